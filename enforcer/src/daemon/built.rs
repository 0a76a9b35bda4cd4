//! A daemon built: its config checked against this host, the sensor loaded and pinned, the
//! pools made, the configured and previously launched members adopted, the GPU side started
//! and the sockets bound. Nothing enforces yet; `Daemon::spawn` starts the threads and tasks
//! that do.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
};

use aya::maps::{MapData, RingBuf};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tracing::{info, warn};

use super::{
    DaemonError, enforcement::Enforcement, event_thread::EventTally, heartbeat::Heartbeat,
    journal::Journal, loops, metrics, relaunch_board::RelaunchBoard, release, server,
    state::Shared,
};
use crate::{
    actuate::{
        decision_log::{DecisionLog, DecisionLogWriter},
        quiet_cpus::QuietCpus,
    },
    config::{Settings, control::ControlSettings},
    gpu::service::{GpuService, OwnersFn},
    host::{cgroup_support::cgroup_support, paths, preflight},
    registry::{Registry, group_processes},
    sensor::Sensor,
};

/// A daemon ready to run: what `spawn` starts from.
pub struct Daemon {
    pub(super) settings: Settings,
    pub(super) shared: Arc<Shared>,
    pub(super) ring: RingBuf<MapData>,
    pub(super) log_writer: DecisionLogWriter,
    pub(super) socket_path: PathBuf,
    pub(super) listener: UnixListener,
    pub(super) metrics_listener: Option<TcpListener>,
    /// The control socket's connection caps, within this process's open-file limit.
    pub(super) control: ControlSettings,
}

impl Daemon {
    /// Builds the daemon of `instance` from `settings`, its decisions to be appended to
    /// `decision_log` as JSON lines. Needs root. A daemon that cannot be built leaves no pins
    /// behind: they would only be taken over by the next start, with nothing enforced in
    /// between.
    pub async fn build(
        settings: Settings,
        instance: &str,
        decision_log: &Path,
    ) -> Result<Self, DaemonError> {
        preflight::require_root()?;
        let socket_path = paths::socket_path(instance);
        // The socket, the launch journal and, by default, the decision log live in
        // /run/reamer, which is on tmpfs: a freshly booted node does not have it.
        for dir in [socket_path.parent(), decision_log.parent()]
            .into_iter()
            .flatten()
        {
            std::fs::create_dir_all(dir).map_err(|error| DaemonError::RunDir {
                dir: dir.to_owned(),
                error,
            })?;
        }
        claim_socket_path(&socket_path, instance).await?;
        let control = connection_caps_within(
            settings.control,
            enforcer_common::open_files::raise_open_files(),
        );
        preflight::ensure_mounts()?;
        preflight::raise_memlock();
        // Pools need cgroups: refuse before anything is loaded or pinned.
        if !settings.pools.is_empty() {
            cgroup_support()?;
        }

        let mut sensor = Sensor::load(&paths::pin_dir(instance), &settings.sensor)?;
        let ring = sensor.take_events().ok_or(DaemonError::RingTaken)?;
        let started = DecisionLog::open(decision_log)
            .map_err(DaemonError::from)
            .and_then(|(log, writer)| {
                let enforcement = Enforcement::new(&settings, instance, log.clone())?;
                Ok((log, writer, enforcement))
            });
        let (log, log_writer, mut enforcement) = started.inspect_err(|_| sensor.unpin())?;
        if let Some(reserved) = sensor.take_reserved_cpus() {
            enforcement.set_quiet_map(QuietCpus::new(reserved));
        }
        let mut registry = Registry::from_settings(&settings);
        for (pool, dir) in enforcement.pools().member_dirs() {
            registry.add_pool_cgroup(&pool, dir);
        }
        let mut journal = Journal::open(&paths::launched_journal(instance));
        readopt_launched(&mut registry, &mut journal);
        // Configured pool members move into their pool's cgroup.
        for pool in &registry.pools {
            for pid in group_processes(&pool.sources) {
                if let Err(err) = enforcement.pools().add_process(&pool.name, pid) {
                    warn!(pool = pool.name, pid, "cannot adopt: {err}");
                }
            }
        }
        let report = loops::classify(&mut registry, &mut sensor);
        info!(
            jobs = registry.training.len(),
            pools = registry.pools.len(),
            threads = report.classified,
            "classified the configured groups"
        );

        let metrics_listener = match settings.metrics {
            Some(addr) => metrics::bind(addr).await,
            None => None,
        };
        let metrics_addr = metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string());
        let gpu_freezers = enforcement.pools().gpu_freezers();
        let shared = Arc::new(Shared {
            instance: instance.to_owned(),
            cpus: enforcement.cpus().clone(),
            registry: Mutex::new(registry),
            journal: Mutex::new(journal),
            enforcement: Arc::new(Mutex::new(enforcement)),
            sensor: Mutex::new(sensor),
            tally: Arc::new(Mutex::new(EventTally::default())),
            heartbeat: Arc::new(Heartbeat::default()),
            relaunch: Mutex::new(RelaunchBoard::new(
                settings.pools.iter().map(|p| p.name.clone()),
            )),
            metrics_addr,
            pool_slo_ms: settings
                .pools
                .iter()
                .filter_map(|p| Some((p.name.clone(), p.kind.online()?.slo_ms?)))
                .collect::<HashMap<_, _>>(),
            gpu: OnceLock::new(),
            progress: Mutex::new(HashMap::new()),
        });
        let owners: OwnersFn = {
            let shared = Arc::downgrade(&shared);
            Arc::new(move || {
                shared.upgrade().map_or_else(HashMap::new, |shared| {
                    shared.registry.lock().expect("registry poisoned").owners()
                })
            })
        };
        let _ = shared
            .gpu
            .set(GpuService::start(&settings, gpu_freezers, log, owners));

        let listener = server::bind(&socket_path).map_err(|error| DaemonError::Socket {
            what: "binding",
            path: socket_path.clone(),
            error,
        });
        let listener = match listener {
            Ok(listener) => listener,
            Err(err) => {
                release::release(shared, &socket_path, log_writer);
                return Err(err);
            }
        };
        Ok(Self {
            settings,
            shared,
            ring,
            log_writer,
            socket_path,
            listener,
            metrics_listener,
            control,
        })
    }
}

/// Registers again the training processes launched through a previous daemon of this
/// instance that still run. Their threads keep the classification they had where the
/// previous daemon's pinned `thread_state` was taken over; the registry makes sure of it.
fn readopt_launched(registry: &mut Registry, journal: &mut Journal) {
    for launched in journal.entries() {
        match registry.add_training_process(&launched.job, launched.pid) {
            Ok(job) => info!(
                job = job.name,
                id = job.id,
                pid = launched.pid,
                "re-adopted a training process launched before this daemon started"
            ),
            Err(err) => {
                warn!(
                    job = launched.job,
                    pid = launched.pid,
                    "cannot re-adopt a training process launched before this daemon: {err}"
                );
                journal.forget(launched.pid);
            }
        }
    }
}

/// Refuses to start a second daemon of the same instance (its pins would be torn down), and
/// removes a socket file left by one that died.
async fn claim_socket_path(socket: &Path, instance: &str) -> Result<(), DaemonError> {
    if UnixStream::connect(socket).await.is_ok() {
        return Err(DaemonError::AlreadyRunning {
            instance: instance.to_owned(),
            socket: socket.to_owned(),
        });
    }
    if socket.exists() {
        warn!(socket = %socket.display(), "removing stale control socket");
        std::fs::remove_file(socket).map_err(|error| DaemonError::Socket {
            what: "removing",
            path: socket.to_owned(),
            error,
        })?;
    }
    Ok(())
}

/// File descriptors kept for everything but control connections: the sensor's maps and
/// links, the pools' held cgroup files, /proc reads, the decision log, /metrics.
const RESERVED_FILES: u64 = 256;

/// `control` with its connection caps lowered where root's and everyone else's budgets
/// together would not fit in `open_files` beside `RESERVED_FILES`.
fn connection_caps_within(control: ControlSettings, open_files: u64) -> ControlSettings {
    let fits = (open_files.saturating_sub(RESERVED_FILES) / 2).max(1) as usize;
    if control.max_connections <= fits {
        return control;
    }
    warn!(
        open_files,
        configured = control.max_connections,
        lowered_to = fits,
        "[control] max_connections does not fit the open-file limit (LimitNOFILE): lowered"
    );
    ControlSettings {
        max_connections: fits,
        max_connections_per_user: control.max_connections_per_user.min(fits),
        ..control
    }
}
