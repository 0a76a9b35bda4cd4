//! The pace controller (`reamer_by_pace`) against its targets, from the run itself: training's
//! slowdown interval within 1%, online within the SLO, offline at least as much as every fixed
//! setting in the same run whose slowdown interval stays within 1%, and, where sharing
//! training's cores costs training nothing, offline at 85% of the idle CPU or more.
//!
//! Offline against a fixed setting is a paired ratio: the controller's offline inferences/s
//! over the setting's in the same round, their median and its 95% interval. Windows vary by
//! themselves: on the VM (AMD EPYC host) reamer's defaults ran offline at 1,376 to 1,513
//! inferences/s over the three rounds of one run
//! (docs/experiments/runs/2026-11-29-ceiling-waits-colocation-run.json), 10% apart. The
//! medians of three windows each cannot tell a few percent apart; the interval says when a
//! run cannot.

use super::{Figures, Measured, Scenario, Window, find};
use crate::bench::common::{
    stats::{bootstrap_median_ci, cell, median},
    verdict,
};

/// The settings that fix offline's share for the whole run: the baselines that do (plain
/// CFS, a partition, a weight), and the core policy's levels as scenarios (the controller's
/// ladder passes the last five).
const FIXED: [Scenario; 8] = [
    Scenario::PlainCfs,
    Scenario::StaticPartition,
    Scenario::LowShares,
    Scenario::Reamer,
    Scenario::ReamerOfflineNotPaused,
    Scenario::ReamerTrainingCoresQuarter,
    Scenario::ReamerTrainingCoresHalf,
    Scenario::ReamerOfflineOnTrainingCores,
];

const SHARING_FREE: &str =
    "where sharing training's cores costs training nothing, offline ≥ 85% of the idle CPU";

/// The table, with the fixed settings that are no bound (their slowdown interval passes 1%);
/// empty where the run has no `reamer_by_pace`.
pub(super) fn table(figures: &[(Scenario, Figures)], measured: &Measured) -> String {
    let Some(by_pace) = find(figures, Scenario::ReamerByPace) else {
        return String::new();
    };
    let [low, high] = by_pace.training_slowdown_ci95_pct;
    let attainment_met = by_pace.online_slo_attainment_pct.map(|a| a >= 99.0);
    let mut rows = vec![
        [
            "training slowdown ≤ 1%, its 95% interval".to_owned(),
            format!(
                "{:.1}% [{low:.1}, {high:.1}]",
                by_pace.training_slowdown_pct
            ),
            verdict::interval_at_most(low, high, 1.0),
        ],
        [
            "online ≥ 99% within the SLO".to_owned(),
            cell(by_pace.online_slo_attainment_pct, 1, "%"),
            verdict::met_where_measured(attainment_met).to_owned(),
        ],
    ];
    let mut no_bound = Vec::new();
    for (fixed, f) in FIXED.iter().filter_map(|&s| Some((s, find(figures, s)?))) {
        if !within_one_percent(f) {
            no_bound.push(format!("{} ({})", fixed.label(), slowdown(f)));
            continue;
        }
        let ratios = offline_paired_pct(measured, fixed);
        let target = format!(
            "offline ≥ {}'s (its slowdown {})",
            fixed.label(),
            slowdown(f)
        );
        rows.push(match ratios.is_empty() {
            true => [target, "–".to_owned(), "not measured".to_owned()],
            false => {
                let (low, high) = bootstrap_median_ci(&ratios, 17);
                let result = format!(
                    "{:.0}% of it [{low:.0}, {high:.0}], paired by round ({} against {} \
                     inferences/s, medians)",
                    median(&ratios),
                    cell(by_pace.offline_inferences_per_s, 0, ""),
                    cell(f.offline_inferences_per_s, 0, ""),
                );
                [target, result, verdict::interval_at_least(low, high, 100.0)]
            }
        });
    }
    let share = cell(by_pace.offline_idle_capacity_pct, 1, "%");
    let (result, word) = match find(figures, Scenario::ReamerOfflineOnTrainingCores) {
        None => (
            "–".to_owned(),
            "not measured: the run has no reamer_offline_on_training_cores".to_owned(),
        ),
        Some(f) if !within_one_percent(f) => (
            share,
            format!(
                "does not apply: sharing training's cores cost training {} here",
                slowdown(f)
            ),
        ),
        Some(_) => {
            let met = by_pace.offline_idle_capacity_pct.map(|c| c >= 85.0);
            (share, verdict::met_where_measured(met).to_owned())
        }
    };
    rows.push([SHARING_FREE.to_owned(), result, word]);
    let mut text = "\nThe pace controller against its targets (offline against a fixed setting: \
                    its inferences/s over the setting's in the same round):\n\n\
                    | target | reamer_by_pace | |\n|---|---|---|\n"
        .to_owned();
    for [target, result, word] in rows {
        text.push_str(&format!("| {target} | {result} | {word} |\n"));
    }
    if !no_bound.is_empty() {
        text.push_str(&format!(
            "\nNo bound on offline, their slowdown interval passing 1%: {}.\n",
            no_bound.join("; ")
        ));
    }
    text
}

fn within_one_percent(f: &Figures) -> bool {
    f.training_slowdown_ci95_pct[1] <= 1.0
}

fn slowdown(f: &Figures) -> String {
    let [low, high] = f.training_slowdown_ci95_pct;
    format!("{:.1}% [{low:.1}, {high:.1}]", f.training_slowdown_pct)
}

/// Round by round, the controller's offline inferences/s as a percentage of `fixed`'s, where
/// both ran offline work in that round.
fn offline_paired_pct(measured: &Measured, fixed: Scenario) -> Vec<f64> {
    let rate = |w: &Window| w.offline_items_per_s.filter(|rate| *rate > 0.0);
    let fixed_in = |round: usize| {
        measured
            .windows
            .iter()
            .find(|w| w.scenario == fixed && w.round == round)
    };
    measured
        .windows
        .iter()
        .filter(|w| w.scenario == Scenario::ReamerByPace)
        .filter_map(|w| Some(rate(w)? / rate(fixed_in(w.round)?)? * 100.0))
        .collect()
}
