//! Quantiles and medians of samples, shared by the workload generators' reports, the tests
//! and the benchmarks, and Student's t for the intervals of the pace controller and of the
//! reports that read its cycles. (Bucketed histograms have their own
//! `histogram::percentile`.)

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

/// Student's t at 95% (two-sided) for 1 to 9 degrees of freedom, from the tables.
pub const T95: [f64; 9] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26];

/// Student's t at 95% (two-sided) for `freedom` degrees of freedom (at least 1): the tables'
/// to 9, the expansion beyond.
pub fn t95(freedom: usize) -> f64 {
    T95.get(freedom.max(1) - 1)
        .copied()
        .unwrap_or_else(|| student_t(1.96, freedom))
}

/// Student's t quantile whose normal counterpart is `z` (1.96 for a two-sided 95% interval,
/// 2.576 for 99%), with `freedom` degrees of freedom, by the Cornish–Fisher expansion: within
/// 0.01 of the tables from 11 degrees of freedom at 99% and from 7 at 95%, and too low below
/// (2.55 for 2.57 at 5, 95%).
pub fn student_t(z: f64, freedom: usize) -> f64 {
    let v = freedom as f64;
    z + (z.powi(3) + z) / (4.0 * v)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expansion_gives_students_t_within_a_hundredth() {
        // Tables, 99%: 3.106 at 11 degrees of freedom, 2.845 at 20, 2.704 at 40, 2.660 at 60;
        // 95%: 2.365 at 7, 2.262 at 9, 2.086 at 20.
        let tables = [
            (2.576, 11, 3.106),
            (2.576, 20, 2.845),
            (2.576, 40, 2.704),
            (2.576, 60, 2.660),
            (1.96, 7, 2.365),
            (1.96, 9, 2.262),
            (1.96, 20, 2.086),
        ];
        for (z, freedom, table) in tables {
            let t = student_t(z, freedom);
            assert!((t - table).abs() < 0.01, "{z} at {freedom}: {t}");
        }
        // Where the tables end, the expansion takes over within a hundredth.
        assert!((t95(9) - 2.26).abs() < 1e-9 && (t95(10) - 2.228).abs() < 0.01);
        assert_eq!(t95(1), 12.71);
    }

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
