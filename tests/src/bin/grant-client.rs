//! A stand-in for an inference worker's grant handling: subscribes to its pool's core grants
//! on the enforcer's control socket and prints each grant as one JSON line.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    process::ExitCode,
    time::Duration,
};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Subscribes to a pool's core grants and prints them")]
struct Args {
    /// The enforcer's control socket.
    #[arg(long, default_value = "/run/reamer/default.sock")]
    socket: String,
    #[arg(long)]
    pool: String,
    /// Exit after this many grants.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Exit at the first grant that gives cores back after a shrink, whatever `--count` says
    /// (training's cores come back one step at a time, so how many grants a shrink and its
    /// end take depends on the machine's size).
    #[arg(long)]
    until_growth: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut stream = match UnixStream::connect(&args.socket) {
        Ok(stream) => stream,
        Err(err) => {
            eprintln!("grant-client: cannot connect to {}: {err}", args.socket);
            return ExitCode::from(2);
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs_f64(args.seconds)))
        .expect("timeout");
    let request = serde_json::json!({"op": "subscribe", "pool": args.pool});
    writeln!(stream, "{request}").expect("send subscribe");
    let mut stdout = std::io::stdout().lock();
    let count = if args.until_growth {
        usize::MAX
    } else {
        args.count
    };
    let mut shrunk = false;
    for line in BufReader::new(stream).lines().take(count) {
        let Ok(line) = line else {
            eprintln!("grant-client: no grant within {} s", args.seconds);
            return ExitCode::from(4);
        };
        writeln!(stdout, "{line}").expect("print");
        stdout.flush().expect("flush");
        if line.contains("\"status\":\"error\"") {
            return ExitCode::from(3);
        }
        let shrinking = line.contains("\"shrinking\":true");
        if args.until_growth && shrunk && !shrinking {
            break;
        }
        shrunk |= shrinking;
    }
    ExitCode::SUCCESS
}
