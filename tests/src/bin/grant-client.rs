//! A stand-in for an inference worker's grant handling: subscribes to its pool's core grants
//! on the enforcer's control socket and prints each grant as one JSON line.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    process::ExitCode,
    time::Duration,
};

use clap::Parser;
use enforcer_common::protocol::{self, LatencyReport, Request, Response};

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
    /// After the first grant, send one latency report of these figures, as a worker does each
    /// second: REQUESTS,MISSED,P99_US,SLO_US (any u64, to see how the daemon takes absurd ones).
    #[arg(long, value_parser = parse_report)]
    report_latency: Option<LatencyReport>,
}

fn parse_report(text: &str) -> Result<LatencyReport, String> {
    let figures: Vec<u64> = text
        .split(',')
        .map(|n| n.trim().parse::<u64>().map_err(|e| format!("{n:?}: {e}")))
        .collect::<Result<_, _>>()?;
    let [requests, missed, p99_us, slo_us] = figures[..] else {
        return Err(format!("{text:?}: want REQUESTS,MISSED,P99_US,SLO_US"));
    };
    Ok(LatencyReport {
        requests,
        missed,
        p99_us,
        slo_us,
    })
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
    let request = Request::Subscribe {
        pool: args.pool.clone(),
    };
    stream
        .write_all(&protocol::to_line(&request))
        .expect("send subscribe");
    let mut stdout = std::io::stdout().lock();
    let count = if args.until_growth {
        usize::MAX
    } else {
        args.count
    };
    let mut shrunk = false;
    let mut previous_cpus = None;
    let mut report = args
        .report_latency
        .map(|report| (stream.try_clone().expect("clone the stream"), report));
    for line in BufReader::new(stream).lines().take(count) {
        let Ok(line) = line else {
            eprintln!("grant-client: no grant within {} s", args.seconds);
            return ExitCode::from(4);
        };
        writeln!(stdout, "{line}").expect("print");
        stdout.flush().expect("flush");
        let grant = match protocol::from_line::<Response>(line.as_bytes()) {
            Ok(Response::Grant(grant)) => grant,
            Ok(Response::Error { .. }) => return ExitCode::from(3),
            Ok(other) => {
                eprintln!("grant-client: not a grant: {other:?}");
                return ExitCode::from(3);
            }
            Err(err) => {
                eprintln!("grant-client: {err}");
                return ExitCode::from(3);
            }
        };
        if let Some((mut writer, report)) = report.take() {
            let line = protocol::to_line(&Request::Latency(report));
            writer.write_all(&line).expect("send the latency report");
        }
        let cpus = grant.cpus.len();
        // A pause, or its end, moves no CPU: the grant that grows has more than the last.
        let grew = previous_cpus.is_some_and(|previous| cpus > previous);
        if args.until_growth && shrunk && grew && !grant.paused {
            break;
        }
        shrunk |= grant.shrinking;
        previous_cpus = Some(cpus);
    }
    ExitCode::SUCCESS
}
