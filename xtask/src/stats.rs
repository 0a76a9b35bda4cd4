//! Small statistics for benchmark reports: medians, spreads and bootstrap confidence
//! intervals of paired ratios (fixed seed, so a report is reproducible from its samples).

pub use reamer_tests::quantile::{quantile, sorted};

pub fn median(values: &[f64]) -> f64 {
    let sorted = sorted(values.iter().copied());
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
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
    let mut state = seed;
    let mut next = || {
        // SplitMix64.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
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
