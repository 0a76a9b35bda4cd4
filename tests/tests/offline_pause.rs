//! Privileged test of `[policy] pause_offline_when_training_short` on real cgroups: while
//! training wants more cores than the online pool's minimum leaves it, the offline pool is
//! frozen and its workers are told first; it resumes once training's demand has fallen, before
//! any core goes back (`enforcer status` telling both in words), and a daemon that stops leaves
//! it thawed.

use std::{process::Child, time::Duration};

use enforcer_common::protocol::{self, Grant, Response};
use reamer_tests::harness::{
    Daemon, Reaped, cgroup_dir, eventually, online_cpu_count, pool_in, privileged,
    remove_test_cgroups, status_text, wait_ok,
};
use serde_json::Value;

const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");
const GRANT_CLIENT: &str = env!("CARGO_BIN_EXE_grant-client");
/// One core guaranteed to the online pool: training may reserve all but one, and a hog on
/// every CPU wants one more. Short hold and demand window, so that the test takes seconds.
const CONFIG: &str = "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\n\n\
                      [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
                      [policy]\npause_offline_when_training_short = true\n\
                      give_back_after_ms = 200\ndemand_window_ms = 200\ntick_ms = 50\n";
/// Time for the slow path to see demand move, with room for a busy VM.
const SETTLE: Duration = Duration::from_secs(5);

/// Whether the kernel holds the pool's cgroup frozen: frozen, or freezing (v1's
/// `freezer.state` FROZEN or FREEZING; v2's `cgroup.freeze` 1, which `cgroup.events` reports
/// as frozen only once every task is). A task enters the freezer only when it next runs, and
/// the pool's SCHED_IDLE hog beside a training hog on every CPU may not run for seconds: in
/// one run here the freezer read FREEZING for 8.8 s after the pause decision, and this test
/// failed 2 runs in 8 waiting for FROZEN. Freezing is the pause in force: the task stops
/// before it runs again.
fn kernel_freezes(instance: &str) -> bool {
    let group = format!("/reamer/{instance}/batch");
    let dir = cgroup_dir("freezer", &group);
    if reamer_tests::harness::cgroups::is_v2_host() {
        std::fs::read_to_string(dir.join("cgroup.freeze")).is_ok_and(|v| v.trim() == "1")
    } else {
        let state = std::fs::read_to_string(dir.join("freezer.state")).unwrap_or_default();
        matches!(state.trim(), "FROZEN" | "FREEZING")
    }
}

/// CPU time process `pid` has used, in clock ticks (utime + stime).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the hog's stat");
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th
    // of the line, the 12th and 13th after it.
    let after = &stat[stat.rfind(')').expect("stat has a command") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn batch_paused(daemon: &Daemon) -> bool {
    pool_in(&daemon.snapshot(), "batch").0.paused
}

/// A hog on every CPU as the training job.
fn launch_training(daemon: &Daemon, seconds: &str) -> Child {
    let threads = online_cpu_count().to_string();
    daemon.launch(
        "--training",
        "t",
        HOG,
        &["--threads", &threads, "--seconds", seconds],
    )
}

/// The recent decision that froze (`"paused"`) or thawed (`"resumed"`) the batch pool.
fn decision_that(daemon: &Daemon, list: &str) -> Option<Value> {
    daemon
        .snapshot()
        .enforcement?
        .recent_decisions
        .into_iter()
        .rev()
        .find(|d| {
            d[list]
                .as_array()
                .is_some_and(|p| p.contains(&"batch".into()))
        })
}

#[test]
fn offline_pool_pauses_while_training_is_short_of_cores_and_resumes_after() {
    let instance = "it-pause";
    if !privileged("offline_pool_pauses_while_training_is_short_of_cores_and_resumes_after") {
        return;
    }
    let daemon = Daemon::start(instance, CONFIG);
    let offline = Reaped(daemon.launch(
        "--pool",
        "batch",
        HOG,
        &["--threads", "1", "--seconds", "60"],
    ));
    let socket = daemon.socket().display().to_string();
    // Prints every grant until none has come for 6 s.
    let subscriber = daemon.launch(
        "--pool",
        "batch",
        GRANT_CLIENT,
        &[
            "--socket",
            &socket,
            "--pool",
            "batch",
            "--count",
            "100",
            "--seconds",
            "6",
        ],
    );
    // Subscribed before training starts: a pause would freeze it (it is in the pool) before
    // it could hear of it. Under a full suite's load 300 ms was once not enough.
    eventually("the grant subscriber subscribed", SETTLE, || {
        pool_in(&daemon.snapshot(), "batch").0.subscribers >= 1
    });
    assert!(!batch_paused(&daemon), "paused before training ran");

    // Training wants every CPU: the offline pool is frozen, and gets no CPU. Long enough for
    // the checks below after a pause that was seen to come 3 s after the start under a full
    // suite's load.
    let training = launch_training(&daemon, "8");
    eventually("the offline pool paused", SETTLE, || {
        batch_paused(&daemon) && kernel_freezes(instance)
    });
    let paused = decision_that(&daemon, "paused").expect("no decision froze the pool");
    println!("pausing decision: {paused}");
    assert_eq!(paused["allocation"]["offline_paused"], true);
    // Past the demand window and the hold, training's estimate is its steady two CPUs: the
    // first crossing, with the window still holding ticks from before training, may pause and
    // resume once. From here the pause holds while training runs.
    std::thread::sleep(Duration::from_millis(600));
    eventually("the offline pool paused, steady", SETTLE, || {
        batch_paused(&daemon) && kernel_freezes(instance)
    });
    let paused = decision_that(&daemon, "paused").expect("no decision froze the pool");
    // Over a window the pause held throughout (paused at both ends, no resume between, the
    // latest pausing decision the same), the pool's process used no CPU at all.
    let before = cpu_ticks(offline.id());
    std::thread::sleep(Duration::from_millis(500));
    let during = cpu_ticks(offline.id());
    assert!(
        batch_paused(&daemon) && kernel_freezes(instance),
        "the pause ended within 500 ms while training still wanted every CPU"
    );
    assert_eq!(
        decision_that(&daemon, "paused").map(|d| d["at_ns"].clone()),
        Some(paused["at_ns"].clone()),
        "the pool was resumed and paused again meanwhile"
    );
    assert_eq!(before, during, "the paused pool's process ran");

    // Training gone: the pool resumes first, in a decision that gives back no core.
    wait_ok(training, "the training hog");
    eventually("the offline pool resumed", SETTLE, || {
        !batch_paused(&daemon) && !kernel_freezes(instance)
    });
    let resumed = decision_that(&daemon, "resumed").expect("no decision thawed the pool");
    println!("resuming decision: {resumed}");
    assert_eq!(resumed["trigger"], "demand_fell");
    assert_eq!(
        resumed["training_cores_before"], resumed["training_cores_after"],
        "a core went back in the same step as the pause: {resumed}"
    );
    let after = cpu_ticks(offline.id());
    eventually("the resumed pool's process ran", SETTLE, || {
        cpu_ticks(offline.id()) > after
    });
    // `enforcer status` tells the pause and the resume in words, from the daemon's records.
    let status = status_text(instance);
    let decisions: Vec<&str> = status
        .lines()
        .skip_while(|line| !line.starts_with("recent decisions"))
        .collect();
    // The pause by whichever trigger made it; the resume by training's demand (above).
    for (why, what) in [
        ("s ago  ", "batch paused"),
        ("s ago  training's demand fell", "batch resumed"),
    ] {
        assert!(
            decisions
                .iter()
                .any(|line| line.contains(why) && line.contains(what)),
            "\"{what}\" is not in `enforcer status`:\n{status}"
        );
    }

    // The worker heard of the pause, and of its end, on its grant subscription.
    let output = subscriber.wait_with_output().unwrap();
    let grants: Vec<Grant> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| match protocol::from_line(line.as_bytes()).unwrap() {
            Response::Grant(grant) => grant,
            other => panic!("not a grant: {other:?}"),
        })
        .collect();
    println!("grants: {grants:?}");
    let paused_at = grants
        .iter()
        .position(|g| g.paused)
        .unwrap_or_else(|| panic!("no grant announced the pause: {grants:?}"));
    assert!(
        grants[paused_at..].iter().any(|g| !g.paused),
        "no grant announced the resume: {grants:?}"
    );

    // Paused again, then the daemon stops: nothing is left frozen. Once in a full run of the
    // suite this took longer than SETTLE, never in runs of this test alone; the wait is longer
    // here, and a miss says what the daemon had decided.
    let training = Reaped(launch_training(&daemon, "20"));
    let deadline = std::time::Instant::now() + 2 * SETTLE;
    while !(batch_paused(&daemon) && kernel_freezes(instance)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the offline pool did not pause again within {:?} (frozen: {}); decisions: {:?}",
            2 * SETTLE,
            kernel_freezes(instance),
            daemon.snapshot().enforcement.map(|e| e.recent_decisions)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.stop();
    assert!(
        !kernel_freezes(instance),
        "the offline pool was left frozen at shutdown"
    );
    let after_stop = cpu_ticks(offline.id());
    eventually("the pool's process ran after shutdown", SETTLE, || {
        cpu_ticks(offline.id()) > after_stop
    });
    drop((training, offline));
    // The empty online pool's group went at shutdown, unless a failed run left it.
    remove_test_cgroups(instance, "web");
    remove_test_cgroups(instance, "batch");
}
