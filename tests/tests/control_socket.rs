//! Privileged tests of the control socket from outside, the way a careless or hostile local
//! user, a broken worker or the service manager meets it: connections are capped per user and
//! closed when idle, root is never locked out, an absurd report from a pool member leaves the
//! daemon serving, and the service manager hears READY=1 and a fed watchdog.

use std::{
    os::unix::{net::UnixDatagram, process::CommandExt as _},
    process::Command,
    time::{Duration, Instant},
};

use reamer_tests::harness::{Daemon, enforcer_bin, privileged, remove_test_cgroups, wait_ok};
use serde_json::Value;

const SOCKET_HOLDER: &str = env!("CARGO_BIN_EXE_socket-holder");
const GRANT_CLIENT: &str = env!("CARGO_BIN_EXE_grant-client");
/// The user the holder runs as: nobody, which owns nothing of the daemon's.
const NOBODY: u32 = 65534;

/// Runs `socket-holder` as nobody against `daemon` and returns its report.
fn hold_as_nobody(daemon: &Daemon, connections: usize, hold_seconds: f64) -> Value {
    let socket = daemon.socket().display().to_string();
    let output = Command::new(SOCKET_HOLDER)
        .args(["--socket", &socket, "--connections"])
        .arg(connections.to_string())
        .arg("--hold-seconds")
        .arg(hold_seconds.to_string())
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run socket-holder");
    assert!(
        output.status.success(),
        "socket-holder failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("socket-holder's report")
}

#[test]
fn a_user_holding_idle_connections_is_capped_timed_out_and_cannot_lock_out_root() {
    let instance = "it-control";
    if !privileged("a_user_holding_idle_connections_is_capped_timed_out_and_cannot_lock_out_root") {
        return;
    }
    let config = "[control]\nidle_timeout_ms = 1500\nmax_connections_per_user = 4\n\
                  max_connections = 8\n";
    let daemon = Daemon::start(instance, config);

    // While nobody holds its 4 idle connections, root (this test) is still served.
    let root_served = std::thread::scope(|scope| {
        let holder = scope.spawn(|| hold_as_nobody(&daemon, 6, 5.0));
        std::thread::sleep(Duration::from_millis(500));
        let snapshot = daemon.snapshot();
        (holder.join().expect("holder thread"), snapshot.instance)
    });
    let (report, served) = root_served;
    println!("nobody's connections: {report}");
    assert_eq!(
        served, instance,
        "root was not served while nobody held its cap"
    );
    assert_eq!(
        report["admitted"], 4,
        "admitted beyond the per-user cap: {report}"
    );
    assert_eq!(report["refused"], 2, "{report}");
    let refusal = report["refusals"][0].as_str().unwrap_or_default();
    assert!(
        refusal.contains("uid 65534") && refusal.contains("max_connections_per_user"),
        "the refusal does not say whom and which cap: {refusal:?}"
    );
    // Idle past 1.5 s: each admitted connection was closed by the daemon, not held for ever.
    assert_eq!(
        report["closed_by_daemon"], 4,
        "idle connections left open: {report}"
    );
    let closed_ms = report["last_closed_ms"].as_u64().unwrap_or(0);
    assert!(
        (1400..4500).contains(&closed_ms),
        "idle connections closed after {closed_ms} ms, not after the 1500 ms timeout"
    );
    // The closed connections gave their places back.
    let again = hold_as_nobody(&daemon, 4, 0.1);
    assert_eq!(again["admitted"], 4, "places not given back: {again}");
    let log = daemon.stop();
    assert!(
        log.contains("control connection refused"),
        "refusals not logged:\n{log}"
    );
}

#[test]
fn an_absurd_latency_report_from_a_pool_member_leaves_the_daemon_serving() {
    let instance = "it-absurd";
    if !privileged("an_absurd_latency_report_from_a_pool_member_leaves_the_daemon_serving") {
        return;
    }
    // A steered online pool: its members' latency reports are read.
    let config = "[[pool]]\nname = \"web\"\nkind = \"online\"\ncpu_weight = 50\n\
                  min_cpu_weight = 10\n";
    let daemon = Daemon::start(instance, config);
    let socket = daemon.socket().display().to_string();
    let max = u64::MAX.to_string();
    let figures = format!("{max},{max},{max},1");
    let member = daemon.launch(
        "--pool",
        "web",
        GRANT_CLIENT,
        &[
            "--socket",
            &socket,
            "--pool",
            "web",
            "--report-latency",
            &figures,
        ],
    );
    wait_ok(member, "grant-client");
    // The daemon read the report (requests + missed would wrap) and still answers.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        assert_eq!(daemon.snapshot().instance, instance);
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = daemon.stop();
    assert!(!log.contains("panicked"), "the daemon panicked:\n{log}");
    remove_test_cgroups(instance, "web");
}

#[test]
fn the_service_manager_hears_ready_and_a_watchdog_fed_while_the_event_path_lives() {
    let instance = "it-notify";
    if !privileged("the_service_manager_hears_ready_and_a_watchdog_fed_while_the_event_path_lives")
    {
        return;
    }
    let dir = std::env::temp_dir().join(format!("reamer-{instance}"));
    std::fs::create_dir_all(&dir).expect("notify dir");
    let path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&path);
    let manager = UnixDatagram::bind(&path).expect("bind the manager's socket");
    manager
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut command = Command::new(enforcer_bin());
    // A 400 ms watchdog: fed every 200 ms.
    command
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "400000");
    let daemon = Daemon::start_command(command, instance, "");

    let mut heard = Vec::new();
    let mut buffer = [0u8; 256];
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match manager.recv(&mut buffer) {
            Ok(n) => heard.push(String::from_utf8_lossy(&buffer[..n]).into_owned()),
            Err(err) => panic!("the manager heard nothing more after {heard:?}: {err}"),
        }
    }
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        heard.first().map(String::as_str),
        Some("READY=1"),
        "{heard:?}"
    );
    let fed = heard.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!(
        (6..=14).contains(&fed),
        "{fed} watchdog notifications in 2 s at a 400 ms period (every 200 ms): {heard:?}"
    );
}
