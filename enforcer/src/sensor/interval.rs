//! Turning two readings of a job's totals into an interval's figures: wait percentiles, CPU
//! demand and CPUs used, event rates. `enforcer observe` prints them.

use enforcer_common::{histogram::percentile, protocol::JobTotals};
use serde::{Deserialize, Serialize};

/// One job's figures over the interval between two snapshots.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct JobInterval {
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
    /// Its waits that began behind offline inference, % of the time it ran: what offline
    /// inference cost it in waits.
    #[serde(default)]
    pub offline_wait_pct: f64,
    /// The job's own pace, steps a second, where it reports its progress
    /// (`Request::Progress`): the one figure here that shows what the run queue cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace_steps_per_s: Option<f64>,
    /// Its GPUs' busy share over the last 5 s, in GPUs busy, where the share is its own
    /// (`gpu::training_busy`): the pace signal of a job that reports nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
}

/// Figures for `cur` over the `dt_ns` since `prev` (the same job) on a machine of
/// `online_cpus` CPUs (0: unknown).
pub(crate) fn job_interval(
    prev: &JobTotals,
    cur: &JobTotals,
    dt_ns: u64,
    online_cpus: usize,
) -> JobInterval {
    let delta: Vec<u64> = cur
        .wait_hist
        .iter()
        .zip(prev.wait_hist.iter().chain(std::iter::repeat(&0)))
        .map(|(c, p)| c.saturating_sub(*p))
        .collect();
    let seconds = dt_ns.max(1) as f64 / 1e9;
    let run = cur.run_ns.saturating_sub(prev.run_ns) as f64;
    let wait = cur.wait_ns.saturating_sub(prev.wait_ns) as f64;
    // The two readings' instants and the slices they count in progress are each a few
    // microseconds apart: a job on every CPU can read a hair above their count.
    let running = match online_cpus {
        0 => run / dt_ns.max(1) as f64,
        cpus => (run / dt_ns.max(1) as f64).min(cpus as f64),
    };
    let max = percentile(&delta, 1.0).map(|upper| upper.min(cur.max_wait_ns.max(1)));
    JobInterval {
        name: cur.name.clone(),
        threads: cur.threads,
        wait_p50_ns: percentile(&delta, 0.50),
        wait_p99_ns: percentile(&delta, 0.99),
        wait_max_ns: max,
        waits: cur.waits.saturating_sub(prev.waits),
        demand_cpus: (run + wait) / dt_ns.max(1) as f64,
        running_cpus: running,
        events_per_s: cur.events_received.saturating_sub(prev.events_received) as f64 / seconds,
        behind_inference_per_s: cur.behind_inference.saturating_sub(prev.behind_inference) as f64
            / seconds,
        offline_wait_pct: offline_wait_pct(
            cur.offline_wait_ns.saturating_sub(prev.offline_wait_ns),
            cur.run_ns.saturating_sub(prev.run_ns),
        ),
        pace_steps_per_s: cur.progress.and_then(|progress| progress.steps_per_s),
        gpu_busy: cur.gpu_busy,
    }
}

/// Waits behind offline inference as a share of the time run, %; 0 where nothing ran.
pub(crate) fn offline_wait_pct(offline_wait_ns: u64, run_ns: u64) -> f64 {
    match run_ns {
        0 => 0.0,
        run => 100.0 * offline_wait_ns as f64 / run as f64,
    }
}

/// A rate from readings of a cumulative total (a job's run time, say): the total's growth
/// per nanosecond between the previous reading and this one.
#[derive(Debug, Default)]
pub(crate) struct Rate {
    previous: Option<(u64, u64)>,
}

impl Rate {
    /// The growth of `total` per ns since the previous reading, taken at `now_ns`; None for
    /// the first reading, or where the clock did not move.
    pub(crate) fn since(&mut self, now_ns: u64, total: u64) -> Option<f64> {
        let (then, before) = self.previous.replace((now_ns, total))?;
        (now_ns > then).then(|| total.saturating_sub(before) as f64 / (now_ns - then) as f64)
    }
}

#[cfg(test)]
mod tests {
    use enforcer_common::histogram::{NR_BUCKETS, bucket_of};

    use super::*;

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
        let interval = job_interval(&prev, &cur, 1_000_000_000, 0);
        let p99 = interval.wait_p99_ns.unwrap();
        assert!((10_000..=11_250).contains(&p99), "p99 {p99}");
        assert!((interval.demand_cpus - 2.0).abs() < 1e-9);
        assert!((interval.running_cpus - 1.5).abs() < 1e-9);
        assert!((interval.events_per_s - 20.0).abs() < 1e-9);
        assert_eq!(interval.waits, 50);
    }

    #[test]
    fn running_cpus_never_read_above_the_machine() {
        let prev = JobTotals::default();
        let cur = JobTotals {
            run_ns: 2_040_000_000, // 2.04 CPUs over one second: readings a hair apart
            ..Default::default()
        };
        assert_eq!(
            job_interval(&prev, &cur, 1_000_000_000, 2).running_cpus,
            2.0
        );
        assert!((job_interval(&prev, &cur, 1_000_000_000, 0).running_cpus - 2.04).abs() < 1e-9);
    }

    #[test]
    fn a_rate_is_the_growth_per_ns_since_the_previous_reading() {
        let mut rate = Rate::default();
        assert_eq!(rate.since(1_000, 0), None, "a first reading has no rate");
        assert_eq!(rate.since(2_000, 1_500), Some(1.5));
        assert_eq!(rate.since(2_000, 1_600), None, "the clock did not move");
        assert_eq!(rate.since(3_000, 1_600), Some(0.0));
    }
}
