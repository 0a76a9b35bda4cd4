//! Privileged tests of enforcement on real cgroups with real processes: an offline pool is
//! placed, moved off the cores training needs, and released at shutdown; and the training
//! simulator keeps its pace beside a CPU-hungry pool only when the enforcer runs.

use std::{process::Command, time::Duration};

use enforcer_common::{
    protocol::{self, Grant, Response},
    stats::median,
};
use reamer_tests::harness::{
    Daemon, cgroup_dir, cgroup_of, cgroup_value, eventually, online_cpu_count, online_cpus,
    pool_in, privileged, remove_test_cgroups, thread_policies, u64_of, wait_ok,
};

const SIM: &str = env!("CARGO_BIN_EXE_training-sim");
const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");
const OFFLINE_POOL: &str = "[[pool]]\nname = \"batch\"\nkind = \"offline\"\n";
const SLOW_TICK_MS: u64 = 1000;

#[test]
fn offline_pool_is_placed_moved_for_training_and_released_at_shutdown() {
    let instance = "it-enforce";
    if !privileged("offline_pool_is_placed_moved_for_training_and_released_at_shutdown") {
        return;
    }
    // A slow path that ticks once a second: at the default 100 ms, a tick that ran before the
    // event consumer (a thread of its own, descheduled for a while when the hypervisor steals
    // this VM's CPU) could reserve training's cores from its demand first, and then the event
    // changes nothing, so no fast-path decision is made for this test to see.
    let config = format!("{OFFLINE_POOL}\n[policy]\ntick_ms = {SLOW_TICK_MS}\n");
    let daemon = Daemon::start(instance, &config);
    // The empty group a daemon that is gone left under the tree: it must not keep the tree
    // idle at shutdown (only a live daemon, or processes a restarting one adopts, do).
    let stale_group = cgroup_dir("cpu", &format!("/reamer/{instance}-gone"));
    std::fs::create_dir_all(&stale_group).expect("creating the stale group");
    let hog = daemon.launch(
        "--pool",
        "batch",
        HOG,
        &["--threads", "2", "--seconds", "8"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let pool_path = format!("/reamer/{instance}/batch");
    assert_eq!(
        cgroup_of(hog.id(), "cpu"),
        pool_path,
        "hog not moved into the pool (cpu)"
    );
    assert_eq!(
        cgroup_of(hog.id(), "cpuset"),
        pool_path,
        "hog not moved into the pool (cpuset)"
    );
    assert_eq!(
        cgroup_value("cpu", &pool_path, "cpu.idle"),
        "1",
        "offline pool is not SCHED_IDLE"
    );
    // The kernel ranks an idle group only against its siblings: against training (outside the
    // tree) it is the top `reamer` group that must be idle.
    assert_eq!(
        cgroup_value("cpu", "/reamer", "cpu.idle"),
        "1",
        "the reamer tree is not idle"
    );
    // Each of its threads has the SCHED_IDLE policy too (thread_policy.rs says why), the
    // threads it started after joining the pool included.
    eventually(
        "the hog's threads SCHED_IDLE",
        Duration::from_secs(3),
        || {
            let policies = thread_policies(hog.id());
            policies.len() >= 3 && policies.iter().all(|&p| p == libc::SCHED_IDLE)
        },
    );

    let sim = daemon.launch("--training", "train", SIM, &["--seconds", "2"]);
    wait_ok(sim, "training-sim");
    let status = daemon.snapshot().enforcement.expect("enforcement status");
    println!("enforcement status: {status:?}");
    let contended = status
        .recent_decisions
        .iter()
        .find(|d| d["trigger"] == "contended")
        .cloned()
        .expect("no fast-path decision while training ran behind the pool");
    let reaction = u64_of(&contended, "event_to_write_ns");
    let read = u64_of(&contended, "event_to_read_ns");
    println!("event to cgroup write: {reaction} ns, of which until the event was read: {read} ns");
    assert!(
        read <= reaction,
        "the event was read ({read} ns) after the write it caused was done ({reaction} ns)"
    );
    assert!(
        reaction < 50_000_000,
        "reaction of {reaction} ns is not a fast path"
    );
    assert!(status.reactions >= 1);
    // The second latency arrives on the next slow-path tick: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_millis(SLOW_TICK_MS + 3000);
    let ran = loop {
        let status = daemon.snapshot().enforcement.expect("enforcement status");
        if let Some(ns) = status.event_to_ran_p50_ns {
            break ns;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no event-to-ran latency: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("event to training ran, p50: {ran} ns");

    // Stopping the daemon leaves the pool's process running on every CPU, not idle-classed.
    daemon.stop();
    assert_eq!(
        cgroup_value("cpuset", &pool_path, "cpuset.cpus"),
        online_cpus(),
        "pool not given every CPU at shutdown"
    );
    assert_eq!(
        cgroup_value("cpu", &pool_path, "cpu.idle"),
        "0",
        "pool left SCHED_IDLE at shutdown"
    );
    assert_eq!(
        cgroup_value("cpu", "/reamer", "cpu.idle"),
        "0",
        "the reamer tree left idle at shutdown"
    );
    let state = std::fs::read_to_string(format!("/proc/{}/stat", hog.id())).unwrap();
    assert!(
        !state.contains(") T "),
        "the pool's process is stopped: {state}"
    );
    let policies = thread_policies(hog.id());
    assert!(
        !policies.is_empty() && policies.iter().all(|&p| p == libc::SCHED_OTHER),
        "the pool's threads were not given SCHED_OTHER back at shutdown: {policies:?}"
    );
    let mut hog = hog;
    let _ = hog.kill();
    let _ = hog.wait();
    let _ = std::fs::remove_dir(&stale_group);
    remove_test_cgroups(instance, "batch");
}

/// What one training-sim run reports: its step rate, and its threads' run-queue wait per
/// CPU-second they used.
struct TrainingRun {
    steps_per_s: f64,
    wait_per_cpu_s: f64,
}

fn training_run(output: std::process::Output) -> TrainingRun {
    assert!(output.status.success(), "training-sim failed");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("report");
    let field = |name: &str| report[name].as_f64().unwrap_or_else(|| panic!("no {name}"));
    TrainingRun {
        steps_per_s: field("steps_per_s"),
        wait_per_cpu_s: field("runqueue_wait_s") / field("cpu_s").max(1e-3),
    }
}

/// The same CPU-hungry work beside the training simulator: unmanaged (plain CFS) it keeps
/// training's threads waiting in the run queue; in an offline pool under the enforcer it must
/// not. The assertion is on run-queue wait, not on step rate. The step rate here moves with
/// the host (0-40% between runs), and a bound on it failed CI once at 8.1% against 8%. Even a
/// hog under `chrt -i` (SCHED_IDLE, no cgroup) cut the step rate by 12% here while adding no
/// run-queue wait and no steal: the two vCPUs interfere below the guest's scheduler, which no
/// enforcer can prevent short of leaving a CPU idle. Rounds are interleaved so that drift hits
/// every arm.
#[test]
fn the_enforcer_prevents_the_slowdown_an_unmanaged_hog_causes() {
    let instance = "it-slowdown";
    if !privileged("the_enforcer_prevents_the_slowdown_an_unmanaged_hog_causes") {
        return;
    }
    let seconds = "2.5";
    // One spinning thread per CPU: the hog contends for every CPU training could use, on a
    // machine of any size (2 threads left a 16-CPU machine idle enough to add no wait).
    let hog_threads = online_cpu_count().to_string();
    let (mut alone, mut unmanaged, mut enforced) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        alone.push(training_run(
            Command::new(SIM)
                .args(["--seconds", seconds, "--json"])
                .output()
                .unwrap(),
        ));

        let hog = Command::new(HOG)
            .args(["--threads", &hog_threads, "--seconds", "3"])
            .spawn()
            .unwrap();
        unmanaged.push(training_run(
            Command::new(SIM)
                .args(["--seconds", seconds, "--json"])
                .output()
                .unwrap(),
        ));
        wait_ok(hog, "cpu-hog");

        let daemon = Daemon::start(instance, OFFLINE_POOL);
        let hog = daemon.launch(
            "--pool",
            "batch",
            HOG,
            &["--threads", &hog_threads, "--seconds", "3"],
        );
        std::thread::sleep(Duration::from_millis(100));
        let sim = daemon.launch(
            "--training",
            "train",
            SIM,
            &["--seconds", seconds, "--json"],
        );
        enforced.push(training_run(sim.wait_with_output().unwrap()));
        wait_ok(hog, "cpu-hog (pool)");
        daemon.stop();
    }
    remove_test_cgroups(instance, "batch");
    let summary = |arm: &[TrainingRun]| {
        (
            median(&arm.iter().map(|run| run.steps_per_s).collect::<Vec<_>>()),
            median(&arm.iter().map(|run| run.wait_per_cpu_s).collect::<Vec<_>>()),
        )
    };
    let (alone, unmanaged, enforced) = (summary(&alone), summary(&unmanaged), summary(&enforced));
    println!(
        "median steps/s, run-queue wait per CPU-second: alone {alone:.3?}, \
         unmanaged hog {unmanaged:.3?}, enforced {enforced:.3?}; step slowdown unmanaged \
         {:.1}%, enforced {:.1}%",
        (1.0 - unmanaged.0 / alone.0) * 100.0,
        (1.0 - enforced.0 / alone.0) * 100.0
    );
    // Training's three threads share two CPUs, so it waits even alone (0.27-0.46 s per
    // CPU-second here); what the hog adds is the excess over that. Runs here: unmanaged added
    // 0.8-0.95, enforced 0.04-0.33.
    let added = |arm: (f64, f64)| (arm.1 - alone.1).max(0.0);
    assert!(
        added(unmanaged) > 0.2,
        "the unmanaged hog added no run-queue wait to prevent: {unmanaged:?} vs alone {alone:?}"
    );
    // The step-time bound is absolute and loose: on a busy host an idle vCPU is slow to wake,
    // so training alone, which leaves one idle, ran at 47.7 steps/s in one run and 85.9 in
    // another while beside a normal-priority hog it ran at 115 and 132 (the two arms compared
    // with each other swap places with the host). Enforced, it stayed within 1.2% of alone on
    // a quiet host (docs/experiments/2026-11-22-remaining-slowdown.md) and 19% in one busy-host run. The run-queue wait, below,
    // is the sharp check.
    let enforced_slowdown = (1.0 - enforced.0 / alone.0) * 100.0;
    assert!(
        enforced_slowdown < 35.0,
        "training's steps slowed by {enforced_slowdown:.1}% with the enforcer (bound 35%)"
    );
    assert!(
        added(enforced) < added(unmanaged) / 2.0,
        "the enforcer left training waiting: {:.3} s per CPU-second added, unmanaged {:.3}",
        added(enforced),
        added(unmanaged)
    );
}

/// One plain HTTP/1.1 GET over loopback; returns (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[test]
fn metrics_are_served_on_loopback_with_training_figures() {
    if !privileged("metrics_are_served_on_loopback_with_training_figures") {
        return;
    }
    let daemon = Daemon::start("it-metrics", "[metrics]\nlisten = \"127.0.0.1:0\"\n");
    let sim = daemon.launch("--training", "metered", SIM, &["--seconds", "1"]);
    wait_ok(sim, "training-sim");
    let addr = daemon.snapshot().metrics_addr.expect("metrics address");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let count_line = body
        .lines()
        .find(|l| l.starts_with("reamer_training_wait_seconds_count{job=\"metered\"}"))
        .unwrap_or_else(|| panic!("no wait histogram for the job in:\n{body}"));
    let waits: u64 = count_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(waits > 0, "{count_line}");
    assert!(body.contains("reamer_enforcer_reactions_total"));
    let (status, _) = http_get(&addr, "/elsewhere");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    daemon.snapshot();
    daemon.stop();
}

/// Short hold and demand window, so that cores come back within a test's patience.
const QUICK_POLICY: &str =
    "[policy]\ngive_back_after_ms = 200\ndemand_window_ms = 200\ntick_ms = 50\n";

#[test]
fn a_training_job_that_exits_frees_its_cores() {
    let instance = "it-exit-frees";
    if !privileged("a_training_job_that_exits_frees_its_cores") {
        return;
    }
    let daemon = Daemon::start(instance, &format!("{OFFLINE_POOL}{QUICK_POLICY}"));
    let sim = daemon.launch("--training", "short", SIM, &["--seconds", "1"]);
    wait_ok(sim, "training-sim");
    let held = daemon
        .snapshot()
        .enforcement
        .expect("enforcement status")
        .training_cpus;
    assert!(!held.is_empty(), "training never got cores while it ran");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = daemon.snapshot().enforcement.expect("enforcement status");
        if status.training_cpus.is_empty() {
            let fell = status
                .recent_decisions
                .iter()
                .any(|d| d["trigger"] == "demand_fell");
            assert!(
                fell,
                "cores came back without a demand_fell decision: {status:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cores still held 10 s after training exited: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}

#[test]
fn a_pool_cgroup_removed_underneath_is_logged_retried_and_the_daemon_goes_on() {
    let instance = "it-removed";
    if !privileged("a_pool_cgroup_removed_underneath_is_logged_retried_and_the_daemon_goes_on") {
        return;
    }
    // An online core beside: training can never hold every core, so the offline pool's CPUs
    // change whenever training takes one (with both taken, offline would share them all, as
    // before, and nothing would be written).
    let online = "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\n";
    let daemon = Daemon::start(instance, &format!("{OFFLINE_POOL}{online}{QUICK_POLICY}"));
    let cpuset_dir = cgroup_dir("cpuset", &format!("/reamer/{instance}/batch"));
    std::fs::remove_dir(&cpuset_dir).expect("remove the empty pool cgroup (cpuset)");
    // Training demand makes the slow path rewrite the pool's cpuset, which is gone.
    let sim = daemon.launch("--training", "t", SIM, &["--seconds", "1"]);
    wait_ok(sim, "training-sim");
    // The slow path writes on its next tick after demand moved: give it a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        daemon.snapshot();
        let log = daemon.log();
        if log.contains("pool batch:") && log.contains("cpuset.cpus") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no warning logged:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The group back (as an operator would make it again): the failed write is retried on
    // the tick until it is done, not left until the next allocation that differs.
    std::fs::create_dir(&cpuset_dir).expect("make the pool cgroup (cpuset) again");
    eventually("the failed write retried", Duration::from_secs(3), || {
        daemon
            .log()
            .contains("a write that failed earlier is done now")
    });
    let cpus = std::fs::read_to_string(cpuset_dir.join("cpuset.cpus")).unwrap_or_default();
    assert!(!cpus.trim().is_empty(), "the retry wrote no CPUs");
    let log = daemon.stop();
    assert!(log.contains("sensor detached, pins removed"), "{log}");
    assert_eq!(
        log.matches("(retried every tick)").count(),
        1,
        "the failure was reported more than once:\n{log}"
    );
    remove_test_cgroups(instance, "batch");
    remove_test_cgroups(instance, "web");
}

/// The registry re-reads its groups every second.
const REREAD: Duration = Duration::from_secs(3);

const GRANT_CLIENT: &str = env!("CARGO_BIN_EXE_grant-client");

/// `grant-client` launched into pool "batch": it subscribes for the pool's grants and exits
/// after `count` of them, or after `seconds`.
fn launch_batch_subscriber(daemon: &Daemon, until: &str, seconds: &str) -> std::process::Child {
    let socket = daemon.socket().display().to_string();
    let mut args = vec!["--socket", &socket, "--pool", "batch", "--seconds", seconds];
    match until {
        "growth" => args.push("--until-growth"),
        count => args.extend(["--count", count]),
    }
    daemon.launch("--pool", "batch", GRANT_CLIENT, &args)
}

#[test]
fn workers_get_their_grants_shrinks_announced_and_only_for_their_own_pool() {
    let instance = "it-grants";
    if !privileged("workers_get_their_grants_shrinks_announced_and_only_for_their_own_pool") {
        return;
    }
    // One core guaranteed to an online pool, so that training, whatever its demand, reserves
    // at most the others and the offline pool's grant shrinks: where training may hold every
    // core, offline shares them all and its grant does not change. Unpaused, so that the
    // grants differ only in their CPUs.
    let config = format!(
        "{OFFLINE_POOL}[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\n\n\
         {QUICK_POLICY}pause_offline_when_training_short = false\n"
    );
    let daemon = Daemon::start(instance, &config);
    let socket = daemon.socket().display().to_string();

    // Outside the pool: refused.
    let outsider = Command::new(GRANT_CLIENT)
        .args(["--socket", &socket, "--pool", "batch"])
        .output()
        .unwrap();
    assert_eq!(
        outsider.status.code(),
        Some(3),
        "an outsider was not refused"
    );
    assert!(String::from_utf8_lossy(&outsider.stdout).contains("is not in pool"));

    // Inside: the current grant, then a shrink when training arrives, then growth when it leaves.
    let worker = launch_batch_subscriber(&daemon, "growth", "15");
    std::thread::sleep(Duration::from_millis(300));
    let sim = daemon.launch("--training", "t", SIM, &["--seconds", "1"]);
    wait_ok(sim, "training-sim");
    let output = worker.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the worker saw no growth after a shrink:\n{text}"
    );
    let grants: Vec<Grant> = text
        .lines()
        .map(|l| match protocol::from_line(l.as_bytes()).unwrap() {
            Response::Grant(grant) => grant,
            other => panic!("not a grant: {other:?}"),
        })
        .collect();
    println!("grants: {grants:?}");
    assert!(!grants[0].shrinking, "the first grant is the current one");
    assert!(
        grants.iter().any(|g| g.shrinking),
        "no shrink was announced: {grants:?}"
    );
    let last = grants.last().unwrap();
    assert!(
        !last.shrinking,
        "cores did not come back after training left: {grants:?}"
    );
    daemon.stop();
    remove_test_cgroups(instance, "batch");
    remove_test_cgroups(instance, "web");
}

#[test]
fn a_worker_that_dies_is_cleaned_up_and_its_pool_serves_the_next_one() {
    let instance = "it-worker-death";
    if !privileged("a_worker_that_dies_is_cleaned_up_and_its_pool_serves_the_next_one") {
        return;
    }
    let daemon = Daemon::start(instance, OFFLINE_POOL);
    let mut worker = launch_batch_subscriber(&daemon, "1000", "30");
    let pid = worker.id();
    eventually("the worker subscribed", REREAD, || {
        pool_in(&daemon.snapshot(), "batch").0.subscribers == 1
    });
    // SIGKILL: the worker gets no chance to say goodbye.
    worker.kill().unwrap();
    worker.wait().unwrap();
    eventually("the dead worker's subscription dropped", REREAD, || {
        pool_in(&daemon.snapshot(), "batch").0.subscribers == 0
    });
    eventually("the dead worker left the pool", REREAD, || {
        let (enforced, classified) = pool_in(&daemon.snapshot(), "batch");
        let listed = enforced.processes.contains(&pid);
        !listed && classified.threads == 0
    });
    // The pool serves the next worker as before.
    let next = launch_batch_subscriber(&daemon, "1", "5");
    wait_ok(next, "the next worker's grant");
    let log = daemon.stop();
    remove_test_cgroups(instance, "batch");
    assert!(
        log.contains("worker gone: grant subscription dropped"),
        "the daemon did not log the dead worker:\n{log}"
    );
}
