//! Online mode: start-up (model, grant, profile), the adaptation loop, and the HTTP server.
//!
//! Once a second, and at every grant, the worker re-chooses its configuration from the
//! start-up profile, the SLO and the arrival rate it measured: the fewest threads that keep
//! up, within the granted CPUs. Threads are added at once and removed only after the smaller
//! choice held for `SHRINK_AFTER` checks, so the worker does not flap on a noisy rate.
//!
//! Each check also works out how many CPUs the SLO needs at the measured rate, whatever the
//! grant is now, and tells the enforcer (a rise at once, a fall after `SHRINK_AFTER` checks):
//! for an online pool the enforcer grants them beyond the pool's minimum where training
//! leaves cores free. A thread of its own tells the enforcer the latency of the requests
//! (`latency_report`), by which the enforcer steers the pool's CPU weight (lower while the
//! tail has room); a worker on a fixed grant has no enforcer to tell, and no such thread.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering::Relaxed, mpsc},
    time::{Duration, Instant},
};

use enforcer_common::http_serve::{self, HttpLimits};
use tokio::sync::Semaphore;

use crate::{
    affinity,
    drain::{self, Drain, DrainingListener},
    executor::{Config, Executor},
    grants::{self, Grant, GrantSource, SloReporter},
    http::{self, AppState},
    latency_report,
    metrics::Metrics,
    model::Model,
    profile::Profile,
    queue::JobQueue,
    reload, socket_activation,
};

pub struct Options {
    pub model: Arc<Model>,
    pub item_shape: Option<Vec<usize>>,
    pub listen: SocketAddr,
    /// How long a drain keeps answering open connections before closing the idle ones.
    pub drain_timeout: Duration,
    pub slo: Duration,
    pub grants: GrantSource,
    pub queue_capacity: usize,
    pub body_limit: usize,
    pub max_bodies: usize,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// How long a connection may wait for, or take to send, a request's head.
    pub header_timeout: Duration,
    /// Connections open at once (before the open-file limit lowers it).
    pub max_connections: usize,
    pub profile_runs: usize,
    pub reload_poll: Option<Duration>,
}

/// Checks of the arrival rate a smaller choice must hold for before threads are removed.
const SHRINK_AFTER: u32 = 3;
const ADAPT_EVERY: Duration = Duration::from_secs(1);

/// Why online serving could not start or went down.
#[derive(Debug, thiserror::Error)]
pub enum OnlineError {
    #[error(transparent)]
    Grants(#[from] grants::GrantError),
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    #[error(transparent)]
    Activation(#[from] socket_activation::ActivationError),
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

pub fn run(options: Options) -> Result<(), OnlineError> {
    let (grant_tx, grant_rx) = mpsc::channel::<Grant>();
    let needs = SloReporter::default();
    let first = grants::follow(
        &options.grants,
        Duration::from_secs(10),
        &needs,
        move |grant| {
            let _ = grant_tx.send(grant.clone());
        },
    )?;
    tracing::info!(cpus = ?first.cpus, "granted");
    let model = options.model.clone();
    let started = Instant::now();
    let profile = Profile::measure(&model, &first.cpus, first.cpus.len(), options.profile_runs)?;
    tracing::info!(
        took = ?started.elapsed(),
        "profile: {}",
        serde_json::to_string(&profile.points).unwrap_or_default()
    );
    let choice = profile.choose(options.slo, 0.0, first.cpus.len());
    let metrics = Arc::new(Metrics::new(options.slo));
    let queue = Arc::new(JobQueue::new(options.queue_capacity));
    let executor = Arc::new(Executor::start(
        model.clone(),
        queue,
        Config {
            threads: choice.threads,
            cpus: first.cpus.clone(),
            max_batch: choice.batch,
            batch_delay: choice.batch_delay,
        },
        metrics.clone(),
    ));
    tracing::info!(?choice, "serving");
    if let Some(poll) = options.reload_poll {
        reload::spawn(
            reload::Watch {
                path: model.path.clone(),
                item_shape: options.item_shape.clone(),
                max_batch: model.max_batch(),
                poll,
            },
            executor.clone(),
            metrics.clone(),
        )?;
    }
    // A fixed grant has no enforcer to tell: no thread looking at the latency ten times a
    // second for nobody.
    if matches!(options.grants, GrantSource::Enforcer { .. }) {
        let (metrics, reporter) = (metrics.clone(), needs.clone());
        std::thread::Builder::new()
            .name("latency-report".into())
            .spawn(move || latency_report::run(&metrics, &reporter))?;
    }
    {
        let (executor, metrics) = (executor.clone(), metrics.clone());
        std::thread::Builder::new()
            .name("adapt".into())
            .spawn(move || adapt(&executor, &metrics, &profile, grant_rx, &needs))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let state = Arc::new(AppState {
        executor: executor.clone(),
        metrics,
        body_limit: options.body_limit,
        body_timeout: options.body_timeout,
        bodies: Semaphore::new(options.max_bodies.max(1)),
    });
    let drain = Drain::new();
    runtime.block_on(async move {
        // A passed socket means a successor may take it over: only then is it worth holding
        // open connections while their clients move on. Alone, a worker shuts down at once.
        let (listener, drain_timeout) = match socket_activation::inherited_listener()? {
            Some(passed) => {
                tracing::info!("serving the listening socket passed by the launcher (LISTEN_FDS)");
                let listener = tokio::net::TcpListener::from_std(passed)?;
                (listener, options.drain_timeout)
            }
            None => {
                let listener = tokio::net::TcpListener::bind(options.listen)
                    .await
                    .map_err(|error| OnlineError::Listen {
                        addr: options.listen,
                        error,
                    })?;
                (listener, Duration::ZERO)
            }
        };
        // The one line a script or test waits for, with the real port when it was 0.
        println!("listening on http://{}", listener.local_addr()?);
        let listener = DrainingListener::new(listener, drain.clone())?;
        let router = http::router(state).layer(axum::middleware::map_response_with_state(
            drain.clone(),
            drain::close_while_draining,
        ));
        // A launcher that relaunches this worker stops the old one only after this.
        socket_activation::notify_ready();
        let max_connections = connections_within_open_files(options.max_connections);
        let limits = HttpLimits {
            header_timeout: options.header_timeout,
            max_connections,
            // Clients reach a model server through a proxy or a load balancer, one address for
            // many of them: the cap is the server's only.
            max_per_client: max_connections,
        };
        http_serve::serve(listener, router, limits, drained(drain, drain_timeout)).await;
        Ok::<(), OnlineError>(())
    })?;
    tracing::info!("shutting down: serving what is queued");
    executor.shutdown();
    Ok(())
}

/// Open files the worker keeps for itself beside its connections: the model, the listening
/// socket, the control socket, the runtime's own, with room to spare.
const FILES_BESIDE_CONNECTIONS: u64 = 64;

/// `wanted` connections, or fewer where the open-file limit (raised to its hard limit first)
/// would run out before the cap: then accepts would fail instead of being answered 503.
fn connections_within_open_files(wanted: usize) -> usize {
    let files = enforcer_common::open_files::raise_open_files();
    let fit = files.saturating_sub(FILES_BESIDE_CONNECTIONS).max(1);
    if wanted as u64 > fit {
        tracing::warn!(
            wanted,
            open_files = files,
            "--max-connections lowered to {fit} to fit the open-file limit"
        );
        fit as usize
    } else {
        wanted
    }
}

/// Completes, and so starts the server's graceful shutdown, once a SIGTERM's drain is over: every
/// connection closed, or the timeout passed (see `drain`).
async fn drained(drain: Arc<Drain>, timeout: Duration) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!(
        open_connections = drain.open_connections(),
        "draining: answering open connections with `Connection: close`"
    );
    drain.start();
    if !drain.connections_closed(timeout).await && !timeout.is_zero() {
        tracing::info!(
            open_connections = drain.open_connections(),
            "drain timeout: closing the idle connections left"
        );
    }
}

fn adapt(
    executor: &Executor,
    metrics: &Metrics,
    profile: &Profile,
    grants: mpsc::Receiver<Grant>,
    needs: &SloReporter,
) {
    let arrivals = || metrics.arrived_items.load(Relaxed);
    let mut last = (Instant::now(), arrivals());
    let mut smaller_for = 0;
    let machine_cpus = affinity::machine_cpus();
    let mut need = Hysteresis::default();
    loop {
        let mut config = executor.config();
        match grants.recv_timeout(ADAPT_EVERY) {
            Ok(grant) => {
                tracing::info!(cpus = ?grant.cpus, shrinking = grant.shrinking, "new grant");
                config.cpus = grant.cpus;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // A fixed grant: only the load changes.
                std::thread::sleep(ADAPT_EVERY);
            }
        }
        let now = (Instant::now(), arrivals());
        let rate = (now.1 - last.1) as f64 / now.0.duration_since(last.0).as_secs_f64().max(1e-3);
        last = now;
        let needed = need.update(profile.cpus_needed(metrics.slo(), rate, machine_cpus));
        metrics.needed_cpus.store(needed as u64, Relaxed);
        needs.report(needed);
        let choice = profile.choose(metrics.slo(), rate, config.cpus.len());
        let mut wanted = Config {
            threads: choice.threads,
            cpus: config.cpus.clone(),
            max_batch: choice.batch,
            batch_delay: choice.batch_delay,
        };
        let current = executor.config();
        if wanted.threads < current.threads.min(wanted.cpus.len().max(1)) {
            smaller_for += 1;
            if smaller_for < SHRINK_AFTER {
                wanted.threads = current.threads.min(wanted.cpus.len().max(1));
            }
        } else {
            smaller_for = 0;
        }
        if wanted != current {
            tracing::info!(
                rate = format!("{rate:.1}/s"),
                meets_slo = choice.meets_slo,
                ?wanted,
                "reconfiguring"
            );
            executor.reconfigure(wanted);
        }
    }
}

/// A value that rises at once and falls only after a smaller one held for `SHRINK_AFTER`
/// checks.
#[derive(Default)]
struct Hysteresis {
    value: usize,
    lower_for: u32,
}

impl Hysteresis {
    fn update(&mut self, now: usize) -> usize {
        if now >= self.value {
            self.lower_for = 0;
            self.value = now;
        } else {
            self.lower_for += 1;
            if self.lower_for >= SHRINK_AFTER {
                self.lower_for = 0;
                self.value = now;
            }
        }
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_need_rises_at_once_and_falls_after_holding() {
        let mut need = Hysteresis::default();
        assert_eq!(need.update(1), 1);
        assert_eq!(need.update(3), 3);
        // Two lower checks are a wobble, the third a fall.
        assert_eq!(need.update(1), 3);
        assert_eq!(need.update(2), 3);
        assert_eq!(need.update(2), 2);
        // A rise in between restarts the count.
        assert_eq!(need.update(1), 2);
        assert_eq!(need.update(2), 2);
        assert_eq!(need.update(1), 2);
        assert_eq!(need.update(1), 2);
        assert_eq!(need.update(1), 1);
    }
}
