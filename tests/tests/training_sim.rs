//! The training simulator's serving mode (`--serve`), which the server benchmark's stand-in
//! runs: one process, a timed part per request on stdin, and an exit when stdin closes.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

const TRAINING_SIM: &str = env!("CARGO_BIN_EXE_training-sim");

#[test]
fn the_simulator_times_one_part_per_request_and_exits_when_stdin_closes() {
    let mut sim = Command::new(TRAINING_SIM)
        .args(["--serve", "--json", "--loaders", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn training-sim");
    let mut stdin = sim.stdin.take().unwrap();
    let mut lines = BufReader::new(sim.stdout.take().unwrap()).lines();
    let mut next = || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    // A request it cannot read is skipped, not fatal.
    writeln!(stdin, "not a request").unwrap();
    for seconds in [0.3, 0.2] {
        writeln!(stdin, "{{\"seconds\": {seconds}}}").unwrap();
        assert_eq!(next(), serde_json::json!({ "timed_start": true }));
        let report = next();
        let timed = report["seconds"].as_f64().unwrap();
        assert!(timed >= seconds && timed < seconds + 1.0, "{report}");
        let steps = report["steps"].as_u64().unwrap();
        assert!(steps > 0, "{report}");
        assert_eq!(report["step_ms"].as_array().unwrap().len() as u64, steps);
        assert!(report["cpu_s"].as_f64().unwrap() > 0.0, "{report}");
    }
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = sim.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "training-sim outlived its stdin by 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
