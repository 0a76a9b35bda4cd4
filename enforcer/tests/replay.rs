//! `enforcer replay` on the trace recorded on the 16-CPU GPU server (ResNet-50 alone, the
//! daemon observing only): the binary as a user runs it, no privilege needed.
//!
//! The trace: `cargo xtask bench --only server`'s scenario `alone_observed_10hz`, its second
//! round, on the H200 server (16 vCPUs, no SMT), ResNet-50 with 6 loader workers, recorded at
//! 10 Hz by `enforcer observe --json` with the sensor that counts slices in progress. It
//! records its machine's CPU count.

use std::{path::PathBuf, process::Command};

use serde_json::Value;

const ENFORCER: &str = env!("CARGO_BIN_EXE_enforcer");

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

const TRACE: &str = "resnet50-h200-16cpu-alone.observe.jsonl";

fn replay(args: &[&str]) -> std::process::Output {
    Command::new(ENFORCER)
        .arg("replay")
        .args(args)
        .output()
        .expect("running enforcer replay")
}

fn summary_of(output: &std::process::Output) -> Value {
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().expect("a summary line")).expect("JSON summary")
}

#[test]
fn the_server_trace_replays_with_a_reservation_sized_by_use() {
    let trace = fixture(TRACE);
    // The trace records its 16 CPUs: no --cpus needed.
    let output = replay(&[trace.to_str().unwrap(), "--json"]);
    let summary = summary_of(&output);
    println!("{summary}");
    let f = |key: &str| {
        summary[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {summary}"))
    };
    assert_eq!(summary["intervals"], 313);
    assert_eq!(summary["cpus"], 16);
    // As recorded: the job ran on 6.3 CPUs at the median of its 100 ms intervals (its own
    // CPU time from /proc over the timed part: 6.67 CPUs), 7.2 at the 90th percentile.
    assert!((f("running_cpus_p50") - 6.281).abs() < 0.01, "{summary}");
    // The policy reserves within two cores of that level, half the machine at most.
    assert!(
        f("reserved_cores_p50") <= f("running_cpus_p50") + 2.0,
        "{summary}"
    );
    assert!(f("reserved_cores_p90") <= 8.0, "{summary}");
    // Offline never pauses where training ran on 8 CPUs or fewer; the trace never demands
    // more than training may reserve for long enough to pause at all.
    assert_eq!(summary["paused_at_half_or_less"], 0, "{summary}");
    assert_eq!(f("offline_paused_pct"), 0.0, "{summary}");
    // Reported: how often the job ran on more CPUs than it had reserved.
    assert!((0.0..=100.0).contains(&f("short_pct")), "{summary}");
    // One JSON object per interval before the summary.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    for key in [
        "running_cpus",
        "demand_cpus",
        "reserved_cores",
        "offline_paused",
    ] {
        assert!(first.get(key).is_some(), "{key} missing from {first}");
    }
    assert_eq!(stdout.lines().count(), 314);
}

#[test]
fn the_table_names_the_scenario_and_a_config_replaces_it() {
    let trace = fixture(TRACE);
    let output = replay(&[trace.to_str().unwrap(), "--cpus", "16"]);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("the default scenario"), "{text}");
    assert!(text.contains("online (online, min_cores 2)"), "{text}");
    assert!(text.contains("313 intervals"), "{text}");

    // A config whose online pool takes 14 of the 16 cores: training may reserve 2, and
    // pauses offline whenever its estimate is above them.
    let config = std::env::temp_dir().join(format!("reamer-replay-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 14\n\n\
         [[pool]]\nname = \"batch\"\nkind = \"offline\"\n",
    )
    .unwrap();
    let output = replay(&[
        trace.to_str().unwrap(),
        "--cpus",
        "16",
        "--json",
        "--config",
        config.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&config);
    let summary = summary_of(&output);
    assert!(
        summary["reserved_cores_p90"].as_f64().unwrap() <= 2.0,
        "{summary}"
    );
    assert!(
        summary["offline_paused_pct"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
}

#[test]
fn bad_input_is_named() {
    let trace = fixture(TRACE);
    let dir = std::env::temp_dir();
    let text = std::fs::read_to_string(&trace).unwrap();

    // A trace from before `observe --json` recorded the CPU count needs --cpus.
    let untold = dir.join(format!("reamer-replay-untold-{}.jsonl", std::process::id()));
    let without_cpus: String = text
        .lines()
        .map(|line| {
            let mut value: Value = serde_json::from_str(line).unwrap();
            value.as_object_mut().unwrap().remove("online_cpus");
            format!("{value}\n")
        })
        .collect();
    std::fs::write(&untold, without_cpus).unwrap();
    let missing_cpus = replay(&[untold.to_str().unwrap()]);
    let with_cpus = replay(&[untold.to_str().unwrap(), "--cpus", "16", "--json"]);
    let _ = std::fs::remove_file(&untold);
    assert!(!missing_cpus.status.success());
    let stderr = String::from_utf8_lossy(&missing_cpus.stderr);
    assert!(stderr.contains("give it with --cpus N"), "{stderr}");
    assert_eq!(summary_of(&with_cpus)["intervals"], 313);

    // A --cpus that contradicts the trace is refused, naming both.
    let contradicted = replay(&[trace.to_str().unwrap(), "--cpus", "8"]);
    assert!(!contradicted.status.success());
    let stderr = String::from_utf8_lossy(&contradicted.stderr);
    assert!(
        stderr.contains("--cpus 8, but the trace was recorded on 16 CPUs"),
        "{stderr}"
    );

    let broken = dir.join(format!("reamer-replay-broken-{}.jsonl", std::process::id()));
    let good_line = text.lines().next().unwrap();
    std::fs::write(&broken, format!("{good_line}\n{{\"seconds\": \"soon\"}}\n")).unwrap();
    let output = replay(&[broken.to_str().unwrap(), "--cpus", "16"]);
    let _ = std::fs::remove_file(&broken);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":2: not a line of `enforcer observe --json`"),
        "{stderr}"
    );

    let nowhere = replay(&["/nonexistent/trace.jsonl", "--cpus", "16"]);
    let stderr = String::from_utf8_lossy(&nowhere.stderr);
    assert!(
        stderr.contains("opening /nonexistent/trace.jsonl"),
        "{stderr}"
    );
}
