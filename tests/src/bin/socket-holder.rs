//! A control-socket client that only holds connections, as a careless or hostile local user
//! would: it opens `--connections` of them, sends nothing, and reports which the daemon
//! admitted (no answer) and which it refused (an error line), then how many of the admitted the
//! daemon closed within `--hold-seconds`, and after how long. One JSON line at the end.

use std::{
    io::{BufRead as _, BufReader, ErrorKind},
    os::unix::net::UnixStream,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;
use enforcer_common::protocol::{self, Response};

#[derive(Parser)]
#[command(about = "Holds idle control-socket connections and reports what the daemon did")]
struct Args {
    /// The enforcer's control socket.
    #[arg(long)]
    socket: String,
    /// Connections to open.
    #[arg(long)]
    connections: usize,
    /// How long to wait for the daemon to close the admitted ones.
    #[arg(long, default_value_t = 5.0)]
    hold_seconds: f64,
}

/// How long a refused connection's answer may take to come.
const ANSWER_WITHIN: Duration = Duration::from_millis(500);

fn main() -> ExitCode {
    let args = Args::parse();
    let started = Instant::now();
    // Connect them all first, then give the daemon `ANSWER_WITHIN` to refuse some: read one
    // by one with a timeout each, the first ones would reach the idle timeout meanwhile.
    let mut streams = Vec::new();
    for _ in 0..args.connections {
        match UnixStream::connect(&args.socket) {
            Ok(stream) => streams.push(stream),
            Err(err) => {
                eprintln!("socket-holder: cannot connect to {}: {err}", args.socket);
                return ExitCode::from(2);
            }
        }
    }
    std::thread::sleep(ANSWER_WITHIN);
    let mut held = Vec::new();
    let mut refusals = Vec::new();
    for stream in streams {
        stream.set_nonblocking(true).expect("nonblocking");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 => match protocol::from_line(line.as_bytes()) {
                Ok(Response::Error { message }) => refusals.push(message),
                other => refusals.push(format!("unexpected answer: {other:?}")),
            },
            Ok(_) => refusals.push("closed without an answer".to_owned()),
            Err(err) if err.kind() == ErrorKind::WouldBlock => {
                reader.get_ref().set_nonblocking(false).expect("blocking");
                held.push(reader);
            }
            Err(err) => refusals.push(format!("read failed: {err}")),
        }
    }
    let admitted = held.len();
    let deadline = started + Duration::from_secs_f64(args.hold_seconds);
    let mut closed_by_daemon = 0;
    let mut last_closed_ms = 0u128;
    for mut reader in held {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        reader
            .get_ref()
            .set_read_timeout(Some(left))
            .expect("timeout");
        let mut line = String::new();
        // End of stream: the daemon closed it. A timeout: it is still open.
        if matches!(reader.read_line(&mut line), Ok(0)) {
            closed_by_daemon += 1;
            last_closed_ms = started.elapsed().as_millis();
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "admitted": admitted,
            "refused": refusals.len(),
            "refusals": refusals,
            "closed_by_daemon": closed_by_daemon,
            "last_closed_ms": last_closed_ms,
        })
    );
    ExitCode::SUCCESS
}
