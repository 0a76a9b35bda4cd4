//! A training job's pace from the progress it reports: steps (or samples) done, counted by
//! the job itself and sent through the control socket (`Request::Progress`), turned into steps
//! a second over a window. Pure: times are passed in.
//!
//! What the run queue cannot see is in this figure: on the GPU server, offline inference in a
//! `cpu.idle` group never queued training, and still cost a ResNet-50 job 13–19% of its pace
//! (memory bandwidth, caches, turbo). The job's own count is the one signal that shows it.
//!
//! A count that goes back (a new run under the same job, a restarted process) starts the
//! tracker again rather than reading as a negative pace. A job that stops reporting has no
//! pace after `STALE_NS`: silence is not a pace of zero, it is no signal.
//!
//! A report may carry the count's mean over the time since the job's report before
//! (`MeanCount`): what the pace controller reads a bursty job's pace from (`Report::mean`).

use std::collections::VecDeque;

use enforcer_common::protocol::MeanCount;

/// The window the pace is taken over. ResNet-50 on the GPU server steps about 11 times a
/// second (1,444 images/s at batch 128): 5 s holds some 55 steps, so one slow step moves the
/// figure by about 2%, not by half.
pub(crate) const WINDOW_NS: u64 = 5_000_000_000;
/// Reports older than this leave the job without a pace: a job reports at least once a
/// second while it trains (the Python helper's period), so 10 s of silence is a pause, a
/// checkpoint or an end.
pub(crate) const STALE_NS: u64 = 10_000_000_000;
/// Reports are kept this long: the harvest controller (`harvest`) measures the pace over
/// the halves of its cycles, up to 11 s each, from them.
pub(crate) const HISTORY_NS: u64 = 30_000_000_000;
/// Reports kept are at least this far apart: a job that reports on every step has its newest
/// report replace the one before while they are closer, so the history stays covered with at
/// most about `HISTORY_NS / MIN_SPACING_NS` reports.
const MIN_SPACING_NS: u64 = 100_000_000;

/// One report as the tracker keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Report {
    pub at_ns: u64,
    /// Cumulative steps at `at_ns`.
    pub steps: u64,
    /// Where the job sends it: the count's mean over `(from_ns, at_ns]`, which lies at the
    /// middle of that time on a count that climbs steadily.
    pub mean: Option<Mean>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Mean {
    pub from_ns: u64,
    pub steps: f64,
}

impl Mean {
    /// The mean a report at `at_ns` carried, over the time up to it.
    pub(crate) fn before(at_ns: u64, mean: MeanCount) -> Self {
        Self {
            from_ns: at_ns.saturating_sub((mean.seconds * 1e9) as u64),
            steps: mean.steps,
        }
    }
}

impl Report {
    /// A count without a mean.
    #[cfg(test)]
    pub(crate) fn count(at_ns: u64, steps: u64) -> Self {
        Self {
            at_ns,
            steps,
            mean: None,
        }
    }

    /// Where this report has a mean: the middle of its time, and the mean.
    pub(crate) fn mean_point(&self) -> Option<(u64, f64)> {
        let mean = self.mean?;
        Some((mean.from_ns + (self.at_ns - mean.from_ns) / 2, mean.steps))
    }
}

/// One job's reports.
#[derive(Debug, Default, Clone)]
pub(crate) struct PaceTracker {
    /// Oldest first, times ascending.
    reports: VecDeque<Report>,
    /// Reports whose count went back: each restarted the tracker.
    restarts: u64,
}

/// What a job's reports say now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pace {
    /// The newest cumulative count.
    pub steps: u64,
    /// Steps a second over the window ending at the newest report; None with fewer than two
    /// reports in it, or reports older than `STALE_NS`.
    pub steps_per_s: Option<f64>,
    /// Seconds since the newest report.
    pub age_s: f64,
}

impl PaceTracker {
    /// Takes a report of `steps` done at `at_ns`. A report earlier than the newest one (two
    /// connections racing) is dropped.
    pub(crate) fn record(&mut self, at_ns: u64, steps: u64) {
        self.record_with_mean(at_ns, steps, None);
    }

    /// `record`, with the count's mean over the time before the report where the job sends
    /// it (checked already: `MeanCount::problem`). The mean of a report whose count went back
    /// is not kept: its time may reach into the run before.
    pub(crate) fn record_with_mean(&mut self, at_ns: u64, steps: u64, mean: Option<MeanCount>) {
        let mut restarted = false;
        if let Some(last) = self.reports.back() {
            if at_ns < last.at_ns {
                return;
            }
            if steps < last.steps {
                self.reports.clear();
                self.restarts += 1;
                restarted = true;
            }
        }
        let len = self.reports.len();
        if len >= 2 && at_ns - self.reports[len - 2].at_ns < MIN_SPACING_NS {
            self.reports.pop_back();
        }
        let mean = mean
            .filter(|_| !restarted)
            .map(|mean| Mean::before(at_ns, mean));
        self.reports.push_back(Report { at_ns, steps, mean });
        // Keep one report at or before the history's start, so that it is covered.
        while self
            .reports
            .get(1)
            .is_some_and(|report| report.at_ns + HISTORY_NS <= at_ns)
        {
            self.reports.pop_front();
        }
    }

    /// The pace at `now_ns`, or None before any report.
    pub(crate) fn pace(&self, now_ns: u64) -> Option<Pace> {
        let &Report {
            at_ns: last_at,
            steps: last_steps,
            ..
        } = self.reports.back()?;
        let age_ns = now_ns.saturating_sub(last_at);
        let steps_per_s = (age_ns <= STALE_NS)
            .then(|| {
                // The newest report at or before the window's start, else the oldest.
                let first = self
                    .reports
                    .iter()
                    .rev()
                    .find(|report| report.at_ns + WINDOW_NS <= last_at)
                    .or(self.reports.front())?;
                let span_ns = last_at - first.at_ns;
                (span_ns > 0).then(|| (last_steps - first.steps) as f64 * 1e9 / span_ns as f64)
            })
            .flatten();
        Some(Pace {
            steps: last_steps,
            steps_per_s,
            age_s: age_ns as f64 / 1e9,
        })
    }

    /// The reports of the last `HISTORY_NS`, oldest first, since the count last went back.
    pub(crate) fn reports(&self) -> impl Iterator<Item = Report> + '_ {
        self.reports.iter().copied()
    }

    /// How often the count went back, for the tests.
    #[cfg(test)]
    pub(crate) fn restarts(&self) -> u64 {
        self.restarts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn steady_reports_give_the_steps_per_second_over_the_window() {
        let mut tracker = PaceTracker::default();
        assert_eq!(tracker.pace(0), None);
        // Ten steps a second, reported once a second for 20 s.
        for second in 0..=20 {
            tracker.record(second * S, second * 10);
        }
        let pace = tracker.pace(20 * S).unwrap();
        assert_eq!(pace.steps, 200);
        assert!((pace.steps_per_s.unwrap() - 10.0).abs() < 1e-9, "{pace:?}");
        assert_eq!(pace.age_s, 0.0);
        // Only the window is kept: the pace follows a change within it.
        for second in 21..=26 {
            tracker.record(second * S, 200 + (second - 20) * 5);
        }
        let pace = tracker.pace(26 * S).unwrap();
        assert!((pace.steps_per_s.unwrap() - 5.0).abs() < 1e-9, "{pace:?}");
    }

    #[test]
    fn one_report_is_a_count_without_a_pace_and_silence_is_no_signal() {
        let mut tracker = PaceTracker::default();
        tracker.record(S, 7);
        let pace = tracker.pace(2 * S).unwrap();
        assert_eq!((pace.steps, pace.steps_per_s), (7, None));
        tracker.record(2 * S, 17);
        assert!(tracker.pace(3 * S).unwrap().steps_per_s.is_some());
        // Past STALE_NS without a report: the count stays, the pace goes.
        let silent = tracker.pace(2 * S + STALE_NS + 1).unwrap();
        assert_eq!((silent.steps, silent.steps_per_s), (17, None));
        assert!(silent.age_s > 10.0);
    }

    #[test]
    fn a_count_that_goes_back_starts_again_and_a_late_report_is_dropped() {
        let mut tracker = PaceTracker::default();
        for second in 0..5 {
            tracker.record(second * S, 1000 + second * 10);
        }
        // A new run under the same job: its count starts from zero.
        tracker.record(5 * S, 3);
        assert_eq!(tracker.restarts(), 1);
        assert_eq!(tracker.pace(5 * S).unwrap().steps_per_s, None);
        tracker.record(6 * S, 13);
        assert!((tracker.pace(6 * S).unwrap().steps_per_s.unwrap() - 10.0).abs() < 1e-9);
        // A report from before the newest (a second connection's, late) changes nothing.
        tracker.record(5 * S + S / 2, 0);
        assert_eq!(tracker.pace(6 * S).unwrap().steps, 13);
        assert_eq!(tracker.restarts(), 1);
    }

    #[test]
    fn a_reports_mean_is_kept_at_its_time_and_not_where_its_count_went_back() {
        let mut tracker = PaceTracker::default();
        let mean = |steps| {
            Some(MeanCount {
                steps,
                seconds: 1.0,
            })
        };
        tracker.record(S, 10);
        tracker.record_with_mean(2 * S, 20, mean(14.0));
        let newest = tracker.reports().last().unwrap();
        assert_eq!(
            newest.mean,
            Some(Mean {
                from_ns: S,
                steps: 14.0
            })
        );
        assert_eq!(newest.mean_point(), Some((S + S / 2, 14.0)));
        // A new run: its count went back, and a mean over a time before speaks of the old one.
        tracker.record_with_mean(3 * S, 2, mean(1.0));
        assert_eq!(tracker.reports().last().unwrap().mean, None);
        tracker.record_with_mean(4 * S, 12, mean(7.0));
        let newest = tracker.reports().last().unwrap();
        assert_eq!(newest.mean_point(), Some((3 * S + S / 2, 7.0)));
    }

    #[test]
    fn a_job_reporting_every_step_keeps_a_bounded_history() {
        let mut tracker = PaceTracker::default();
        // 1,000 steps a second, each reported: the history stays bounded and still spans the
        // window.
        for step in 0..10_000u64 {
            tracker.record(step * S / 1000, step);
        }
        assert!(tracker.reports.len() <= 302, "{}", tracker.reports.len());
        let (first, last) = (
            tracker.reports[0].at_ns,
            tracker.reports.back().unwrap().at_ns,
        );
        assert!(last - first >= 10 * S - MIN_SPACING_NS, "{first} {last}");
        let pace = tracker.pace(10 * S).unwrap();
        assert!((pace.steps_per_s.unwrap() - 1000.0).abs() < 1.0, "{pace:?}");
    }
}
