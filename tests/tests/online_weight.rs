//! An online pool's CPU weight follows its worker's latency tail (enforcer/src/policy/online_weight.rs):
//! the real daemon, worker, load generator, training process and cgroups. Needs privilege.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use enforcer_common::protocol::PoolStatus;
use reamer_tests::harness::{
    Daemon, online_cpu_count, privileged, remove_test_cgroups, wait_ok,
    worker::{OnlineWorker, scratch},
};
use serde_json::Value;

const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");

/// The pool's cpu group, its weight file, and what that holds at `weight` (v1 takes weights
/// as `cpu.shares`, 1024 for 100).
fn weight_file(instance: &str, weight: u32) -> (String, &'static str, String) {
    let group = format!("/reamer-online.{instance}.web");
    if reamer_tests::harness::cgroups::is_v2_host() {
        (group, "cpu.weight", weight.to_string())
    } else {
        (
            group,
            "cpu.shares",
            (u64::from(weight) * 1024 / 100).to_string(),
        )
    }
}

/// Asserts that the pool's weight file holds `weight`.
fn weight_file_value(instance: &str, weight: u32) -> String {
    let (group, file, want) = weight_file(instance, weight);
    let got = reamer_tests::harness::cgroup_value("cpu", &group, file);
    assert_eq!(got, want, "{group}/{file} at weight {weight}");
    got
}

#[test]
fn an_online_pools_weight_falls_while_its_tail_has_room_and_rises_when_training_crowds_it() {
    let instance = "it-weight";
    if !privileged(
        "an_online_pools_weight_falls_while_its_tail_has_room_and_rises_when_training_crowds_it",
    ) {
        return;
    }
    // 4 items of the MLP below take the (debug) worker about 4 ms here: a tail near 8 ms,
    // under half the SLO, while the worker has its core to itself (with an SLO of 25 ms a
    // slow second on a busy CI host raised it back once, and the floor came too late). At a
    // tenth of a training thread's weight on the same core the worker gets about a tenth of
    // it, less than 20 requests/s of 4 ms need: its queue grows and the tail passes three
    // quarters of the SLO.
    let slo_ms = 40;
    let config = format!(
        "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\nslo_ms = {slo_ms}\n\
         cpu_weight = 50\nmin_cpu_weight = 10\n"
    );
    let decision_log = reamer_tests::harness::decision_log_of(instance);
    let _ = std::fs::remove_file(&decision_log);
    let daemon = Daemon::start(instance, &config);
    let dir = scratch("online-weight");
    let worker = OnlineWorker::launch_cpu_bound_into(instance, "web", &dir);
    let web = || reamer_tests::harness::pool_in(&daemon.snapshot(), "web").0;
    let weight = |pool: &PoolStatus| pool.cpu_weight.unwrap_or(0);
    assert_eq!(weight(&web()), 50, "the pool starts at its cpu_weight");
    assert_eq!(web().min_cpu_weight, Some(10), "status names the floor");
    weight_file_value(instance, 50);

    let items = 4;
    let data: Vec<f32> = (0..items * 16).map(|i| (i as f32 * 0.1).sin()).collect();
    let body = serde_json::json!({"inputs": [{
        "name": "x", "shape": [items, 16], "datatype": "FP32", "data": data,
    }]});
    std::fs::write(dir.join("body.json"), body.to_string()).unwrap();
    let load = |seconds: u64| {
        Command::new(env!("CARGO_BIN_EXE_load-gen"))
            .args(["--url", &format!("{}/v2/models/mlp/infer", worker.base)])
            .arg("--body")
            .arg(dir.join("body.json"))
            .args(["--rate", "20", "--seconds", &seconds.to_string()])
            .args(["--slo-ms", &slo_ms.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };

    // Every weight change in the decision log: (from, to), and the line, for a failure.
    let weight_changes = || -> Vec<(u64, u64, String)> {
        std::fs::read_to_string(&decision_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|record| {
                let change = &record["weight"];
                let step = (change["from"].as_u64()?, change["to"].as_u64()?);
                Some((step.0, step.1, change.to_string()))
            })
            .collect()
    };
    let until = |what: &str, seconds: u64, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        while !check() {
            if Instant::now() > deadline {
                let changes: Vec<String> = weight_changes().into_iter().map(|c| c.2).collect();
                panic!(
                    "{what}: not within {seconds} s; pool {:?}\nweight changes:\n{}\nworker log:\n{}",
                    web(),
                    changes.join("\n"),
                    worker.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // Alone: halved once a second, 50, 25, 12, then the floor.
    let calm = load(12);
    until("the weight fell to the floor", 12, &|| weight(&web()) == 10);
    weight_file_value(instance, 10);
    println!("alone: {:?}", web());
    wait_ok(calm, "load-gen");

    // A training job spinning on every CPU, the pool's guaranteed one included: the worker
    // waits behind it, its tail nears the SLO, and the weight goes back up.
    let training = daemon.launch(
        "--training",
        "spin",
        HOG,
        &[
            "--threads",
            &online_cpu_count().to_string(),
            "--seconds",
            "12",
        ],
    );
    // 10 s to rise: with 6 s it failed once under the full suite's load on a 2-vCPU host.
    let crowded = load(11);
    until("the weight rose again", 10, &|| weight(&web()) > 10);
    let raised = weight(&web());
    println!("beside training: {:?}", web());
    weight_file_value(instance, raised);
    wait_ok(crowded, "load-gen");
    wait_ok(training, "training cpu-hog");

    let worker_log = worker.log_text();
    assert!(worker.stop().success(), "{worker_log}");
    let log = daemon.stop();
    assert!(log.contains("online pool's CPU weight changed"), "{log}");
    let changes: Vec<(u64, u64)> = weight_changes()
        .into_iter()
        .map(|(from, to, _)| (from, to))
        .collect();
    println!("weight changes: {changes:?}");
    assert_eq!(changes.first(), Some(&(50, 25)), "halved first");
    for &(from, to) in &changes {
        assert!(
            to == (from / 2).max(10) || to == (from * 2).min(50),
            "a step other than halving to the floor or doubling to the ceiling: {changes:?}"
        );
    }
    assert!(
        changes.iter().any(|(from, to)| to > from),
        "no raise logged: {changes:?}"
    );
    remove_test_cgroups(instance, "web");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A daemon killed while its pool's weight was steered down (SIGKILL, a crash: nothing is
/// released) is followed by one that goes on from that weight instead of raising it to
/// `cpu_weight`, which would cost training the seconds the steering takes to come down. A
/// clean stop releases the pool to the default weight, above the range: the next daemon
/// starts at `cpu_weight` again.
#[test]
fn a_restarted_daemon_goes_on_from_the_weight_its_predecessor_steered_down() {
    let instance = "it-weight-restart";
    if !privileged("a_restarted_daemon_goes_on_from_the_weight_its_predecessor_steered_down") {
        return;
    }
    let config = "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\nslo_ms = 40\n\
                  cpu_weight = 50\nmin_cpu_weight = 10\n";
    let first = Daemon::start(instance, config);
    // Any process of the pool: the group is adopted because it still holds one.
    let mut member = first.launch("--pool", "web", "sleep", &["60"]);
    let web = |daemon: &Daemon| reamer_tests::harness::pool_in(&daemon.snapshot(), "web").0;
    let holds_member = |pool: &PoolStatus| pool.processes.contains(&member.id());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !holds_member(&web(&first)) {
        assert!(
            Instant::now() < deadline,
            "not in the pool: {:?}",
            web(&first)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    weight_file_value(instance, 50);

    first.crash();
    // Where the steering would have left it after three halvings: 50, 25, 12.
    let (group, file, steered) = weight_file(instance, 12);
    let path = reamer_tests::harness::cgroup_dir("cpu", &group).join(file);
    std::fs::write(&path, &steered).unwrap_or_else(|e| panic!("{}: {e}", path.display()));

    let second = Daemon::start(instance, config);
    weight_file_value(instance, 12);
    assert_eq!(web(&second).cpu_weight, Some(12), "{:?}", web(&second));
    assert!(holds_member(&web(&second)), "{:?}", web(&second));
    let log = second.stop();
    assert!(log.contains("the weight a previous daemon left"), "{log}");
    weight_file_value(instance, 100);

    let third = Daemon::start(instance, config);
    weight_file_value(instance, 50);
    assert_eq!(web(&third).cpu_weight, Some(50), "{:?}", web(&third));
    let log = third.stop();
    assert!(!log.contains("the weight a previous daemon left"), "{log}");
    member.kill().unwrap();
    member.wait().unwrap();
    remove_test_cgroups(instance, "web");
}
