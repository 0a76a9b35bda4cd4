//! Where the worker's CPUs come from: the enforcer's control socket (a subscription for its
//! pool), or a fixed list when it runs alone.
//!
//! The enforcer speaks JSON lines; a grant reads
//! `{"status":"grant","pool":"P","cpus":[2,3],"shrinking":false,"paused":false}`.
//! `shrinking: true` comes just before the pool's cpuset is rewritten, so the worker moves its
//! threads first. `paused: true` (offline pools) comes just before the enforcer freezes the
//! pool while training is short of cores; the grant that resumes it says `paused: false`. The
//! enforcer accepts a subscription only from a process inside the pool's cgroup (it checks the
//! socket's peer credentials): start the worker with `enforcer launch --pool P -- …`.
//!
//! On the same connection an online worker tells the enforcer how many CPUs its SLO needs at
//! its current load (`{"op":"need","cpus":N}`); for an online pool the enforcer grants them
//! beyond the pool's minimum from the cores training leaves free. After a reconnect the last
//! need is sent again. Once a second while it has requests, and at once where they already
//! miss the SLO (`latency_report`), it also sends their latency
//! (`{"op":"latency","requests":N,"missed":M,"p99_us":P,"slo_us":S}`), by which the enforcer
//! steers the pool's CPU weight.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

pub use enforcer_common::protocol::Grant;
use enforcer_common::protocol::{self, LatencyReport, Request, Response};

use crate::metrics::WindowLatency;

#[derive(Debug, Clone)]
pub enum GrantSource {
    Fixed(Vec<u32>),
    Enforcer { socket: PathBuf, pool: String },
}

/// Why the worker has no grant from the enforcer.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(
        "cannot reach the enforcer at {}: {error}; run the worker without --enforcer-socket \
         (and with --cpus) when no enforcer runs",
        socket.display()
    )]
    Connect {
        socket: PathBuf,
        error: std::io::Error,
    },
    #[error("no grant for pool '{pool}' from {}: {error}", socket.display())]
    First {
        pool: String,
        socket: PathBuf,
        error: Box<GrantError>,
    },
    #[error("talking to the enforcer: {0}")]
    Io(#[from] std::io::Error),
    #[error("the enforcer closed the connection")]
    Closed,
    #[error("the enforcer granted no CPU")]
    NoCpu,
    #[error("the enforcer refused: {0}")]
    Refused(String),
    #[error("unexpected message from the enforcer ({error}): {line}")]
    Unexpected { error: String, line: String },
}

/// How long to wait before connecting again after the enforcer went away.
const RECONNECT: Duration = Duration::from_secs(1);

/// Sends the worker's SLO need and its latency to the enforcer on its grant subscription.
/// Without one (a fixed grant) it keeps the need and sends nothing.
#[derive(Clone, Default)]
pub struct SloReporter {
    inner: Arc<Mutex<ReporterState>>,
}

#[derive(Default)]
struct ReporterState {
    /// The subscription's connection, for writing; None while there is none.
    stream: Option<UnixStream>,
    last: Option<usize>,
}

impl SloReporter {
    /// Tells the enforcer the worker needs `cpus` CPUs; only a change is sent.
    pub fn report(&self, cpus: usize) {
        let mut state = self.inner.lock().expect("reporter lock");
        if state.last == Some(cpus) {
            return;
        }
        state.last = Some(cpus);
        state.send();
    }

    /// Tells the enforcer the latency of the requests of the last period, against `slo`; a
    /// period without requests says nothing. Not kept: a lost report is followed by the next.
    pub fn report_latency(&self, latency: &WindowLatency, slo: Duration) {
        if latency.requests == 0 && latency.missed == 0 {
            return;
        }
        // Only refusals and failures: nothing answered to take a percentile of, and the
        // misses already tell the enforcer the SLO was not kept.
        let p99 = latency.p99.unwrap_or(slo);
        let report = Request::Latency(LatencyReport {
            requests: latency.requests,
            missed: latency.missed,
            p99_us: p99.as_micros() as u64,
            slo_us: slo.as_micros() as u64,
        });
        self.inner.lock().expect("reporter lock").write(&report);
    }

    /// The connection of a new subscription: the last need goes out on it at once.
    fn attach(&self, stream: &UnixStream) {
        let mut state = self.inner.lock().expect("reporter lock");
        state.stream = stream.try_clone().ok();
        state.send();
    }
}

impl ReporterState {
    fn send(&mut self) {
        if let Some(cpus) = self.last {
            self.write(&Request::Need { cpus });
        }
    }

    fn write(&mut self, request: &Request) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        if let Err(err) = stream.write_all(&protocol::to_line(request)) {
            // The grants thread sees the broken connection too and reconnects.
            tracing::debug!("writing to the enforcer: {err}");
            self.stream = None;
        }
    }
}

/// Waits for the first grant from the enforcer (up to `timeout`), then keeps following it on a
/// thread of its own, calling `apply` for every later grant. A fixed source grants once.
/// `needs` is attached to every subscription, the first and those after a reconnect.
pub fn follow(
    source: &GrantSource,
    timeout: Duration,
    needs: &SloReporter,
    apply: impl Fn(&Grant) + Send + 'static,
) -> Result<Grant, GrantError> {
    let (socket, pool) = match source {
        GrantSource::Fixed(cpus) => {
            return Ok(Grant {
                pool: String::new(),
                cpus: cpus.clone(),
                shrinking: false,
                paused: false,
            });
        }
        GrantSource::Enforcer { socket, pool } => (socket.clone(), pool.clone()),
    };
    let mut reader = subscribe(&socket, &pool)?;
    let first = next_grant(&mut reader, Some(timeout)).map_err(|error| GrantError::First {
        pool: pool.clone(),
        socket: socket.clone(),
        error: Box::new(error),
    })?;
    needs.attach(reader.get_ref());
    let needs = needs.clone();
    std::thread::Builder::new()
        .name("grants".into())
        .spawn(move || {
            loop {
                match next_grant(&mut reader, None) {
                    Ok(grant) => apply(&grant),
                    Err(err) => {
                        tracing::warn!(
                            "lost the enforcer's grants ({err}); keeping the current CPUs and reconnecting"
                        );
                        loop {
                            std::thread::sleep(RECONNECT);
                            match subscribe(&socket, &pool) {
                                Ok(new) => {
                                    reader = new;
                                    needs.attach(reader.get_ref());
                                    break;
                                }
                                Err(err) => tracing::debug!("reconnecting: {err}"),
                            }
                        }
                    }
                }
            }
        })?;
    Ok(first)
}

fn subscribe(socket: &PathBuf, pool: &str) -> Result<BufReader<UnixStream>, GrantError> {
    let mut stream = UnixStream::connect(socket).map_err(|error| GrantError::Connect {
        socket: socket.clone(),
        error,
    })?;
    let request = Request::Subscribe {
        pool: pool.to_owned(),
    };
    stream.write_all(&protocol::to_line(&request))?;
    Ok(BufReader::new(stream))
}

fn next_grant(
    reader: &mut BufReader<UnixStream>,
    timeout: Option<Duration>,
) -> Result<Grant, GrantError> {
    reader.get_ref().set_read_timeout(timeout)?;
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(GrantError::Closed);
    }
    let unexpected = |error: String| GrantError::Unexpected {
        error,
        line: line.trim().to_owned(),
    };
    match protocol::from_line::<Response>(line.as_bytes()) {
        Ok(Response::Grant(grant)) if !grant.cpus.is_empty() => Ok(grant),
        Ok(Response::Grant(_)) => Err(GrantError::NoCpu),
        Ok(Response::Error { message }) => Err(GrantError::Refused(message)),
        Ok(other) => Err(unexpected(format!("not a grant: {other:?}"))),
        Err(err) => Err(unexpected(err.to_string())),
    }
}
