//! Privileged tests of a training job's progress reports (`Request::Progress`): the training
//! simulator and the shipped Python helper (`python/reamer_progress.py`), each launched as a
//! training job through a real daemon, report their steps; the daemon turns them into the
//! job's pace in its snapshot, and refuses a report from a process of no training job, or with
//! a mean that cannot be its count's. Two tests need no privilege: the helper's reports resume
//! once a socket that was missing appears, as soon as `REAMER_PROGRESS_RETRY_S` says, and
//! carry the count's mean since the report before.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    os::unix::net::UnixListener,
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use enforcer_common::protocol::{MeanCount, Request, Response};
use reamer_tests::harness::{Daemon, eventually, job, privileged, status_text, wait_ok};
use serde_json::Value;

const TRAINING_SIM: &str = env!("CARGO_BIN_EXE_training-sim");

/// The folder holding the Python helper.
fn helper_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .join("python")
}

/// A Python job reporting a step every 20 ms for `seconds` to `socket`, which appears 0.5 s
/// after it starts (a daemon started after its job, as in a benchmark that starts one per
/// window): the reports a listener there answered, with `REAMER_PROGRESS_RETRY_S` set to
/// `retry`.
fn reports_once_the_socket_appears(retry: Option<&str>, seconds: u32) -> Vec<Value> {
    // Tests run side by side: each call its own folder.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "reamer-progress-retry-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let socket = dir.join("daemon.sock");
    let _ = std::fs::remove_file(&socket);
    let script = format!(
        "import sys, time\n\
         sys.path.insert(0, {dir:?})\n\
         import reamer_progress\n\
         for step in range(1, {steps}):\n\
         \x20   time.sleep(0.02)\n\
         \x20   reamer_progress.report(step)\n",
        dir = helper_dir().display().to_string(),
        steps = seconds * 50 + 1,
    );
    let mut command = Command::new("python3");
    command
        .args(["-c", &script])
        .env("REAMER_SOCKET", &socket)
        .env_remove("REAMER_PROGRESS_RETRY_S")
        .stderr(Stdio::null());
    if let Some(retry) = retry {
        command.env("REAMER_PROGRESS_RETRY_S", retry);
    }
    let mut python = command.spawn().expect("python3");
    std::thread::sleep(Duration::from_millis(500));
    let listener = UnixListener::bind(&socket).expect("binding the stand-in socket");
    listener.set_nonblocking(true).expect("nonblocking");
    let mut answered = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while python.try_wait().expect("python's state").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the script ran past 10 s"
        );
        let Ok((stream, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        stream.set_nonblocking(false).expect("blocking");
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .expect("a read timeout");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            let answer = "{\"status\":\"ok\",\"job\":\"train\",\"steps_per_s\":50.0}\n";
            reader
                .get_mut()
                .write_all(answer.as_bytes())
                .expect("answering");
            answered.push(serde_json::from_str(&line).expect("a report is JSON"));
            line.clear();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    answered
}

#[test]
fn the_python_helper_tries_again_as_soon_as_reamer_progress_retry_s_says() {
    // The first report, at 20 ms, finds no socket; the socket appears at 0.5 s.
    let soon = reports_once_the_socket_appears(Some("0.3"), 2).len();
    assert!(soon >= 1, "{soon} reports answered with a 0.3 s retry");
    // The default waits 30 s: the job ends first.
    assert_eq!(reports_once_the_socket_appears(None, 2).len(), 0);
    // A value that is not seconds above 0 is the default.
    assert_eq!(reports_once_the_socket_appears(Some("-1"), 2).len(), 0);
}

#[test]
fn the_python_helpers_reports_carry_the_counts_mean_since_the_report_before() {
    let reports = reports_once_the_socket_appears(Some("0.3"), 4);
    assert!(reports.len() >= 2, "{reports:?}");
    for report in &reports {
        let steps = report["steps"].as_f64().expect("steps");
        let (mean, seconds) = (&report["mean"]["steps"], &report["mean"]["seconds"]);
        let (mean, seconds) = (mean.as_f64().expect("a mean"), seconds.as_f64().unwrap());
        // A step every 20 ms or more: the count climbed by at most 50 a second, so its mean
        // over the time before lies below the count, by at most that climb.
        assert!(seconds > 0.0 && seconds <= 1.5, "{report}");
        assert!(
            mean < steps && mean >= steps - 50.0 * seconds - 1.0,
            "{report}"
        );
    }
}

#[test]
fn the_training_simulator_reports_its_pace_and_a_process_of_no_job_is_refused() {
    let instance = "it-progress-sim";
    if !privileged("the_training_simulator_reports_its_pace_and_a_process_of_no_job_is_refused") {
        return;
    }
    let daemon = Daemon::start(instance, "");

    // This test's own process is in no training job: its report is refused, naming why.
    match daemon.call(&Request::Progress {
        steps: 10,
        mean: None,
    }) {
        Response::Error { message } => assert!(
            message.contains("is in no training job") && message.contains("--training"),
            "{message}"
        ),
        other => panic!("a report from outside every job was taken: {other:?}"),
    }
    // A mean that cannot be the count's (above it) is refused, and says which field.
    match daemon.call(&Request::Progress {
        steps: 10,
        mean: Some(MeanCount {
            steps: 11.0,
            seconds: 1.0,
        }),
    }) {
        Response::Error { message } => assert!(message.contains("mean.steps 11"), "{message}"),
        other => panic!("a mean above its count was taken: {other:?}"),
    }

    let mut sim = daemon.launch(
        "--training",
        "sim",
        TRAINING_SIM,
        &["--seconds", "8", "--loaders", "1", "--json"],
    );
    // Two reports a second apart give a pace; the window fills over 5 s.
    let mut pace = None;
    eventually(
        "the simulator's pace in the snapshot",
        Duration::from_secs(7),
        || {
            let snapshot = daemon.snapshot();
            // Until `enforcer launch` has registered it, the job is not there.
            let progress = snapshot.job("sim").and_then(|job| job.progress);
            pace = progress.and_then(|p| p.steps_per_s);
            pace.is_some()
        },
    );
    let mut out = String::new();
    sim.stdout
        .take()
        .expect("the simulator's stdout")
        .read_to_string(&mut out)
        .expect("the simulator's report");
    wait_ok(sim, "training-sim");
    let report: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the simulator's report {out:?}: {e}"));
    let own = report["steps_per_s"].as_f64().expect("steps_per_s");
    let pace = pace.expect("a pace");
    println!("pace from reports {pace:.1} steps/s; the simulator's own {own:.1} steps/s");
    // The daemon's pace is over a few seconds of the run, the simulator's over all of it:
    // the same job, within what a busy VM changes between seconds.
    assert!(
        (0.6..=1.6).contains(&(pace / own)),
        "pace {pace:.1} against the simulator's {own:.1} steps/s"
    );
    daemon.stop();
}

#[test]
fn the_python_helper_reports_from_a_job_and_says_once_why_it_cannot_from_outside() {
    let instance = "it-progress-py";
    if !privileged("the_python_helper_reports_from_a_job_and_says_once_why_it_cannot_from_outside")
    {
        return;
    }
    let daemon = Daemon::start(instance, "");
    // A loop that reports 50 steps a second (every call; the helper sends one a second),
    // for 4 s, then prints what the daemon last answered.
    let script = format!(
        "import sys, time, json\n\
         sys.path.insert(0, {dir:?})\n\
         import reamer_progress\n\
         sent = 0\n\
         for step in range(1, 201):\n\
         \x20   time.sleep(0.02)\n\
         \x20   sent += reamer_progress.report(step)\n\
         print(json.dumps({{'sent': sent, 'answer': reamer_progress._reporter.last_answer}}))\n",
        dir = helper_dir().display().to_string()
    );
    let mut python = daemon.launch("--training", "py", "python3", &["-c", &script]);
    let mut out = String::new();
    python
        .stdout
        .take()
        .expect("python's stdout")
        .read_to_string(&mut out)
        .expect("python's output");
    wait_ok(python, "the helper's script");
    let printed: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the script's output {out:?}: {e}"));
    println!("{printed}");
    // About one report a second over 4 s, each counted for the job it ran in.
    let sent = printed["sent"].as_u64().expect("sent");
    assert!((3..=6).contains(&sent), "{printed}");
    assert_eq!(printed["answer"]["job"], "py", "{printed}");
    let pace = printed["answer"]["steps_per_s"].as_f64().expect("a pace");
    assert!(
        (25.0..=75.0).contains(&pace),
        "50 steps a second read as {pace}"
    );
    // The job has ended (its process exited): its figures stay for status until its slot
    // is needed.
    let snapshot = daemon.snapshot();
    let progress = job(&snapshot, "py").progress.expect("the job's progress");
    assert!(progress.steps >= 150, "{progress:?}");
    // `enforcer status` shows it beside the job.
    let status = status_text(instance);
    let line = status
        .lines()
        .find(|l| l.trim_start().starts_with("py "))
        .unwrap_or_else(|| panic!("no line for the job in {status}"));
    assert!(
        line.contains(&format!("progress {} steps", progress.steps)) && line.contains("steps/s"),
        "{line}"
    );

    // The same helper in a process of no job, pointed at the daemon: no report counts, the
    // reason is said once, and the script runs to its end.
    let outside = Command::new("python3")
        .args(["-c", &script])
        .env("REAMER_SOCKET", daemon.socket())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("python3 outside the job");
    assert!(outside.status.success(), "{outside:?}");
    let printed: Value = serde_json::from_slice(&outside.stdout).expect("the script's output");
    assert_eq!(printed["sent"], 0, "{printed}");
    let stderr = String::from_utf8_lossy(&outside.stderr);
    assert_eq!(
        stderr.matches("reamer_progress:").count(),
        1,
        "said more than once: {stderr}"
    );
    assert!(stderr.contains("is in no training job"), "{stderr}");

    // Without REAMER_SOCKET (a job not started by reamer): nothing sent, said once.
    let unset = Command::new("python3")
        .args(["-c", &script])
        .env_remove("REAMER_SOCKET")
        .output()
        .expect("python3 without a daemon");
    assert!(unset.status.success(), "{unset:?}");
    let stderr = String::from_utf8_lossy(&unset.stderr);
    assert!(
        stderr.contains("REAMER_SOCKET is not set")
            && stderr.matches("reamer_progress:").count() == 1,
        "{stderr}"
    );
    daemon.stop();
}
