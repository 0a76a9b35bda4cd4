//! Privileged tests of `[policy] harvest_by_pace` on real cgroups, with a training job that
//! reports its progress (the training simulator, launched through the daemon):
//! - beside an offline hog, the controller compares the top of its ladder with offline held
//!   back, in cycles of a half at that level and a half with offline frozen, each step in the
//!   decision log with its reason; `status` shows the level and the held pace; when the job
//!   stops reporting, offline goes back to the core policy's CPUs;
//! - settled, it reads the job's pace between rechecks, and a job whose pace drops has its
//!   level compared again at once (`pace_moved`), not at the next recheck; so does a job
//!   beside the one followed (`pace_moved_for`, with the job);
//! - a second training job without a pace brings it down from the top of its ladder to the
//!   core policy's level (`several_jobs`): one job's pace is no proof for the other's cores;
//! - with two reporting jobs it searches from the top of its ladder, each job's own cycles to
//!   show a level above the policy's free;
//! - of two reporting jobs, the other is measured over the controller's cycles beside the one
//!   followed; `observe --json` records the controller as status has it; the one followed,
//!   stopped past 10 s while its process lives (a checkpoint), is paused: no signal meanwhile,
//!   not the other job's, and once it reports again its level is compared again (`resumed`).

use std::time::{Duration, Instant};

use reamer_tests::harness::{
    Daemon, Reaped, decision_log_of, enforcer_bin, eventually, pool_in, privileged,
    remove_test_cgroups, send_signal, status_text, wait_ok,
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

/// A daemon of `instance` with an offline hog of one thread in its `batch` pool for
/// `seconds`.
fn daemon_with_offline_hog(instance: &str, seconds: &str) -> (Daemon, Reaped) {
    remove_test_cgroups(instance, "batch");
    let daemon = Daemon::start(instance, CONFIG);
    let hog = Reaped(daemon.launch(
        "--pool",
        "batch",
        HOG,
        &["--threads", "1", "--seconds", seconds],
    ));
    (daemon, hog)
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
    let (daemon, _hog) = daemon_with_offline_hog(instance, "60");
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
    assert_eq!(status.job.as_deref(), Some("sim"), "the job followed");
    // Its steps counted by reason, for `/metrics`: a trial and a probe so far at least.
    for reason in ["trial", "probe"] {
        let count = status.steps.get(reason).copied().unwrap_or(0);
        assert!(count >= 1, "{reason}: {:?}", status.steps);
    }
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

/// The controller's lines of the daemon's whole decision log, oldest first: the snapshot
/// keeps the recent decisions only, and this test runs for minutes.
fn logged_harvest_steps(instance: &str) -> Vec<Value> {
    std::fs::read_to_string(decision_log_of(instance))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|record| record.get("harvest").cloned())
        .collect()
}

/// The first step of `instance`'s decision log that compared a settled level again because a
/// pace moved (`pace_moved`, or `pace_moved_for` a job beside): two stretches past the bar (16 s
/// each, plus the one the phase began in) after a new phase begun 18 s after the loop settled
/// at `settled`, well before the next recheck two minutes after it.
fn first_pace_move(instance: &str, settled: Instant) -> Value {
    let moved = |steps: &[Value]| {
        let mut moves = steps.iter().filter(|s| {
            s["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("pace_moved"))
        });
        moves.next().cloned()
    };
    eventually("the level compared again", Duration::from_secs(55), || {
        moved(&logged_harvest_steps(instance)).is_some()
    });
    assert!(
        settled.elapsed() < Duration::from_secs(120),
        "seen only at the recheck"
    );
    moved(&logged_harvest_steps(instance)).unwrap()
}

#[test]
fn a_settled_pace_that_drops_has_its_level_compared_again_at_once() {
    let instance = "it-pace-moved";
    if !privileged("a_settled_pace_that_drops_has_its_level_compared_again_at_once") {
        return;
    }
    remove_test_cgroups(instance, "batch");
    let _ = std::fs::remove_file(decision_log_of(instance));
    // ε of 5%: the simulator's cycles (about 1% apart on the VM) show every level free in
    // three, so the search settles at the top within seconds of its first comparison.
    let config = CONFIG.replace("pace_epsilon = 0.01", "pace_epsilon = 0.05");
    assert_ne!(config, CONFIG);
    let daemon = Daemon::start(instance, &config);
    let sim = Reaped(daemon.launch(
        "--training",
        "sim",
        TRAINING_SIM,
        &[
            "--seconds",
            "330",
            "--loaders",
            "1",
            "--phase-gap-us",
            "1000",
        ],
    ));
    // Settled after its search, and again after its first recheck a minute later: the watch
    // that follows judges from its second stretch, on the deviation the first one pooled. Up
    // to 250 s: a level above the policy's may run 24 cycles (144 s) before it is kept, and
    // under the full suite's load the first comparison once ran 14 cycles, its ratios 1.00 to
    // 1.09, so the second settle came past 150 s. The simulator runs long enough for the
    // phase change after it.
    let settled = |steps: &[Value]| steps.iter().filter(|s| s["settles"] == true).count();
    eventually("settled twice", Duration::from_secs(250), || {
        settled(&logged_harvest_steps(instance)) >= 2
    });
    let second_settle = Instant::now();
    // Its first stretch (1 s to settle, 16 s read) is the mean the next ones are judged
    // against. Then a new phase: the simulator's pace falls by about three quarters (its
    // launch thread waits 1000 µs after each burst, not 150), past the watch's bar (2ε and
    // twice the stretches' deviation) by a wide margin: under the full suite's load, a drop by
    // half (400 µs) was once not seen within 55 s.
    std::thread::sleep(Duration::from_secs(18));
    // SAFETY: a signal to the simulator this test started (`enforcer launch` execs it).
    assert_eq!(unsafe { libc::kill(sim.0.id() as i32, libc::SIGUSR1) }, 0);
    let step = first_pace_move(instance, second_settle);
    assert_eq!(step["reason"], "pace_moved", "{step}");
    let (from, to) = (step["from"].as_f64().unwrap(), step["to"].as_f64().unwrap());
    assert!(
        to < 0.8 * from,
        "the pace fell by about three quarters: {step}"
    );
    // `enforcer status` says how far: in its last move, or among the recent decisions once
    // the comparison's held half has followed.
    let text = status_text(instance);
    assert!(text.contains("pace moved (the settled pace"), "{text}");
    println!("{:#?}", logged_harvest_steps(instance));
    drop(sim);
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}

#[test]
fn a_settled_pace_that_drops_for_the_job_beside_has_its_level_compared_again_at_once() {
    let instance = "it-pace-moved-for";
    if !privileged(
        "a_settled_pace_that_drops_for_the_job_beside_has_its_level_compared_again_at_once",
    ) {
        return;
    }
    remove_test_cgroups(instance, "batch");
    let _ = std::fs::remove_file(decision_log_of(instance));
    // ε of 5%, as above: each job's cycles show a level free or costly in three.
    let config = CONFIG.replace("pace_epsilon = 0.01", "pace_epsilon = 0.05");
    let daemon = Daemon::start(instance, &config);
    let args = [
        "--seconds",
        "300",
        "--loaders",
        "1",
        "--phase-gap-us",
        "1000",
    ];
    let first = Reaped(daemon.launch("--training", "first", TRAINING_SIM, &args));
    eventually("the first job followed", Duration::from_secs(10), || {
        followed_job(&daemon).as_deref() == Some("first")
    });
    let second = Reaped(daemon.launch("--training", "second", TRAINING_SIM, &args));
    // Settled twice: the second watch of each job judges from its second stretch.
    let settled = |steps: &[Value]| steps.iter().filter(|s| s["settles"] == true).count();
    eventually("settled twice", Duration::from_secs(200), || {
        settled(&logged_harvest_steps(instance)) >= 2
    });
    let second_settle = Instant::now();
    std::thread::sleep(Duration::from_secs(18));
    // A new phase of the job beside, not of the one followed: its pace falls by about three
    // quarters, as above.
    send_signal(second.id(), libc::SIGUSR1);
    let step = first_pace_move(instance, second_settle);
    assert_eq!(step["reason"], "pace_moved_for", "{step}");
    assert_eq!(step["job"], "second", "{step}");
    let (from, to) = (step["from"].as_f64().unwrap(), step["to"].as_f64().unwrap());
    assert!(
        to < 0.8 * from,
        "its pace fell by about three quarters: {step}"
    );
    let text = status_text(instance);
    assert!(
        text.contains("pace moved for second (the settled pace"),
        "{text}"
    );
    println!("{:#?}", logged_harvest_steps(instance));
    drop((first, second));
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}

#[test]
fn a_second_training_job_brings_the_controller_down_to_the_policys_level() {
    let instance = "it-pace-jobs";
    if !privileged("a_second_training_job_brings_the_controller_down_to_the_policys_level") {
        return;
    }
    let (daemon, _hog) = daemon_with_offline_hog(instance, "40");
    let _sim = Reaped(daemon.launch(
        "--training",
        "sim",
        TRAINING_SIM,
        &["--seconds", "40", "--loaders", "1"],
    ));
    eventually("a comparison of the top", Duration::from_secs(16), || {
        has_step(&harvest_steps(&daemon), "training_cores", "trial")
    });

    // A second job, which reports nothing: offline on training's cores would reach its cores
    // too, and the first job's pace says nothing of them.
    let _other = Reaped(daemon.launch("--training", "other", "sleep", &["30"]));
    eventually("the policy's level", Duration::from_secs(5), || {
        has_step(&harvest_steps(&daemon), "policy", "several_jobs")
    });
    let came_down = |steps: &[Value]| {
        steps
            .iter()
            .position(|s| s["reason"] == "several_jobs")
            .expect("a several_jobs step")
    };
    let down = &harvest_steps(&daemon)[came_down(&harvest_steps(&daemon))];
    assert_eq!(down["jobs"], 2, "{down}");
    assert_eq!(down["waiting_for"], "other", "{down}");
    // Its comparisons go on, at the policy's level and below (a cycle is 6 s or more).
    std::thread::sleep(Duration::from_secs(8));
    let steps = harvest_steps(&daemon);
    let since: Vec<&Value> = steps[came_down(&steps)..].iter().collect();
    assert!(
        since.len() > 1
            && since
                .iter()
                .all(|s| !["unpaused", "training_cores"].contains(&s["level"].as_str().unwrap())),
        "{since:#?}"
    );
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}

#[test]
fn two_reporting_jobs_have_the_levels_above_the_policys_compared() {
    let instance = "it-pace-two";
    if !privileged("two_reporting_jobs_have_the_levels_above_the_policys_compared") {
        return;
    }
    let _ = std::fs::remove_file(decision_log_of(instance));
    let (daemon, _hog) = daemon_with_offline_hog(instance, "45");
    let args = ["--seconds", "45", "--loaders", "1"];
    let _first = Reaped(daemon.launch("--training", "first", TRAINING_SIM, &args));
    eventually("the first job followed", Duration::from_secs(10), || {
        followed_job(&daemon).as_deref() == Some("first")
    });
    let _second = Reaped(daemon.launch("--training", "second", TRAINING_SIM, &args));
    // The first comparison waits for both jobs' first 10 s of a pace. Each job then has a pace
    // of its own to show a level above the policy's free, so the search starts at the top of
    // the ladder.
    eventually("a comparison", Duration::from_secs(16), || {
        harvest_steps(&daemon)
            .iter()
            .any(|s| s["reason"] == "trial")
    });
    let steps = harvest_steps(&daemon);
    let first = steps.iter().find(|s| s["reason"] == "trial");
    assert_eq!(
        first.map(|s| s["level"].clone()),
        Some("training_cores".into()),
        "{steps:#?}"
    );
    // The job beside is measured over the controller's cycles from its own first 10 s on (two
    // cycles: 12 s or more), whatever level the search has come to.
    eventually("the job beside measured", Duration::from_secs(40), || {
        let harvest = daemon.snapshot().enforcement.and_then(|e| e.harvest);
        let beside = harvest.map(|h| h.beside).unwrap_or_default();
        beside.iter().any(|b| b.job == "second" && b.cycles >= 2)
    });
    let steps = logged_harvest_steps(instance);
    assert!(
        !steps.iter().any(|s| s["reason"] == "several_jobs"),
        "{steps:#?}"
    );
    println!("{steps:#?}");
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}

/// The job the controller follows, as status has it.
fn followed_job(daemon: &Daemon) -> Option<String> {
    daemon.snapshot().enforcement?.harvest?.job
}

#[test]
fn a_job_followed_that_pauses_keeps_the_signal_and_its_level_is_compared_again() {
    let instance = "it-pace-follow";
    if !privileged("a_job_followed_that_pauses_keeps_the_signal_and_its_level_is_compared_again") {
        return;
    }
    let _ = std::fs::remove_file(decision_log_of(instance));
    let (daemon, _hog) = daemon_with_offline_hog(instance, "60");
    // Two reporting jobs: "first" comes first in the registry's order and is followed.
    let args = ["--seconds", "60", "--loaders", "1"];
    let first = Reaped(daemon.launch("--training", "first", TRAINING_SIM, &args));
    eventually("the first job followed", Duration::from_secs(10), || {
        followed_job(&daemon).as_deref() == Some("first")
    });
    let second = Reaped(daemon.launch("--training", "second", TRAINING_SIM, &args));
    // Its first comparison (after its first 10 s of reports): a change of job from here on is
    // a step of the decision log.
    eventually("a comparison", Duration::from_secs(16), || {
        harvest_steps(&daemon)
            .iter()
            .any(|s| s["reason"] == "trial")
    });
    // The job beside it is measured over the same cycles (two at least: 12 s or more), so that
    // a level costly to it alone is left too.
    eventually("the job beside measured", Duration::from_secs(40), || {
        let harvest = daemon.snapshot().enforcement.and_then(|e| e.harvest);
        let beside = harvest.map(|h| h.beside).unwrap_or_default();
        beside
            .iter()
            .any(|b| b.job == "second" && b.cycles >= 2 && b.ratio > 0.0)
    });
    // And status says what the level costs it.
    let status = status_text(instance);
    let line = status
        .lines()
        .find(|line| line.starts_with("offline's share"));
    assert!(
        line.is_some_and(|line| line.contains("beside it: second lost")),
        "{status}"
    );
    println!("{}", line.unwrap_or_default());
    // `observe --json` records the controller as status has it: the job followed and its pace
    // with offline held back (the jobs beside are left out here: a new comparison may have
    // begun since, with no cycles yet).
    let observed = std::process::Command::new(enforcer_bin())
        .args(["observe", "--json", "--interval", "0.2", "--count", "1"])
        .args(["--instance", instance])
        .output()
        .expect("enforcer observe");
    assert!(observed.status.success(), "{observed:?}");
    let trace: Value = serde_json::from_slice(&observed.stdout).expect("a JSON line");
    let harvest = &trace["harvest"];
    assert_eq!(harvest["job"], "first", "{trace}");
    assert!(
        harvest["reference_steps_per_s"]
            .as_f64()
            .is_some_and(|pace| pace > 0.0),
        "{trace}"
    );

    // "first" stops while its process lives on, as a job writing a checkpoint does: silent
    // past 10 s, it is paused, not ended. The controller waits for it at the policy's level,
    // and does not follow "second" (which would drop what it measured of "first").
    send_signal(first.id(), libc::SIGSTOP);
    eventually("the pause", Duration::from_secs(16), || {
        has_step(&logged_harvest_steps(instance), "policy", "no_signal")
    });
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(followed_job(&daemon), None);
    let harvest = daemon
        .snapshot()
        .enforcement
        .and_then(|e| e.harvest)
        .unwrap();
    assert_eq!(harvest.paused_job.as_deref(), Some("first"));
    assert!(harvest.paused_s.is_some_and(|s| s >= 3.0), "{harvest:?}");
    let status = status_text(instance);
    assert!(status.contains("waiting for first, silent"), "{status}");
    // "first" reports again: followed again, and after its first 10 s of reports the level it
    // had is compared again (`resumed`), not searched for from the top.
    send_signal(first.id(), libc::SIGCONT);
    eventually(
        "the first job followed again",
        Duration::from_secs(6),
        || followed_job(&daemon).as_deref() == Some("first"),
    );
    eventually("its level compared again", Duration::from_secs(16), || {
        logged_harvest_steps(instance)
            .iter()
            .any(|step| step["reason"] == "resumed")
    });
    let steps = logged_harvest_steps(instance);
    let resumed = steps
        .iter()
        .find(|step| step["reason"] == "resumed")
        .unwrap();
    assert!(
        resumed["paused_s"].as_f64().is_some_and(|s| s >= 3.0),
        "{resumed}"
    );
    assert!(
        !steps.iter().any(|step| step["reason"] == "job_changed"),
        "{steps:#?}"
    );
    drop((first, second));
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}
