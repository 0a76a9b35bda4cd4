//! `enforcer run`: the node daemon. This file is its lifecycle: start-up (preflight, the
//! sensor, the pools, the GPU side, the threads and tasks) and the shutdown that leaves
//! nothing starved or frozen. The parts:
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
pub mod answer;
pub mod enforcement;
pub mod event_thread;
pub mod fatal;
pub mod heartbeat;
pub mod journal;
pub mod loops;
pub mod metrics;
pub mod pods;
pub mod reactions;
pub mod relaunch_board;
pub mod requests;
pub mod server;
pub mod snapshot;
pub mod state;
pub mod subscription;
pub mod watchdog;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    net::UnixStream,
    signal::unix::{SignalKind, signal},
};
use tracing::{info, warn};

use self::{
    enforcement::{Enforcement, EnforcementError},
    event_thread::EventTally,
    heartbeat::Heartbeat,
    journal::Journal,
    relaunch_board::RelaunchBoard,
    state::Shared,
};
use crate::{
    actuate::{
        decision_log::{DecisionLog, OpenError},
        quiet_cpus::QuietCpus,
        thread_policy,
    },
    config::{Settings, control::ControlSettings},
    gpu::service::{GpuService, OwnersFn},
    host::{
        cgroup_support::{CgroupUnsupported, cgroup_support},
        paths,
        preflight::{self, PreflightError},
        systemd::{self, Notifier},
    },
    registry::{Registry, group_processes},
    sensor::{Sensor, SensorError},
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

/// Runs the daemon until SIGINT or SIGTERM. Decisions are appended to `decision_log` as JSON
/// lines.
pub async fn run(
    settings: Settings,
    instance: &str,
    decision_log: &Path,
) -> Result<(), DaemonError> {
    preflight::require_root()?;
    let socket_path = paths::socket_path(instance);
    // The socket, the launch journal and, by default, the decision log live in /run/reamer,
    // which is on tmpfs: a freshly booted node does not have it.
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
    fatal::exit_on_panic(instance);
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

    let pin_dir = paths::pin_dir(instance);
    let mut sensor = Sensor::load(&pin_dir, &settings.sensor)?;
    let ring = sensor.take_events().ok_or(DaemonError::RingTaken)?;
    // A daemon that cannot start leaves no pins behind: they would only be taken over by the
    // next start, with nothing enforced in between.
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
        metrics_addr: metrics_addr.clone(),
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
    let _ = shared.gpu.set(GpuService::start(
        &settings,
        gpu_freezers,
        log.clone(),
        owners,
    ));
    drop(log);

    let listener = server::bind(&socket_path).map_err(|error| DaemonError::Socket {
        what: "binding",
        path: socket_path.clone(),
        error,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread_error = |what| move |error| DaemonError::Thread { what, error };
    let heartbeat = shared.heartbeat.clone();
    let consumer = {
        let (tally, enforcement, heartbeat, stop) = (
            shared.tally.clone(),
            shared.enforcement.clone(),
            heartbeat.clone(),
            stop.clone(),
        );
        let priority = settings.event_thread_rt_priority;
        let instance = instance.to_owned();
        std::thread::Builder::new()
            .name(event_thread::THREAD_NAME.to_owned())
            .spawn(move || {
                let consumed = event_thread::consume_blocking(
                    ring,
                    tally,
                    enforcement,
                    priority,
                    heartbeat,
                    stop,
                );
                if let Err(err) = consumed {
                    fatal::exit(
                        &instance,
                        &format!("polling the event ring buffer failed: {err}"),
                    );
                }
            })
            .map_err(thread_error("event thread"))?
    };
    let mut periodic = vec![
        loops::spawn_periodic(
            "reamer-tick",
            settings.tick,
            stop.clone(),
            loops::tick(&shared),
        )
        .map_err(thread_error("tick thread"))?,
        loops::spawn_periodic(
            "reamer-reconcile",
            loops::RECONCILE_INTERVAL,
            stop.clone(),
            loops::reconcile(&shared),
        )
        .map_err(thread_error("reconcile thread"))?,
    ];
    if shared.gpu.get().is_some_and(GpuService::gates) {
        periodic.push(
            loops::spawn_periodic(
                "reamer-gpu-rise",
                loops::GPU_RISE_PERIOD,
                stop.clone(),
                loops::gpu_rise(&shared),
            )
            .map_err(thread_error("GPU signal thread"))?,
        );
    }
    let server = tokio::spawn(server::serve(listener, shared.clone(), control));
    let pods = settings
        .kubernetes
        .clone()
        .map(|kubernetes| pods::start(shared.clone(), kubernetes, &settings.pools));
    let metrics = metrics_listener
        .map(|listener| tokio::spawn(metrics::serve(listener, metrics::router(shared.clone()))));
    if let Some(addr) = &metrics_addr {
        info!("metrics on http://{addr}/metrics");
    }
    info!(instance, socket = %socket_path.display(), pins = %pin_dir.display(), "enforcer running");
    let watchdog = watchdog::start(
        Notifier::from_env(),
        systemd::watchdog_period(),
        heartbeat,
        shared.enforcement.clone(),
        stop.clone(),
    )
    .map_err(thread_error("watchdog thread"))?;

    let signal_error = |signal| move |error| DaemonError::Signal { signal, error };
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error("SIGTERM"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error("SIGINT"))?;
    tokio::select! {
        _ = sigterm.recv() => info!("SIGTERM: shutting down"),
        _ = sigint.recv() => info!("SIGINT: shutting down"),
    }

    stop.store(true, Ordering::Relaxed);
    let _ = consumer.join();
    for thread in periodic.into_iter().chain(watchdog) {
        let _ = thread.join();
    }
    if let Some(gpu) = shared.gpu.get() {
        gpu.shutdown();
    }
    for task in std::iter::once(server).chain(metrics).chain(pods) {
        task.abort();
        let _ = task.await;
    }
    let _ = std::fs::remove_file(&socket_path);
    shutdown(shared);
    // Every decision logged before the shutdown is in the file when the daemon exits.
    log_writer.close();
    info!("sensor detached, pins removed");
    Ok(())
}

/// Leaves every inference process runnable, removes the pins and detaches the sensor.
/// Connection tasks (a worker's grant stream, say) may still hold the shared state, so the
/// shutdown works through the locks, whatever state a panicked holder left them in. The
/// programs detach when the process's links close: explicitly below when nothing else holds
/// the sensor, at exit otherwise.
fn shutdown(shared: Arc<Shared>) {
    let offline_threads = shared
        .registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .offline_threads();
    let normal = thread_policy::make_normal(offline_threads);
    if let Some(err) = normal.last_error {
        warn!(
            failed = normal.failed,
            "offline threads left SCHED_IDLE at shutdown (needs CAP_SYS_NICE): {err}"
        );
    }
    shared
        .enforcement
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .shutdown(&shared.instance);
    info!(
        offline_threads_made_normal = normal.changed,
        "inference pools released: every CPU, no idle class, thawed"
    );
    shared
        .journal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .close();
    shared
        .sensor
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unpin();
    if let Some(shared) = Arc::into_inner(shared) {
        drop(
            shared
                .sensor
                .into_inner()
                .unwrap_or_else(|e| e.into_inner()),
        );
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
