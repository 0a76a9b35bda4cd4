//! A daemon that dies and is started again (privileged tests): its successor finds what it
//! knew, and the running workers notice nothing but a reconnect.

use std::{path::PathBuf, process::Command, time::Duration};

use reamer_tests::harness::{
    Daemon, bpftool, cgroup_dir, cgroup_of, eventually, job, mount_bpffs_if_missing, pin_dir_of,
    pool_in, privileged, remove_test_cgroups, u64_of, wait_ok,
    worker::{OnlineWorker, agent, check_tiny_answer, post, scratch_with_tiny_model, tiny_request},
};

const SIM: &str = env!("CARGO_BIN_EXE_training-sim");
/// The registry re-reads its groups every second; a worker reconnects a second after losing
/// its daemon.
const REREAD_AND_RECONNECT: Duration = Duration::from_secs(5);
const CONFIG: &str = "[[pool]]\nname = \"serve\"\nkind = \"offline\"\n\
                      [policy]\ngive_back_after_ms = 200\ndemand_window_ms = 200\ntick_ms = 50\n";

/// The kernel's id of a pinned map: the same id is the same map.
fn pinned_map_id(daemon: &Daemon, map: &str) -> u64 {
    let path = daemon.pin_dir().join(map);
    let info = bpftool(&["map", "show", "pinned", path.to_str().expect("utf-8 path")]);
    u64_of(&info, "id")
}

/// Freezes the cgroup `pid` is in, as a daemon that died in the middle of a GPU duty cycle
/// leaves it: the v1 freezer, or `cgroup.freeze` on a cgroup v2 host.
fn freeze_cgroup_of(pid: u32) -> PathBuf {
    let (file, value) = if reamer_tests::harness::cgroups::is_v2_host() {
        ("cgroup.freeze", "1")
    } else {
        ("freezer.state", "FROZEN")
    };
    let path = cgroup_dir("freezer", &cgroup_of(pid, "freezer")).join(file);
    std::fs::write(&path, value).unwrap_or_else(|e| panic!("freezing {}: {e}", path.display()));
    path
}

#[test]
fn a_restarted_daemon_readopts_jobs_pools_and_pinned_state_without_disturbing_workers() {
    let instance = "it-restart";
    if !privileged(
        "a_restarted_daemon_readopts_jobs_pools_and_pinned_state_without_disturbing_workers",
    ) {
        return;
    }
    let first = Daemon::start(instance, CONFIG);
    let (dir, model) = scratch_with_tiny_model("restart");
    let worker = OnlineWorker::launch_into(
        instance,
        "serve",
        &["--model", model.to_str().unwrap()],
        dir.join("worker.log"),
    );
    let worker_pid = worker.child.id();
    let worker_cgroup = cgroup_of(worker_pid, "cpuset");
    // cgroup v1: the online pool's own cpu group, which carries its weight; empty on v2.
    let worker_cpu_group = cgroup_of(worker_pid, "cpu");
    assert!(
        worker_cgroup.ends_with("reamer/it-restart/serve"),
        "{worker_cgroup}"
    );
    // Launched through the daemon, so only the daemon (and its journal) knows it is training.
    let sim = first.launch("--training", "t", SIM, &["--seconds", "10"]);
    eventually(
        "training ran and the worker subscribed",
        REREAD_AND_RECONNECT,
        || {
            let snapshot = first.snapshot();
            let registered = snapshot
                .job("t")
                .is_some_and(|t| t.threads > 0 && t.run_ns > 0);
            registered && pool_in(&snapshot, "serve").0.subscribers == 1
        },
    );
    let before = first.snapshot();
    let job_id = job(&before, "t").id;
    let maps_before = ["thread_state", "job_stats"].map(|m| pinned_map_id(&first, m));

    let crashed_log = first.crash();
    assert!(
        pin_dir_of(instance).join("thread_state").exists(),
        "a killed daemon's pins should outlive it:\n{crashed_log}"
    );
    let frozen = freeze_cgroup_of(worker_pid);
    let run_at_crash = job(&before, "t").run_ns;

    let second = Daemon::start(instance, CONFIG);
    let log = second.log();
    assert!(
        log.contains("taking over the pinned sensor state of a previous run"),
        "{log}"
    );
    assert!(
        log.contains("re-adopted a training process launched before this daemon started"),
        "{log}"
    );
    assert!(
        log.contains("left frozen by a previous daemon: thawed"),
        "{log}"
    );
    let frozen_state = std::fs::read_to_string(&frozen).unwrap();
    assert!(
        matches!(frozen_state.trim(), "THAWED" | "0"),
        "{}: {frozen_state}",
        frozen.display()
    );

    // The very maps the first daemon made, so its per-job totals go on.
    let maps_after = ["thread_state", "job_stats"].map(|m| pinned_map_id(&second, m));
    assert_eq!(
        maps_before, maps_after,
        "the pinned maps were not taken over"
    );
    let after = second.snapshot();
    let t = job(&after, "t");
    assert_eq!(t.id, job_id, "the job came back under another id");
    assert!(
        t.run_ns >= run_at_crash,
        "the job's run time restarted from zero: {} < {run_at_crash}",
        t.run_ns
    );
    println!(
        "job t: run {} ms at the crash, {} ms after the restart; map ids {maps_after:?}",
        run_at_crash / 1_000_000,
        t.run_ns / 1_000_000
    );
    eventually("the re-adopted job is sensed", REREAD_AND_RECONNECT, || {
        let t = job(&second.snapshot(), "t").clone();
        t.threads > 0 && t.run_ns > run_at_crash
    });

    // The worker: the same process in the same cgroup, classified from the pool's cgroup,
    // subscribed again on its own, serving throughout.
    assert_eq!(cgroup_of(worker_pid, "cpuset"), worker_cgroup);
    assert_eq!(cgroup_of(worker_pid, "cpu"), worker_cpu_group);
    eventually(
        "the worker is back as a pool member and a subscriber",
        REREAD_AND_RECONNECT,
        || {
            let (enforced, classified) = pool_in(&second.snapshot(), "serve");
            enforced.subscribers == 1 && classified.threads > 0
        },
    );
    assert!(
        worker.log_text().contains("lost the enforcer's grants"),
        "{}",
        worker.log_text()
    );
    let http = agent();
    let items = [[0.5, -1.0, 2.0, 0.25]];
    let (status, body) = post(
        &http,
        &format!("{}/v2/models/tiny/infer", worker.base),
        &tiny_request("after-restart", &items),
    );
    assert_eq!(status, 200, "{body}");
    check_tiny_answer(&body, &items);

    wait_ok(sim, "training-sim across the restart");
    assert!(worker.stop().success());
    let log = second.stop();
    assert!(log.contains("pins removed"), "{log}");
    assert!(
        !PathBuf::from(format!("/run/reamer/{instance}.launched.json")).exists(),
        "no launched process runs: the journal should be gone"
    );
    remove_test_cgroups(instance, "serve");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pinned_map_of_another_shape_is_not_taken_over() {
    let instance = "it-restart-shape";
    if !privileged("a_pinned_map_of_another_shape_is_not_taken_over") {
        return;
    }
    // What a build with another `ThreadState` would have left: 24-byte values, as before the
    // wait in progress moved to `task_cache`.
    mount_bpffs_if_missing();
    let pin_dir = pin_dir_of(instance);
    std::fs::create_dir_all(&pin_dir).unwrap();
    let stale = pin_dir.join("thread_state");
    let created = Command::new("bpftool")
        .args(["map", "create", stale.to_str().unwrap()])
        .args(["type", "hash", "key", "4", "value", "24", "entries", "16"])
        .args(["name", "thread_state"])
        .output()
        .expect("run bpftool");
    assert!(
        created.status.success(),
        "bpftool map create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let stale_id = bpftool(&["map", "show", "pinned", stale.to_str().unwrap()])["id"].clone();

    let daemon = Daemon::start(instance, CONFIG);
    let log = daemon.log();
    assert!(
        log.contains("not taking over the pinned map") && log.contains("this build's"),
        "{log}"
    );
    assert_ne!(
        pinned_map_id(&daemon, "thread_state"),
        stale_id.as_u64().unwrap(),
        "the stale map is still in use"
    );
    // The sensor works on its fresh map: a launched job is classified and sensed.
    let sim = daemon.launch("--training", "t", SIM, &["--seconds", "1"]);
    wait_ok(sim, "training-sim");
    assert!(job(&daemon.snapshot(), "t").run_ns > 0);
    let log = daemon.stop();
    assert!(log.contains("pins removed"), "{log}");
    remove_test_cgroups(instance, "serve");
}

/// cgroup v2: daemons before online pools had a top-level group of their own there kept an
/// online pool at `reamer/<instance>/<pool>`, under the idle tree. A daemon started over such
/// a pool moves its processes to the pool's top-level group and removes the old one.
#[test]
fn an_online_pool_left_under_the_idle_tree_moves_to_its_own_group_on_cgroup_v2() {
    let instance = "it-online-move";
    if !privileged("an_online_pool_left_under_the_idle_tree_moves_to_its_own_group_on_cgroup_v2") {
        return;
    }
    if !reamer_tests::harness::cgroups::is_v2_host() {
        eprintln!("SKIPPED: only cgroup v2 ever kept online pools under the idle tree");
        return;
    }
    let old = reamer_tests::harness::cgroups::Group::ensure(instance, "web").expect("old group");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    old.add_process(sleeper.id()).expect("into the old group");
    assert_eq!(
        cgroup_of(sleeper.id(), "cpu"),
        format!("/reamer/{instance}/web")
    );

    let daemon = Daemon::start(instance, "[[pool]]\nname = \"web\"\nkind = \"online\"\n");
    assert_eq!(
        cgroup_of(sleeper.id(), "cpu"),
        format!("/reamer-online.{instance}.web"),
        "the process was not moved to the pool's own group"
    );
    assert!(
        !PathBuf::from(format!("/sys/fs/cgroup/reamer/{instance}/web")).exists(),
        "the old group under the idle tree is still there"
    );
    assert!(
        daemon.log().contains("out of an older daemon's group"),
        "{}",
        daemon.log()
    );
    daemon.stop();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    remove_test_cgroups(instance, "web");
}
