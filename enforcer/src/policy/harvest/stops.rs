//! The time a settled level makes training stop, counted over hours: a cost that comes as rare
//! stops, which a comparison of a few cycles seldom sees. Pure: paces and times are passed in.
//!
//! A level that makes training stop for 1.5 s about once a minute costs it about 2.5%. A
//! recheck's three cycles hold about 6 s of the level's time: most rechecks see no such stop,
//! and one that does leaves the level for the one below, which may cost the same. On the unit
//! tests' model of the VM's job stopping so at every level above `held`, training lost 2.29%
//! over two hours (docs/experiments/2026-12-07-far-cycles.md).
//!
//! So the loop keeps an account of the last `ACCOUNT_NS`. For each level, the time its settled
//! pace was read (in `watch::WATCH_NS` stretches, from its first report in them to its last),
//! and the time training lost in the stretches that lie far below its last ones' median (a stop,
//! not the pace's noise), the stop taken as `1 − pace / median` of the stretch. The same for the
//! job's held halves and its stretches settled at `held`: the job's own stops. A held half with
//! fewer than two reports counts as stopped throughout: a stop holds back the report that would
//! have measured it. Left out, the held halves missed most of the job's own stops: on the unit
//! tests' model of a job stopping on its own for 1.5 s once a minute, 21 levels that cost
//! nothing were left for them in 40 hours, and none with them counted so. A level whose share of
//! time lost lies above the held time's by more than ε, by a one-sided 99% bound, is left as
//! too costly, and waits longer than a comparison's verdict has it wait
//! (`Ceiling::stops_shown`). Where the loop settled, a level whose own stops point past ε while
//! the held time cannot show it yet has its rechecks every minute (`suspect`).
//!
//! Over the VM job's recorded steps the account seldom decides: a level's hours spread over the
//! ladder, and its share must be bounded within a few tenths of a percent of ε
//! (docs/experiments/2026-12-07-stops-over-hours.md). It leans towards the job's own stops: a
//! held half (about 2 s, the reports a second apart) is read over the second between its two
//! reports, and one that a stop left with one report counts 2 s lost, so the held halves read
//! the job's own stops at about twice their share, the stretches at nine tenths. Read alike
//! (each stop a gap between reports, charged to the windows it overlaps), the held time read
//! them at half their share instead, and levels were left for them: the rechecks that place the
//! held time lock on to the job's stops (docs/experiments/2026-12-08-stops-by-gaps.md).
//!
//! The bound: each side's share has the variance of a sum of rare stops, their squares summed
//! over the time squared. Held time is short (the probes, a few percent of the settled time),
//! and where it saw no stop its variance is taken as that of one stop as long as the level's
//! mean one: held time that saw none of a job's own stops by chance would otherwise read them
//! as the level's. A smooth cost (a pace slower throughout) is not counted here: the stretches'
//! median moves with it, and the comparisons find it. The price: a level is left only once it
//! has cost training for a while (`MIN_STOPS` stops, and as long as the held time takes to
//! bound the job's own), and stops too short to lie far below a stretch's pace are not seen.

use std::collections::VecDeque;

use super::{
    level::Level,
    statistics::{SpreadFrom, far_below_median},
};

/// How long the account keeps what it read: two hours, so that the job's own stops are known
/// from minutes of held halves, and so that a level left is tried again from a fresh account.
pub(super) const ACCOUNT_NS: u64 = 7_200_000_000_000;
/// Stops seen at a level before it is judged: fewer say little of how often it stops.
const MIN_STOPS: usize = 10;
/// The paces of a kind kept to judge the next by: about five minutes of stretches.
const KEPT: usize = 20;
/// How far below the median a stop lies, in standard deviations of the faster half: a pace
/// drawn from a normal spread lies that far below about once in 30,000.
const STOP_SPREADS: f64 = 4.0;
/// The normal quantile that a one-sided 99% bound lies at.
const Z99: f64 = 2.326;

/// The paces of one kind (a level's settled stretches, or the held halves), and the time lost.
#[derive(Debug, Clone, Default)]
struct Account {
    /// The last `KEPT` paces: their median and spread say which pace is a stop.
    recent: VecDeque<f64>,
    /// Each pace read in the last `ACCOUNT_NS`: when, how long it measured and the time a stop
    /// took from it (0 for none), ns.
    read: VecDeque<(u64, u64, f64)>,
    /// `read` summed as of the last pace: the loop asks whether a level is `suspect` at every
    /// tick, and a pace comes every 16 s or so.
    tally: Tally,
}

impl Account {
    fn add(&mut self, at_ns: u64, pace: f64, measured_ns: u64) {
        let lost_ns = self
            .stopped_below(pace)
            .map_or(0.0, |median| (1.0 - pace / median) * measured_ns as f64);
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(pace);
        self.read.push_back((at_ns, measured_ns, lost_ns));
        let old = |&(at, ..): &(u64, u64, f64)| at.saturating_add(ACCOUNT_NS) < at_ns;
        while self.read.front().is_some_and(old) {
            self.read.pop_front();
        }
        self.tally = self.summed();
    }

    /// The recent paces' median, where `pace` lies `STOP_SPREADS` deviations below it. The
    /// deviation is read from the paces above the median: stops only slow a pace, and where a
    /// stop comes once a minute a quarter of the 16 s stretches hold one, which would widen a
    /// spread read from both sides until no stop lay that far.
    fn stopped_below(&self, pace: f64) -> Option<f64> {
        let paces = self.recent.iter().copied();
        far_below_median(paces, pace, STOP_SPREADS, SpreadFrom::FasterHalf)
    }

    fn summed(&self) -> Tally {
        self.read
            .iter()
            .fold(Tally::default(), |tally, &(_, measured_ns, lost_ns)| {
                Tally {
                    measured_ns: tally.measured_ns + measured_ns as f64,
                    lost_ns: tally.lost_ns + lost_ns,
                    squares: tally.squares + lost_ns * lost_ns,
                    stops: tally.stops + usize::from(lost_ns > 0.0),
                }
            })
    }
}

/// An account summed: the time measured, the time lost to stops, its squares, and the stops.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    measured_ns: f64,
    lost_ns: f64,
    squares: f64,
    stops: usize,
}

impl Tally {
    fn plus(self, other: Tally) -> Tally {
        Tally {
            measured_ns: self.measured_ns + other.measured_ns,
            lost_ns: self.lost_ns + other.lost_ns,
            squares: self.squares + other.squares,
            stops: self.stops + other.stops,
        }
    }

    /// Whether this time at the levels from `lowest` up is shown to have lost more of it to stops
    /// than `held` time did, by more than `epsilon` (a one-sided 99% bound).
    fn shown_beyond(self, held: Tally, epsilon: f64, lowest: Level) -> Option<Shown> {
        if self.stops < MIN_STOPS || held.measured_ns <= 0.0 {
            return None;
        }
        let at_level = self.lost_ns / self.measured_ns;
        let held_share = held.lost_ns / held.measured_ns;
        let mean_stop_ns = self.lost_ns / self.stops as f64;
        let held_squares = held.squares.max(mean_stop_ns * mean_stop_ns);
        let variance =
            self.squares / self.measured_ns.powi(2) + held_squares / held.measured_ns.powi(2);
        (at_level - held_share - Z99 * variance.sqrt() > epsilon).then_some(Shown {
            lowest,
            at_level,
            held: held_share,
            lost_ns: (at_level - held_share) * self.measured_ns,
        })
    }
}

/// A level shown to make training stop: the lowest level counted with it, the share of their
/// time training lost to stops, the share with offline held back, and the time the difference
/// took from training over the account, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Shown {
    pub(super) lowest: Level,
    pub(super) at_level: f64,
    pub(super) held: f64,
    pub(super) lost_ns: f64,
}

/// The job's accounts: its held halves, and each level's settled stretches (`held`'s among
/// them, the job's own stops too).
#[derive(Debug, Clone, Default)]
pub(super) struct Stops {
    held_halves: Account,
    levels: [Account; Level::LADDER.len()],
}

impl Stops {
    /// A held half that ended at `at_ns`, its pace read over `measured_ns`.
    pub(super) fn held_half(&mut self, at_ns: u64, pace: f64, measured_ns: u64) {
        self.held_halves.add(at_ns, pace, measured_ns);
    }

    /// A stretch read over `measured_ns`, settled at `level`, that ended at `at_ns`: whether the
    /// level, above `held`, is now shown to make training stop for more than `epsilon` of its
    /// time beyond the job's own stops.
    pub(super) fn stretch(
        &mut self,
        level: Level,
        at_ns: u64,
        pace: f64,
        measured_ns: u64,
        epsilon: f64,
    ) -> Option<Shown> {
        self.levels[level.index()].add(at_ns, pace, measured_ns);
        let held = self.held();
        // The level alone, then with the levels under it, down to `quarter`: each costs
        // training no more than a level above it.
        let mut at = Tally::default();
        for lowest in Level::LADDER[1..=level.index()].iter().rev() {
            at = at.plus(self.levels[lowest.index()].tally);
            if let Some(shown) = at.shown_beyond(held, epsilon, *lowest) {
                return Some(shown);
            }
        }
        None
    }

    /// Whether `level`'s own stops so far point to more than `epsilon` of its time beyond the
    /// job's own, though the held time is too short yet to show it: the held halves of its
    /// rechecks are what can.
    pub(super) fn suspect(&self, level: Level, epsilon: f64) -> bool {
        let (at, held) = (self.levels[level.index()].tally, self.held());
        level > Level::Held
            && at.stops >= MIN_STOPS
            && held.measured_ns > 0.0
            && at.lost_ns / at.measured_ns - held.lost_ns / held.measured_ns > epsilon
    }

    /// The held halves' tally with `held`'s stretches': the job's own stops.
    fn held(&self) -> Tally {
        self.held_halves
            .tally
            .plus(self.levels[Level::Held.index()].tally)
    }

    /// Forgets it all: a new phase or job, whose stops are its own.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const EPSILON: f64 = 0.01;
    const STRETCH: u64 = 16 * S;
    const HALF: u64 = 2 * S;

    /// A pace of 100 give or take 1%, by `i`.
    fn pace(i: u64) -> f64 {
        100.0 + [0.0, 1.0, -1.0, 0.5, -0.5][(i % 5) as usize]
    }

    /// `minutes` of the job settled at `policy` with three held halves every four stretches,
    /// training stopping for `level_stop_s` every `every` stretches at the level and for
    /// `own_stop_s` every `own_every` held halves: when the level was first shown costly.
    fn shown_after(
        level_stop_s: f64,
        every: u64,
        own_stop_s: f64,
        own_every: u64,
        minutes: u64,
    ) -> Option<(u64, Shown)> {
        let mut stops = Stops::default();
        let (mut now, mut halves) = (0, 0);
        for i in 0..minutes * 60 * S / STRETCH {
            now += STRETCH;
            let stopped = level_stop_s > 0.0 && i % every == every - 1;
            let lost = if stopped { level_stop_s / 16.0 } else { 0.0 };
            let at_level = pace(i) * (1.0 - lost);
            if let Some(shown) = stops.stretch(Level::Policy, now, at_level, STRETCH, EPSILON) {
                return Some((now / S, shown));
            }
            if i % 4 == 3 {
                for _ in 0..3 {
                    halves += 1;
                    let own = own_stop_s > 0.0 && halves % own_every == 0;
                    let lost = if own { own_stop_s / 2.0 } else { 0.0 };
                    stops.held_half(now, pace(halves) * (1.0 - lost), HALF);
                }
            }
        }
        None
    }

    #[test]
    fn a_level_that_stops_training_once_a_minute_is_shown_costly_after_an_hour_of_it() {
        // 1.5 s every four stretches (64 s): about 2.3% of the level's time. With held halves
        // 9% as long, shown after 3712 s: held time that saw no stop bounds the job's own
        // stops only slowly.
        let (at_s, shown) = shown_after(1.5, 4, 0.0, 1, 120).expect("shown within two hours");
        assert!((1800..4800).contains(&at_s), "{at_s} s");
        assert!((shown.at_level - 1.5 / 64.0).abs() < 0.002, "{shown:?}");
        assert_eq!(shown.held, 0.0);
    }

    #[test]
    fn stops_as_often_with_offline_held_back_are_the_jobs_own() {
        // The job stops for 1.5 s once a minute whatever offline does: in a held half of
        // every 2 s in 64 s, as in a stretch of every 64 s.
        assert_eq!(shown_after(1.5, 4, 1.5, 32, 240), None);
    }

    #[test]
    fn stops_that_cost_less_than_epsilon_or_that_no_held_time_could_bound_are_not_shown() {
        // 1.5 s every 16 stretches: 0.6%.
        assert_eq!(shown_after(1.5, 16, 0.0, 1, 240), None);
        let mut stops = Stops::default();
        for i in 0..600 {
            let lost = if i % 4 == 3 { 0.1 } else { 0.0 };
            let at_level = pace(i) * (1.0 - lost);
            let shown = stops.stretch(Level::Policy, i * STRETCH, at_level, STRETCH, EPSILON);
            assert_eq!(shown, None, "no held time yet");
        }
    }

    #[test]
    fn a_level_slower_throughout_is_left_to_the_comparisons_and_held_counts_no_level() {
        let mut stops = Stops::default();
        for i in 0..100 {
            stops.held_half(i * STRETCH, pace(i), HALF);
        }
        for i in 0..400 {
            let at_level = if i < 200 { pace(i) } else { 0.9 * pace(i) };
            let shown = stops.stretch(Level::Half, i * STRETCH, at_level, STRETCH, EPSILON);
            assert_eq!(shown, None);
            // Settled at `held`, stops count as the job's own and judge nothing.
            let held = stops.stretch(Level::Held, i * STRETCH, 50.0, STRETCH, EPSILON);
            assert_eq!(held, None);
        }
    }

    #[test]
    fn a_stop_is_read_below_the_faster_halfs_spread_which_stops_do_not_widen() {
        // A quarter of the stretches 9% low, the rest within 1%: read from both sides, the
        // spread would put none of them four deviations below the median.
        let mut account = Account::default();
        for i in 0..40 {
            let stopped = i % 4 == 3;
            account.add(
                i * STRETCH,
                if stopped { 0.91 * pace(i) } else { pace(i) },
                STRETCH,
            );
        }
        // Every stop after the first six paces, which set the median.
        assert_eq!(account.tally.stops, 9, "{:?}", account.read);
    }

    #[test]
    fn what_was_read_more_than_two_hours_ago_is_forgotten() {
        let mut account = Account::default();
        account.add(0, 100.0, STRETCH);
        account.add(ACCOUNT_NS, 100.0, STRETCH);
        assert_eq!(account.tally.measured_ns, 2.0 * STRETCH as f64);
        account.add(ACCOUNT_NS + 1, 100.0, STRETCH);
        assert_eq!(account.tally.measured_ns, 2.0 * STRETCH as f64);
    }
}
