//! A training job's GPU busy share (`gpu::training_busy`) counted up as a pace: busy
//! microseconds into a `PaceTracker`, as if the job had reported them, so that the pace
//! controller measures both signals alike. Pure: samples and times are passed in.
//!
//! GPUs idle for `IDLE_SILENT_NS` are a job that has stopped stepping, and its count is silent
//! until they are busy again, as a job's own reports are while it writes a checkpoint.

use std::collections::{BTreeMap, HashMap};

use super::pace::{PaceTracker, Report, STALE_NS};

/// Samples further apart than this, or than three sampling periods where that is longer,
/// start a job's count again: the share of one sample says nothing of a gap that long (the
/// sampler's default period is 200 ms). A period of `pace::STALE_NS` or more leaves no pace.
pub(crate) const MAX_GAP_NS: u64 = 2_000_000_000;

/// A job's GPUs idle this long (every sample at 0%) are a job that has stopped stepping: it
/// writes a checkpoint from host memory, evaluates on the CPU, or starts an epoch's data
/// loader. Its count takes no report until they are busy again, as a job that reports its own
/// steps sends none meanwhile; past `pace::STALE_NS` of that the controller has no signal and
/// keeps what it measured for the job's return (`policy::harvest::pause`, `daemon::pace_signal`).
/// Counted as a pace of zero, a checkpoint read as a level that stopped training, or as a new
/// phase. Shorter idle stretches are part of the pace, as they must be: a loader slowed by
/// offline idles the GPU longer between batches, which is the cost the controller looks for.
/// On the GPU server the ResNet-50 job's steps took 639 ms at the 99th percentile, nearly all
/// of it waiting for a batch (docs/experiments/2026-11-28-mean-counts.md): well under this.
pub(crate) const IDLE_SILENT_NS: u64 = 2_000_000_000;

/// One job's busy time, counted.
#[derive(Debug, Clone)]
struct Counted {
    at_ns: u64,
    busy_us: f64,
    idle: Idle,
    /// The count as the pace signal: a silence left out (`Idle`).
    tracker: PaceTracker,
    /// The count at every sample, idle ones included: the busy share that status and
    /// `/metrics` show, 0 through a checkpoint rather than none.
    every_sample: PaceTracker,
}

/// Whether a job's GPUs are idle, and since when.
#[derive(Debug, Clone, Default)]
enum Idle {
    #[default]
    Busy,
    /// Idle since `since_ns`, for less than `IDLE_SILENT_NS` so far: a stall that is part of
    /// the pace if it ends soon, and no part of it if it turns out a silence. Its samples go
    /// into the tracker as they come, and `before` is the tracker as it was before them: put
    /// back when the stall is long enough to be a silence, so that no half the controller
    /// reads later counts the first seconds of a checkpoint as training slowed. Counted in,
    /// those seconds had offline held back 70% and 42% of the time, against 85% and 68%
    /// dropped, on the replay's models of a job followed by its GPUs that checkpoints, every
    /// level costing it (`a_job_that_pauses_to_checkpoint`).
    Stalled { since_ns: u64, before: PaceTracker },
    /// Idle for `IDLE_SILENT_NS` or more.
    Silent,
}

/// Every training job's busy time, counted up from sample to sample.
#[derive(Debug, Clone)]
pub(crate) struct BusyPace {
    jobs: HashMap<String, Counted>,
    max_gap_ns: u64,
}

impl BusyPace {
    /// For samples every `period_ns`.
    pub(crate) fn new(period_ns: u64) -> Self {
        Self {
            jobs: HashMap::new(),
            max_gap_ns: MAX_GAP_NS.max(period_ns.saturating_mul(3)),
        }
    }

    /// Counts one sample's `shares` (`busy_on_device`, summed over devices) at `now_ns`: each
    /// job's share, held since its previous sample. A job's first sample, or its first after a
    /// gap (`MAX_GAP_NS`), starts its count at zero. A job whose GPUs have been idle for
    /// `IDLE_SILENT_NS` is silent: its count goes on, unreported. Jobs without a sample for
    /// `STALE_NS` are forgotten.
    pub(crate) fn record(&mut self, now_ns: u64, shares: &BTreeMap<String, f64>) {
        for (job, &share) in shares {
            let counted = self.jobs.entry(job.clone()).or_insert_with(|| Counted {
                at_ns: now_ns,
                busy_us: 0.0,
                idle: Idle::Busy,
                tracker: PaceTracker::default(),
                every_sample: PaceTracker::default(),
            });
            let gap_ns = now_ns.saturating_sub(counted.at_ns);
            if gap_ns > self.max_gap_ns {
                counted.busy_us = 0.0;
                counted.idle = Idle::Busy;
                counted.tracker = PaceTracker::default();
                counted.every_sample = PaceTracker::default();
            } else {
                counted.busy_us += share * gap_ns as f64 / 1e3;
            }
            counted.at_ns = now_ns;
            counted.every_sample.record(now_ns, counted.busy_us as u64);
            counted.count_sample(now_ns, share);
        }
        self.jobs
            .retain(|_, counted| now_ns.saturating_sub(counted.at_ns) < STALE_NS);
    }

    /// `job`'s busy share over the pace window (`pace::WINDOW_NS`), in GPUs busy, idle samples
    /// included (a silence too: status shows 0 while the job writes a checkpoint); None unless
    /// it has samples at `now_ns`.
    pub(crate) fn share(&self, job: &str, now_ns: u64) -> Option<f64> {
        let pace = self.jobs.get(job)?.every_sample.pace(now_ns)?;
        pace.steps_per_s.map(|busy_us_per_s| busy_us_per_s / 1e6)
    }

    /// `job`'s count, as progress reports: (time in ns, busy µs so far); None unless it has a
    /// pace at `now_ns` by the samples before any stall under way (a job whose GPUs have not
    /// yet been busy has none).
    pub(crate) fn reports(&self, job: &str, now_ns: u64) -> Option<Vec<Report>> {
        let counted = self.jobs.get(job)?;
        let before_stall = match &counted.idle {
            Idle::Stalled { before, .. } => before,
            Idle::Busy | Idle::Silent => &counted.tracker,
        };
        before_stall.pace(now_ns)?.steps_per_s?;
        Some(counted.tracker.reports().collect())
    }
}

impl Counted {
    /// The sample at `now_ns`, its share counted: into the tracker, unless the GPUs have been
    /// idle long enough to be a silence (`Idle`).
    fn count_sample(&mut self, now_ns: u64, share: f64) {
        self.idle = match (share > 0.0, std::mem::take(&mut self.idle)) {
            (true, _) => Idle::Busy,
            (false, Idle::Busy) => Idle::Stalled {
                since_ns: now_ns,
                before: self.tracker.clone(),
            },
            (false, Idle::Stalled { since_ns, before }) if now_ns - since_ns >= IDLE_SILENT_NS => {
                self.tracker = before;
                Idle::Silent
            }
            (false, idle) => idle,
        };
        if !matches!(self.idle, Idle::Silent) {
            self.tracker.record(now_ns, self.busy_us as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_count_gives_the_busy_share_as_a_pace_and_a_gap_starts_it_again() {
        let mut pace = BusyPace::new(200 * MS);
        let half = BTreeMap::from([("llm".to_owned(), 0.5)]);
        for i in 0..=10 {
            pace.record(i * 200 * MS, &half);
        }
        let reports = pace.reports("llm", 2_000 * MS).expect("a pace");
        // Half a GPU busy for 2 s: a million µs.
        assert_eq!(reports.last(), Some(&Report::count(2_000 * MS, 1_000_000)));
        let busy_us_per_s =
            crate::policy::harvest::pace_between(&reports, 0, 0, 2_000 * MS).unwrap();
        assert!((busy_us_per_s - 500_000.0).abs() < 1.0, "{busy_us_per_s}");
        let share = pace.share("llm", 2_000 * MS).unwrap();
        assert!((share - 0.5).abs() < 1e-6, "{share}");
        // Three seconds without a sample: the count starts again, not a pace read across it.
        pace.record(5_000 * MS, &half);
        assert_eq!(
            pace.reports("llm", 5_000 * MS),
            None,
            "one report is no pace yet"
        );
        pace.record(5_200 * MS, &half);
        let reports = pace.reports("llm", 5_200 * MS).unwrap();
        assert_eq!(
            reports,
            vec![
                Report::count(5_000 * MS, 0),
                Report::count(5_200 * MS, 100_000)
            ]
        );
        // Silent past STALE_NS: forgotten.
        pace.record(5_200 * MS + STALE_NS, &BTreeMap::new());
        assert_eq!(pace.reports("llm", 5_200 * MS + STALE_NS), None);
    }

    #[test]
    fn gpus_idle_for_two_seconds_leave_the_count_silent_until_busy_again() {
        let mut pace = BusyPace::new(200 * MS);
        let at = |share: f64| BTreeMap::from([("llm".to_owned(), share)]);
        // 4 s busy at half a GPU, a stall of 1 s idle, 2 s busy again.
        let shares =
            (1..=35).map(|i| (i * 200 * MS, if (21..=25).contains(&i) { 0.0 } else { 0.5 }));
        for (now, share) in shares {
            pace.record(now, &at(share));
        }
        // The stall is part of the pace: 29 samples at half a GPU busy over 34.
        let reports = pace.reports("llm", 7_000 * MS).expect("a pace");
        let count_at = |ms: u64| reports.iter().find(|r| r.at_ns == ms * MS).map(|r| r.steps);
        // Flat through the stall, taken in when the GPU was busy again.
        assert_eq!(
            [4_000, 4_200, 5_000, 5_200].map(count_at),
            [1_900_000, 1_900_000, 1_900_000, 2_000_000].map(Some),
            "{reports:?}"
        );
        let busy_us_per_s =
            crate::policy::harvest::pace_between(&reports, 0, 200 * MS, 7_000 * MS).unwrap();
        assert!(
            (busy_us_per_s - 500_000.0 * 29.0 / 34.0).abs() < 1.0,
            "{busy_us_per_s}"
        );
        // A checkpoint: 20 s idle. A stall, read with the count, for its first 2 s.
        let idle = |pace: &mut BusyPace, samples: std::ops::RangeInclusive<u64>| {
            for i in samples {
                pace.record(i * 200 * MS, &at(0.0));
            }
        };
        idle(&mut pace, 36..=40);
        let reports = pace.reports("llm", 8_000 * MS).unwrap();
        let last = reports[reports.len() - 1];
        assert_eq!((last.at_ns, last.steps), (8_000 * MS, 2_900_000));
        // Then a silence: the stall's samples dropped, the last report the last busy one, and
        // past STALE_NS of it no pace.
        idle(&mut pace, 41..=46);
        let last = pace
            .reports("llm", 9_200 * MS)
            .unwrap()
            .last()
            .copied()
            .unwrap();
        assert_eq!((last.at_ns, last.steps), (7_000 * MS, 2_900_000));
        idle(&mut pace, 47..=135);
        assert_eq!(pace.reports("llm", 7_200 * MS + STALE_NS), None);
        // What status and /metrics show: its GPUs idle.
        assert_eq!(pace.share("llm", 27_000 * MS), Some(0.0));
        // Busy again: the count goes on where it was, not from zero (the same run, to the
        // controller's pause).
        pace.record(27_200 * MS, &at(0.5));
        pace.record(27_400 * MS, &at(0.5));
        let reports = pace.reports("llm", 27_400 * MS).expect("a pace again");
        let newest = reports.last().unwrap();
        assert_eq!(newest.steps, last.steps + 200_000);
    }

    #[test]
    fn stalls_shorter_than_a_silence_read_as_every_sample_counted() {
        // Half a GPU busy at two samples in three, idle at the third at random: stalls of up
        // to a few samples, as a loader's. At every sample the reports read as a tracker's
        // that took each sample as it came.
        let mut rng = enforcer_common::rng::SplitMix64::new(3);
        let mut pace = BusyPace::new(200 * MS);
        let (mut every_sample, mut busy_us) = (PaceTracker::default(), 0.0);
        for i in 1..=2_000 {
            let now = i * 200 * MS;
            let share = if rng.next_f64() < 1.0 / 3.0 { 0.0 } else { 0.5 };
            pace.record(now, &BTreeMap::from([("llm".to_owned(), share)]));
            if i > 1 {
                busy_us += share * 200_000.0;
            }
            every_sample.record(now, busy_us as u64);
            let reports = pace.reports("llm", now);
            if i > 1 {
                let expected: Vec<Report> = every_sample.reports().collect();
                assert_eq!(reports, Some(expected), "at sample {i}");
            }
        }
    }

    #[test]
    fn a_slow_sampler_is_no_gap_until_three_of_its_periods() {
        let mut pace = BusyPace::new(3_000 * MS);
        let full = BTreeMap::from([("llm".to_owned(), 1.0)]);
        for i in 0..=3 {
            pace.record(i * 3_000 * MS, &full);
        }
        let reports = pace
            .reports("llm", 9_000 * MS)
            .expect("a pace at 3 s a sample");
        assert_eq!(reports.last(), Some(&Report::count(9_000 * MS, 9_000_000)));
    }
}
