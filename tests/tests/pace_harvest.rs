//! Privileged test of `[policy] harvest_by_pace` on real cgroups: a training job that reports
//! its progress (the training simulator, launched through the daemon) and an offline hog.
//! The controller compares the top of its ladder with offline held back, in cycles of a half
//! at that level and a half with offline frozen, each step in the decision log with its
//! reason; `status` shows the level and the held pace; when the job stops reporting, offline
//! goes back to the core policy's CPUs.

use std::time::Duration;

use reamer_tests::harness::{
    Daemon, Reaped, eventually, pool_in, privileged, remove_test_cgroups, wait_ok,
};
use serde_json::Value;

const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");
const TRAINING_SIM: &str = env!("CARGO_BIN_EXE_training-sim");
const CONFIG: &str = "[[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
                      [policy]\nharvest_by_pace = true\npace_epsilon = 0.01\ntick_ms = 50\n";

/// The controller's lines of the decision log (`"harvest"`), oldest first.
fn harvest_steps(daemon: &Daemon) -> Vec<Value> {
    daemon
        .snapshot()
        .enforcement
        .map(|e| e.recent_decisions)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|d| d.get("harvest").cloned())
        .collect()
}

fn has_step(steps: &[Value], level: &str, reason: &str) -> bool {
    steps
        .iter()
        .any(|s| s["level"] == level && s["reason"] == reason)
}

#[test]
fn a_reporting_job_is_compared_with_offline_held_and_without_reports_the_policy_returns() {
    let instance = "it-pace";
    if !privileged(
        "a_reporting_job_is_compared_with_offline_held_and_without_reports_the_policy_returns",
    ) {
        return;
    }
    remove_test_cgroups(instance, "batch");
    let daemon = Daemon::start(instance, CONFIG);
    let _hog = Reaped(daemon.launch(
        "--pool",
        "batch",
        HOG,
        &["--threads", "1", "--seconds", "60"],
    ));
    // No job reports yet: the core policy's level, no controller step.
    std::thread::sleep(Duration::from_millis(500));
    assert!(harvest_steps(&daemon).is_empty());

    let sim = daemon.launch(
        "--training",
        "sim",
        TRAINING_SIM,
        &["--seconds", "24", "--loaders", "1"],
    );
    // Two reports a second apart give the job a pace; after its first 10 s of reports the
    // controller compares the top of its ladder: offline running, on training's cores too.
    eventually("a comparison of the top", Duration::from_secs(16), || {
        has_step(&harvest_steps(&daemon), "training_cores", "trial")
    });
    assert!(!pool_in(&daemon.snapshot(), "batch").0.paused);
    // After the level's half (1 s to settle, 2 s or more measured), its held half: offline
    // frozen.
    eventually("a held half", Duration::from_secs(12), || {
        has_step(&harvest_steps(&daemon), "held", "probe")
    });
    assert!(
        pool_in(&daemon.snapshot(), "batch").0.paused,
        "offline not held during the held half"
    );
    let status = daemon.snapshot().enforcement.and_then(|e| e.harvest);
    assert_eq!(status.map(|h| h.level).as_deref(), Some("held"));

    // The next cycle carries the held pace measured: offline running again.
    let held_pace = |steps: &[Value]| {
        steps
            .iter()
            .filter(|s| s["reason"] == "trial")
            .filter_map(|s| s["reference"]["steps_per_s"].as_f64())
            .next_back()
    };
    // A half is 1 s to settle and two of the job's report periods measured (their 90th
    // percentile, 2 to 10 s): beside the hog on a 2-vCPU VM the simulator's reports can come
    // 1.5 s or more apart, and the held half then runs past 5 s.
    eventually("the next cycle", Duration::from_secs(12), || {
        held_pace(&harvest_steps(&daemon)).is_some()
    });
    let reference = held_pace(&harvest_steps(&daemon)).unwrap();
    assert!(reference > 0.0, "{reference}");
    assert!(!pool_in(&daemon.snapshot(), "batch").0.paused);
    let status = daemon
        .snapshot()
        .enforcement
        .and_then(|e| e.harvest)
        .unwrap();
    assert_eq!(status.reference_steps_per_s, Some(reference));
    // One held half is over (3 s: 1 s to settle, 2 s measured): status counts it against the
    // controller's time.
    assert!(
        status.held_back_s >= 2.5 && status.held_back_s < status.running_s,
        "held back {} s of {} s",
        status.held_back_s,
        status.running_s
    );
    // Status carries the last step as the decision log has it.
    let last = status
        .last_change
        .expect("the controller's last step in status");
    assert!(
        harvest_steps(&daemon)
            .iter()
            .any(|step| step["level"] == last["level"] && step["reason"] == last["reason"]),
        "{last}"
    );

    // The job ends: 10 s without a report, and offline is back on the policy's CPUs, not
    // left held or narrowed.
    wait_ok(sim, "training-sim");
    eventually(
        "the policy's level without a signal",
        Duration::from_secs(15),
        || has_step(&harvest_steps(&daemon), "policy", "no_signal"),
    );
    assert!(!pool_in(&daemon.snapshot(), "batch").0.paused);
    println!("{:#?}", harvest_steps(&daemon));
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}
