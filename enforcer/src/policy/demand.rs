//! Training's CPU demand estimate: the median of the per-tick demand over a sliding window,
//! never more than the machine's CPUs.
//!
//! The median, because a training job's demand comes in bursts: on the 16-CPU GPU server a
//! ResNet-50 job with six data-loader workers read 2.8 CPUs at the median of its 100 ms ticks
//! and 13.6 at the 90th percentile. An estimate that took every rise at once (and let it decay
//! over a half-life, as this one did before) sat on the bursts: it reserved cores for the
//! peaks and left them idle between. The median over a window a few training steps long
//! follows the level the job runs at, and rises within half a window when that level does.
//! Single bursts are the fast path's: a training thread queued behind inference claims its
//! core in microseconds.

use std::collections::VecDeque;

use enforcer_common::stats::median;

/// The per-tick samples of the last `window_ns`, and their median.
#[derive(Debug, Clone)]
pub(crate) struct DemandWindow {
    window_ns: u64,
    /// The machine's CPUs: no sample counts for more (threads waiting beyond them would not
    /// run on a reserved core either).
    cpus: f64,
    /// (time, CPUs runnable or running over the tick that ended then), oldest first.
    samples: VecDeque<(u64, f64)>,
    estimate: f64,
}

impl DemandWindow {
    pub(crate) fn new(window_ns: u64, cpus: usize) -> Self {
        Self {
            window_ns,
            cpus: cpus as f64,
            samples: VecDeque::new(),
            estimate: 0.0,
        }
    }

    /// Adds the demand of the tick that ended at `now_ns`, forgets the samples older than the
    /// window (the newest always stays) and returns the new estimate.
    pub(crate) fn add(&mut self, now_ns: u64, demand_cpus: f64) -> f64 {
        let demand = match demand_cpus.is_finite() {
            true => demand_cpus.clamp(0.0, self.cpus),
            false => 0.0,
        };
        self.samples.push_back((now_ns, demand));
        let oldest_kept = now_ns.saturating_sub(self.window_ns);
        while self.samples.len() > 1 && self.samples.front().is_some_and(|s| s.0 < oldest_kept) {
            self.samples.pop_front();
        }
        let values: Vec<f64> = self.samples.iter().map(|s| s.1).collect();
        self.estimate = median(&values);
        self.estimate
    }

    /// The estimate, CPUs: 0 before the first sample.
    pub(crate) fn estimate(&self) -> f64 {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_estimate_is_the_median_of_the_window_and_ignores_short_bursts() {
        let mut window = DemandWindow::new(1000 * MS, 16);
        // 3 CPUs at the level, every fourth tick a burst of 13.
        let mut last = 0.0;
        for tick in 0..30 {
            let demand = if tick % 4 == 0 { 13.0 } else { 3.0 };
            last = window.add(tick * 100 * MS, demand);
        }
        assert_eq!(last, 3.0);
    }

    #[test]
    fn a_new_level_is_taken_within_half_a_window() {
        let mut window = DemandWindow::new(1000 * MS, 16);
        for tick in 0..20 {
            window.add(tick * 100 * MS, 2.0);
        }
        let estimates: Vec<f64> = (20..40)
            .map(|tick| window.add(tick * 100 * MS, 8.0))
            .collect();
        // The window holds 11 samples (1 s at 100 ms, both ends): the sixth at 8 moves the median.
        assert_eq!(estimates[4], 2.0, "{estimates:?}");
        assert_eq!(estimates[5], 8.0, "{estimates:?}");
        assert!(estimates[5..].iter().all(|&e| e == 8.0));
    }

    #[test]
    fn no_sample_counts_for_more_than_the_machine() {
        let mut window = DemandWindow::new(1000 * MS, 16);
        assert_eq!(window.estimate(), 0.0);
        assert_eq!(window.add(0, 28.1), 16.0);
        assert_eq!(
            window.add(MS, f64::NAN),
            8.0,
            "a NaN sample counts as no demand"
        );
        assert_eq!(window.add(2 * MS, -1.0), 0.0);
    }

    #[test]
    fn a_tick_longer_than_the_window_keeps_its_own_sample() {
        let mut window = DemandWindow::new(50 * MS, 4);
        window.add(0, 1.0);
        assert_eq!(window.add(100 * MS, 3.0), 3.0);
    }
}
