//! The probes' path, end to end: `enforcer health` answers over the control socket while one
//! client holds every connection `/metrics` allows, and that client's share of `/metrics` does
//! not keep another client out. Before, the chart probed `/metrics`, and unfinished requests
//! from one client failed every probe, so that the kubelet restarted a healthy daemon.
//! Loopback only. Privileged: skips with a reason elsewhere (fails with
//! REAMER_REQUIRE_PRIVILEGED=1).

use std::{process::Command, time::Duration};

use reamer_tests::harness::{Daemon, enforcer_bin, privileged};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpSocket, TcpStream},
};

const INSTANCE: &str = "it-health";

/// `enforcer health` for the test's instance: (exit code, what it printed).
fn health() -> (i32, String) {
    let output = Command::new(enforcer_bin())
        .args(["health", "--instance", INSTANCE, "--timeout-s", "5"])
        .output()
        .expect("running enforcer health");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// GET /metrics from source address `from`: the status line.
async fn metrics_status(addr: &str, from: &str) -> String {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_one_client_holds_every_metrics_connection() {
    if !privileged("health_answers_while_one_client_holds_every_metrics_connection") {
        return;
    }
    let daemon = Daemon::start(INSTANCE, "[metrics]\nlisten = \"127.0.0.1:0\"\n");
    let addr = daemon.snapshot().metrics_addr.expect("metrics address");
    let (code, said) = health();
    assert_eq!((code, said.trim()), (0, "healthy: the event path is alive"));

    // One client opens more connections than /metrics holds in all (32), each with a request
    // head it never finishes.
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..40 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\n").await;
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        metrics_status(&addr, "127.0.0.1").await.contains("503"),
        "that client is over its share"
    );
    let (code, said) = health();
    assert_eq!(code, 0, "the probe's path is not /metrics': {said}");
    assert_eq!(
        metrics_status(&addr, "127.0.0.2").await,
        "HTTP/1.1 200 OK",
        "another client is served meanwhile"
    );
    drop(held);

    daemon.stop();
    let (code, said) = health();
    assert_eq!(code, 1, "{said}");
    assert!(
        said.starts_with("unhealthy: no enforcer daemon answers"),
        "{said}"
    );
}
