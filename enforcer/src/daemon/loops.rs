//! The daemon's periodic work, each loop on a thread of its own (it reads /proc, the sensor's
//! maps and writes cgroups: blocking work that stays off the async runtime):
//! - the slow path's tick: training's demand goes to the CPU policy, its CPU use to the GPU
//!   policy;
//! - the GPU clamp's fast signal, while some GPU pool is gated;
//! - the reconcile: group membership re-read from cgroups and process trees.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use tracing::warn;

use super::state::Shared;
use crate::{
    actuate::thread_policy,
    host::clock::monotonic_ns,
    registry::{Reconciled, Registry},
    sensor::{Sensor, interval::Rate, readings},
};

/// How often the registry re-reads cgroups and process trees. Threads created after a
/// registration are classified by the sensor at fork; this only catches the rest.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// The GPU clamp's fast signal: how often training's CPU use is read while GPU pools are gated.
/// At the 100 ms policy tick alone, the clamp came 19 to 109 ms after training's first kernel on
/// an H100, with training at about half its speed until then (docs/gpu.md); one read of each
/// training job's stats costs microseconds.
pub const GPU_RISE_PERIOD: Duration = Duration::from_millis(10);

/// Runs `work` every `period` on a thread named `name` until `stop` is set. A period that
/// overran starts the next one late rather than running twice to catch up.
pub fn spawn_periodic(
    name: &str,
    period: Duration,
    stop: Arc<AtomicBool>,
    mut work: impl FnMut() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                work();
                next += period;
                let now = Instant::now();
                if next < now {
                    next = now;
                }
                // Sleep in slices, so that a stop does not wait a whole reconcile period.
                while !stop.load(Ordering::Relaxed) {
                    let left = next.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
            }
        })
}

/// Training's total run and run-queue wait time so far, ns, from the sensor's job stats.
fn training_run_wait(shared: &Shared) -> (u64, u64) {
    let registry = shared.registry.lock().expect("registry poisoned");
    let sensor = shared.sensor.lock().expect("sensor poisoned");
    registry
        .training
        .iter()
        .filter_map(|job| readings::read_job(&sensor.maps, job.id).ok())
        .fold((0, 0), |(run, wait), stats| {
            (run + stats.run_ns, wait + stats.wait_ns)
        })
}

/// The slow path, once a tick: training's run + wait time goes to the CPU policy as a demand
/// (threads runnable or running), and its CPU use over the tick to the GPU policy (a rise, and
/// its absence for idling).
pub fn tick(shared: &Arc<Shared>) -> impl FnMut() + Send + 'static {
    let shared = shared.clone();
    let (mut demand, mut cpus) = (Rate::default(), Rate::default());
    move || {
        let (run, wait) = training_run_wait(&shared);
        let now = monotonic_ns();
        if let Some(demand_cpus) = demand.since(now, run + wait) {
            shared
                .enforcement
                .lock()
                .expect("enforcement poisoned")
                .on_demand(now, demand_cpus);
        }
        if let (Some(gpu), Some(cpus)) = (shared.gpu.get(), cpus.since(now, run)) {
            gpu.on_training_cpu(now, cpus);
        }
    }
}

/// The GPU policy's fast signal: training's CPU use over each `GPU_RISE_PERIOD`, where the
/// policy looks for a step starting (`ClampSettings::rise_cpus`).
pub fn gpu_rise(shared: &Arc<Shared>) -> impl FnMut() + Send + 'static {
    let shared = shared.clone();
    let mut cpus = Rate::default();
    move || {
        let (run, _) = training_run_wait(&shared);
        let now = monotonic_ns();
        if let (Some(gpu), Some(cpus)) = (shared.gpu.get(), cpus.since(now, run)) {
            gpu.on_training_cpu_rise(now, cpus);
        }
    }
}

/// The reconcile, once a period: classification from cgroups and process trees, and the launch
/// journal's exited processes dropped.
pub fn reconcile(shared: &Arc<Shared>) -> impl FnMut() + Send + 'static {
    let shared = shared.clone();
    move || {
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

/// Writes the registry's classes into the sensor's `thread_state` and, when any changed,
/// tells the programs to copy them again; gives offline pools' threads the SCHED_IDLE policy
/// (`thread_policy` says why).
pub fn classify(registry: &mut Registry, sensor: &mut Sensor) -> Reconciled {
    let report = registry.reconcile(&mut sensor.maps.thread_state);
    if report.newly_classified > 0
        && let Err(err) = sensor.classes_changed()
    {
        warn!("new classes stay unseen by the sensor until the next change: {err}");
    }
    let idled = thread_policy::make_idle(report.offline_threads.iter().copied());
    if let Some(err) = &idled.last_error
        && !IDLE_POLICY_REFUSED.swap(true, Ordering::Relaxed)
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
static IDLE_POLICY_REFUSED: AtomicBool = AtomicBool::new(false);
