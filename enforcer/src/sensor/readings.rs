//! Reading the sensor's in-kernel aggregates: per-job totals, per-CPU time by class and the
//! diagnostic counters, each summed over CPUs in one pass over its map.

use std::collections::BTreeMap;

use enforcer_common::{COUNTER_NAMES, JobStats, NR_CLASSES, NR_COUNTERS};

use super::SensorMaps;

/// Sums one job's per-CPU statistics.
pub fn read_job(maps: &SensorMaps, id: u32) -> Result<JobStats, aya::maps::MapError> {
    let per_cpu = maps.job_stats.get(&id, 0)?;
    let mut total = JobStats::default();
    for cpu in per_cpu.iter() {
        total.run_ns += cpu.run_ns;
        total.wait_ns += cpu.wait_ns;
        total.waits += cpu.waits;
        total.max_wait_ns = total.max_wait_ns.max(cpu.max_wait_ns);
        total.behind_inference += cpu.behind_inference;
        total.long_waits += cpu.long_waits;
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

/// Sums the per-CPU diagnostic counters.
pub fn read_counters(maps: &SensorMaps) -> BTreeMap<String, u64> {
    (0..NR_COUNTERS)
        .map(|i| {
            let total = maps.counters.get(&i, 0).map_or(0, |v| v.iter().sum());
            (COUNTER_NAMES[i as usize].to_owned(), total)
        })
        .collect()
}

/// Per-CPU time by class, for the CPUs that exist.
pub fn read_cpu_class_ns(maps: &SensorMaps) -> Vec<[u64; NR_CLASSES]> {
    let cpus = aya::util::nr_cpus().unwrap_or(1) as u32;
    (0..cpus)
        .map(|cpu| {
            maps.cpu_state
                .get(&cpu, 0)
                .map(|s| s.class_ns)
                .unwrap_or_default()
        })
        .collect()
}
