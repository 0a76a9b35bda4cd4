//! The cycles of the comparisons that kept a level at or below the core policy's on its mean,
//! pooled with the next comparison's own. Pure: the cycles are passed in.
//!
//! Where a level costs training close to ε, one comparison's mean is a coin's toss. On the VM
//! `policy` costs the training simulator about 0.8% (reamer's defaults in the settled runs of
//! docs/enforcer.md), while one cycle's ratio spreads by about 2%. Judged afresh, most of its
//! rechecks ran on past the third cycle (`MAX_CYCLES_NEAR_FLOOR`): on the unit tests' model of
//! the VM's job, 63% of them; live, six and seven cycles, the second of them leaving the level
//! (docs/experiments/2026-11-29-settled-pace-bar.md). Pooled with the cycles that kept the
//! level, a recheck's three cycles are judged on a mean over many more, which does not turn
//! over from one recheck to the next, and the recheck ends at its third cycle.
//! Over the VM job's recorded steps, with the levels costing what they cost on the VM (2
//! hours, five rotations), offline was held back 10% of the time against 15%, and ran at
//! `policy` or above 80% against 57%; training lost 0.72% against 0.68%
//! (docs/experiments/2026-11-29-kept-cycles-pooled.md).
//!
//! Earlier cycles speak of the level as it was. A comparison whose own mean lies below theirs
//! by more than `TURNED_Z` standard errors of the difference reads a level turned costlier:
//! it is judged on its own cycles, which replace the earlier ones if they keep it. One-sided,
//! and at a one-sided 5%, because a false alarm only costs the fresh judgement every
//! comparison had before, while a missed one keeps a costlier level for another recheck: at
//! three two-sided errors, a cost of 5% coming and going every five minutes cost training
//! 0.98% against 0.76% judged afresh; at this test, 0.74%. A level left drops them: tried
//! again, it is judged afresh, so that a cost gone is seen as soon as before. A new phase of
//! the job drops them all, and only the newest `MAX_KEPT_CYCLES` are pooled, so that a level
//! whose cost creeps up shows it within a few rechecks.

use super::{level::Level, statistics::errors_apart};

/// The most earlier cycles pooled for one level: six rechecks' three, about half an hour of a
/// settled level's. 12 and 30 gave about the same over the VM job's steps.
const MAX_KEPT_CYCLES: usize = 18;
/// A comparison's mean this many standard errors of the difference below the kept cycles'
/// reads a level turned costlier (one-sided 5%).
const TURNED_Z: f64 = 1.645;

#[derive(Debug, Clone, Default)]
pub(super) struct KeptCycles {
    by_level: [Vec<f64>; Level::LADDER.len()],
}

impl KeptCycles {
    /// The cycles of `level`'s earlier comparisons that kept it, and `ratios`, a comparison's
    /// own: None where there are none, or where `ratios` read the level turned costlier.
    pub(super) fn pooled(&self, level: Level, ratios: &[f64]) -> Option<Vec<f64>> {
        let kept = &self.by_level[level.index()];
        (!kept.is_empty() && !turned_costlier(kept, ratios))
            .then(|| kept.iter().chain(ratios).copied().collect())
    }

    /// A comparison kept `level` on its mean with `ratios`: they join the cycles kept before
    /// (replace them, where they read the level turned costlier), the newest
    /// `MAX_KEPT_CYCLES` kept.
    pub(super) fn kept(&mut self, level: Level, ratios: &[f64]) {
        let kept = &mut self.by_level[level.index()];
        if turned_costlier(kept, ratios) {
            kept.clear();
        }
        kept.extend_from_slice(ratios);
        let over = kept.len().saturating_sub(MAX_KEPT_CYCLES);
        kept.drain(..over);
    }

    /// `level` left, or judged other than on its mean: judged afresh next time.
    pub(super) fn drop_level(&mut self, level: Level) {
        self.by_level[level.index()].clear();
    }

    /// A new phase, or a new signal.
    pub(super) fn clear(&mut self) {
        self.by_level.iter_mut().for_each(Vec::clear);
    }
}

/// Whether `ratios` read the level costlier than the cycles that kept it (`kept`) did: their
/// mean lower by more than `TURNED_Z` standard errors of the difference, from the spread of
/// both.
fn turned_costlier(kept: &[f64], ratios: &[f64]) -> bool {
    errors_apart(kept, ratios).is_some_and(|apart| -apart > TURNED_Z)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Six cycles around `mean`, 2% apart: the VM's spread.
    fn cycles(mean: f64) -> Vec<f64> {
        [-0.02, 0.01, -0.01, 0.02, 0.0, 0.0]
            .iter()
            .map(|d| mean + d)
            .collect()
    }

    #[test]
    fn a_comparison_is_pooled_with_the_cycles_that_kept_its_level_and_only_its_level() {
        let mut kept = KeptCycles::default();
        assert_eq!(kept.pooled(Level::Policy, &[0.99, 0.98, 1.0]), None);
        kept.kept(Level::Policy, &cycles(0.995));
        let pooled = kept.pooled(Level::Policy, &[0.99, 0.98, 1.0]).unwrap();
        assert_eq!(pooled.len(), 9);
        assert_eq!(kept.pooled(Level::Half, &[0.99, 0.98, 1.0]), None);
        kept.drop_level(Level::Policy);
        assert_eq!(kept.pooled(Level::Policy, &[0.99, 0.98, 1.0]), None);
    }

    #[test]
    fn a_level_read_costlier_is_judged_on_its_own_cycles_and_one_read_cheaper_is_pooled() {
        let mut kept = KeptCycles::default();
        kept.kept(Level::Policy, &cycles(0.995));
        kept.kept(Level::Policy, &cycles(0.995));
        // 5% lower: beyond 1.645 errors of the difference (about 1.3% here).
        assert_eq!(kept.pooled(Level::Policy, &cycles(0.945)), None);
        // 1% lower is within them, and higher is never a costlier level.
        assert!(kept.pooled(Level::Policy, &cycles(0.985)).is_some());
        assert!(kept.pooled(Level::Policy, &cycles(1.05)).is_some());
        // Kept on its own cycles, those replace the earlier ones.
        kept.kept(Level::Policy, &cycles(0.945));
        assert_eq!(kept.pooled(Level::Policy, &[]).unwrap(), cycles(0.945));
    }

    #[test]
    fn only_the_newest_cycles_are_kept() {
        let mut kept = KeptCycles::default();
        for i in 0..10 {
            kept.kept(Level::Policy, &[1.0 + f64::from(i) * 1e-4; 3]);
        }
        let pooled = kept.pooled(Level::Policy, &[]).unwrap();
        assert_eq!(pooled.len(), MAX_KEPT_CYCLES);
        assert_eq!(pooled.last(), Some(&(1.0 + 9e-4)));
        kept.clear();
        assert_eq!(kept.pooled(Level::Policy, &[]), None);
    }
}
