//! Training job slots on a long-lived node: the sensor tracks at most `MAX_JOBS` (64) training
//! jobs at once. A job launched through the control socket ends when its last process exits:
//! it keeps its figures for status until a new job needs its slot, and that job takes it with
//! its totals starting from zero, not from the ended job's. Privileged: skips with a reason elsewhere (fails with
//! REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    process::{Child, Command},
    time::Duration,
};

use enforcer_common::{
    MAX_JOBS,
    protocol::{GroupKind, Request, Response},
};
use reamer_tests::harness::{Daemon, eventually, privileged};

const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");
const INSTANCE: &str = "it-job-slots";

/// Processes the test started, killed when it ends however it ends.
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("120")
        .spawn()
        .expect("starting sleep")
}

fn register(daemon: &Daemon, name: &str, pid: u32) -> Response {
    daemon.call(&Request::Register {
        kind: GroupKind::Training,
        name: name.to_owned(),
        pid,
    })
}

#[test]
fn a_launched_job_whose_processes_exited_frees_its_slot_with_its_totals() {
    if !privileged("a_launched_job_whose_processes_exited_frees_its_slot_with_its_totals") {
        return;
    }
    let daemon = Daemon::start(INSTANCE, "[policy]\ntick_ms = 100\n");
    let mut started = Started(Vec::new());

    // One busy job, which runs up a second of CPU time, and every other slot taken.
    let hog = Command::new(HOG)
        .args(["--threads", "1", "--seconds", "120"])
        .spawn()
        .expect("starting cpu-hog");
    let hog_pid = hog.id();
    started.0.push(hog);
    let busy_id = match register(&daemon, "busy", hog_pid) {
        Response::Registered { id, .. } => id,
        other => panic!("busy not registered: {other:?}"),
    };
    eventually(
        "the busy job's second of run time",
        Duration::from_secs(20),
        || {
            daemon
                .snapshot()
                .job("busy")
                .is_some_and(|job| job.run_ns > 1_000_000_000)
        },
    );
    for n in 1..MAX_JOBS {
        let child = sleeper();
        let pid = child.id();
        started.0.push(child);
        let answer = register(&daemon, &format!("idle-{n}"), pid);
        assert!(matches!(answer, Response::Registered { .. }), "{answer:?}");
    }
    let late = sleeper();
    let late_pid = late.id();
    started.0.push(late);
    let answer = register(&daemon, "late", late_pid);
    assert!(
        matches!(&answer, Response::Error { message } if message.contains("at most 64 training jobs")),
        "{answer:?}"
    );

    // The busy job's process exits: the job ends at the next reconcile, and keeps its figures
    // for status until its slot is needed. The late job takes it, from zero.
    let mut hog = started.0.remove(0);
    hog.kill().unwrap();
    hog.wait().unwrap();
    eventually("the busy job's end said", Duration::from_secs(10), || {
        daemon.log().contains("training job ended")
    });
    let ended = daemon.snapshot();
    let busy = ended
        .job("busy")
        .expect("an ended job keeps its figures for status");
    assert!(busy.run_ns > 1_000_000_000 && busy.threads == 0, "{busy:?}");
    let answer = register(&daemon, "late", late_pid);
    let Response::Registered { id, .. } = answer else {
        panic!("late not registered once a slot freed: {answer:?}");
    };
    assert_eq!(id, busy_id, "the freed slot");
    let snapshot = daemon.snapshot();
    let late_job = snapshot.job("late").unwrap();
    assert!(
        late_job.run_ns < 100_000_000,
        "a sleeping job's run time, not the busy job's: {late_job:?}"
    );
    assert!(snapshot.job("busy").is_none(), "its slot taken, it is gone");
    daemon.stop();
    drop(started);
}
