//! The HTTP/1 server loop of the enforcer's `/metrics` and of the inference worker, with the
//! bounds `axum::serve` lacks.
//!
//! `axum::serve` gives hyper no timer, and hyper's header-read timeout needs one: a client
//! that opened a connection and then sent a request head one byte a minute, or nothing at all,
//! held it for ever, and connections had no cap but the process's open-file limit. Here:
//!
//! - **A deadline on every request head.** hyper's `header_read_timeout` runs from the moment
//!   the server waits for a head until the head is complete, so it also closes a keep-alive
//!   connection left idle between requests.
//! - **A cap on open connections.** One past the cap is answered `503 Service Unavailable`
//!   with a line that names the cap, and closed; the refusal is logged at most once every
//!   10 s, so a flood cannot fill the log.
//! - **A cap per client address.** One client that holds its share is refused the same way,
//!   so it cannot take every slot from the others (32 unfinished requests from one client
//!   held every slot of the enforcer's `/metrics`).
//! - **Graceful shutdown.** Once `shutdown` completes, nothing more is accepted, idle
//!   connections close, and requests in flight are answered first.

use std::{
    collections::HashMap,
    future::Future,
    net::{IpAddr, SocketAddr},
    pin::pin,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, serve::Listener};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{io::AsyncWriteExt as _, sync::Semaphore, task::JoinSet};

/// How often a refused connection is logged, at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// How long a refused client has to take its 503 before the connection is dropped.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// From waiting for a request head to having all of it (idle keep-alive time included).
    pub header_timeout: Duration,
    /// Connections open at once; the next is answered 503 and closed.
    pub max_connections: usize,
    /// Connections one client address holds at once; its next is answered 503 and closed.
    /// A server behind a proxy or a load generator sees one address for many clients: give
    /// it `max_connections`.
    pub max_per_client: usize,
}

/// The connections each client address holds now.
#[derive(Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

/// One connection of a client, counted while it is open.
struct ClientSlot {
    clients: Arc<PerClient>,
    ip: IpAddr,
}

impl PerClient {
    /// A slot for `ip`, unless it holds `cap` already.
    fn take(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<ClientSlot> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(ip).or_default();
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.clients.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then lets every
/// open connection finish the request it is serving.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener<Addr = SocketAddr>,
    L::Io: Unpin,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let clients = Arc::new(PerClient::default());
    let refusals = Arc::new(RefusalLog::default());
    let (closing, closing_seen) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        // The server's cap first: where the two are the same (the worker's), it is the one
        // to name.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let why = format!(
                "this server holds at most {} at once",
                limits.max_connections
            );
            connections.spawn(refuse(io, why, refusals.clone()));
            continue;
        };
        let per_client = limits.max_per_client.max(1);
        let Some(client_slot) = clients.take(addr.ip(), per_client) else {
            let why = format!("this client holds {per_client} already");
            connections.spawn(refuse(io, why, refusals.clone()));
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let mut closing_seen = closing_seen.clone();
        connections.spawn(async move {
            let _slots = (slot, client_slot);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let mut connection = pin!(builder.serve_connection(TokioIo::new(io), service));
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = closing_seen.wait_for(|closing| *closing) => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    // The listening socket closes here: new connections go to a successor, or are refused.
    drop(listener);
    closing.send_replace(true);
    while connections.join_next().await.is_some() {}
}

/// Answers a connection over a cap, briefly, and closes it.
async fn refuse<Io>(mut io: Io, why: String, log: Arc<RefusalLog>)
where
    Io: tokio::io::AsyncWrite + Unpin,
{
    log.refused(&why);
    let body = format!("too many connections: {why}\n");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        io.write_all(answer.as_bytes()).await?;
        io.shutdown().await
    })
    .await;
}

/// Counts refusals and logs them at most once per `REFUSAL_LOG_EVERY`.
#[derive(Default)]
struct RefusalLog {
    state: Mutex<(Option<Instant>, u64)>,
}

impl RefusalLog {
    fn refused(&self, why: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 += 1;
        let due = state
            .0
            .is_none_or(|last| last.elapsed() >= REFUSAL_LOG_EVERY);
        if due {
            tracing::warn!(
                refused = state.1,
                "HTTP connections refused: {why} (the last refusal's reason)"
            );
            *state = (Some(Instant::now()), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::{
        io::{AsyncReadExt as _, AsyncWriteExt as _},
        net::{TcpListener, TcpStream},
    };

    use super::*;

    /// A server of one route, `/slow` (300 ms), within `limits`; it shuts down when the
    /// sender is used or dropped, and the handle ends when it has.
    async fn server(
        limits: HttpLimits,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "done"
            }),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(serve(listener, router, limits, async {
            let _ = stopped.await;
        }));
        (addr, stop, handle)
    }

    async fn read_all(stream: &mut TcpStream) -> String {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn a_head_not_finished_in_time_and_an_idle_keep_alive_connection_are_closed() {
        let (addr, _stop, _server) = server(HttpLimits {
            header_timeout: Duration::from_millis(300),
            max_connections: 8,
            max_per_client: 8,
        })
        .await;
        // A head that never ends: closed at the deadline, not held.
        let mut dribbling = TcpStream::connect(addr).await.unwrap();
        dribbling
            .write_all(b"GET /slow HTTP/1.1\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        read_all(&mut dribbling).await;
        let held = started.elapsed();
        assert!(
            held >= Duration::from_millis(250) && held < Duration::from_secs(3),
            "closed after {held:?}"
        );
        // A connection that never sends anything: the same.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        read_all(&mut silent).await;
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn one_past_the_cap_is_answered_503_and_its_slot_comes_back() {
        let (addr, _stop, _server) = server(HttpLimits {
            header_timeout: Duration::from_secs(5),
            max_connections: 2,
            max_per_client: 8,
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            held.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        let answer = read_all(&mut third).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("at most 2 at once"), "{answer}");
        drop(held);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut again = TcpStream::connect(addr).await.unwrap();
        again
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_all(&mut again).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[tokio::test]
    async fn one_client_cannot_take_every_slot_from_the_others() {
        let (addr, _stop, _server) = server(HttpLimits {
            header_timeout: Duration::from_secs(5),
            max_connections: 8,
            max_per_client: 2,
        })
        .await;
        // 127.0.0.1 holds its two: its third is refused, naming the per-client cap.
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(b"GET /slow HTTP/1.1\r\n").await.unwrap();
            held.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        let answer = read_all(&mut third).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("this client holds 2 already"), "{answer}");
        // Another address on loopback is served meanwhile.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut other = socket.connect(addr).await.unwrap();
        other
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_all(&mut other).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // The first client's slots come back when it closes.
        drop(held);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut again = TcpStream::connect(addr).await.unwrap();
        again
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        assert!(read_all(&mut again).await.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn shutdown_answers_the_request_in_flight_then_ends() {
        let (addr, stop, server) = server(HttpLimits {
            header_timeout: Duration::from_secs(5),
            max_connections: 8,
            max_per_client: 8,
        })
        .await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(()).unwrap();
        let answer = read_all(&mut stream).await;
        assert!(answer.contains("done"), "{answer}");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns once the connection is done")
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
