//! `enforcer run`: the node daemon. Loads the sensor, keeps thread classification current,
//! consumes events, serves the control socket, and cleans up on SIGINT/SIGTERM.

use std::{
    collections::HashMap,
    os::unix::fs::PermissionsExt as _,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context as _;
use enforcer_common::{Settings, WAIT_THRESHOLD_UNIT_NS};
use tokio::{
    io::{AsyncWriteExt as _, BufReader},
    net::{UnixListener, UnixStream},
    signal::unix::{SignalKind, signal},
};
use tracing::{info, warn};

use crate::{
    config::Config,
    control::{self, GroupKind, Request, Response},
    enforce::Enforcer,
    events::{self, EventTally},
    gpu::service::{GpuService, OwnersFn},
    journal::Journal,
    online_weight::TailReport,
    paths, preflight,
    registry::{Reconciled, Registry},
    relaunch_board::RelaunchBoard,
    sensor::{
        Sensor, Snapshot,
        snapshot::{self, JobTotals, PoolInfo},
    },
    thread_policy,
};

/// How often the registry re-reads cgroups and process trees. Threads created after a
/// registration are classified by the sensor at fork; this only catches the rest.
const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

struct Shared {
    instance: String,
    registry: Mutex<Registry>,
    /// Training processes launched through this daemon, for a restarted one to find.
    journal: Mutex<Journal>,
    sensor: Mutex<Sensor>,
    tally: Arc<Mutex<EventTally>>,
    enforcer: Arc<Mutex<Enforcer>>,
    metrics_addr: Option<String>,
    /// The SLO of each pool whose config gives one, for the processes launched into it.
    pool_slo_ms: HashMap<String, u64>,
    /// Set once, right after `Shared` exists: its NVML sampler reads the registry.
    gpu: std::sync::OnceLock<GpuService>,
    /// The launchers that relaunch their command on request, and each pool's generation.
    relaunch: Mutex<RelaunchBoard>,
}

/// Settings for the sensor from the config.
pub fn sensor_settings(config: &Config) -> Settings {
    Settings {
        wait_threshold_ns: config
            .sensor
            .wait_threshold_us
            .saturating_mul(WAIT_THRESHOLD_UNIT_NS),
        event_min_interval_ns: config.sensor.event_min_interval_us.saturating_mul(1000),
    }
}

/// Writes the registry's classes into the sensor's `thread_state` and, when any changed,
/// tells the programs to copy them again; gives offline pools' threads the SCHED_IDLE policy
/// (thread_policy.rs says why).
fn classify(registry: &mut Registry, sensor: &mut Sensor) -> Reconciled {
    let report = registry.reconcile(&mut sensor.maps.thread_state);
    if report.newly_classified > 0
        && let Err(err) = sensor.classes_changed()
    {
        warn!("new classes stay unseen by the sensor until the next change: {err}");
    }
    let idled = thread_policy::make_idle(report.offline_threads.iter().copied());
    if let Some(err) = &idled.last_error
        && !IDLE_POLICY_REFUSED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        warn!(
            failed = idled.failed,
            "offline threads keep their normal policy (their pool is still cpu.idle; said once): \
             {err}"
        );
    }
    report
}

/// Whether a refused SCHED_IDLE was already logged: the reconcile would repeat it every second.
static IDLE_POLICY_REFUSED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Runs the daemon until SIGINT or SIGTERM. Decisions are appended to `decision_log` as JSON
/// lines.
pub async fn run(config: Config, instance: &str, decision_log: &Path) -> anyhow::Result<()> {
    preflight::require_root()?;
    let socket_path = paths::socket_path(instance);
    // The socket, the launch journal and, by default, the decision log live in /run/reamer,
    // which is on tmpfs: a freshly booted node does not have it.
    for dir in [socket_path.parent(), decision_log.parent()]
        .into_iter()
        .flatten()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    claim_socket_path(&socket_path, instance).await?;
    preflight::ensure_mounts()?;
    preflight::raise_memlock();
    // Pools need cgroups: refuse before anything is loaded or pinned.
    if !config.pool.is_empty() {
        crate::cgroup_support::cgroup_support().map_err(|why| {
            anyhow::anyhow!(
                "the config's pools need cgroups this process cannot have here: {why} \
                 (`enforcer check` lists every requirement)"
            )
        })?;
    }

    let pin_dir = paths::pin_dir(instance);
    let mut sensor = Sensor::load(&pin_dir, sensor_settings(&config), config.sensor.clock)?;
    let ring = sensor
        .take_events()
        .context("event ring buffer already taken")?;
    // A daemon that cannot start leaves no pins behind: they would only be taken over by the
    // next start, with nothing enforced in between.
    let mut enforcer = Enforcer::new(&config, instance, Some(decision_log)).inspect_err(|_| {
        sensor.unpin();
    })?;
    if let Some(reserved) = sensor.take_reserved_cpus() {
        enforcer.set_reserved_map(reserved);
    }
    let mut registry = Registry::from_config(&config);
    for (pool, dir) in enforcer.pool_member_dirs() {
        registry.add_pool_cgroup(&pool, dir);
    }
    let mut journal = Journal::open(&paths::launched_journal(instance));
    readopt_launched(&mut registry, &mut journal);
    // Configured pool members move into their pool's cgroup.
    for pool in &registry.pools {
        for pid in crate::registry::group_processes(&pool.sources) {
            if let Err(err) = enforcer.add_process(&pool.name, pid) {
                warn!(pool = pool.name, pid, "cannot adopt: {err:#}");
            }
        }
    }
    let report = classify(&mut registry, &mut sensor);
    info!(
        jobs = registry.training.len(),
        pools = registry.pools.len(),
        threads = report.classified,
        "classified the configured groups"
    );

    let metrics_listener = match config.metrics.address() {
        Some(addr) => crate::metrics::bind(addr).await,
        None => None,
    };
    let metrics_addr = metrics_listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.to_string());
    let shared = Arc::new(Shared {
        instance: instance.to_owned(),
        registry: Mutex::new(registry),
        journal: Mutex::new(journal),
        sensor: Mutex::new(sensor),
        tally: Arc::new(Mutex::new(EventTally::default())),
        enforcer: Arc::new(Mutex::new(enforcer)),
        metrics_addr: metrics_addr.clone(),
        pool_slo_ms: config
            .pool
            .iter()
            .filter_map(|p| Some((p.name.get_ref().clone(), p.slo_ms()?)))
            .collect(),
        gpu: std::sync::OnceLock::new(),
        relaunch: Mutex::new(RelaunchBoard::new(
            config.pool.iter().map(|p| p.name.get_ref().clone()),
        )),
    });
    let owners: OwnersFn = {
        let shared = Arc::downgrade(&shared);
        Arc::new(move || {
            shared.upgrade().map_or_else(HashMap::new, |shared| {
                crate::gpu::attribution::owners(&shared.registry.lock().expect("registry poisoned"))
            })
        })
    };
    let _ = shared
        .gpu
        .set(GpuService::start(&config, instance, decision_log, owners));

    let listener = bind(&socket_path)?;
    let stop_events = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = {
        let (tally, enforcer, stop) = (
            shared.tally.clone(),
            shared.enforcer.clone(),
            stop_events.clone(),
        );
        let priority = config.policy.event_thread_rt_priority;
        std::thread::Builder::new()
            .name(events::THREAD_NAME.to_owned())
            .spawn(move || events::consume_blocking(ring, tally, enforcer, priority, stop))
            .context("starting the event thread")?
    };
    let ticker = tokio::spawn(tick_forever(
        shared.clone(),
        Duration::from_millis(config.policy.tick_ms.max(10)),
    ));
    let gpu_signal = shared
        .gpu
        .get()
        .is_some_and(GpuService::gates)
        .then(|| tokio::spawn(gpu_rise_forever(shared.clone())));
    let server = tokio::spawn(serve(listener, shared.clone()));
    let reconciler = tokio::spawn(reconcile_forever(shared.clone()));
    let metrics = metrics_listener.map(|listener| {
        let shared = shared.clone();
        tokio::spawn(crate::metrics::serve(listener, move || {
            take_snapshot(&shared)
        }))
    });
    if let Some(addr) = &metrics_addr {
        info!("metrics on http://{addr}/metrics");
    }
    info!(instance, socket = %socket_path.display(), pins = %pin_dir.display(), "enforcer running");

    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    tokio::select! {
        _ = sigterm.recv() => info!("SIGTERM: shutting down"),
        _ = sigint.recv() => info!("SIGINT: shutting down"),
    }

    stop_events.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = consumer.join();
    if let Some(gpu) = shared.gpu.get() {
        gpu.shutdown();
    }
    for task in [server, reconciler, ticker]
        .into_iter()
        .chain(metrics)
        .chain(gpu_signal)
    {
        task.abort();
        let _ = task.await;
    }
    let _ = std::fs::remove_file(&socket_path);
    // Connection tasks (a worker's grant stream, say) may still hold the shared state, so the
    // shutdown works through the locks. The programs detach when the process's links close:
    // explicitly below when nothing else holds the sensor, at exit otherwise.
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
        .enforcer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .shutdown();
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
    info!("sensor detached, pins removed");
    Ok(())
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
async fn claim_socket_path(socket: &Path, instance: &str) -> anyhow::Result<()> {
    if UnixStream::connect(socket).await.is_ok() {
        anyhow::bail!(
            "an enforcer of instance {instance:?} is already running (it answers on {}); \
             stop it first or choose another --instance",
            socket.display()
        );
    }
    if socket.exists() {
        warn!(socket = %socket.display(), "removing stale control socket");
        std::fs::remove_file(socket).with_context(|| format!("removing {}", socket.display()))?;
    }
    Ok(())
}

fn bind(socket: &Path) -> anyhow::Result<UnixListener> {
    let listener =
        UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
    // Anyone may read snapshots; registering is checked against the peer's credentials.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("chmod {}", socket.display()))?;
    Ok(listener)
}

/// Training's total run and run-queue wait time so far, ns, from the sensor's job stats.
fn training_run_wait(shared: &Shared) -> (u64, u64) {
    let registry = shared.registry.lock().expect("registry poisoned");
    let sensor = shared.sensor.lock().expect("sensor poisoned");
    registry
        .training
        .iter()
        .filter_map(|job| snapshot::read_job(&sensor.maps, job.id).ok())
        .fold((0, 0), |(run, wait), stats| {
            (run + stats.run_ns, wait + stats.wait_ns)
        })
}

/// CPUs used between the `(time, run time)` reading `previous` and this one, ns.
fn cpus_since(previous: Option<(u64, u64)>, now: u64, run: u64) -> Option<f64> {
    let (then, run_then) = previous?;
    Some(run.saturating_sub(run_then) as f64 / now.saturating_sub(then).max(1) as f64)
}

/// The GPU clamp's fast signal: how often training's CPU use is read while GPU pools are gated.
/// At the 100 ms policy tick alone, the clamp came 19 to 109 ms after training's first kernel on
/// an H100, with training at about half its speed until then (docs/gpu.md); one read of each
/// training job's stats costs microseconds.
const GPU_RISE_PERIOD: Duration = Duration::from_millis(10);
/// Feeds the GPU policy training's CPU use over each `GPU_RISE_PERIOD`, where the policy looks
/// for a step starting (`ClampConfig::rise_cpus`).
async fn gpu_rise_forever(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(GPU_RISE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<(u64, u64)> = None;
    loop {
        tick.tick().await;
        let (run, _) = training_run_wait(&shared);
        let now = snapshot::monotonic_ns();
        if let (Some(gpu), Some(cpus)) = (shared.gpu.get(), cpus_since(previous, now, run)) {
            gpu.on_training_cpu_rise(now, cpus);
        }
        previous = Some((now, run));
    }
}

/// The slow path: every `period`, training's total run + wait time goes to the CPU policy,
/// and its CPU use over the period to the GPU policy (a rise, and its absence for idling).
async fn tick_forever(shared: Arc<Shared>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<(u64, u64)> = None;
    loop {
        tick.tick().await;
        let (run, wait) = training_run_wait(&shared);
        let now = snapshot::monotonic_ns();
        shared
            .enforcer
            .lock()
            .expect("enforcer poisoned")
            .on_tick(now, run + wait);
        if let (Some(gpu), Some(cpus)) = (shared.gpu.get(), cpus_since(previous, now, run)) {
            gpu.on_training_cpu(now, cpus);
        }
        previous = Some((now, run));
    }
}

async fn reconcile_forever(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(RECONCILE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut registry = shared.registry.lock().expect("registry poisoned");
        let mut sensor = shared.sensor.lock().expect("sensor poisoned");
        let report = classify(&mut registry, &mut sensor);
        drop((registry, sensor));
        shared
            .journal
            .lock()
            .expect("journal poisoned")
            .retain_running();
        if report.failed > 0 {
            warn!(
                failed = report.failed,
                "could not classify some threads (thread_state full?)"
            );
        }
    }
}

async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, shared.clone()));
            }
            Err(err) => {
                warn!("control socket accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn serve_connection(stream: UnixStream, shared: Arc<Shared>) {
    let peer = stream.peer_cred().ok();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut buffer = Vec::new();
    loop {
        let (response, keep_going) = match control::read_request(&mut reader, &mut buffer).await {
            Ok(None) | Err(_) => return,
            Ok(Some(Err(message))) => {
                let oversized = buffer.len() > control::MAX_REQUEST_BYTES;
                (Response::Error { message }, !oversized)
            }
            Ok(Some(Ok(Request::Subscribe { pool }))) => {
                let pid = peer.and_then(|c| c.pid()).map_or(0, |p| p as u32);
                stream_grants(&shared, &pool, pid, &mut reader, &mut write).await;
                return;
            }
            Ok(Some(Ok(request))) => (handle(&shared, request, peer), true),
        };
        if send_line(&mut write, &response).await.is_err() || !keep_going {
            return;
        }
    }
}

async fn send_line(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    response: &Response,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(response).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

/// Sends a subscribed worker its grants until it goes away, and takes the SLO needs it sends
/// on the same connection. A worker that dies closes its end: the read side sees it at once,
/// so the subscription (and its need) is dropped then, not at the next grant change, which may
/// be hours away.
async fn stream_grants(
    shared: &Shared,
    pool: &str,
    pid: u32,
    reader: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    write: &mut tokio::net::unix::OwnedWriteHalf,
) {
    use tokio::io::AsyncBufReadExt as _;
    let (sender, mut grants) = tokio::sync::mpsc::unbounded_channel();
    let subscribed = shared
        .enforcer
        .lock()
        .expect("enforcer poisoned")
        .subscribe(pool, pid, sender);
    if let Err(message) = subscribed {
        let _ = send_line(write, &Response::Error { message }).await;
        return;
    }
    info!(pool, pid, "worker subscribed to grants");
    // Kept across iterations: read_until is cancel-safe, a line cut by a grant goes on.
    let mut line = Vec::new();
    loop {
        // At most one request's length, whether or not a newline comes.
        let room = (control::MAX_REQUEST_BYTES + 1).saturating_sub(line.len()) as u64;
        let mut limited = tokio::io::AsyncReadExt::take(&mut *reader, room);
        tokio::select! {
            grant = grants.recv() => {
                let Some(grant) = grant else { break };
                if send_line(write, &Response::Grant(grant)).await.is_err() {
                    break;
                }
            }
            read = limited.read_until(b'\n', &mut line) => {
                if matches!(read, Ok(0) | Err(_)) || line.len() > control::MAX_REQUEST_BYTES {
                    break;
                }
                if line.ends_with(b"\n") {
                    on_subscriber_line(shared, pool, pid, &line);
                    line.clear();
                }
            }
        }
    }
    info!(pool, pid, "worker gone: grant subscription dropped");
    shared
        .enforcer
        .lock()
        .expect("enforcer poisoned")
        .worker_gone(pool, pid);
}

/// A line from a subscribed worker: a need, or something the daemon logs and ignores (the
/// stream carries grants only, so no error goes back on it).
fn on_subscriber_line(shared: &Shared, pool: &str, pid: u32, line: &[u8]) {
    match serde_json::from_slice::<Request>(line) {
        Ok(Request::Need { cpus }) => {
            shared
                .enforcer
                .lock()
                .expect("enforcer poisoned")
                .set_need(pool, pid, Some(cpus))
        }
        Ok(Request::Latency {
            requests,
            missed,
            p99_us,
            slo_us,
        }) => {
            let report = TailReport {
                requests,
                missed,
                p99_us,
                slo_us,
            };
            shared
                .enforcer
                .lock()
                .expect("enforcer poisoned")
                .set_latency(pool, pid, &report, snapshot::monotonic_ns())
        }
        Ok(other) => warn!(
            pool,
            pid,
            "ignored on a grant subscription (only needs and latency reports are read there): \
             {other:?}"
        ),
        Err(err) => warn!(pool, pid, "malformed line on a grant subscription: {err}"),
    }
}

/// What a new process of pool `name` starts with: a GPU pool's MPS limits (or its refusal,
/// when no GPU has room for another client) and the pool's SLO for an inference worker that
/// is not told another.
fn pool_client_env(shared: &Shared, name: &str) -> Result<Vec<(String, String)>, String> {
    let mut env = match shared.gpu.get() {
        Some(gpu) => gpu.client_env(name)?,
        None => Vec::new(),
    };
    if let Some(slo) = shared.pool_slo_ms.get(name) {
        env.push((crate::launch::SLO_ENV.to_owned(), slo.to_string()));
    }
    Ok(env)
}

fn only_root(peer_uid: Option<u32>, what: &str) -> Result<(), Response> {
    if peer_uid == Some(0) {
        return Ok(());
    }
    Err(Response::Error {
        message: format!(
            "only root may {what} (your uid is {})",
            peer_uid.map_or("unknown".to_owned(), |u| u.to_string())
        ),
    })
}

fn handle(shared: &Shared, request: Request, peer: Option<tokio::net::unix::UCred>) -> Response {
    let peer_uid = peer.map(|c| c.uid());
    match request {
        Request::Snapshot => Response::Snapshot(Box::new(take_snapshot(shared))),
        Request::Subscribe { .. } => Response::Error {
            message: "subscriptions are served as a stream, one per connection".to_owned(),
        },
        Request::Need { .. } | Request::Latency { .. } => Response::Error {
            message: "needs and latency reports are sent on a grant subscription, after \
                      subscribing for the pool"
                .to_owned(),
        },
        Request::Watch { pool } => {
            // Only a launcher, which registered itself (root only), watches.
            if let Err(refused) = only_root(peer_uid, "watch a pool for relaunches") {
                return refused;
            }
            let pid = peer.and_then(|c| c.pid()).map_or(0, |p| p as u32);
            let watched = shared
                .relaunch
                .lock()
                .expect("relaunch board poisoned")
                .watch(&pool, pid, snapshot::monotonic_ns());
            match watched {
                Ok(generation) => {
                    let (env, refused) = match pool_client_env(shared, &pool) {
                        Ok(env) => (env, None),
                        Err(why) => (Vec::new(), Some(why)),
                    };
                    Response::Watching {
                        generation,
                        env,
                        refused,
                    }
                }
                Err(message) => Response::Error { message },
            }
        }
        Request::Relaunch { pool } => {
            if let Err(refused) = only_root(peer_uid, "relaunch a pool's workers") {
                return refused;
            }
            let asked = shared
                .relaunch
                .lock()
                .expect("relaunch board poisoned")
                .relaunch(&pool, snapshot::monotonic_ns());
            match asked {
                Ok((generation, launchers)) => {
                    info!(pool, generation, ?launchers, "relaunch asked");
                    Response::Relaunching {
                        pool,
                        generation,
                        launchers,
                    }
                }
                Err(message) => Response::Error { message },
            }
        }
        Request::Register { kind, name, pid } => {
            if let Err(refused) = only_root(peer_uid, "register threads") {
                return refused;
            }
            // A GPU pool admits a process only where a CUDA context fits beside training;
            // the process starts with the pool's MPS limits. Training is told only where the
            // MPS control daemon listens, to share the server its GPU pools use.
            let env = match kind {
                GroupKind::Pool => match pool_client_env(shared, &name) {
                    Ok(env) => env,
                    Err(message) => return Response::Error { message },
                },
                GroupKind::Training => shared
                    .gpu
                    .get()
                    .map(GpuService::training_env)
                    .unwrap_or_default(),
            };
            let mut registry = shared.registry.lock().expect("registry poisoned");
            let added = match kind {
                GroupKind::Training => registry.add_training_process(&name, pid),
                GroupKind::Pool => registry.add_pool_process(&name, pid),
            };
            let (name, id) = match added {
                Ok(group) => (group.name.clone(), group.id),
                Err(err) => {
                    return Response::Error {
                        message: err.to_string(),
                    };
                }
            };
            if kind == GroupKind::Training {
                shared
                    .journal
                    .lock()
                    .expect("journal poisoned")
                    .record(&name, id, pid);
            }
            // A pool member moves into the pool's cgroup before its threads are classified
            // (which also makes offline threads SCHED_IDLE).
            if kind == GroupKind::Pool {
                let enforcer = shared.enforcer.lock().expect("enforcer poisoned");
                if let Err(err) = enforcer.add_process(&name, pid) {
                    return Response::Error {
                        message: format!("{err:#}"),
                    };
                }
            }
            let mut sensor = shared.sensor.lock().expect("sensor poisoned");
            classify(&mut registry, &mut sensor);
            let groups = match kind {
                GroupKind::Training => &registry.training,
                GroupKind::Pool => &registry.pools,
            };
            let threads = groups
                .iter()
                .find(|g| g.name == name)
                .map_or(0, |g| g.threads);
            info!(?kind, name, pid, threads, "registered");
            Response::Registered {
                name,
                id,
                threads,
                env,
            }
        }
    }
}

fn take_snapshot(shared: &Shared) -> Snapshot {
    let registry = shared.registry.lock().expect("registry poisoned");
    let sensor = shared.sensor.lock().expect("sensor poisoned");
    let tally = shared.tally.lock().expect("event tally poisoned");
    let jobs: Vec<JobTotals> = registry
        .training
        .iter()
        .map(|job| {
            let stats = snapshot::read_job(&sensor.maps, job.id).unwrap_or_default();
            JobTotals {
                id: job.id,
                name: job.name.clone(),
                threads: job.threads,
                run_ns: stats.run_ns,
                wait_ns: stats.wait_ns,
                waits: stats.waits,
                max_wait_ns: stats.max_wait_ns,
                behind_inference: stats.behind_inference,
                long_waits: stats.long_waits,
                events_received: tally.per_job.get(job.id as usize).copied().unwrap_or(0),
                wait_hist: stats.wait_hist.to_vec(),
                reports_ran: stats.reports_ran,
                report_to_ran_ns: stats.report_to_ran_ns,
                report_to_ran_hist: stats.report_to_ran_hist.to_vec(),
            }
        })
        .collect();
    let relaunch = shared.relaunch.lock().expect("relaunch board poisoned");
    let now_ns = snapshot::monotonic_ns();
    let pools = registry
        .pools
        .iter()
        .map(|pool| {
            let (relaunch_generation, relaunching_launchers) =
                relaunch.watching(&pool.name, now_ns);
            PoolInfo {
                id: pool.id,
                name: pool.name.clone(),
                kind: if pool.class == enforcer_common::CLASS_ONLINE {
                    "online"
                } else {
                    "offline"
                }
                .to_owned(),
                threads: pool.threads,
                relaunch_generation,
                relaunching_launchers,
            }
        })
        .collect();
    drop(relaunch);
    let enforcement = enforcement_status(shared, &jobs);
    Snapshot {
        instance: shared.instance.clone(),
        monotonic_ns: snapshot::monotonic_ns(),
        jobs,
        pools,
        cpu_class_ns: snapshot::read_cpu_class_ns(&sensor.maps),
        counters: snapshot::read_counters(&sensor.maps),
        programs: sensor.program_stats(),
        enforcement: Some(enforcement),
        metrics_addr: shared.metrics_addr.clone(),
        gpu: shared.gpu.get().map(GpuService::report),
        event_thread: thread_policy::own_thread_named(events::THREAD_NAME)
            .map(thread_policy::describe),
    }
}

/// The enforcer's status, with "event to training ran" summed from the sensor's per-job
/// histograms (the kernel measures it, see `record_report_ran` in the sensor).
fn enforcement_status(shared: &Shared, jobs: &[JobTotals]) -> crate::enforce::EnforcementStatus {
    let mut status = shared.enforcer.lock().expect("enforcer poisoned").status();
    let mut hist = vec![0u64; enforcer_common::histogram::NR_BUCKETS];
    for job in jobs {
        for (sum, count) in hist.iter_mut().zip(&job.report_to_ran_hist) {
            *sum += count;
        }
    }
    status.event_to_ran_p50_ns = snapshot::percentile(&hist, 0.5);
    status.event_to_ran_p99_ns = snapshot::percentile(&hist, 0.99);
    status.event_to_ran_sum_ns = jobs.iter().map(|j| j.report_to_ran_ns).sum();
    status.event_to_ran_hist = hist;
    status
}
