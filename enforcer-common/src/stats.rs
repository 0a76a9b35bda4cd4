//! Quantiles and medians of samples, shared by the workload generators' reports, the tests
//! and the benchmarks. (Bucketed histograms have their own `histogram::percentile`.)

/// `values` in ascending order (NaN last), for [`quantile`].
pub fn sorted(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut values: Vec<f64> = values.into_iter().collect();
    values.sort_by(f64::total_cmp);
    values
}

/// The value at quantile `q` of `sorted` (nearest rank); NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// The median: the middle value, or the mean of the two middle ones; NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let sorted = sorted(values.iter().copied());
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_of_a_sorted_list() {
        let values = sorted([5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!(values, [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert_eq!(quantile(&values, 0.5), 3.0);
        assert_eq!(quantile(&values, 0.99), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
