//! The daemon's periodic work, each loop on a thread of its own (it reads /proc, the sensor's
//! maps and writes cgroups: blocking work that stays off the async runtime):
//! - the slow path's tick: training's demand goes to the CPU policy, its CPU use to the GPU
//!   policy;
//! - the GPU clamp's fast signal, while some GPU pool is gated;
//! - the reconcile: group membership re-read from cgroups and process trees, and pods' groups
//!   read back for someone else's writes.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use tracing::{info, warn};

use super::{pace_signal, state::Shared};
use crate::{
    actuate::thread_policy,
    registry::{Reconciled, Registry},
    sensor::{Sensor, interval::Rate, readings},
};

/// How often the registry re-reads cgroups and process trees. Threads created after a
/// registration are classified by the sensor at fork; this only catches the rest.
pub(crate) const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// The GPU clamp's fast signal: how often training's CPU use is read while GPU pools are gated.
/// At the 100 ms policy tick alone, the clamp came 19 to 109 ms after training's first kernel on
/// an H100, with training at about half its speed until then (docs/gpu.md); one read of each
/// training job's stats costs microseconds.
pub(crate) const GPU_RISE_PERIOD: Duration = Duration::from_millis(10);

/// Runs `work` every `period` on a thread named `name` until `stop` is set. A period that
/// overran starts the next one late rather than running twice to catch up.
pub(crate) fn spawn_periodic(
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

/// Training's totals so far, summed over its jobs, as of one instant.
#[derive(Debug, Clone, Copy, Default)]
struct TrainingTotals {
    /// CLOCK_MONOTONIC instant of the reading.
    at_ns: u64,
    /// Run time, the slices running at `at_ns` included.
    run_ns: u64,
    wait_ns: u64,
}

/// Training's totals: the sensor's job stats and the slices running at the reading, so that
/// the difference of two readings is what happened in between, a thread that has run for
/// seconds without a switch included.
fn training_totals(shared: &Shared) -> TrainingTotals {
    let registry = shared.registry.lock().expect("registry poisoned");
    let sensor = shared.sensor.lock().expect("sensor poisoned");
    let ids: Vec<u32> = registry.training.iter().map(|job| job.id).collect();
    let read = readings::run_times(&sensor.maps, &ids);
    let running: u64 = read
        .running
        .iter()
        .filter(|(job, _)| ids.contains(job))
        .map(|(_, ns)| ns)
        .sum();
    TrainingTotals {
        at_ns: read.at_ns,
        run_ns: read.jobs.iter().map(|stats| stats.run_ns).sum::<u64>() + running,
        wait_ns: read.jobs.iter().map(|stats| stats.wait_ns).sum(),
    }
}

/// The slow path, once a tick: training's run + wait time goes to the CPU policy as a demand
/// (threads runnable or running), and its CPU use over the tick to the GPU policy (a rise,
/// and its absence for idling).
pub(crate) fn tick(shared: &Arc<Shared>) -> impl FnMut() + Send + 'static {
    let shared = shared.clone();
    let mut previous: Option<TrainingTotals> = None;
    move || {
        let now = training_totals(&shared);
        let Some(then) = previous.replace(now) else {
            return;
        };
        let dt = now.at_ns.saturating_sub(then.at_ns);
        if dt == 0 {
            return;
        }
        let run_ns = now.run_ns.saturating_sub(then.run_ns);
        let wait_ns = now.wait_ns.saturating_sub(then.wait_ns);
        let harvests_by_pace = {
            let mut enforcement = shared.enforcement.lock().expect("enforcement poisoned");
            enforcement.on_demand(now.at_ns, (run_ns + wait_ns) as f64 / dt as f64);
            enforcement.harvests_by_pace()
        };
        if harvests_by_pace {
            pace_signal::step(&shared, now.at_ns);
        }
        if let Some(gpu) = shared.gpu.get() {
            gpu.on_training_cpu(now.at_ns, run_ns as f64 / dt as f64);
        }
    }
}

/// The GPU policy's fast signal: training's CPU use over each `GPU_RISE_PERIOD`, where the
/// policy looks for a step starting (`ClampSettings::rise_cpus`).
pub(crate) fn gpu_rise(shared: &Arc<Shared>) -> impl FnMut() + Send + 'static {
    let shared = shared.clone();
    let mut cpus = Rate::default();
    move || {
        let now = training_totals(&shared);
        if let (Some(gpu), Some(cpus)) = (shared.gpu.get(), cpus.since(now.at_ns, now.run_ns)) {
            gpu.on_training_cpu_rise(now.at_ns, cpus);
        }
    }
}

/// The reconcile, once a period: classification from cgroups and process trees, and the launch
/// journal's exited processes dropped.
pub(crate) fn reconcile(shared: &Arc<Shared>) -> impl FnMut() + Send + 'static {
    let shared = shared.clone();
    let mut inference_unclassified = 0;
    move || {
        let mut registry = shared.registry.lock().expect("registry poisoned");
        let mut sensor = shared.sensor.lock().expect("sensor poisoned");
        let report = classify(&mut registry, &mut sensor);
        drop((registry, sensor));
        // Pods' files read back: the kubelet's rewrites re-applied, another agent's reported.
        // Read with the lock let go: the event thread needs it.
        let readbacks = shared
            .enforcement
            .lock()
            .expect("enforcement poisoned")
            .pools()
            .pod_readbacks();
        // Without pods (every node outside Kubernetes) the lock is not taken a second time.
        if !readbacks.is_empty() {
            let readings = readbacks
                .into_iter()
                .map(|(pool, uid, readback)| (pool, uid, readback.read()))
                .collect();
            let notes = shared
                .enforcement
                .lock()
                .expect("enforcement poisoned")
                .pools_mut()
                .check_pods(Instant::now(), readings);
            for note in notes {
                warn!("Kubernetes: {note}");
            }
        }
        shared
            .journal
            .lock()
            .expect("journal poisoned")
            .retain_running();
        if report.failed > 0 {
            warn!(
                failed = report.failed,
                "could not classify some training threads (thread_state full: 65,536 training \
                 threads at once)"
            );
        }
        // Said when the number changes, not every second while a pool keeps its map full.
        if report.failed_inference != inference_unclassified {
            inference_unclassified = report.failed_inference;
            if inference_unclassified > 0 {
                warn!(
                    unclassified = inference_unclassified,
                    "inference threads beyond [sensor] max_inference_threads are not classified \
                     (training's are, in a map of their own)"
                );
            }
        }
    }
}

/// Writes the registry's classes into the sensor's `thread_state` and, when any changed,
/// tells the programs to copy them again; gives offline pools' threads the SCHED_IDLE policy
/// (`thread_policy` says why).
pub(crate) fn classify(registry: &mut Registry, sensor: &mut Sensor) -> Reconciled {
    // Before any of a new job's threads is classified into its id.
    zero_new_jobs(registry, sensor);
    let maps = &mut sensor.maps;
    let report = registry.reconcile(&mut maps.thread_state, &mut maps.pool_threads);
    for job in &report.jobs_ended {
        info!(
            job,
            "training job ended: its last launched process exited; it keeps its figures until \
             a new job needs its slot"
        );
    }
    if !registry.waiting.is_empty() && registry.slot_available() {
        for pod in registry.retry_waiting() {
            info!(
                pod,
                "Kubernetes: a training pod that waited for a job slot joined"
            );
        }
        zero_new_jobs(registry, sensor);
    }
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
            "offline threads keep their normal policy (a launched worker's pool is still \
             cpu.idle, an offline pod's group at the least weight; said once): {err}"
        );
    }
    report
}

/// Zeroes the sensor's totals for the ids new jobs were given where an ended job had them
/// (`Registry::take_to_zero`). Called with the registry held since the job was made, so that
/// nothing reads the ended job's totals as the new one's.
pub(crate) fn zero_new_jobs(registry: &mut Registry, sensor: &mut Sensor) {
    let mut failed = Vec::new();
    for id in registry.take_to_zero() {
        if let Err(err) = sensor.reset_job_stats(id) {
            warn!(
                id,
                "a new training job starts with the totals of the ended job that had its id \
                 (retried): {err}"
            );
            failed.push(id);
        }
    }
    registry.zero_again(failed);
}

/// Whether a refused SCHED_IDLE was already logged: the reconcile would repeat it every second.
static IDLE_POLICY_REFUSED: AtomicBool = AtomicBool::new(false);
