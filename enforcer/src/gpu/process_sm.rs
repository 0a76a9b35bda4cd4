//! Each GPU process's SM utilization from NVML's per-process samples, and what a process
//! without a sample means.
//!
//! NVML returns one sample "per process running, that had some non-zero utilization during the
//! last sample period", and only the samples newer than the timestamp the caller last saw. The
//! driver takes one every 1/6 s to 1 s, by the GPU, and the enforcer reads every 200 ms by
//! default. So a running process without a sample is either idle or unknown:
//! - **idle (0%)** where NVML has sampled it before on this device and this read shows that a
//!   period went by: another process has a new sample, or the device itself read 0% busy.
//!   Read as unknown, such periods would be no part of a training job's busy count beside a
//!   GPU pool: the count holds each figure since the one before (`policy::busy_pace`), so the
//!   next busy sample would fill them in, and a loader-bound job's input stalls (the cost the
//!   pace controller looks for) would read as busy; a job stopped to write a checkpoint would
//!   have no figure at all.
//! - **unknown** where NVML has never sampled it: under MPS the server's process is the one
//!   NVML samples for every client's kernels, so a client's absence says nothing of its work.
//!   Also unknown: a read in which no period went by.

use std::collections::{HashMap, HashSet};

use nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample;

/// One device's per-process samples, as read so far.
#[derive(Debug, Default)]
pub(crate) struct ProcessSamples {
    /// The newest sample's timestamp (µs): each read asks only for newer ones.
    last_seen_us: Option<u64>,
    /// The running processes NVML has sampled on this device: the ones whose absence from a
    /// period is idleness.
    sampled: HashSet<u32>,
}

impl ProcessSamples {
    /// The timestamp to ask NVML for samples newer than; None for every sample it holds.
    pub(crate) fn since(&self) -> Option<u64> {
        self.last_seen_us
    }

    /// The SM utilization (%) of each of the device's `running` processes that has a figure at
    /// this read: the mean of its new `samples`, or 0 where it is idle (above). A process
    /// absent from the map has none. `device_busy_pct` is the device's utilization.
    pub(crate) fn read(
        &mut self,
        samples: &[ProcessUtilizationSample],
        running: &[u32],
        device_busy_pct: u32,
    ) -> HashMap<u32, u32> {
        if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
            self.last_seen_us = Some(newest);
        }
        let mut sums: HashMap<u32, (u64, u64)> = HashMap::new();
        for sample in samples {
            let (sum, count) = sums.entry(sample.pid).or_default();
            *sum += u64::from(sample.sm_util);
            *count += 1;
        }
        let period_went_by = !samples.is_empty() || device_busy_pct == 0;
        let figures = running
            .iter()
            .filter_map(|pid| match sums.get(pid) {
                Some((sum, count)) => Some((*pid, (sum / count) as u32)),
                None if period_went_by && self.sampled.contains(pid) => Some((*pid, 0)),
                None => None,
            })
            .collect();
        // Only running processes are kept: a pid that leaves is forgotten before it can be
        // reused by a process NVML has never sampled.
        self.sampled.extend(sums.keys().copied());
        self.sampled.retain(|pid| running.contains(pid));
        figures
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policy::busy_pace::BusyPace;

    fn sample(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
        }
    }

    #[test]
    fn a_sampled_process_without_a_new_sample_is_idle_once_a_period_went_by() {
        let mut device = ProcessSamples::default();
        let running = [10, 20];
        // Both busy: each its mean, and the newest timestamp is asked from next.
        let read = device.read(
            &[
                sample(10, 100, 60),
                sample(10, 200, 80),
                sample(20, 200, 30),
            ],
            &running,
            95,
        );
        assert_eq!(read, HashMap::from([(10, 70), (20, 30)]));
        assert_eq!(device.since(), Some(200));
        // 10 stops (a checkpoint) while 20 goes on: 10 ran nothing in that period.
        let read = device.read(&[sample(20, 300, 90)], &running, 90);
        assert_eq!(read, HashMap::from([(10, 0), (20, 90)]));
        // Both stop: no sample at all, and the device idle says the period held no kernel.
        assert_eq!(
            device.read(&[], &running, 0),
            HashMap::from([(10, 0), (20, 0)])
        );
        assert_eq!(device.since(), Some(300));
    }

    #[test]
    fn a_read_before_the_next_period_or_of_a_process_never_sampled_gives_no_figure() {
        let mut device = ProcessSamples::default();
        device.read(&[sample(10, 100, 60)], &[10], 60);
        // No new sample yet, the device busy: the driver has not taken its next period.
        assert!(device.read(&[], &[10], 60).is_empty());
        // Under MPS the server (99) is sampled for its clients' kernels: a client NVML never
        // sampled (30) has no figure, idle or not.
        let read = device.read(&[sample(99, 200, 80)], &[10, 30, 99], 80);
        assert_eq!(read, HashMap::from([(10, 0), (99, 80)]));
        assert_eq!(device.read(&[], &[10, 30, 99], 0).get(&30), None);
    }

    #[test]
    fn a_pid_that_left_is_forgotten() {
        let mut device = ProcessSamples::default();
        device.read(&[sample(10, 100, 60)], &[10], 60);
        device.read(&[], &[], 0);
        // The pid again, a process NVML has not sampled: no figure.
        let read = device.read(&[sample(20, 200, 50)], &[10, 20], 50);
        assert_eq!(read, HashMap::from([(20, 50)]));
    }

    #[test]
    fn a_job_beside_a_busy_pool_counts_its_idle_periods_as_idle() {
        // Read every 200 ms, a period each: training (10) busy in one period of three, its
        // loader stalled the other two; the pool (20) busy in every one.
        const PERIOD_NS: u64 = 200_000_000;
        let mut device = ProcessSamples::default();
        let (mut counted, mut as_unknown) = (BusyPace::new(PERIOD_NS), BusyPace::new(PERIOD_NS));
        let mut now_ns = 0;
        for period in 0..60_u64 {
            now_ns = period * PERIOD_NS;
            let timestamp = now_ns / 1_000 + 1;
            let mut samples = vec![sample(20, timestamp, 60)];
            if period % 3 == 0 {
                samples.push(sample(10, timestamp, 100));
            }
            let read = device.read(&samples, &[10, 20], 100);
            let share = |sm: u32| BTreeMap::from([("llm".to_owned(), f64::from(sm) / 100.0)]);
            counted.record(now_ns, &share(read[&10]));
            // As before: a process without a sample of its own had no figure.
            if let Some(sample) = samples.iter().find(|s| s.pid == 10) {
                as_unknown.record(now_ns, &share(sample.sm_util));
            }
        }
        let counted = counted.share("llm", now_ns).expect("a share");
        let as_unknown = as_unknown.share("llm", now_ns).expect("a share");
        assert!((counted - 1.0 / 3.0).abs() < 0.05, "{counted}");
        assert!(as_unknown > 0.95, "{as_unknown}");
    }
}
