//! Reading the sensor's in-kernel aggregates, and turning two readings into an interval's
//! figures (percentiles, CPU demand, rates).

use std::collections::BTreeMap;

pub use enforcer_common::histogram::percentile;
use enforcer_common::{COUNTER_NAMES, JobStats, NR_CLASSES, NR_COUNTERS};
use serde::{Deserialize, Serialize};

use super::loader::{ProgramStats, SensorMaps};

/// Cumulative totals of one training job, summed over CPUs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobTotals {
    pub id: u32,
    pub name: String,
    /// Threads classified into the job at the last reconcile.
    pub threads: usize,
    pub run_ns: u64,
    pub wait_ns: u64,
    pub waits: u64,
    pub max_wait_ns: u64,
    pub behind_inference: u64,
    pub long_waits: u64,
    /// Events userspace received for the job.
    pub events_received: u64,
    pub wait_hist: Vec<u64>,
    /// Reports behind inference whose thread has run since, and the delay histogram.
    #[serde(default)]
    pub reports_ran: u64,
    #[serde(default)]
    pub report_to_ran_ns: u64,
    #[serde(default)]
    pub report_to_ran_hist: Vec<u64>,
}

/// An inference pool as the daemon knows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolInfo {
    pub id: u32,
    pub name: String,
    pub kind: String,
    pub threads: usize,
    /// The pool's relaunch generation (raised by `enforcer relaunch`).
    #[serde(default)]
    pub relaunch_generation: u64,
    /// The launchers started with `--relaunch` that watch the pool.
    #[serde(default)]
    pub relaunching_launchers: Vec<u32>,
}

/// Everything `observe` shows, read at one instant.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub instance: String,
    /// CLOCK_MONOTONIC at the reading, the clock of the sensor's timestamps.
    pub monotonic_ns: u64,
    pub jobs: Vec<JobTotals>,
    pub pools: Vec<PoolInfo>,
    /// Per CPU, time spent running each class (other, training, online, offline, idle).
    pub cpu_class_ns: Vec<[u64; NR_CLASSES]>,
    pub counters: BTreeMap<String, u64>,
    pub programs: Vec<ProgramStats>,
    /// Cores and pools as enforced now, with recent decisions.
    pub enforcement: Option<crate::enforce::EnforcementStatus>,
    /// Where /metrics is served, if anywhere.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The GPU side: off, disabled (and why) or what it sees and does.
    #[serde(default)]
    pub gpu: Option<crate::gpu::report::GpuReport>,
    /// How the event thread is scheduled ("SCHED_FIFO 10", or the normal class and its slice
    /// where real time was refused).
    #[serde(default)]
    pub event_thread: Option<String>,
}

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

/// CLOCK_MONOTONIC in nanoseconds: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One job's figures over the interval between two snapshots.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobInterval {
    pub name: String,
    pub threads: usize,
    /// Run-queue wait percentiles (upper bounds of their buckets, so within 12.5% above).
    pub wait_p50_ns: Option<u64>,
    pub wait_p99_ns: Option<u64>,
    pub wait_max_ns: Option<u64>,
    pub waits: u64,
    /// Average number of the job's threads runnable or running: its CPU demand.
    pub demand_cpus: f64,
    /// Average number of the job's threads running: the CPUs it actually got.
    pub running_cpus: f64,
    pub events_per_s: f64,
    pub behind_inference_per_s: f64,
}

/// Figures for `cur` over the `dt_ns` since `prev` (the same job).
pub fn job_interval(prev: &JobTotals, cur: &JobTotals, dt_ns: u64) -> JobInterval {
    let delta: Vec<u64> = cur
        .wait_hist
        .iter()
        .zip(prev.wait_hist.iter().chain(std::iter::repeat(&0)))
        .map(|(c, p)| c.saturating_sub(*p))
        .collect();
    let seconds = dt_ns.max(1) as f64 / 1e9;
    let run = cur.run_ns.saturating_sub(prev.run_ns) as f64;
    let wait = cur.wait_ns.saturating_sub(prev.wait_ns) as f64;
    let max = percentile(&delta, 1.0).map(|upper| upper.min(cur.max_wait_ns.max(1)));
    JobInterval {
        name: cur.name.clone(),
        threads: cur.threads,
        wait_p50_ns: percentile(&delta, 0.50),
        wait_p99_ns: percentile(&delta, 0.99),
        wait_max_ns: max,
        waits: cur.waits.saturating_sub(prev.waits),
        demand_cpus: (run + wait) / dt_ns.max(1) as f64,
        running_cpus: run / dt_ns.max(1) as f64,
        events_per_s: cur.events_received.saturating_sub(prev.events_received) as f64 / seconds,
        behind_inference_per_s: cur.behind_inference.saturating_sub(prev.behind_inference) as f64
            / seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforcer_common::histogram::{NR_BUCKETS, bucket_of};

    fn hist_of(values: &[u64]) -> Vec<u64> {
        let mut hist = vec![0; NR_BUCKETS];
        for &v in values {
            hist[bucket_of(v)] += 1;
        }
        hist
    }

    #[test]
    fn percentiles_are_bucket_upper_bounds_within_an_eighth() {
        let values: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let hist = hist_of(&values);
        let p50 = percentile(&hist, 0.5).unwrap();
        let p99 = percentile(&hist, 0.99).unwrap();
        assert!((500_000..=500_000 * 9 / 8).contains(&p50), "p50 {p50}");
        assert!((990_000..=990_000 * 9 / 8).contains(&p99), "p99 {p99}");
        assert_eq!(percentile(&vec![0; NR_BUCKETS], 0.5), None);
    }

    #[test]
    fn interval_uses_only_the_new_samples() {
        let mut prev = JobTotals {
            wait_hist: hist_of(&[1_000_000; 100]),
            ..Default::default()
        };
        prev.run_ns = 1_000_000_000;
        prev.max_wait_ns = 1_000_000;
        let mut cur = prev.clone();
        for (c, n) in cur.wait_hist.iter_mut().zip(hist_of(&[10_000; 50])) {
            *c += n;
        }
        cur.waits = 50;
        cur.run_ns += 1_500_000_000; // 1.5 CPUs over one second
        cur.wait_ns += 500_000_000; // plus 0.5 waiting
        cur.events_received = 20;
        let interval = job_interval(&prev, &cur, 1_000_000_000);
        let p99 = interval.wait_p99_ns.unwrap();
        assert!((10_000..=11_250).contains(&p99), "p99 {p99}");
        assert!((interval.demand_cpus - 2.0).abs() < 1e-9);
        assert!((interval.running_cpus - 1.5).abs() < 1e-9);
        assert!((interval.events_per_s - 20.0).abs() < 1e-9);
        assert_eq!(interval.waits, 50);
    }
}
