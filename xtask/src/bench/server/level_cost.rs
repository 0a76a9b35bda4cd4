//! What each of the pace controller's levels cost training, read from the controller's own
//! halves: in its timed windows, the job's steps over each half of a level, against the half
//! with offline held back just before it.
//!
//! The section's `% of alone` pairs a window with training alone's window of the same round,
//! a minute or two away, and the server's ResNet-50 job moves its pace by about 10% over such
//! a gap (1121 and 1012 images/s alone in two rounds on 2026-11-27; 1104 and 970 under the
//! controller on 2026-11-28). The controller's halves are four seconds apart, so a level's
//! half over the held half before it is the run's closest pairing; over a window's cycles,
//! and the windows of a run, its mean is the run's best reading of a level's cost. It is the
//! cost of the level switched on and off every few seconds, which the run's windows of
//! reamer's defaults (the core policy's level, never switched) can be set against.

use enforcer_common::stats::t95;

use super::{Scenario, pace_noise::HALF_SETTLE_S, report::Window};
use crate::bench::common::harvest::HarvestStep;

/// The level that holds offline back: the reference of every other level's halves.
const HELD: &str = "held";
/// A half measured over less than this (past its settling) gives too few steps to count.
const MIN_MEASURED_S: f64 = 1.0;
/// Fewer halves than this give no interval worth a figure.
const MIN_HALVES: usize = 3;

/// One half of the controller's cycles within a window's timed part: its level and the
/// job's pace over it (steps a second, past the half's first `HALF_SETTLE_S`).
#[derive(Debug, PartialEq)]
struct Half {
    level: String,
    pace: f64,
}

/// The halves of a window's controller `steps` that began in its timed part and that the
/// controller ended itself (the one the window's end cut is left out), with the job's steps
/// (`step_ms`, in order from the timed part's start) that ended in each.
fn halves(steps: &[HarvestStep], step_ms: &[f64]) -> Vec<Half> {
    let ends_s: Vec<f64> = step_ms
        .iter()
        .scan(0.0, |at, ms| {
            *at += ms / 1e3;
            Some(*at)
        })
        .collect();
    steps
        .windows(2)
        .filter(|pair| pair[0].at_s >= 0.0)
        .filter_map(|pair| {
            let (from, to) = (pair[0].at_s + HALF_SETTLE_S, pair[1].at_s);
            if to - from < MIN_MEASURED_S || ends_s.last().is_none_or(|&last| to > last) {
                return None;
            }
            let steps = ends_s.iter().filter(|&&e| from <= e && e < to).count();
            Some(Half {
                level: pair[0].level.clone(),
                pace: steps as f64 / (to - from),
            })
        })
        .collect()
}

/// Each level's halves over the held half just before each, as the controller's cycles pair
/// them, level by level in the order they first appear. Against the held halves on both
/// sides a drift of the pace would cancel too, but two neighbouring ratios would share a held
/// half, and their mean's interval would need their correlation; one held half each keeps the
/// ratios independent.
fn ratios_by_level(halves: &[Half]) -> Vec<(String, Vec<f64>)> {
    let mut by_level: Vec<(String, Vec<f64>)> = Vec::new();
    for pair in halves.windows(2) {
        let (held, half) = (&pair[0], &pair[1]);
        if held.level != HELD || half.level == HELD || held.pace <= 0.0 {
            continue;
        }
        let ratio = half.pace / held.pace;
        match by_level.iter_mut().find(|(level, _)| *level == half.level) {
            Some((_, ratios)) => ratios.push(ratio),
            None => by_level.push((half.level.clone(), vec![ratio])),
        }
    }
    by_level
}

/// `0.916 [0.855, 0.977] over 10 halves`, or the mean alone where there are too few halves.
fn mean_and_interval(ratios: &[f64]) -> String {
    let n = ratios.len();
    let mean = ratios.iter().sum::<f64>() / n as f64;
    if n < MIN_HALVES {
        return format!("{mean:.3} over {n} halves, too few for an interval");
    }
    let variance = ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half_width = t95(n - 1) * (variance / n as f64).sqrt();
    format!(
        "{mean:.3} [{:.3}, {:.3}] over {n} halves",
        mean - half_width,
        mean + half_width
    )
}

/// A line under the controller's paragraph: each level's halves over the held half before
/// each, pooled over the controller's windows; empty where no window kept its steps and
/// halves.
pub(super) fn markdown(windows: &[Window]) -> String {
    let controller: Vec<&Window> = windows
        .iter()
        .filter(|w| w.scenario == Scenario::ReamerByPace && !w.step_ms.is_empty())
        .collect();
    // Halves of different windows are never neighbours: each window's are paired alone.
    let mut pooled: Vec<(String, Vec<f64>)> = Vec::new();
    for window in &controller {
        let Some(harvest) = &window.harvest else {
            continue;
        };
        for (level, ratios) in ratios_by_level(&halves(&harvest.steps, &window.step_ms)) {
            match pooled.iter_mut().find(|(l, _)| *l == level) {
                Some((_, all)) => all.extend(ratios),
                None => pooled.push((level, ratios)),
            }
        }
    }
    if pooled.is_empty() {
        return String::new();
    }
    let levels: Vec<String> = pooled
        .iter()
        .map(|(level, ratios)| format!("`{level}` {}", mean_and_interval(ratios)))
        .collect();
    format!(
        "\nWhat each level cost training, from the controller's own halves in {}: the job's \
         pace over each half of a level (past its first {HALF_SETTLE_S:.0} s, the halves the \
         controller ended) over its pace in the held half before it, the mean with its 95% \
         interval: {}. The level's cost switched on and off every few seconds, paired seconds \
         apart where `% of alone` pairs windows minutes apart.\n",
        match controller.len() {
            1 => "its timed window".to_owned(),
            windows => format!("its {windows} timed windows"),
        },
        levels.join("; ")
    )
}

#[cfg(test)]
mod tests;
