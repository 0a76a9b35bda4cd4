//! The daemon built, then run, in the test's own process (`Daemon::build`, `Daemon::spawn`,
//! `Running::shutdown`): built, it has pinned its maps; running, it answers on its control
//! socket with its training job classified, and refuses a second daemon of its instance; shut
//! down, it has removed its socket and its pins. Privileged: skips with a reason elsewhere
//! (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    process::Command,
    time::Duration,
};

use enforcer::{
    config::Config,
    daemon::{Daemon, DaemonError},
    host::paths,
};
use enforcer_common::protocol::{self, Request, Response, Snapshot};
use reamer_tests::harness::{Reaped, privileged};

const INSTANCE: &str = "it-in-process";

/// A snapshot over the control socket, as `enforcer status` asks for it.
fn snapshot_of(socket: &Path) -> Snapshot {
    let mut stream = UnixStream::connect(socket).expect("connect to the daemon");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&protocol::to_line(&Request::Snapshot))
        .unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    match protocol::from_line(answer.as_bytes()).expect("an answer") {
        Response::Snapshot(snapshot) => *snapshot,
        other => panic!("no snapshot: {other:?}"),
    }
}

#[test]
fn a_daemon_built_then_spawned_in_process_serves_and_its_shutdown_leaves_nothing() {
    if !privileged("a_daemon_built_then_spawned_in_process_serves_and_its_shutdown_leaves_nothing")
    {
        return;
    }
    let training = Reaped(Command::new("sleep").arg("60").spawn().unwrap());
    let text = format!(
        "[[training]]\nname = \"in-process\"\npids = [{}]\n",
        training.0.id()
    );
    let settings = Config::parse(Path::new("in-process.toml"), &text)
        .unwrap()
        .settings();
    let decision_log = std::env::temp_dir().join("reamer-in-process.decisions.jsonl");
    let (socket, pins) = (paths::socket_path(INSTANCE), paths::pin_dir(INSTANCE));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let built = Daemon::build(settings, INSTANCE, &decision_log)
            .await
            .expect("the daemon builds");
        assert!(pins.is_dir(), "built, the daemon has pinned its maps");

        let running = built.spawn().expect("the daemon starts");
        let socket_for_client = socket.clone();
        let snapshot = tokio::task::spawn_blocking(move || snapshot_of(&socket_for_client))
            .await
            .unwrap();
        assert_eq!(snapshot.instance, INSTANCE);
        assert_eq!(snapshot.jobs.len(), 1);
        assert_eq!(snapshot.jobs[0].name, "in-process");

        // Running, a second daemon of the same instance is refused, and leaves it serving.
        let second = Daemon::build(
            enforcer::config::Settings::default(),
            INSTANCE,
            &decision_log,
        )
        .await;
        assert!(
            matches!(second, Err(DaemonError::AlreadyRunning { .. })),
            "a second daemon of a running instance: {:?}",
            second.err()
        );
        let socket_for_client = socket.clone();
        tokio::task::spawn_blocking(move || snapshot_of(&socket_for_client))
            .await
            .unwrap();

        running.shutdown().await;
    });
    assert!(!socket.exists(), "the shutdown removes the control socket");
    assert!(!pins.exists(), "the shutdown removes the pins");
    let _ = std::fs::remove_file(&decision_log);
}
