//! The job's recent held halves, and whether a cycle holds a stop of the job's own, not its
//! pace, in a half that lies far below them: such a cycle is set aside, not counted.
//!
//! A job stops now and then for reasons of its own: a checkpoint written, a garbage
//! collection, an epoch's loader workers started again. A stop of 0.7 s in a held half of 2 s
//! reads that half's pace about a third low, and the level beside it a third faster than
//! training with offline held back. One such cycle moves a comparison's mean, and more: it
//! widens the job's pooled spread, so that a mean the spread calls too noisy no longer judges.
//! Over the VM job's recorded steps with a stop once every 30 to 90 s and every level costing
//! 2% (`xtask/scripts/ladder_replay.py --stop-ms`, 20 rotations of two hours), training lost
//! 1.71% with stops of 0.7 s, 1.04% with 1.5 s and 0.70% with 3 s (ε is 1%), against 0.43%
//! without stops; with such halves set aside, 1.04%, 0.64% and 0.41%, and 0.49% without stops
//! (docs/experiments/2026-12-07-held-half-stops.md).
//!
//! So a held half whose pace lies more than `OUTLIER_SPREADS` robust standard deviations below
//! the median of the job's last `KEPT` held halves (1.4826 times their median absolute
//! deviation, which the stops themselves barely move) is set aside. Only slow ones: no stop
//! makes a half faster. At most every other cycle is set aside, so that a comparison ends; and
//! the halves set aside are kept among the last `KEPT`, so that a pace that fell for good, by
//! less than a new phase (`PHASE_CHANGE`), becomes the median within a few comparisons.
//!
//! A level's half as far below them is set aside only as often as held halves were: each held half
//! set aside lets one level half be (`MAX_UNMATCHED` at most). The job's own stops fall in level
//! halves as often as in held ones, and so are matched; a level that itself made training stop has
//! its stops beyond the job's own counted. Counted, a stop of the job's own in a level's half reads
//! the level a third costlier, and where the mean judges (`pooled_spread`), a level that costs less
//! than ε was left: at the VM's frontier with stops of 0.7 to 3 s, offline ran at 87.7 to 89.4% of
//! the defaults'; with level halves matched, 90.3 to 92.8%, training losing 0.67 to 0.69% against
//! 0.60 to 0.63%, and at every level costing 2%, 0.27 to 0.41% against 0.24 to 0.38%
//! (docs/experiments/2026-12-07-far-cycles.md).

use std::collections::VecDeque;

use super::{
    change::{Half, Why},
    level::Level,
    statistics::{SpreadFrom, far_below_median},
};

/// Held halves kept: about four comparisons of three to six cycles.
const KEPT: usize = 20;
/// How far below the median a held half is set aside, in robust standard deviations: a pace
/// drawn from a normal spread lies that far below it about once in 30,000 halves.
const OUTLIER_SPREADS: f64 = 4.0;
/// Held halves set aside that a level half set aside may yet match, at most: a job's stops
/// seen long ago say little of how often it stops now. A level so costly that all its halves lie
/// that far below the held ones has its comparison run at most this many cycles longer.
const MAX_UNMATCHED: usize = 3;

#[derive(Debug, Clone, Default)]
pub(super) struct HeldHalves {
    paces: VecDeque<f64>,
    /// Whether the last cycle was set aside.
    last_set_aside: bool,
    /// Held halves set aside that no level half set aside has matched yet.
    unmatched: usize,
}

impl HeldHalves {
    /// A cycle of `level`'s comparison whose held half measured `held` and level half `at_level`:
    /// where it is set aside, why (the half far below the median of the last held halves, with
    /// that median). The held pace is kept either way.
    pub(super) fn set_aside(&mut self, level: Level, held: f64, at_level: f64) -> Option<Why> {
        let set_aside = match self.last_set_aside {
            true => None,
            false => match self.outlier_from(held) {
                Some(median) => {
                    self.unmatched = (self.unmatched + 1).min(MAX_UNMATCHED);
                    Some((Half::Held, median, held))
                }
                None if self.unmatched > 0 => {
                    let median = self.outlier_from(at_level);
                    self.unmatched -= usize::from(median.is_some());
                    median.map(|median| (Half::Level, median, at_level))
                }
                None => None,
            },
        };
        self.last_set_aside = set_aside.is_some();
        if self.paces.len() == KEPT {
            self.paces.pop_front();
        }
        self.paces.push_back(held);
        set_aside.map(|(half, from, to)| Why::SetAside {
            tried: level,
            half,
            from,
            to,
        })
    }

    /// The last held halves' median, where `pace` lies far below it.
    fn outlier_from(&self, pace: f64) -> Option<f64> {
        let paces = self.paces.iter().copied();
        far_below_median(paces, pace, OUTLIER_SPREADS, SpreadFrom::EveryPace)
    }

    /// Forgets the halves: a new phase or job, or halves of another length, whose paces spread
    /// otherwise.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held halves at 100 steps/s give or take 2%, as the VM's job's.
    fn quiet() -> HeldHalves {
        let mut halves = HeldHalves::default();
        for pace in [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 101.5] {
            assert_eq!(halves.set_aside(Level::Policy, pace, pace), None);
        }
        halves
    }

    #[test]
    fn a_half_a_stop_slowed_is_set_aside_and_one_within_the_spread_or_faster_is_not() {
        let mut halves = quiet();
        assert_eq!(halves.set_aside(Level::Policy, 97.0, 97.0), None);
        // 0.7 s of a 2 s half without a step.
        assert_eq!(
            halves.set_aside(Level::Policy, 65.0, 65.0),
            Some(Why::SetAside {
                tried: Level::Policy,
                half: Half::Held,
                from: 100.0,
                to: 65.0
            })
        );
        assert_eq!(halves.set_aside(Level::Policy, 100.0, 100.0), None);
        // As far the other way: no stop makes a half faster.
        assert_eq!(halves.set_aside(Level::Policy, 140.0, 140.0), None);
    }

    #[test]
    fn at_most_every_other_cycle_is_set_aside() {
        let mut halves = quiet();
        assert!(halves.set_aside(Level::Policy, 60.0, 60.0).is_some());
        assert_eq!(halves.set_aside(Level::Policy, 60.0, 60.0), None);
        assert!(halves.set_aside(Level::Policy, 60.0, 60.0).is_some());
    }

    #[test]
    fn a_pace_that_moved_for_good_becomes_the_median() {
        let mut halves = quiet();
        // 10% slower for good: less than a new phase's move. Set aside at most every other
        // cycle, then counted once the kept halves' median has moved to it.
        let set_aside: Vec<bool> = (0..20)
            .map(|_| halves.set_aside(Level::Policy, 90.0, 90.0).is_some())
            .collect();
        assert!(set_aside.iter().filter(|&&aside| aside).count() <= 10);
        assert!(!set_aside[10..].iter().any(|&aside| aside), "{set_aside:?}");
    }

    #[test]
    fn nothing_is_set_aside_before_the_spread_is_known_or_once_cleared() {
        let mut halves = HeldHalves::default();
        for pace in [100.0, 101.0, 99.0, 100.0, 100.0] {
            assert_eq!(halves.set_aside(Level::Policy, pace, pace), None);
        }
        assert_eq!(halves.set_aside(Level::Policy, 50.0, 50.0), None);
        let mut halves = quiet();
        halves.clear();
        assert_eq!(halves.set_aside(Level::Policy, 50.0, 50.0), None);
    }

    #[test]
    fn a_noisy_jobs_spread_sets_aside_only_what_lies_far_beyond_it() {
        // Held halves spread by about 20%, as the GPU server's job's reported steps: a half
        // 40% low is its noise, a half without a step for most of it is not.
        let mut halves = HeldHalves::default();
        for pace in [
            100.0, 80.0, 120.0, 90.0, 115.0, 85.0, 105.0, 95.0, 125.0, 75.0,
        ] {
            halves.set_aside(Level::Policy, pace, pace);
        }
        assert_eq!(halves.set_aside(Level::Policy, 60.0, 60.0), None);
        assert!(halves.set_aside(Level::Policy, 5.0, 5.0).is_some());
    }

    #[test]
    fn a_level_half_as_far_below_is_set_aside_only_as_often_as_held_halves_were() {
        let mut halves = quiet();
        // No held half set aside yet: a level half a stop slowed counts, as a level that made
        // training stop would.
        assert_eq!(halves.set_aside(Level::Policy, 100.0, 65.0), None);
        // One held half set aside lets one level half be, no more.
        assert!(halves.set_aside(Level::Policy, 60.0, 100.0).is_some());
        assert_eq!(halves.set_aside(Level::Policy, 100.0, 100.0), None);
        assert_eq!(
            halves.set_aside(Level::Policy, 100.0, 65.0),
            Some(Why::SetAside {
                tried: Level::Policy,
                half: Half::Level,
                from: 100.0,
                to: 65.0
            })
        );
        assert_eq!(halves.set_aside(Level::Policy, 100.0, 100.0), None);
        assert_eq!(halves.set_aside(Level::Policy, 100.0, 65.0), None);
    }

    #[test]
    fn held_halves_set_aside_long_ago_match_at_most_three_level_halves() {
        let mut halves = quiet();
        for _ in 0..5 {
            assert!(halves.set_aside(Level::Policy, 60.0, 100.0).is_some());
            assert_eq!(halves.set_aside(Level::Policy, 100.0, 100.0), None);
        }
        let mut matched = 0;
        for _ in 0..6 {
            matched += usize::from(halves.set_aside(Level::Policy, 100.0, 65.0).is_some());
            assert_eq!(halves.set_aside(Level::Policy, 100.0, 100.0), None);
        }
        assert_eq!(matched, MAX_UNMATCHED);
        // A new phase forgets the stops seen.
        let mut halves = quiet();
        assert!(halves.set_aside(Level::Policy, 60.0, 100.0).is_some());
        halves.clear();
        for pace in [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 101.5] {
            assert_eq!(halves.set_aside(Level::Policy, pace, pace), None);
        }
        assert_eq!(halves.set_aside(Level::Policy, 100.0, 65.0), None);
    }
}
