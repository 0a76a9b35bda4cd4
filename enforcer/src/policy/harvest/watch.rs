//! The job's pace at a settled level, read between its rechecks: a pace that moves by more
//! than training may feel is compared again at once, not up to `RECHECK_MAX_NS` later. Pure:
//! the reports and the time are passed in.
//!
//! A settled level is compared with offline held back only at its rechecks, a minute at first
//! and then up to four minutes apart: each holds offline back for 9 s or more, so they cannot
//! come much oftener. The pace at the level itself costs nothing to read. It moves where the
//! job enters a new phase (evaluation, a checkpoint, a new job), and where the level starts
//! to cost training more (offline's work beside it grew): either way what the last
//! comparison found no longer says what the level costs.
//!
//! Read in stretches of `WATCH_NS` against the mean of those read before, it finds a move
//! larger than 2ε and twice the stretches' standard deviation, in two stretches in a row, the
//! same way. 2ε: a level kept at a cost of up to about ε that moved so far costs training more
//! than ε now, or the job's phase changed. The deviation is pooled over the job's watches
//! (`StretchSpread`), so that a watch can judge from its second stretch: a phase that began in
//! the first would otherwise be part of what later stretches are judged against.
//!
//! A move that is noise costs a recheck: 9 s or more of offline held back. Judged by 15% alone,
//! without the deviation, on a model of the server's bursty job (its loader's batches spread
//! by 30%) the pace of a level that cost nothing moved 14 times in 20 hours. With the
//! deviation and 2ε, that model moved 10 times in 40 hours (spreads of 15% and 30%), and the
//! server's reported-steps noise (±30% a second) 4 times in 10 hours: about 0.1% of offline's
//! time. 15% with the deviation, the held halves' own rule for a new phase, moved never, but
//! left a cost up to 15% and twice the deviation to the recheck: on a model of the VM's quiet
//! job (1% noise), levels that began to cost 5%, 10% or 15% were left 225 s later, where they
//! are now left after 50 s (`cargo test -p enforcer --lib a_settled_level_whose_cost_grows`).

use super::{
    SETTLE_NS,
    statistics::{pace_and_span_between, spread_upper_bound},
};
use crate::policy::pace::Report;

/// The stretch the settled pace is read over. Long, so that noise alone does not move it far:
/// on the GPU server the ResNet-50 job's pace over one stretch against the next spread by
/// 16.5% at 8 s alone and by 5.4% at 16 s beside reamer's defaults
/// (docs/experiments/2026-11-28-pace-steps-server-cut.md); the VM's training simulator, by
/// 1.5% at 16 s. Short enough to fit the reports kept (`pace::HISTORY_NS`).
pub(crate) const WATCH_NS: u64 = 16_000_000_000;

/// The most degrees of freedom the pooled spread keeps: about two watches of four minutes,
/// so that it follows the job's noise as it changes.
const MAX_FREEDOM: f64 = 30.0;

/// How far a job's settled paces spread about their watch's mean (relative), pooled over its
/// watches: squared deviations and their degrees of freedom.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct StretchSpread {
    squares: f64,
    freedom: f64,
}

impl StretchSpread {
    /// This spread with `squares` over `freedom` more, the oldest let go past `MAX_FREEDOM`.
    fn with(self, squares: f64, freedom: f64) -> Self {
        let (squares, freedom) = (self.squares + squares, self.freedom + freedom);
        match freedom > MAX_FREEDOM {
            true => Self {
                squares: squares * MAX_FREEDOM / freedom,
                freedom: MAX_FREEDOM,
            },
            false => Self { squares, freedom },
        }
    }

    /// The relative standard deviation the job's stretches keep below nine times in ten
    /// (`spread_upper_bound`), where there is a degree of freedom to say it: a deviation from
    /// a few stretches is as likely too small as too large, and too small takes noise for a
    /// move. From the sample's own deviation, the bursty model above moved once in 20 hours.
    fn deviation(self) -> Option<f64> {
        let freedom = self.freedom.round() as usize;
        (freedom >= 1).then(|| spread_upper_bound(self.squares / self.freedom, freedom))
    }
}

/// The pace at the level settled at `since`, stretch by stretch from `since + SETTLE_NS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Watch {
    since: u64,
    /// Stretches over: read, or passed without two reports.
    over: u64,
    /// The count, the sum and the sum of squares of the paces read that did not move: their
    /// mean is what a stretch is judged against.
    read: u32,
    sum: f64,
    sum_of_squares: f64,
    /// The last stretch's pace, where it had moved from that mean.
    moved_once: Option<f64>,
    /// The last stretch's pace and the time it was read over, until taken (`take_stretch`).
    unread: Option<(f64, u64)>,
}

impl Watch {
    pub(super) fn new(since: u64) -> Self {
        Self {
            since,
            over: 0,
            read: 0,
            sum: 0.0,
            sum_of_squares: 0.0,
            moved_once: None,
            unread: None,
        }
    }

    /// The pace of the stretch read last and the time it was read over, once: what the level's
    /// stops are counted from (`stops`).
    pub(super) fn take_stretch(&mut self) -> Option<(f64, u64)> {
        self.unread.take()
    }

    /// When the level took effect.
    pub(super) fn since(&self) -> u64 {
        self.since
    }

    /// The spread of the job's watches (`before`, those before this one), this one's
    /// stretches so far included: what the next watch starts from.
    pub(super) fn spread(&self, before: StretchSpread) -> StretchSpread {
        let n = f64::from(self.read);
        if self.read < 2 {
            return before;
        }
        let mean = self.sum / n;
        if mean <= 0.0 {
            return before;
        }
        let squares = (self.sum_of_squares - n * mean * mean).max(0.0) / (mean * mean);
        before.with(squares, n - 1.0)
    }

    /// At `now_ns`, with the job's `reports`, the spread of its watches before this one
    /// (`before`) and the controller's `epsilon`: where a stretch ended since the last call,
    /// its pace read (the latest one, where several did). The pace it was judged against and
    /// its own, where it moved from the mean before it further than `2 × epsilon` and twice the
    /// deviation (`spread`), and the stretch before it had too, the same way. The job's first
    /// watch judges from its third stretch: the first two are the deviation's.
    pub(super) fn read(
        &mut self,
        now_ns: u64,
        reports: &[Report],
        before: StretchSpread,
        epsilon: f64,
    ) -> Option<(f64, f64)> {
        let first = self.since + SETTLE_NS;
        let over = now_ns.saturating_sub(first) / WATCH_NS;
        if over <= self.over {
            return None;
        }
        let start = first + (over - 1) * WATCH_NS;
        if over > self.over + 1 {
            // Stretches passed unread (no tick in them): the one before this is not the last.
            self.moved_once = None;
        }
        self.over = over;
        let read = pace_and_span_between(reports, self.since, start, start + WATCH_NS);
        self.unread = read;
        let Some((pace, _)) = read else {
            self.moved_once = None;
            return None;
        };
        let reference = self.sum / f64::from(self.read.max(1));
        let moved = self.read >= 1
            && reference > 0.0
            && self.spread(before).deviation().is_some_and(|deviation| {
                (pace / reference - 1.0).abs() > 2.0 * epsilon + 2.0 * deviation
            });
        if !moved {
            self.read += 1;
            self.sum += pace;
            self.sum_of_squares += pace * pace;
            self.moved_once = None;
            return None;
        }
        match self.moved_once.replace(pace) {
            Some(before) if (before > reference) == (pace > reference) => Some((reference, pace)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    /// The controller's default ε.
    const EPSILON: f64 = 0.01;

    /// A report a second from 0 to `to_s`, counting `pace(second)` steps each second.
    fn reports(to_s: u64, pace: impl Fn(u64) -> u64) -> Vec<Report> {
        let mut steps = 0;
        (0..=to_s)
            .map(|s| {
                let report = Report::count(s * S, steps);
                steps += pace(s);
                report
            })
            .collect()
    }

    /// The watch read at every second to `to_s`, after watches that saw `before`: each move
    /// it found, with when.
    fn moves_after(
        before: StretchSpread,
        watch: &mut Watch,
        reports: &[Report],
        to_s: u64,
    ) -> Vec<(u64, (f64, f64))> {
        (0..=to_s)
            .filter_map(|s| {
                watch
                    .read(s * S, reports, before, EPSILON)
                    .map(|moved| (s, moved))
            })
            .collect()
    }

    /// The same for the job's first watch.
    fn moves(watch: &mut Watch, reports: &[Report], to_s: u64) -> Vec<(u64, (f64, f64))> {
        moves_after(StretchSpread::default(), watch, reports, to_s)
    }

    #[test]
    fn a_steady_pace_never_moves_and_one_that_halves_is_found_after_two_stretches() {
        let steady = reports(300, |_| 100);
        assert_eq!(moves(&mut Watch::new(0), &steady, 300), vec![]);
        // Halved at 100 s: the stretch from 97 s holds part of it and moves already, the next
        // moves too.
        let halved = reports(300, |s| if s < 100 { 100 } else { 50 });
        let found = moves(&mut Watch::new(0), &halved, 300);
        let (at, (from, to)) = found[0];
        assert_eq!((from, to), (100.0, 50.0));
        assert_eq!(at, 1 + 8 * 16, "{found:?}");
    }

    #[test]
    fn a_watch_after_one_that_read_the_jobs_spread_sees_a_phase_that_began_in_its_first_stretch() {
        // The first watch reads five stretches of a steady pace; the next, settled at 200 s,
        // has a first stretch (201 to 217 s) that the halving at 210 s is part of.
        let steps = reports(400, |s| if s < 210 { 100 } else { 50 });
        let mut first = Watch::new(0);
        assert_eq!(moves(&mut first, &steps, 90), vec![]);
        let mut second = Watch::new(200 * S);
        let found = moves_after(
            first.spread(StretchSpread::default()),
            &mut second,
            &steps,
            400,
        );
        assert_eq!(
            found.first().map(|(at, _)| *at),
            Some(201 + 3 * 16),
            "{found:?}"
        );
        // Without it, the first stretch and the second are what later ones are judged against.
        let mut alone = Watch::new(200 * S);
        assert_eq!(moves(&mut alone, &steps, 400), vec![]);
    }

    #[test]
    fn a_move_beyond_twice_epsilon_is_found_and_one_within_it_is_not() {
        // A steady pace, so no deviation: 5% slower from 100 s is a cost training feels, 1.5%
        // is within what it may lose.
        let five = reports(300, |s| if s < 100 { 1000 } else { 950 });
        let found = moves(&mut Watch::new(0), &five, 300);
        assert_eq!(
            found.first().map(|(_, moved)| *moved),
            Some((1000.0, 950.0))
        );
        let within = reports(300, |s| if s < 100 { 1000 } else { 985 });
        assert_eq!(moves(&mut Watch::new(0), &within, 300), vec![]);
    }

    #[test]
    fn a_move_one_way_and_then_the_other_is_not_a_new_phase() {
        let up_then_down = reports(200, |s| match s {
            17..33 => 120,
            33..49 => 80,
            _ => 100,
        });
        assert_eq!(moves(&mut Watch::new(0), &up_then_down, 200), vec![]);
    }

    #[test]
    fn a_stretch_without_reports_is_not_counted_as_the_first_of_two() {
        // Halved from 33 s, reports lost from 40 to 64 s: the stretch of 49 to 65 s cannot be
        // read, and the next moved stretch is the first again.
        let mut halved = reports(200, |s| if s < 33 { 100 } else { 50 });
        halved.retain(|report| !(40 * S..=64 * S).contains(&report.at_ns));
        let found = moves(&mut Watch::new(0), &halved, 200);
        assert_eq!(found[0].0, 1 + 6 * 16, "{found:?}");
    }
}
