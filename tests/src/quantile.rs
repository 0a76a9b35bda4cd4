//! Nearest-rank quantiles, shared by the workload generators' reports and the benchmarks.

/// `values` in ascending order (NaN last), for `quantile`.
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
}
