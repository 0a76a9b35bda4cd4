//! A worker's grant subscription: its connection carries the pool's grants one way, and the
//! worker's SLO needs and latency reports the other, for as long as it stays open.

use enforcer_common::protocol::{self, MAX_REQUEST_BYTES, Request, Response};
use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    net::unix::{OwnedReadHalf, OwnedWriteHalf},
};
use tracing::{info, warn};

use super::{enforcement::SubscribeError, server::send_line, state::Shared};
use crate::host::clock::monotonic_ns;

/// Sends a subscribed worker its grants until it goes away, and takes the SLO needs it sends
/// on the same connection. A worker that dies closes its end: the read side sees it at once,
/// so the subscription (and its need) is dropped then, not at the next grant change, which may
/// be hours away.
pub async fn stream_grants(
    shared: &std::sync::Arc<Shared>,
    pool: &str,
    pid: u32,
    reader: &mut BufReader<OwnedReadHalf>,
    write: &mut OwnedWriteHalf,
) {
    let (sender, mut grants) = tokio::sync::mpsc::unbounded_channel();
    let subscribed = {
        let (shared, pool) = (shared.clone(), pool.to_owned());
        tokio::task::spawn_blocking(move || subscribe(&shared, &pool, pid, sender)).await
    };
    match subscribed {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            let message = err.to_string();
            let _ = send_line(write, &Response::Error { message }).await;
            return;
        }
        Err(_) => return,
    }
    info!(pool, pid, "worker subscribed to grants");
    // Kept across iterations: read_until is cancel-safe, a line cut by a grant goes on.
    let mut line = Vec::new();
    loop {
        // At most one request's length, whether or not a newline comes.
        let room = (MAX_REQUEST_BYTES + 1).saturating_sub(line.len()) as u64;
        let mut limited = tokio::io::AsyncReadExt::take(&mut *reader, room);
        tokio::select! {
            grant = grants.recv() => {
                let Some(grant) = grant else { break };
                if send_line(write, &Response::Grant(grant)).await.is_err() {
                    break;
                }
            }
            read = limited.read_until(b'\n', &mut line) => {
                if matches!(read, Ok(0) | Err(_)) || line.len() > MAX_REQUEST_BYTES {
                    break;
                }
                if line.ends_with(b"\n") {
                    let (shared, pool, taken) = (shared.clone(), pool.to_owned(), std::mem::take(&mut line));
                    let _ = tokio::task::spawn_blocking(move || {
                        on_subscriber_line(&shared, &pool, pid, &taken)
                    })
                    .await;
                }
            }
        }
    }
    info!(pool, pid, "worker gone: grant subscription dropped");
    let (shared, pool) = (shared.clone(), pool.to_owned());
    let _ = tokio::task::spawn_blocking(move || {
        shared
            .enforcement
            .lock()
            .expect("enforcement poisoned")
            .worker_gone(&pool, pid);
    })
    .await;
}

/// Subscribes worker `pid` to `pool`'s grants, once its membership is read from the pool's
/// cgroup (without holding the enforcement's lock).
fn subscribe(
    shared: &Shared,
    pool: &str,
    pid: u32,
    sender: tokio::sync::mpsc::UnboundedSender<protocol::Grant>,
) -> Result<(), SubscribeError> {
    let files = shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .pool_files(pool)?;
    if !files.processes().contains(&pid) {
        return Err(SubscribeError::NotAMember {
            pid,
            pool: pool.to_owned(),
        });
    }
    shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .subscribe(pool, sender)
}

/// A line from a subscribed worker: a need, or something the daemon logs and ignores (the
/// stream carries grants only, so no error goes back on it).
fn on_subscriber_line(shared: &Shared, pool: &str, pid: u32, line: &[u8]) {
    match protocol::from_line::<Request>(line) {
        Ok(Request::Need { cpus }) => shared
            .enforcement
            .lock()
            .expect("enforcement poisoned")
            .set_need(pool, pid, Some(cpus)),
        Ok(Request::Latency(report)) => shared
            .enforcement
            .lock()
            .expect("enforcement poisoned")
            .set_latency(pool, pid, &report, monotonic_ns()),
        Ok(other) => warn!(
            pool,
            pid,
            "ignored on a grant subscription (only needs and latency reports are read there): \
             {other:?}"
        ),
        Err(err) => warn!(pool, pid, "malformed line on a grant subscription: {err}"),
    }
}
