//! Answers to the control socket's one-shot requests: snapshots, registrations, and the
//! relaunch board's watch and relaunch. Runs on the blocking pool (`server`): a registration
//! walks /proc and writes cgroups, a snapshot reads the sensor's maps.

use enforcer_common::protocol::{GroupKind, MeanCount, Request, Response, SLO_ENV};
use tokio::net::unix::UCred;
use tracing::info;

use super::{
    loops::classify,
    snapshot::{Detail, take_snapshot},
    state::Shared,
    watchdog,
};
use crate::{
    actuate::pools::PoolsError,
    gpu::service::{GpuService, PoolFull},
    host::clock::monotonic_ns,
    registry::{RegistryError, training_job_of},
};

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
enum RegisterError {
    #[error(transparent)]
    GpuPoolFull(#[from] PoolFull),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Pool(#[from] PoolsError),
}

pub(crate) fn handle(shared: &Shared, request: Request, peer: Option<UCred>) -> Response {
    let peer_uid = peer.map(|c| c.uid());
    let peer_pid = peer.and_then(|c| c.pid()).map_or(0, |p| p as u32);
    match request {
        Request::Snapshot => Response::Snapshot(Box::new(take_snapshot(shared, Detail::Full))),
        Request::Observe => Response::Snapshot(Box::new(take_snapshot(shared, Detail::Observe))),
        Request::Subscribe { .. } => {
            error("subscriptions are served as a stream, one per connection")
        }
        Request::Need { .. } | Request::Latency(_) => error(
            "needs and latency reports are sent on a grant subscription, after subscribing for \
             the pool",
        ),
        Request::Watch { pool } => {
            // Only a launcher, which registered itself (root only), watches.
            if let Err(refused) = only_root(peer_uid, "watch a pool for relaunches") {
                return refused;
            }
            let watched = shared
                .relaunch
                .lock()
                .expect("relaunch board poisoned")
                .watch(&pool, peer_pid, monotonic_ns());
            match watched {
                Ok(generation) => {
                    let (env, refused) = match pool_client_env(shared, &pool) {
                        Ok(env) => (env, None),
                        Err(why) => (Vec::new(), Some(why.to_string())),
                    };
                    Response::Watching {
                        generation,
                        env,
                        refused,
                    }
                }
                Err(err) => error(err.to_string()),
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
                .relaunch(&pool, monotonic_ns());
            match asked {
                Ok((generation, launchers)) => {
                    info!(pool, generation, ?launchers, "relaunch asked");
                    Response::Relaunching {
                        pool,
                        generation,
                        launchers,
                    }
                }
                Err(err) => error(err.to_string()),
            }
        }
        Request::Health => Response::Health {
            problem: watchdog::event_path_problem(
                &shared.heartbeat,
                &shared.enforcement,
                HEALTH_LOCK_WAIT,
            ),
        },
        Request::Progress { steps, mean } => progress(shared, peer_pid, steps, mean),
        Request::Register { kind, name, pid } => {
            if let Err(refused) = only_root(peer_uid, "register threads") {
                return refused;
            }
            register(shared, kind, &name, pid).unwrap_or_else(|err| error(err.to_string()))
        }
    }
}

/// How long `Health` waits for the enforcement lock: the event path holds it for microseconds
/// per event, the slow path for a tick's writes.
const HEALTH_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn error(message: impl Into<String>) -> Response {
    Response::Error {
        message: message.into(),
    }
}

/// Adds process `pid` to training job or pool `name`; answers with its group and the
/// environment it starts with, or the refusal's message.
fn register(
    shared: &Shared,
    kind: GroupKind,
    name: &str,
    pid: u32,
) -> Result<Response, RegisterError> {
    // A GPU pool admits a process only where a CUDA context fits beside training; the process
    // starts with the pool's MPS limits. Training is told only where the MPS control daemon
    // listens, to share the server its GPU pools use.
    let env = match kind {
        GroupKind::Pool => pool_client_env(shared, name)?,
        GroupKind::Training => shared
            .gpu
            .get()
            .map(GpuService::training_env)
            .unwrap_or_default(),
    };
    let mut registry = shared.registry.lock().expect("registry poisoned");
    let added = match kind {
        GroupKind::Training => registry.add_training_process(name, pid),
        GroupKind::Pool => registry.add_pool_process(name, pid),
    };
    let (name, id) = added.map(|group| (group.name.clone(), group.id))?;
    if kind == GroupKind::Training {
        shared
            .journal
            .lock()
            .expect("journal poisoned")
            .record(&name, id, pid);
    }
    // A pool member moves into the pool's cgroup before its threads are classified (which
    // also makes offline threads SCHED_IDLE).
    if kind == GroupKind::Pool {
        let enforcement = shared.enforcement.lock().expect("enforcement poisoned");
        enforcement.pools().add_process(&name, pid)?;
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
    Ok(Response::Registered {
        name,
        id,
        threads,
        env,
    })
}

/// Counts `steps` (and the count's `mean` over the time before, where sent) for the training
/// job process `pid` belongs to, and answers with the job's pace. The sender names no job: a
/// process may report only for its own (a tenant cannot move another job's signal). A mean
/// that cannot be the count's is refused with the report, not half taken.
fn progress(shared: &Shared, pid: u32, steps: u64, mean: Option<MeanCount>) -> Response {
    if let Some(problem) = mean.and_then(|mean| mean.problem(steps)) {
        return error(format!("a progress report's mean is refused: {problem}"));
    }
    if pid == 0 {
        return error(
            "the sender's process is unknown (no peer credentials): progress counts for the job of the process that sends it",
        );
    }
    // Copied out: the walk of the jobs' members reads /proc, which the registry's other
    // users (the reconcile, snapshots) must not wait for.
    let jobs = shared
        .registry
        .lock()
        .expect("registry poisoned")
        .training
        .clone();
    let live_jobs: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let Some(job) = training_job_of(&jobs, pid).map(|job| job.name.clone()) else {
        return error(format!(
            "process {pid} is in no training job: progress counts for the job of the process \
             that sends it (start the job with `enforcer launch --training NAME`, or name it \
             in the config's [[training]])"
        ));
    };
    let now_ns = monotonic_ns();
    let mut board = shared.progress.lock().expect("progress board poisoned");
    // Jobs gone from the registry take their reports with them.
    board.retain(|name, _| live_jobs.contains(&name.as_str()));
    let tracker = board.entry(job.clone()).or_default();
    tracker.record_with_mean(now_ns, steps, mean);
    Response::Progress {
        steps_per_s: tracker.pace(now_ns).and_then(|pace| pace.steps_per_s),
        job,
    }
}

/// What a new process of pool `name` starts with: a GPU pool's MPS limits (or its refusal,
/// when no GPU has room for another client) and the pool's SLO for an inference worker that
/// is not told another.
fn pool_client_env(shared: &Shared, name: &str) -> Result<Vec<(String, String)>, PoolFull> {
    let mut env = match shared.gpu.get() {
        Some(gpu) => gpu.client_env(name)?,
        None => Vec::new(),
    };
    if let Some(slo) = shared.pool_slo_ms.get(name) {
        env.push((SLO_ENV.to_owned(), slo.to_string()));
    }
    Ok(env)
}

fn only_root(peer_uid: Option<u32>, what: &str) -> Result<(), Response> {
    if peer_uid == Some(0) {
        return Ok(());
    }
    Err(error(format!(
        "only root may {what} (your uid is {})",
        peer_uid.map_or("unknown".to_owned(), |u| u.to_string())
    )))
}
