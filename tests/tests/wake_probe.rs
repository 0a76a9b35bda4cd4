//! `wake-probe`, which times how slowly this machine wakes a thread on an idle CPU: it reports
//! both cases with every round trip it was asked for, and refuses CPUs it cannot use.

use std::process::Command;

use serde_json::Value;

const WAKE_PROBE: &str = env!("CARGO_BIN_EXE_wake-probe");

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[test]
fn wake_probe_reports_both_cases_with_ordered_percentiles() {
    if cpus() < 2 {
        eprintln!("SKIPPED: wake-probe needs two CPUs; this machine has one");
        return;
    }
    let output = Command::new(WAKE_PROBE)
        .args(["--rounds", "2", "--pings", "25", "--gap-us", "100"])
        .output()
        .expect("run wake-probe");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    println!("wake-probe: {report}");
    assert_eq!(report["from_cpu"], 0);
    assert_eq!(report["to_cpu"], 1);
    for case in ["idle", "kept_busy"] {
        let figures = &report[case];
        let field = |name: &str| {
            figures[name]
                .as_f64()
                .unwrap_or_else(|| panic!("no {case}.{name} in {report}"))
        };
        // Two rounds of 25 round trips each.
        assert_eq!(figures["round_trips"], 50, "{report}");
        let (p50, p90, p99, max) = (
            field("p50_us"),
            field("p90_us"),
            field("p99_us"),
            field("max_us"),
        );
        assert!(
            0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max,
            "{case}: {report}"
        );
    }
}

#[test]
fn wake_probe_refuses_one_cpu_for_both_ends_and_a_cpu_that_is_not_there() {
    let run = |args: &[&str]| {
        let output = Command::new(WAKE_PROBE)
            .args(args)
            .output()
            .expect("run wake-probe");
        assert!(!output.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let same = run(&["--from", "0", "--to", "0"]);
    assert!(same.contains("both CPU 0"), "{same}");
    let missing = cpus().to_string();
    let absent = run(&["--to", &missing]);
    assert!(
        absent.contains(&format!("CPU {missing} is not available here")),
        "{absent}"
    );
}
