//! How far a job's cycles spread, pooled over its last comparisons: whether a comparison's
//! mean is too noisy to judge ε by, and how long one could still show a level free. Pure: the
//! cycles are passed in.

use std::collections::VecDeque;

use enforcer_common::stats::median;

use super::{
    POOLED_COMPARISONS,
    statistics::{mean_and_variance, spread_upper_bound},
};

/// How far a job's cycles spread, pooled over its last `POOLED_COMPARISONS` comparisons and
/// the current one: how noisy the job's pace is, which is the job's, not one comparison's. Three
/// to six cycles' own spread is itself noisy, and a comparison whose cycles happened to spread
/// little was judged on its mean. On a model of the GPU server's job that cost nothing (cycles
/// spreading by about 17%, 100 runs of 30 minutes), judged by each comparison's own spread,
/// 4.1% of the policy's comparisons left it; by the pooled spread, 1.9%.
#[derive(Debug, Clone, Default)]
pub(super) struct PooledSpread {
    judged: VecDeque<Judged>,
}

/// One judged comparison's cycles.
#[derive(Debug, Clone)]
struct Judged {
    ratios: Vec<f64>,
    /// What their distances are read as, times: other than 1 where their halves measured
    /// another length than the next comparison's will (`PooledSpread::rescale`).
    scale: f64,
}

impl Judged {
    /// The current comparison's cycles, read as they are.
    fn unscaled(ratios: &[f64]) -> Self {
        Judged {
            ratios: ratios.to_vec(),
            scale: 1.0,
        }
    }

    /// The distance between each two of its cycles.
    fn differences(&self) -> impl Iterator<Item = f64> + '_ {
        let ratios = &self.ratios;
        ratios.iter().enumerate().flat_map(move |(i, a)| {
            ratios[i + 1..]
                .iter()
                .map(move |b| (a - b).abs() * self.scale)
        })
    }

    /// Its cycles within `limit` of their median (all, for an infinite one).
    fn within(&self, limit: f64) -> Vec<f64> {
        let middle = median(&self.ratios);
        let near = |r: &f64| ((r - middle) * self.scale).abs() <= limit;
        self.ratios.iter().copied().filter(near).collect()
    }

    /// Its cycles further than `limit` from their median.
    fn far(&self, limit: f64) -> usize {
        self.ratios.len() - self.within(limit).len()
    }

    /// The sum of the squared deviations from their mean of its cycles within `limit` of their
    /// median, and their count less one: (0, 0) with fewer than two.
    fn squares_within(&self, limit: f64) -> (f64, usize) {
        match self.within(limit) {
            kept if kept.len() < 2 => (0.0, 0),
            kept => {
                let (_, variance) = mean_and_variance(&kept);
                let freedom = kept.len() - 1;
                (variance * freedom as f64 * self.scale.powi(2), freedom)
            }
        }
    }
}

/// The median distance between two draws of a normal spread, times this, is its standard
/// deviation (Shamos's estimator: 1 / (√2 · 0.6745)).
const MEDIAN_DIFFERENCE_TO_SD: f64 = 1.0483;
/// A cycle this many robust standard deviations from its comparison's median is not counted in
/// the variance that says whether the mean is too noisy (`PooledSpread::variance_with`): a
/// normal spread puts a cycle that far from its centre about once in 500 million. A stop of
/// 0.7 s in a 2 s half lies about 15 of the VM job's deviations (2.4%) away; at the GPU
/// server's (15 to 30%), a cycle would have to lie past its other cycles by its whole ratio.
const FAR_CYCLE_SPREADS: f64 = 6.0;
/// Fewer cycles pooled than this, none is left out: a first comparison's three distances say
/// too little of the spread. (On the unit tests' model of the GPU server's bursty job, whose
/// first comparison's cycles can lie close together by chance, a cycle of its ordinary noise
/// was left out, and a level that cost nothing was judged on a mean too noisy to judge by.)
const MIN_CYCLES_TO_SET_FAR_ASIDE: usize = 10;
/// More than one pooled cycle in this many far, none is left out: the job's pace turned
/// noisier, and its new cycles lie far from the quiet ones' spread. A job's own stops are rare:
/// one every 30 to 90 s falls in about one level half of 2 s in 30.
const FAR_AT_MOST_ONE_IN: usize = 10;

impl PooledSpread {
    /// A comparison judged with these cycles' ratios.
    pub(super) fn add(&mut self, ratios: &[f64]) {
        if ratios.len() < 2 {
            return;
        }
        if self.judged.len() == POOLED_COMPARISONS {
            self.judged.pop_front();
        }
        self.judged.push_back(Judged::unscaled(ratios));
    }

    /// The pooled variance of the job's cycles, `ratios` (the current comparison's) included,
    /// without those far from their comparison's median: more than `FAR_CYCLE_SPREADS` times
    /// the robust standard deviation (from the median distance between two cycles of the same
    /// comparison, Shamos's estimator) from it. 0 before two cycles.
    ///
    /// A stop of the job's own in a level's half (a checkpoint, a garbage collection) reads
    /// that cycle's ratio far low. The mean counts it, which holds offline back; the variance
    /// counted it too: one stop of 0.7 s in a 2 s half among 20 cycles that spread by 2.4%, as
    /// the VM job's, read a spread of 8%, a mean too noisy to judge by (`mean_too_noisy`), and
    /// the level was kept. Over the VM job's recorded steps with such stops every 30 to 90 s
    /// and every level costing 2%, offline stayed at a level kept as too noisy 26% of two
    /// hours, against 3% without stops; with the far cycles left out, 3.5%.
    ///
    /// Only the far cycles are left out, and the variance stays a sum of squares: read from the
    /// median distance itself, it came out smaller than the sum of squares where cycles spread
    /// with heavier tails than a normal spread, as the unit tests' model of the GPU server's
    /// bursty job, and six tests of a job too noisy to judge failed.
    pub(super) fn variance_with(&self, ratios: &[f64]) -> f64 {
        let current = Judged::unscaled(ratios);
        let all = || self.judged.iter().chain(std::iter::once(&current));
        let cycles: usize = all().map(|judged| judged.ratios.len()).sum();
        let differences: Vec<f64> = all().flat_map(Judged::differences).collect();
        let limit = FAR_CYCLE_SPREADS * MEDIAN_DIFFERENCE_TO_SD * median(&differences);
        let far: usize = all().map(|judged| judged.far(limit)).sum();
        // Stops are rare: where more cycles lie far, the job's pace turned noisier, and all count.
        let limit =
            match cycles >= MIN_CYCLES_TO_SET_FAR_ASIDE && far * FAR_AT_MOST_ONE_IN <= cycles {
                true => limit,
                false => f64::INFINITY,
            };
        match Self::pooled(all().map(|judged| judged.squares_within(limit))) {
            (_, 0) => 0.0,
            (sum, freedom) => sum / freedom as f64,
        }
    }

    /// A spread the job's cycles keep below nine times in ten, from the pooled variance with
    /// `ratios` (`spread_upper_bound`); infinite before two cycles.
    pub(super) fn upper_bound_with(&self, ratios: &[f64]) -> f64 {
        let current = Judged::unscaled(ratios);
        let all = self.judged.iter().chain(std::iter::once(&current));
        match Self::pooled(all.map(|judged| judged.squares_within(f64::INFINITY))) {
            (_, 0) => f64::INFINITY,
            (sum, freedom) => spread_upper_bound(sum / freedom as f64, freedom),
        }
    }

    /// Sums of squared deviations and their degrees of freedom, pooled.
    fn pooled(judged: impl Iterator<Item = (f64, usize)>) -> (f64, usize) {
        judged.fold((0.0, 0), |(sum, freedom), (s, f)| (sum + s, freedom + f))
    }

    /// The comparisons pooled, read as if their cycles spread by `ratio` times the variance:
    /// their halves measured another length than the next comparison's will.
    pub(super) fn rescale(&mut self, ratio: f64) {
        for judged in &mut self.judged {
            judged.scale *= ratio.sqrt();
        }
    }

    pub(super) fn clear(&mut self) {
        self.judged.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cycles around 1 that spread by about 2.4%, as the VM job's.
    const QUIET: [&[f64]; 4] = [
        &[1.02, 0.98, 1.0, 1.03, 0.97],
        &[0.99, 1.01, 1.04, 0.98, 1.0],
        &[1.0, 0.96, 1.02, 0.99, 1.03],
        &[1.01, 0.97, 1.0, 1.02, 0.98],
    ];

    fn quiet() -> PooledSpread {
        let mut spread = PooledSpread::default();
        QUIET.iter().for_each(|ratios| spread.add(ratios));
        spread
    }

    /// The pooled variance of `judged`'s cycles, every one counted.
    fn classical(judged: &[&[f64]]) -> f64 {
        let (sum, freedom) = judged.iter().fold((0.0, 0), |(sum, freedom), ratios| {
            let (_, variance) = mean_and_variance(ratios);
            let f = ratios.len() - 1;
            (sum + variance * f as f64, freedom + f)
        });
        sum / freedom as f64
    }

    /// `QUIET`'s cycles and `current`'s, every one counted.
    fn classical_with_quiet(current: &[f64]) -> f64 {
        classical(&[&QUIET[..], &[current]].concat())
    }

    fn close(a: f64, b: f64) -> bool {
        (a / b - 1.0).abs() < 1e-9
    }

    #[test]
    fn a_cycle_a_stop_slowed_does_not_make_the_pace_read_noisy() {
        let spread = quiet();
        // A stop of 0.7 s in a 2 s level half: the cycle reads a third low.
        let with_stop = [1.0, 0.65, 1.01, 0.99];
        let every_cycle = classical_with_quiet(&with_stop).sqrt();
        assert!(every_cycle > 0.07, "{every_cycle}");
        let robust = spread.variance_with(&with_stop).sqrt();
        assert!((0.015..0.035).contains(&robust), "{robust}");
        // The spread for the futility stop counts every cycle.
        assert!(spread.upper_bound_with(&with_stop) > every_cycle);
    }

    #[test]
    fn a_pace_turned_noisy_counts_all_its_cycles() {
        // More than one cycle in ten far (all six of these lie further than six robust
        // deviations, about 0.25, from their median): the job's pace spreads wider now.
        let noisy = [1.4, 0.6, 1.35, 0.65, 1.3, 0.7];
        let variance = quiet().variance_with(&noisy);
        assert!(close(variance, classical_with_quiet(&noisy)), "{variance}");
    }

    #[test]
    fn fewer_than_ten_cycles_count_all() {
        let first = [1.0, 1.01, 0.99, 1.0];
        let mut spread = PooledSpread::default();
        spread.add(&first);
        let ratios = [1.0, 0.99, 0.6, 1.01];
        let variance = spread.variance_with(&ratios);
        assert!(close(variance, classical(&[&first, &ratios])), "{variance}");
        assert_eq!(PooledSpread::default().variance_with(&[1.0]), 0.0);
    }

    #[test]
    fn rescaled_comparisons_read_as_spread_so_much_wider() {
        let mut spread = quiet();
        let before = spread.variance_with(&[]);
        spread.rescale(4.0);
        assert!(close(spread.variance_with(&[]), 4.0 * before));
    }
}
