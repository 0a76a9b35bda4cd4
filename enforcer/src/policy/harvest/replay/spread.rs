//! How noisy a recorded job's pace is as the pace controller's cycles read it: with nothing
//! changing, the spread of a cycle's ratio (one half's pace over the next one's) by the length
//! of its halves, read from the count's means and from the counts alone, and how many cycles a
//! comparison would need before its interval narrows to ε (`enforcer replay-pace --spread`).
//! Whether a job's signal can judge ε at all, and with halves how long, before any run beside
//! offline.

use serde::Serialize;

use super::{
    super::{
        SETTLE_NS,
        statistics::{cycle_ratio, mean_and_variance},
    },
    Reporter, Reporting, S, StepTrace,
};
use crate::policy::pace::{Mean, Report};

/// The halves' measured lengths looked at, s: the controller's shortest (two reports of a job
/// reporting once a second), the GPU server's job's (two of its 90th-percentile gaps), and
/// longer ones, up to the controller's longest (`MAX_MEASURE_NS`).
pub(crate) const MEASURES_S: [f64; 5] = [2.0, 3.2, 4.0, 6.4, 10.0];

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.96;

/// The spread of one length of halves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct CycleSpread {
    /// Each half: `SETTLE_NS`, then this long measured.
    pub measure_s: f64,
    /// Cycles the recording holds, one after another.
    pub cycles: usize,
    /// The standard deviation of a cycle's ratio, read from the means, then from the counts.
    pub from_means: f64,
    pub from_counts: f64,
}

impl CycleSpread {
    /// Cycles before a comparison's 95% interval narrows to ±`epsilon` at the spread read from
    /// the means (normal, not Student's t: a lower bound for few cycles).
    pub(crate) fn cycles_for(&self, epsilon: f64) -> f64 {
        (Z95 * self.from_means / epsilon).powi(2)
    }

    /// The same in minutes of comparing: two halves a cycle.
    pub(crate) fn minutes_for(&self, epsilon: f64) -> f64 {
        self.cycles_for(epsilon) * 2.0 * (SETTLE_NS as f64 / S as f64 + self.measure_s) / 60.0
    }
}

/// The reports `reporter` sends over the whole of `trace`, as the daemon keeps each.
pub(crate) fn all_reports(trace: &StepTrace, reporter: Reporter) -> Vec<Report> {
    let mut reporting = Reporting::new(reporter);
    trace
        .ends_between(0, trace.length_ns())
        .filter_map(|end| reporting.step(end))
        .map(|(at_ns, steps, mean)| Report {
            at_ns,
            steps,
            mean: mean.map(|mean| Mean::before(at_ns, mean)),
        })
        .collect()
}

/// The spread of a cycle's ratio over `reports` (`length_ns` of them), halves of `SETTLE_NS`
/// and `measure_s` measured, one cycle after another; with the cycles counted.
fn spread(reports: &[Report], length_ns: u64, measure_s: f64) -> (f64, usize) {
    let half_ns = SETTLE_NS + (measure_s * S as f64) as u64;
    let ratios: Vec<f64> = (0..length_ns / (2 * half_ns))
        .filter_map(|cycle| cycle_ratio(reports, cycle * 2 * half_ns, half_ns))
        .collect();
    let (_, variance) = mean_and_variance(&ratios);
    (variance.sqrt(), ratios.len())
}

/// `trace`'s cycles' spread for each of `measures_s`, where it holds three cycles or more.
pub(crate) fn cycle_spreads(trace: &StepTrace, measures_s: &[f64]) -> Vec<CycleSpread> {
    let means = all_reports(trace, Reporter::WithMeans);
    let counts = all_reports(trace, Reporter::CountsOnly);
    measures_s
        .iter()
        .filter_map(|&measure_s| {
            let (from_means, cycles) = spread(&means, trace.length_ns(), measure_s);
            let (from_counts, _) = spread(&counts, trace.length_ns(), measure_s);
            (cycles >= 3).then_some(CycleSpread {
                measure_s,
                cycles,
                from_means,
                from_counts,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_needs_cycles_by_the_square_of_the_spread_over_epsilon() {
        let row = CycleSpread {
            measure_s: 2.0,
            cycles: 10,
            from_means: 0.01,
            from_counts: 0.02,
        };
        // 1.96² cycles of two 3 s halves.
        assert!((row.cycles_for(0.01) - 3.8416).abs() < 1e-9);
        assert!((row.minutes_for(0.01) - 3.8416 * 6.0 / 60.0).abs() < 1e-9);
        // Half the ε, four times the cycles.
        assert!((row.cycles_for(0.005) - 4.0 * 3.8416).abs() < 1e-9);
    }

    #[test]
    fn a_recording_too_short_for_three_cycles_of_a_length_has_no_row_for_it() {
        // 30 s of 50 ms steps: 3.2 s halves give three cycles, 10 s halves one.
        let steps: Vec<f64> = (0..600).map(|i| if i == 0 { 25.0 } else { 50.0 }).collect();
        let trace = StepTrace::from_step_ms(&steps).unwrap();
        let rows = cycle_spreads(&trace, &[3.2, 10.0]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!((rows[0].measure_s, rows[0].cycles), (3.2, 3));
        assert!(
            rows[0].from_means < 1e-3 && rows[0].from_counts < 1e-3,
            "{rows:?}"
        );
    }
}
