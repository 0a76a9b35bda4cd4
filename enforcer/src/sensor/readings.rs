//! Reading the sensor's in-kernel aggregates: per-job totals, per-CPU time by class and the
//! diagnostic counters, each summed over CPUs in one pass over its map.

use std::collections::BTreeMap;

use enforcer_common::{CLASS_TRAINING, COUNTER_NAMES, JobStats, NR_CLASSES, NR_COUNTERS};

use super::SensorMaps;

/// Sums one job's per-CPU statistics.
pub(crate) fn read_job(maps: &SensorMaps, id: u32) -> Result<JobStats, aya::maps::MapError> {
    let per_cpu = maps.job_stats.get(&id, 0)?;
    let mut total = JobStats::default();
    for cpu in per_cpu.iter() {
        total.run_ns += cpu.run_ns;
        total.wait_ns += cpu.wait_ns;
        total.waits += cpu.waits;
        total.max_wait_ns = total.max_wait_ns.max(cpu.max_wait_ns);
        total.behind_inference += cpu.behind_inference;
        total.long_waits += cpu.long_waits;
        total.offline_wait_ns += cpu.offline_wait_ns;
        for (sum, count) in total.wait_hist.iter_mut().zip(cpu.wait_hist.iter()) {
            *sum += count;
        }
        total.reports_ran += cpu.reports_ran;
        total.report_to_ran_ns += cpu.report_to_ran_ns;
        for (sum, count) in total
            .report_to_ran_hist
            .iter_mut()
            .zip(cpu.report_to_ran_hist.iter())
        {
            *sum += count;
        }
    }
    Ok(total)
}

/// Training's slices in progress at CLOCK_MONOTONIC `now_ns`: per job, the time its threads
/// running now have run since they were switched in. The sensor adds a slice to the job's
/// `run_ns` only when it ends, so a thread that runs for seconds without a switch would
/// otherwise count nothing until then, and all of it in the interval it ends in.
///
/// Read it after the job totals: a slice that ends between the two reads is then missed by
/// this reading and counted by the next, where the other order would count it twice.
pub(crate) fn running_slices(maps: &SensorMaps, now_ns: u64) -> BTreeMap<u32, u64> {
    let mut per_job = BTreeMap::new();
    for cpu in 0..possible_cpus() {
        let Ok(state) = maps.cpu_state.get(&cpu, 0) else {
            continue;
        };
        // `training_since_ns` is written before `current_class` and read after it, so a
        // training class here comes with its own slice's start or a later one, never an
        // earlier (`CpuState`).
        if state.current_class == CLASS_TRAINING
            && state.training_since_ns != 0
            && now_ns > state.training_since_ns
        {
            *per_job.entry(state.current_group).or_default() += now_ns - state.training_since_ns;
        }
    }
    per_job
}

/// The CPUs that can exist (`/sys/devices/system/cpu/possible`): the slots of `cpu_state`
/// in use.
fn possible_cpus() -> u32 {
    aya::util::nr_cpus().unwrap_or(1) as u32
}

/// Sums the per-CPU diagnostic counters.
pub(crate) fn read_counters(maps: &SensorMaps) -> BTreeMap<String, u64> {
    (0..NR_COUNTERS)
        .map(|i| {
            let total = maps.counters.get(&i, 0).map_or(0, |v| v.iter().sum());
            (COUNTER_NAMES[i as usize].to_owned(), total)
        })
        .collect()
}

/// Per-CPU time by class, for the CPUs that exist.
pub(crate) fn read_cpu_class_ns(maps: &SensorMaps) -> Vec<[u64; NR_CLASSES]> {
    (0..possible_cpus())
        .map(|cpu| {
            maps.cpu_state
                .get(&cpu, 0)
                .map(|s| s.class_ns)
                .unwrap_or_default()
        })
        .collect()
}
