//! Privileged test of `[policy] offline_on_training_cores_share` on real cgroups: with no core
//! free of training, the offline pool's cpuset holds training's cores for the first quarter of
//! each second and the online pool's core alone for the rest, each flip a decision; a daemon
//! that stops leaves the pool on every CPU.

use std::time::{Duration, Instant};

use reamer_tests::harness::{
    Daemon, Reaped, cgroup_value, eventually, online_cpu_count, online_cpus, privileged,
    remove_test_cgroups,
};

const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");
/// One core guaranteed to the online pool and training on every CPU: training reserves all
/// the others, so none is free and the share decides. The pause would freeze offline instead,
/// so it is off, as the share's scenarios in the co-location bench have it.
const CONFIG: &str = "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\n\n\
                      [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
                      [policy]\npause_offline_when_training_short = false\n\
                      offline_on_training_cores = true\noffline_on_training_cores_share = 0.25\n\
                      demand_window_ms = 200\ntick_ms = 50\n";

/// The recent decisions with trigger `training_cores_share`.
fn share_flips(daemon: &Daemon) -> usize {
    daemon
        .snapshot()
        .enforcement
        .map(|e| e.recent_decisions)
        .unwrap_or_default()
        .iter()
        .filter(|d| d["trigger"] == "training_cores_share")
        .count()
}

#[test]
fn offline_runs_on_trainings_cores_for_its_share_of_each_second() {
    let instance = "it-share";
    if !privileged("offline_runs_on_trainings_cores_for_its_share_of_each_second") {
        return;
    }
    if online_cpu_count() < 2 {
        println!("skipped: one CPU leaves no core for training beside the online pool's");
        return;
    }
    remove_test_cgroups(instance, "batch");
    let pool_path = format!("/reamer/{instance}/batch");
    let daemon = Daemon::start(instance, CONFIG);
    let _offline = Reaped(daemon.launch(
        "--pool",
        "batch",
        HOG,
        &["--threads", "1", "--seconds", "30"],
    ));
    let threads = online_cpu_count().to_string();
    let _training = Reaped(daemon.launch(
        "--training",
        "t",
        HOG,
        &["--threads", &threads, "--seconds", "30"],
    ));
    eventually("the share's flips", Duration::from_secs(10), || {
        share_flips(&daemon) >= 4
    });
    // The pool's cpuset as the kernel has it, every 10 ms for 4 s: every CPU for the
    // share's part of each second, the online pool's core otherwise.
    let every_cpu = online_cpus();
    let (mut on_training, mut samples) = (0, 0);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let cpus = cgroup_value("cpuset", &pool_path, "cpuset.cpus");
        assert!(!cpus.is_empty(), "the pool left without CPUs");
        if cpus == every_cpu {
            on_training += 1;
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let share = on_training as f64 / samples as f64;
    println!("on training's cores in {on_training} of {samples} samples ({share:.2})");
    // A quarter, give or take a 50 ms tick at each flip and a busy VM's late reads.
    assert!((0.1..=0.45).contains(&share), "{share:.2} of the time");

    daemon.stop();
    assert_eq!(
        cgroup_value("cpuset", &pool_path, "cpuset.cpus"),
        every_cpu,
        "pool not given every CPU at shutdown"
    );
    remove_test_cgroups(instance, "batch");
}
