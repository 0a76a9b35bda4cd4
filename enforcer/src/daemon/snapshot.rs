//! `Request::Snapshot`: the sensor's totals per job, the pools, the enforcement state and the
//! GPU side, read at one instant. Each lock is held only for its in-memory state: the pools'
//! cgroup files are read after letting go of the enforcement's lock, which the event thread
//! needs.

use enforcer_common::{
    CLASS_ONLINE,
    histogram::{NR_BUCKETS, percentile},
    protocol::{EnforcementStatus, JobTotals, PoolInfo, Snapshot},
};

use super::{enforcement::fill_pool_files, event_thread, state::Shared};
use crate::{
    actuate::thread_policy, gpu::service::GpuService, host::clock::monotonic_ns, sensor::readings,
};

pub fn take_snapshot(shared: &Shared) -> Snapshot {
    let registry = shared.registry.lock().expect("registry poisoned");
    let sensor = shared.sensor.lock().expect("sensor poisoned");
    let tally = shared.tally.lock().expect("event tally poisoned");
    let jobs: Vec<JobTotals> = registry
        .training
        .iter()
        .map(|job| {
            let stats = readings::read_job(&sensor.maps, job.id).unwrap_or_default();
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
                events_received: tally.of_job(job.id),
                wait_hist: stats.wait_hist.to_vec(),
                reports_ran: stats.reports_ran,
                report_to_ran_ns: stats.report_to_ran_ns,
                report_to_ran_hist: stats.report_to_ran_hist.to_vec(),
            }
        })
        .collect();
    drop(tally);
    let relaunch = shared.relaunch.lock().expect("relaunch board poisoned");
    let now_ns = monotonic_ns();
    let pools = registry
        .pools
        .iter()
        .map(|pool| {
            let (relaunch_generation, relaunching_launchers) =
                relaunch.watching(&pool.name, now_ns);
            PoolInfo {
                id: pool.id,
                name: pool.name.clone(),
                kind: if pool.class == CLASS_ONLINE {
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
    drop((relaunch, registry));
    let cpu_class_ns = readings::read_cpu_class_ns(&sensor.maps);
    let counters = readings::read_counters(&sensor.maps);
    let programs = sensor.program_stats();
    drop(sensor);
    let enforcement = enforcement_status(shared, &jobs);
    Snapshot {
        instance: shared.instance.clone(),
        monotonic_ns: monotonic_ns(),
        jobs,
        pools,
        cpu_class_ns,
        counters,
        programs,
        enforcement: Some(enforcement),
        metrics_addr: shared.metrics_addr.clone(),
        gpu: shared.gpu.get().map(GpuService::report),
        event_thread: thread_policy::own_thread_named(event_thread::THREAD_NAME)
            .map(thread_policy::describe),
    }
}

/// The enforcement's status, with "event to training ran" summed from the sensor's per-job
/// histograms (the kernel measures it, see `record_report_ran` in the sensor).
fn enforcement_status(shared: &Shared, jobs: &[JobTotals]) -> EnforcementStatus {
    let (mut status, files) = shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .status();
    fill_pool_files(&mut status, &files);
    let mut hist = vec![0u64; NR_BUCKETS];
    for job in jobs {
        for (sum, count) in hist.iter_mut().zip(&job.report_to_ran_hist) {
            *sum += count;
        }
    }
    status.event_to_ran_p50_ns = percentile(&hist, 0.5);
    status.event_to_ran_p99_ns = percentile(&hist, 0.99);
    status.event_to_ran_sum_ns = jobs.iter().map(|j| j.report_to_ran_ns).sum();
    status.event_to_ran_hist = hist;
    status
}
