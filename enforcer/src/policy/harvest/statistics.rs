//! The pace controller's arithmetic: a job's pace between two instants, the paired cycles'
//! interval, whether more cycles could still show a level free, or costly, and whether a pace
//! lies far below the last ones (a stop, not noise).

use enforcer_common::stats::{T95, median};
use serde::Serialize;

use super::{
    super::pace::Report, FUTILITY_Z, MAX_CYCLES, MAX_CYCLES_ABOVE_POLICY, MAX_MEASURE_NS,
    MEAN_NOISE_LIMIT, MIN_MEASURE_NS, Measured, REPORTS_PER_HALF, SETTLE_NS,
};

/// A level's pace against offline held back: the mean of its cycles' ratios and its
/// interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Ratio {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    /// The cycles it is the mean of: more than a comparison's own where a too-noisy level's
    /// carried cycles showed it costly (`Carried`).
    pub cycles: usize,
}

/// Student's t at 95% beyond the tables' 9 degrees of freedom: 2.23 at 10, 2.20 at 11, 2.07
/// at 23. A comparison runs to `MAX_CYCLES_NEAR_FLOOR` (12) cycles at most at the policy's
/// level and below, and to `MAX_CYCLES_ABOVE_POLICY` (24) above it, where the interval is a
/// little wider than Student's: a level is kept there a little less readily.
const T95_BEYOND: f64 = 2.2;

/// The mean of `ratios` with its 95% interval; None with fewer than two.
pub(crate) fn paired_interval(ratios: &[f64]) -> Option<Ratio> {
    let n = ratios.len();
    if n < 2 {
        return None;
    }
    let (mean, variance) = mean_and_variance(ratios);
    let t = T95.get(n - 2).copied().unwrap_or(T95_BEYOND);
    let spread = t * (variance / n as f64).sqrt();
    Some(Ratio {
        ratio: mean,
        low: mean - spread,
        high: mean + spread,
        cycles: n,
    })
}

/// The mean of `values` (at least one) and their sample variance (0 for one).
pub(super) fn mean_and_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = match values.len() {
        0 | 1 => 0.0,
        _ => values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0),
    };
    (mean, variance)
}

/// The standard error of the mean of `values` (at least one; 0 for one).
pub(super) fn standard_error(values: &[f64]) -> f64 {
    let (_, variance) = mean_and_variance(values);
    (variance / values.len() as f64).sqrt()
}

/// Held halves' paces as one measurement: their mean, its standard error and their count;
/// None without one.
pub(super) fn measured(held: &[f64]) -> Option<Measured> {
    (!held.is_empty()).then(|| Measured {
        steps_per_s: mean_and_variance(held).0,
        standard_error: standard_error(held),
        intervals: held.len(),
    })
}

/// How many standard errors of the difference the mean of `later` lies above the mean of
/// `earlier` (below, negative), from the spread of both together: how far a comparison's
/// cycles read a level other than the cycles before it did. None where `earlier` has fewer
/// than two or `later` none.
pub(super) fn errors_apart(earlier: &[f64], later: &[f64]) -> Option<f64> {
    if earlier.len() < 2 || later.is_empty() {
        return None;
    }
    let all: Vec<f64> = earlier.iter().chain(later).copied().collect();
    let (_, variance) = mean_and_variance(&all);
    let (earlier_mean, _) = mean_and_variance(earlier);
    let (later_mean, _) = mean_and_variance(later);
    let error = (variance * (1.0 / earlier.len() as f64 + 1.0 / later.len() as f64)).sqrt();
    Some((later_mean - earlier_mean) / error)
}

/// Whether `ratios` could still show a level free by `horizon` cycles: a sequential test's
/// futility stop. The interval at `horizon` clears `floor` where the mean of all cycles is
/// at least `floor + t·s/√horizon`; the cycles left, drawn around the mean so far (but no
/// higher than 1) with `spread`, reach that mean with a chance of at least 5%
/// (`FUTILITY_Z`). Below it, they would only hold offline back for a verdict already known.
///
/// No higher than 1: offline held back is the reference, and a level that shares the machine
/// with offline does not run training faster than that. A mean above 1 is the noise. On the
/// GPU server the ResNet-50 job's reported steps gave `training_cores` means of 1.05 to 1.14
/// over cycles that spread by 15 to 20%, and the cycles left were drawn around those means:
/// such levels ran three to eight cycles, half of each held back, for no verdict.
///
/// The spread is `spread`, not the cycles' own: a few cycles' spread is itself noisy, and one
/// that came out small by chance kept comparisons of a job too noisy for any verdict running
/// (on a model of the GPU server's job, a cost of 10% kept at `policy` or above 86% of two
/// hours, against 42%). The comparison passes `PooledSpread::upper_bound_with`.
pub(super) fn could_show_free_by(ratios: &[f64], floor: f64, horizon: usize, spread: f64) -> bool {
    could_still_show(Shown::Free, ratios, floor, horizon, Some(spread))
}

/// Whether cycles that spread by `spread` could show any level free in a comparison of their
/// own, of `MAX_CYCLES_ABOVE_POLICY` cycles at most: `could_show_free_by` before its first
/// cycle, at a mean of 1 (a level that costs training nothing). False where the noise alone
/// rules it out: no level above the policy's is worth a comparison then.
pub(super) fn could_show_free_at_spread(spread: f64, floor: f64) -> bool {
    could_reach(Shown::Free, 0, 1.0, spread, floor, MAX_CYCLES_ABOVE_POLICY)
}

/// Whether `ratios` could still show a level costly by `MAX_CYCLES` cycles: the futility
/// stop of a comparison whose mean is too noisy to judge by (`mean_too_noisy`), where only an
/// interval below `floor` moves the level. The interval at `MAX_CYCLES` lies below `floor`
/// where the mean of all cycles is at most `floor − t·s/√MAX_CYCLES`; the cycles left, drawn
/// around the mean so far with the spread so far, reach that mean with a chance of at least 5%
/// (`FUTILITY_Z`). Otherwise they would only hold offline back for a level that stays.
///
/// Cycles that spread like the GPU server's ResNet-50 job's (9 to 20%) put a level that costs
/// nothing below `1 − ε` on the mean about half the time, and its comparison then ran to six
/// cycles, half of each held back, where the interval lies below `1 − ε` only for a mean 10
/// to 20% short of it.
pub(super) fn could_show_costly_by_max_cycles(ratios: &[f64], floor: f64) -> bool {
    could_still_show(Shown::Costly, ratios, floor, MAX_CYCLES, None)
}

/// Whether the cycles after `ratios`, up to `horizon`, could still show the level `shown`
/// (`could_reach`), drawn around the mean so far (no higher than 1, for free) with `spread`,
/// or the spread so far.
fn could_still_show(
    shown: Shown,
    ratios: &[f64],
    floor: f64,
    horizon: usize,
    spread: Option<f64>,
) -> bool {
    let n = ratios.len();
    if n >= horizon {
        return false;
    }
    if n < 2 {
        // No spread yet to judge from.
        return true;
    }
    let (mean, variance) = mean_and_variance(ratios);
    let mean = match shown {
        Shown::Free => mean.min(1.0),
        Shown::Costly => mean,
    };
    let spread = spread.unwrap_or_else(|| variance.sqrt());
    could_reach(shown, n, mean, spread, floor, horizon)
}

/// Which side of `floor` a comparison's interval is to clear.
#[derive(Debug, Clone, Copy)]
enum Shown {
    /// Above it: the level keeps training's pace.
    Free,
    /// Below it: the level costs training more than ε.
    Costly,
}

/// Whether `horizon − n` more cycles, drawn around `mean` with `spread`, reach a mean of
/// all `horizon` whose interval clears `floor` on the side `shown` with a chance of at
/// least 5%.
fn could_reach(shown: Shown, n: usize, mean: f64, spread: f64, floor: f64, horizon: usize) -> bool {
    let total = horizon as f64;
    let left = (horizon - n) as f64;
    let t = T95.get(horizon - 2).copied().unwrap_or(T95_BEYOND);
    // Above `floor` for free, below it for costly.
    let side = match shown {
        Shown::Free => 1.0,
        Shown::Costly => -1.0,
    };
    let needed = floor + side * t * spread / total.sqrt();
    if spread == 0.0 {
        return side * (mean - needed) >= 0.0;
    }
    // How far beyond the mean so far, toward `needed`, the cycles left must come, in standard
    // errors of their own mean.
    let z = side * total * (needed - mean) / (spread * left.sqrt());
    z <= FUTILITY_Z
}

/// The χ² distribution's 10% quantiles for 1 to 10 degrees of freedom.
const CHI2_10: [f64; 10] = [
    0.0158, 0.211, 0.584, 1.064, 1.610, 2.204, 2.833, 3.490, 4.168, 4.865,
];

/// The spread below which the true one lies nine times in ten, from a sample `variance` of
/// `freedom` (at least one) degrees of freedom: `s·√(f / χ²₀.₁₀(f))`, 3.1 times the sample's
/// spread at two degrees of freedom, 1.4 times at ten, 1.2 at thirty (Wilson–Hilferty's
/// approximation of the quantile beyond the table).
pub(super) fn spread_upper_bound(variance: f64, freedom: usize) -> f64 {
    let f = freedom.max(1) as f64;
    let quantile = CHI2_10.get(freedom.max(1) - 1).copied().unwrap_or_else(|| {
        let a = 2.0 / (9.0 * f);
        f * (1.0 - a - 1.2816 * a.sqrt()).powi(3)
    });
    (variance * f / quantile).sqrt()
}

/// Whether the mean of `MAX_CYCLES` cycles that spread with `variance` (`PooledSpread`) would
/// still be too noisy to judge a level by: its standard error above `MEAN_NOISE_LIMIT` times
/// `epsilon`.
/// On the VM a comparison's cycles spread by 2.2 to 2.6% (a standard error of about 1% at six
/// cycles, within the limit at ε = 1%); on the GPU server the ResNet-50 job's reported steps
/// spread by 9 to 20% (4 to 8%), where a mean below `1 − ε` says nothing of the level: a
/// level that costs nothing reads that low in about four comparisons of ten.
pub(super) fn mean_too_noisy(variance: f64, epsilon: f64) -> bool {
    (variance / MAX_CYCLES as f64).sqrt() > MEAN_NOISE_LIMIT * epsilon
}

/// Training's pace over `[from_ns, to_ns]`, from the reports inside; None with fewer than two.
///
/// Where two or more of them carry the count's mean over a time that began at `since_ns` or
/// later (the half's own, its settling included: not a time that saw another level), the
/// slope from the first of those means to the last, each at the middle of its time. Otherwise
/// the count between the first and the last report, over their time. A job whose steps come
/// in bursts climbs in stairs: on a model of the GPU server's ResNet-50 job (6 loader workers
/// whose batches take 0.7 s ± 15–30%, 36 ms of GPU a step: its step times p50 36 ms, p99 681
/// to 842 ms; 36 and 639 ms on the server), a cycle of halves measuring 3.2 s spread by 20 to
/// 34% read from counts and by 12 to 26% from means
/// (docs/experiments/2026-11-28-mean-counts.md).
pub(crate) fn pace_between(
    reports: &[Report],
    since_ns: u64,
    from_ns: u64,
    to_ns: u64,
) -> Option<f64> {
    pace_and_span_between(reports, since_ns, from_ns, to_ns).map(|(pace, _)| pace)
}

/// `pace_between`, with the time it was read over, ns: from the first mean (or report) it
/// counts to the last. A stop before the first or after the last is not in the pace, so what
/// counts the time stops take (`stops`) counts this time, not the window's.
pub(super) fn pace_and_span_between(
    reports: &[Report],
    since_ns: u64,
    from_ns: u64,
    to_ns: u64,
) -> Option<(f64, u64)> {
    let inside = || {
        reports
            .iter()
            .filter(move |report| report.at_ns >= from_ns && report.at_ns <= to_ns)
    };
    let mut means = inside()
        .filter(|report| report.mean.is_some_and(|mean| mean.from_ns >= since_ns))
        .filter_map(Report::mean_point);
    if let (Some((first_at, first)), Some((last_at, last))) = (means.next(), means.next_back())
        && last_at > first_at
    {
        let span_ns = last_at - first_at;
        return Some(((last - first).max(0.0) * 1e9 / span_ns as f64, span_ns));
    }
    let first = inside().next()?;
    let last = inside().next_back()?;
    let span_ns = last
        .at_ns
        .checked_sub(first.at_ns)
        .filter(|&span| span > 0)?;
    let steps = last.steps.saturating_sub(first.steps);
    Some((steps as f64 * 1e9 / span_ns as f64, span_ns))
}

/// The ratio of a cycle of two halves of `half_ns` from `start_ns`, each settling for
/// `SETTLE_NS`: the first half's pace over the second's (infinite, or NaN, where the second's
/// is 0); None where a half has fewer than two reports.
pub(super) fn cycle_ratio(reports: &[Report], start_ns: u64, half_ns: u64) -> Option<f64> {
    let pace = |from: u64| pace_between(reports, from, from + SETTLE_NS, from + half_ns);
    Some(pace(start_ns)? / pace(start_ns + half_ns)?)
}

/// How long a half measures for a job reporting as in `reports`: `REPORTS_PER_HALF` of its
/// report period, within `MIN_MEASURE_NS` and `MAX_MEASURE_NS`. The period is the 90th
/// percentile of the gaps between reports, not their median: a half's pace needs two reports
/// inside it, and a window two gaps long holds two wherever no gap in it is longer. On the GPU
/// server the ResNet-50 job reports after the first step past each second, and 1% of its steps
/// wait 0.6 s or more for their batch, so its gaps run from 1 to 1.6 s; with halves two median
/// gaps long, the first comparison of one window counted 3 of its 7 cycles, the others lost
/// to a half with one report.
pub(super) fn measure_ns(reports: &[Report]) -> u64 {
    let mut gaps: Vec<u64> = reports
        .windows(2)
        .map(|pair| pair[1].at_ns.saturating_sub(pair[0].at_ns))
        .collect();
    gaps.sort_unstable();
    let period = gaps.get(gaps.len() * 9 / 10).copied().unwrap_or(0);
    (period * REPORTS_PER_HALF).clamp(MIN_MEASURE_NS, MAX_MEASURE_NS)
}

/// Where the spread about the median that judges a far pace is read from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum SpreadFrom {
    /// Every pace: their median absolute deviation.
    EveryPace,
    /// The paces above the median only: their median distance above it. A stop only slows a
    /// pace, so that where stops are frequent a spread read from both sides widens with them.
    FasterHalf,
}

/// Fewer paces known than this, none lies far below: their median and spread are not known.
const MIN_KNOWN_PACES: usize = 6;
/// The median absolute deviation of a normal spread, times this, is its standard deviation
/// (and so is the median distance above the median).
const MAD_TO_SD: f64 = 1.4826;

/// The median of `paces`, where `pace` lies more than `spreads` robust standard deviations
/// below it, the deviation read as `from` says: a pace drawn from a normal spread lies four
/// below about once in 30,000.
pub(super) fn far_below_median(
    paces: impl IntoIterator<Item = f64>,
    pace: f64,
    spreads: f64,
    from: SpreadFrom,
) -> Option<f64> {
    let paces: Vec<f64> = paces.into_iter().collect();
    if paces.len() < MIN_KNOWN_PACES {
        return None;
    }
    let middle = median(&paces);
    let deviations: Vec<f64> = match from {
        SpreadFrom::EveryPace => paces.iter().map(|p| (p - middle).abs()).collect(),
        SpreadFrom::FasterHalf => paces
            .iter()
            .filter(|&&p| p > middle)
            .map(|p| p - middle)
            .collect(),
    };
    if deviations.is_empty() {
        return None;
    }
    let deviation = MAD_TO_SD * median(&deviations);
    (middle - pace > spreads * deviation).then_some(middle)
}
