//! The cycles of a level at or below the core policy's, carried from one of its comparisons to
//! the next while the job's pace is too noisy for one comparison's mean (`mean_too_noisy`).
//!
//! Such a level is kept unless one comparison's interval lies below `1 − ε`, and at the GPU
//! server's spread (the ResNet-50 job's cycles spread by 9 to 20%) that takes a cost of about
//! 15%. Carried over, the cycles of a settled level's rechecks (three or more every few
//! minutes) narrow the interval until a smaller cost shows: on a model of that job whose
//! `policy` and the levels above it cost it 10% (10 runs of two hours), the loop spent 65% of
//! the time at `policy` or above before, 41% with them carried; nothing costing, 2.5% below
//! `policy` either way (the test `a_cost_the_noise_hides_from_one_comparison_…`).
//!
//! Each comparison looks once, at its end, at a 99% interval over its own cycles and those
//! carried: a look per recheck for as long as the job runs is many looks, and a 95% interval
//! would take a level that costs nothing down now and then.
//!
//! Carried cycles speak of the level as it was. A comparison whose mean lies more than
//! `CHANGED_Z` pooled standard errors from the carried mean finds the level changed (the
//! offline work beside it, or the job, is not the same): the carried cycles are dropped, and
//! its own start the count again. A new phase of the job drops them all, and at most the
//! newest `MAX_CARRIED_CYCLES` are kept.

use enforcer_common::stats::student_t;

use super::{
    FUTILITY_Z, MAX_CYCLES,
    level::Level,
    statistics::{Ratio, errors_apart, mean_and_variance},
};

/// The most cycles carried for one level: about an hour of a settled level's rechecks.
const MAX_CARRIED_CYCLES: usize = 60;
/// Fewer cycles, carried and the comparison's own, are not looked at: two comparisons' worth,
/// below which the interval says little that the comparison's own did not.
const MIN_LOOKED_CYCLES: usize = 12;
/// A comparison's mean this many pooled standard errors from the carried mean is a changed
/// level. At two, about one comparison in twenty would drop the cycles of a level that had
/// not changed, at three one in 370; a cost of 40% that went away lies three to four errors
/// from the cycles that saw it at the server's spread (three cycles against six).
const CHANGED_Z: f64 = 3.0;
/// The normal quantile of a two-sided 99% interval.
const Z99: f64 = 2.576;

#[derive(Debug, Clone, Default)]
pub(super) struct Carried {
    by_level: [Vec<f64>; Level::LADDER.len()],
}

impl Carried {
    /// A comparison of `level` at or below the policy's, with a pace too noisy for its mean,
    /// ends with `ratios`: they join the level's carried cycles (after the carried ones are
    /// dropped where the level changed). The interval over them all, where it lies below
    /// `floor`.
    pub(super) fn add_and_judge(
        &mut self,
        level: Level,
        ratios: &[f64],
        floor: f64,
    ) -> Option<Ratio> {
        let carried = &mut self.by_level[level.index()];
        if changed(carried, ratios) {
            carried.clear();
        }
        carried.extend_from_slice(ratios);
        let over = carried.len().saturating_sub(MAX_CARRIED_CYCLES);
        carried.drain(..over);
        let n = carried.len();
        if n < MIN_LOOKED_CYCLES {
            return None;
        }
        let (mean, variance) = mean_and_variance(carried);
        let half_width = t99(n - 1) * (variance / n as f64).sqrt();
        (mean + half_width < floor).then_some(Ratio {
            ratio: mean,
            low: mean - half_width,
            high: mean + half_width,
            cycles: n,
        })
    }

    /// Whether the cycles left of a comparison of `level` that has `ratios` so far (up to
    /// `MAX_CYCLES`), drawn around the mean of these and the carried ones with their spread,
    /// could take the interval over them all below `floor` with a chance of at least 5%
    /// (`FUTILITY_Z`): where they could, the comparison runs on, rather than end where its own
    /// cycles could not show the cost. A cost the carried cycles point to is shown sooner so.
    pub(super) fn could_show_costly(&self, level: Level, ratios: &[f64], floor: f64) -> bool {
        let carried = &self.by_level[level.index()];
        if changed(carried, ratios) || ratios.len() >= MAX_CYCLES {
            return false;
        }
        let all: Vec<f64> = carried.iter().chain(ratios).copied().collect();
        let (now, total) = (all.len(), carried.len() + MAX_CYCLES);
        if total.min(MAX_CARRIED_CYCLES) < MIN_LOOKED_CYCLES {
            return false;
        }
        let (mean, variance) = mean_and_variance(&all);
        let spread = variance.sqrt();
        let left = (total - now) as f64;
        // The mean of all `total` cycles must reach this, and the cycles left that mean.
        let needed = floor - t99(total - 1) * spread / (total as f64).sqrt();
        let needed_left = (total as f64 * needed - now as f64 * mean) / left;
        spread > 0.0 && (mean - needed_left) / (spread / left.sqrt()) <= FUTILITY_Z
    }

    /// The level's pace was judged on a mean again (not too noisy): nothing carried.
    pub(super) fn drop_level(&mut self, level: Level) {
        self.by_level[level.index()].clear();
    }

    /// A new phase, or a new signal.
    pub(super) fn clear(&mut self) {
        self.by_level.iter_mut().for_each(Vec::clear);
    }
}

/// Whether `ratios` (at least one) read a level other than the one `carried` measured: their
/// means apart by more than `CHANGED_Z` standard errors, from the spread of both.
fn changed(carried: &[f64], ratios: &[f64]) -> bool {
    errors_apart(carried, ratios).is_some_and(|apart| apart.abs() > CHANGED_Z)
}

/// Student's t for a two-sided 99% interval with `freedom` degrees of freedom (at least 11
/// here, where the expansion holds within 0.01): 3.11 at 11, 2.66 at 59.
fn t99(freedom: usize) -> f64 {
    student_t(Z99, freedom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_runs_on_where_the_carried_cycles_point_to_a_cost() {
        let mut carried = Carried::default();
        let around = |mean: f64, n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| mean + if i % 2 == 0 { 0.15 } else { -0.15 })
                .collect()
        };
        // Nothing carried: the comparison's own cycles decide when it ends.
        assert!(!carried.could_show_costly(Level::Policy, &around(0.9, 3), 0.99));
        // 24 cycles at 0.92 ± 0.15 carried: after four more, the last two of six could take
        // the interval below 0.99; after six, none are left; around 1.0 they could not.
        carried.add_and_judge(Level::Policy, &around(0.92, 24), 0.99);
        assert!(carried.could_show_costly(Level::Policy, &around(0.92, 4), 0.99));
        assert!(!carried.could_show_costly(Level::Policy, &around(0.92, 6), 0.99));
        let mut near_one = Carried::default();
        near_one.add_and_judge(Level::Policy, &around(1.0, 24), 0.99);
        assert!(!near_one.could_show_costly(Level::Policy, &around(1.0, 4), 0.99));
    }

    #[test]
    fn a_cost_shows_once_enough_cycles_are_carried_and_a_changed_level_starts_again() {
        let mut carried = Carried::default();
        // Cycles at 0.94 ± 0.05: a 6% cost in a spread of about 5%.
        let cycles = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| 0.94 + if i % 2 == 0 { 0.05 } else { -0.05 })
                .collect()
        };
        assert_eq!(carried.add_and_judge(Level::Policy, &cycles(4), 0.99), None);
        assert_eq!(carried.add_and_judge(Level::Policy, &cycles(4), 0.99), None);
        let shown = carried
            .add_and_judge(Level::Policy, &cycles(4), 0.99)
            .expect("12 cycles at 0.94 ± 0.05 lie below 0.99");
        assert_eq!(shown.cycles, 12);
        assert!(
            shown.high < 0.99 && (shown.ratio - 0.94).abs() < 1e-9,
            "{shown:?}"
        );
        // The level costs nothing now: three cycles at 1.1 ± 0.02 are far from 0.94, the
        // carried ones go, and three are too few to look at.
        let free: Vec<f64> = vec![1.08, 1.12, 1.1];
        assert_eq!(carried.add_and_judge(Level::Policy, &free, 0.99), None);
        assert_eq!(carried.by_level[Level::Policy.index()], free);
        // Other levels carry their own; at most the newest `MAX_CARRIED_CYCLES`.
        assert!(carried.by_level[Level::Half.index()].is_empty());
        for _ in 0..20 {
            carried.add_and_judge(Level::Half, &cycles(4), 0.9);
        }
        assert_eq!(
            carried.by_level[Level::Half.index()].len(),
            MAX_CARRIED_CYCLES
        );
        carried.drop_level(Level::Half);
        assert!(carried.by_level[Level::Half.index()].is_empty());
        carried.clear();
        assert!(carried.by_level[Level::Policy.index()].is_empty());
    }
}
