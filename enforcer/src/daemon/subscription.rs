//! A worker's grant subscription: its connection carries the pool's grants one way, and the
//! worker's SLO needs and latency reports the other, for as long as it stays open.

use std::time::{Duration, Instant};

use enforcer_common::protocol::{self, MAX_REQUEST_BYTES, Request, Response};
use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    net::unix::{OwnedReadHalf, OwnedWriteHalf},
};
use tracing::{info, warn};

use super::{answer::send_line, enforcement::SubscribeError, state::Shared};
use crate::{actuate::grants::GRANT_BACKLOG, host::clock::monotonic_ns};

/// Sends a subscribed worker its grants until it goes away, and takes the SLO needs it sends
/// on the same connection. A worker that dies closes its end: the read side sees it at once,
/// so the subscription (and its need) is dropped then, not at the next grant change, which may
/// be hours away.
pub(crate) async fn stream_grants(
    shared: &std::sync::Arc<Shared>,
    pool: &str,
    pid: u32,
    reader: &mut BufReader<OwnedReadHalf>,
    write: &mut OwnedWriteHalf,
) {
    let (sender, mut grants) = tokio::sync::mpsc::channel(GRANT_BACKLOG);
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
    let mut needs = NeedPacer::default();
    loop {
        // At most one request's length, whether or not a newline comes.
        let room = (MAX_REQUEST_BYTES + 1).saturating_sub(line.len()) as u64;
        let mut limited = tokio::io::AsyncReadExt::take(&mut *reader, room);
        let due = needs.due();
        let mut request = None;
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
                    request = match protocol::from_line::<Request>(&std::mem::take(&mut line)) {
                        Ok(Request::Need { cpus }) => {
                            needs.offer(cpus, Instant::now()).map(|cpus| Ok(Request::Need { cpus }))
                        }
                        parsed => Some(parsed),
                    };
                }
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now).into()), if due.is_some() => {
                request = needs.take_due(Instant::now()).map(|cpus| Ok(Request::Need { cpus }));
            }
        }
        if let Some(request) = request {
            let (shared, pool) = (shared.clone(), pool.to_owned());
            let _ = tokio::task::spawn_blocking(move || {
                on_subscriber_request(&shared, &pool, pid, request)
            })
            .await;
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
    sender: tokio::sync::mpsc::Sender<protocol::Grant>,
) -> Result<(), SubscribeError> {
    let files = shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .pools()
        .files(pool)?;
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
fn on_subscriber_request(
    shared: &Shared,
    pool: &str,
    pid: u32,
    request: Result<Request, protocol::Malformed>,
) {
    match request {
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

/// Needs of one worker are applied at most once per `NEED_EVERY`: each one that changes
/// rewrites the pool's cpuset and logs a decision, and a worker that sends them in a loop
/// would make the daemon do that in a loop. One that comes sooner waits, and only the latest
/// of those is applied when its time comes: nothing a worker says is lost, only coalesced.
const NEED_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
struct NeedPacer {
    last_applied: Option<Instant>,
    pending: Option<usize>,
}

impl NeedPacer {
    /// A need arrived at `now`: the one to apply now, if its time has come.
    fn offer(&mut self, cpus: usize, now: Instant) -> Option<usize> {
        if self.last_applied.is_some_and(|at| now < at + NEED_EVERY) {
            self.pending = Some(cpus);
            return None;
        }
        self.last_applied = Some(now);
        self.pending = None;
        Some(cpus)
    }

    /// When a waiting need is to be applied.
    fn due(&self) -> Option<Instant> {
        let last = self.last_applied?;
        self.pending.map(|_| last + NEED_EVERY)
    }

    /// The waiting need, where its time has come at `now`.
    fn take_due(&mut self, now: Instant) -> Option<usize> {
        if self.due().is_some_and(|due| now >= due) {
            self.last_applied = Some(now);
            return self.pending.take();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_sooner_than_their_pace_wait_and_only_the_latest_is_applied() {
        let start = Instant::now();
        let mut needs = NeedPacer::default();
        assert_eq!(needs.offer(2, start), Some(2), "the first one at once");
        assert_eq!(needs.due(), None);
        let soon = start + NEED_EVERY / 10;
        assert_eq!(needs.offer(5, soon), None);
        assert_eq!(needs.offer(3, soon), None);
        assert_eq!(needs.due(), Some(start + NEED_EVERY));
        assert_eq!(needs.take_due(soon), None, "not yet");
        assert_eq!(needs.take_due(start + NEED_EVERY), Some(3), "the latest");
        assert_eq!(needs.due(), None);
        let later = start + NEED_EVERY * 3;
        assert_eq!(
            needs.offer(1, later),
            Some(1),
            "a pause long enough: at once again"
        );
    }
}
