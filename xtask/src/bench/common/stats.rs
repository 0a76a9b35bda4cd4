//! Small statistics for benchmark reports: medians, spreads and bootstrap confidence
//! intervals of paired ratios (fixed seed, so a report is reproducible from its samples), and
//! the table cell they are written in.

use enforcer_common::rng::SplitMix64;
pub use enforcer_common::stats::{median, quantile, sorted};

/// The median of `values`; None where there are none.
pub fn median_of(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let values: Vec<f64> = values.into_iter().collect();
    (!values.is_empty()).then(|| median(&values))
}

/// A report's table cell: `value` with `digits` decimals and `unit`, or a dash where there is
/// none.
pub fn cell(value: Option<f64>, digits: usize, unit: &str) -> String {
    value.map_or("–".to_owned(), |v| format!("{v:.digits$}{unit}"))
}

pub fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

/// 95% percentile-bootstrap interval of the median of `values`.
pub fn bootstrap_median_ci(values: &[f64], seed: u64) -> (f64, f64) {
    if values.len() < 2 {
        let v = values.first().copied().unwrap_or(f64::NAN);
        return (v, v);
    }
    let mut rng = SplitMix64::new(seed);
    let mut next = || rng.next_u64();
    let mut medians: Vec<f64> = (0..2000)
        .map(|_| {
            let resample: Vec<f64> = (0..values.len())
                .map(|_| values[(next() % values.len() as u64) as usize])
                .collect();
            median(&resample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (medians[50], medians[1949])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_interval() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let values: Vec<f64> = (0..50).map(|i| 1.0 + (i % 5) as f64 * 0.01).collect();
        let (lo, hi) = bootstrap_median_ci(&values, 1);
        assert!(lo <= median(&values) && median(&values) <= hi);
        assert!(hi - lo < 0.05);
    }
}
