//! The replayed job's pace as the daemon reads it from its GPUs' busy share, for a job that
//! reports no progress of its own (`gpu::training_busy`): each step ends with `gpu_ns` of GPU
//! work (all of it, for a step shorter than that), the GPU idles the rest, and the daemon's
//! sampler reads the share busy every `SAMPLE_NS` in whole percent, as NVML gives it. A step
//! of 30 s (a checkpoint) is 30 s of an idle GPU.

use std::collections::{BTreeMap, VecDeque};

use crate::policy::{busy_pace::BusyPace, pace::Report};

/// The GPU sampler's default period (`[gpu] sample_ms`).
const SAMPLE_NS: u64 = 200_000_000;
/// The job's name in the count.
const JOB: &str = "replayed";

/// The replayed job's GPU work, and the daemon's count of its busy share.
pub(crate) struct GpuSampling {
    gpu_ns: u64,
    /// When the last step ended.
    last_end_ns: u64,
    /// The GPU's busy stretches not yet wholly sampled, oldest first.
    busy: VecDeque<(u64, u64)>,
    /// The sampler's next reading.
    next_sample_ns: u64,
    count: BusyPace,
}

impl GpuSampling {
    /// A job whose steps end with `gpu_ns` each on the GPU.
    pub(crate) fn new(gpu_ns: u64) -> Self {
        Self {
            gpu_ns,
            last_end_ns: 0,
            busy: VecDeque::new(),
            next_sample_ns: SAMPLE_NS,
            count: BusyPace::new(SAMPLE_NS),
        }
    }

    /// A step that ended at `end_ns`: its GPU work, the last `gpu_ns` of it.
    pub(crate) fn step(&mut self, end_ns: u64) {
        let start_ns = end_ns.saturating_sub(self.gpu_ns).max(self.last_end_ns);
        self.busy.push_back((start_ns, end_ns));
        self.last_end_ns = end_ns;
    }

    /// Samples the GPU up to where the steps played so far (to `played_ns`) say all of its
    /// work: a step that ends later starts its GPU work after `played_ns − gpu_ns`.
    pub(crate) fn sample_until(&mut self, played_ns: u64) {
        while self.next_sample_ns + self.gpu_ns <= played_ns {
            let (from, to) = (self.next_sample_ns - SAMPLE_NS, self.next_sample_ns);
            let busy_ns: u64 = self
                .busy
                .iter()
                .map(|&(start, end)| end.min(to).saturating_sub(start.max(from)))
                .sum();
            let pct = (busy_ns as f64 * 100.0 / SAMPLE_NS as f64).round();
            let share = BTreeMap::from([(JOB.to_owned(), pct / 100.0)]);
            self.count.record(to, &share);
            while self.busy.front().is_some_and(|&(_, end)| end <= to) {
                self.busy.pop_front();
            }
            self.next_sample_ns += SAMPLE_NS;
        }
    }

    /// The count as the daemon gives it to the controller at `now_ns`: None while the job has
    /// no pace by it (its GPUs idle past `IDLE_SILENT_NS` and then `pace::STALE_NS`).
    pub(crate) fn reports(&self, now_ns: u64) -> Option<Vec<Report>> {
        self.count.reports(JOB, now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_share_read_is_the_gpu_work_of_the_steps_and_a_long_step_silences_it() {
        // Steps of 10 ms, 4 of them on the GPU: 40% busy, for 5 s.
        let mut gpu = GpuSampling::new(4 * MS);
        for step in 1..=500 {
            gpu.step(step * 10 * MS);
        }
        gpu.sample_until(5_000 * MS);
        let reports = gpu.reports(5_000 * MS - 200 * MS).expect("a pace");
        let (first, last) = (reports[0], reports[reports.len() - 1]);
        let share = (last.steps - first.steps) as f64 / ((last.at_ns - first.at_ns) / 1_000) as f64;
        assert!((share - 0.4).abs() < 1e-9, "{share}");
        // A step of 30 s: its GPUs idle from 5 s, the count silent, and no pace 10 s past its
        // last busy sample.
        gpu.step(35_000 * MS);
        gpu.sample_until(35_000 * MS);
        assert!(gpu.reports(14_900 * MS).is_some());
        assert_eq!(gpu.reports(15_100 * MS), None);
    }
}
