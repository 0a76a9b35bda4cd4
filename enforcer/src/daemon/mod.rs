//! `enforcer run`: the node daemon, built then run. `built`: a config and this host become a
//! `Daemon` (preflight, the sensor, the pools, the members, the GPU side, the sockets), with
//! nothing enforcing yet; `running`: `Daemon::spawn` starts its threads and tasks, and
//! `Running::shutdown` stops them; `release`: what a stopped daemon leaves, nothing starved or
//! frozen. The parts they start:
//! - `state`: what the parts share, and its locks;
//! - `event_thread`: the fast path, from the sensor's ring buffer to `enforcement`;
//! - `loops`: the slow path's tick, the GPU clamp's fast signal, the reconcile;
//! - `enforcement`: the policies' decisions applied by the actuators;
//! - `server`, `admission`, `requests`, `subscription`: the control socket;
//! - `pods`: the node's Kubernetes pods, as members and as groups written in place;
//! - `snapshot` and `metrics`: what `status`, `observe` and Prometheus read;
//! - `journal`, `relaunch_board`: what a restarted daemon and the launchers need;
//! - `fatal`, `watchdog`: a failure ends the daemon, loudly and thawed; the service manager
//!   hears that it is ready, and that its event path is alive.

pub mod admission;
pub(crate) mod answer;
mod built;
pub(crate) mod enforcement;
pub(crate) mod event_thread;
pub(crate) mod fatal;
pub(crate) mod heartbeat;
pub(crate) mod journal;
pub(crate) mod loops;
pub(crate) mod metrics;
mod pace_signal;
pub(crate) mod pods;
pub(crate) mod reactions;
pub(crate) mod relaunch_board;
mod release;
pub(crate) mod requests;
mod running;
pub(crate) mod server;
pub(crate) mod snapshot;
pub(crate) mod state;
pub(crate) mod subscription;
pub(crate) mod watchdog;

use std::path::{Path, PathBuf};

use tokio::signal::unix::{SignalKind, signal};
use tracing::info;

use self::enforcement::EnforcementError;
pub use self::{built::Daemon, running::Running};
use crate::{
    actuate::decision_log::OpenError,
    config::Settings,
    host::{cgroup_support::CgroupUnsupported, preflight::PreflightError},
    sensor::SensorError,
};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error("creating {}: {error}", dir.display())]
    RunDir { dir: PathBuf, error: std::io::Error },
    #[error(
        "an enforcer of instance {instance:?} is already running (it answers on {}); stop it \
         first or choose another --instance",
        socket.display()
    )]
    AlreadyRunning { instance: String, socket: PathBuf },
    #[error("{what} {}: {error}", path.display())]
    Socket {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the config's pools need cgroups this process cannot have here: {0} (`enforcer check` \
         lists every requirement)"
    )]
    Cgroups(#[from] CgroupUnsupported),
    #[error(transparent)]
    Sensor(#[from] SensorError),
    #[error("event ring buffer already taken")]
    RingTaken,
    #[error(transparent)]
    DecisionLog(#[from] OpenError),
    #[error(transparent)]
    Enforcement(#[from] EnforcementError),
    #[error("starting the {what}: {error}")]
    Thread {
        what: &'static str,
        error: std::io::Error,
    },
    #[error("installing the {signal} handler: {error}")]
    Signal {
        signal: &'static str,
        error: std::io::Error,
    },
}

/// `enforcer run`: builds the daemon, runs it until SIGINT or SIGTERM, and shuts it down.
/// Decisions are appended to `decision_log` as JSON lines. A panic anywhere ends the process
/// with its pools released (`fatal`).
pub async fn run(
    settings: Settings,
    instance: &str,
    decision_log: &Path,
) -> Result<(), DaemonError> {
    fatal::exit_on_panic(instance);
    // Installed first: a signal during the start shuts down what was started, in order.
    let signal_error = |signal| move |error| DaemonError::Signal { signal, error };
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error("SIGTERM"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error("SIGINT"))?;
    let running = Daemon::build(settings, instance, decision_log)
        .await?
        .spawn()?;
    tokio::select! {
        _ = sigterm.recv() => info!("SIGTERM: shutting down"),
        _ = sigint.recv() => info!("SIGINT: shutting down"),
    }
    running.shutdown().await;
    Ok(())
}
