//! The server benchmark's targets: for reamer's scenarios (training's pace against alone,
//! online within its SLO, offline against plain CFS and against the other scenarios), and
//! for training alone under a daemon, watched or not.

use enforcer_common::replay::ReplaySummary;

use super::{ScenarioFigures, WithInterval};
use crate::bench::{
    common::verdict::Target,
    replay,
    server::{SLO_MS, Scenario},
};

/// The server's targets, for reamer with its defaults (docs/benchmarks.md, "Server").
const TRAINING_TARGET_PCT: f64 = 99.0;
const ONLINE_TARGET_PCT: f64 = 99.0;
const OFFLINE_TARGET_PCT: f64 = 70.0;
/// The pace controller's offline against the most that any other scenario keeping training
/// at `TRAINING_TARGET_PCT` gets: at least this share of it (reamer's defaults: all of it).
const BY_PACE_OF_BEST_PCT: f64 = 90.0;

/// The targets of the scenarios the run measured: reamer's, and those of training alone
/// under a daemon, observed or not.
pub fn targets(figures: &[ScenarioFigures]) -> Vec<Target> {
    let find = |scenario| figures.iter().find(|f| f.scenario == scenario);
    let mut rows = Vec::new();
    if let Some(reamer) = find(Scenario::Reamer) {
        rows.extend(reamer_targets("reamer", reamer, figures, 100.0));
    }
    if let Some(by_pace) = find(Scenario::ReamerByPace) {
        rows.extend(reamer_targets(
            "reamer by pace",
            by_pace,
            figures,
            BY_PACE_OF_BEST_PCT,
        ));
    }
    if let Some(sensed) = find(Scenario::AloneSensed) {
        rows.push(training_target(
            "under a daemon that does not enforce, not observed",
            sensed.training_pct,
        ));
    }
    if let Some(observed) = find(Scenario::AloneObserved) {
        rows.extend(observed_targets(observed));
    }
    rows
}

/// Training at `TRAINING_TARGET_PCT` of alone or more, the whole interval included.
fn training_target(who: &str, pct: Option<WithInterval>) -> Target {
    match pct {
        Some(t) => Target {
            target: format!(
                "{who}: training ≥ {TRAINING_TARGET_PCT:.0}% of alone, the whole 95% interval \
                 included"
            ),
            result: format!(
                "{}{}",
                t.percent(1),
                match t.interval() {
                    None => ": not resolved",
                    Some([low, _])
                        if t.median >= TRAINING_TARGET_PCT && low < TRAINING_TARGET_PCT =>
                    {
                        ": the interval reaches below, not resolved"
                    }
                    Some(_) => "",
                }
            ),
            // One round's ratio says nothing of the rounds' spread: not met, however high.
            met: t
                .interval()
                .is_some_and(|[low, _]| low >= TRAINING_TARGET_PCT),
        },
        None => Target {
            target: format!("{who}: training ≥ {TRAINING_TARGET_PCT:.0}% of alone"),
            result: "not measured".to_owned(),
            met: false,
        },
    }
}

/// Watching costs training nothing, and the CPU policy replayed over each round's trace meets
/// the replay's targets.
fn observed_targets(observed: &ScenarioFigures) -> Vec<Target> {
    let replays: Vec<(usize, &ReplaySummary)> = observed
        .observed_rounds
        .iter()
        .filter_map(|r| r.replay.as_ref().map(|replay| (r.round, replay)))
        .collect();
    let every_round = |met: fn(&ReplaySummary) -> bool| {
        !replays.is_empty()
            && replays.len() == observed.observed_rounds.len()
            && replays.iter().all(|(_, replay)| met(replay))
    };
    let per_round = |figure: &dyn Fn(&ReplaySummary) -> String| match replays.is_empty() {
        true => "not measured".to_owned(),
        false => replays
            .iter()
            .map(|(round, replay)| format!("round {}: {}", round + 1, figure(replay)))
            .collect::<Vec<_>>()
            .join("; "),
    };
    vec![
        training_target("observed at 10 Hz", observed.training_pct),
        Target {
            target: format!(
                "the policy over each round's trace (`enforcer replay`): median cores reserved \
                 ≤ median running CPUs + {}",
                replay::RESERVED_ABOVE_RUNNING
            ),
            result: per_round(&|r| {
                format!(
                    "{} ≤ {:.2}",
                    r.reserved_cores_p50,
                    replay::reserved_bound(r)
                )
            }),
            met: every_round(replay::reserved_target_met),
        },
        Target {
            target: "the policy over each round's trace: offline never paused while training \
                     ran on half the CPUs or fewer"
                .to_owned(),
            result: per_round(&|r| format!("{} such intervals", r.paused_at_half_or_less)),
            met: every_round(replay::pause_target_met),
        },
    ]
}

/// The targets of one of reamer's scenarios (`who`) against the other scenarios.
/// `of_best_pct`: the share of the most offline work among the other scenarios that keep
/// training at the target which `who` is to get (100: ahead of them all).
fn reamer_targets(
    who: &str,
    reamer: &ScenarioFigures,
    figures: &[ScenarioFigures],
    of_best_pct: f64,
) -> Vec<Target> {
    let mut rows = vec![training_target(who, reamer.training_pct)];
    rows.push(Target {
        target: format!(
            "{who}: online ≥ {ONLINE_TARGET_PCT:.0}% of requests within {SLO_MS:.0} ms"
        ),
        result: reamer
            .online_within_slo_pct
            .map_or("not measured".to_owned(), |p| format!("{p:.1}%")),
        met: reamer
            .online_within_slo_pct
            .is_some_and(|p| p >= ONLINE_TARGET_PCT),
    });
    rows.push(Target {
        target: format!("{who}: offline ≥ {OFFLINE_TARGET_PCT:.0}% of plain CFS's items/s"),
        result: reamer
            .offline_pct_of_cfs
            .map_or("not measured".to_owned(), |o| o.percent(0)),
        met: reamer
            .offline_pct_of_cfs
            .is_some_and(|o| o.median >= OFFLINE_TARGET_PCT),
    });
    // Ahead (or within `of_best_pct` of the best): offline work against every other scenario
    // that keeps training at the target.
    let rivals: Vec<&ScenarioFigures> = figures
        .iter()
        .filter(|f| f.scenario.inference() && f.scenario != reamer.scenario)
        .filter(|f| {
            f.training_pct
                .is_some_and(|t| t.median >= TRAINING_TARGET_PCT)
        })
        .collect();
    let mine = reamer.offline_items_per_s.unwrap_or(0.0);
    let offline = |f: &ScenarioFigures| f.offline_items_per_s.unwrap_or(0.0);
    let behind: Vec<String> = rivals
        .iter()
        .filter(|f| offline(f) * of_best_pct / 100.0 > mine)
        .map(|f| format!("{} ({:.0} items/s)", f.label, offline(f)))
        .collect();
    // Which scenarios keep training there is read from their medians; from one round's
    // ratios, that reading is one sample of each.
    let one_round = figures
        .iter()
        .filter(|f| f.scenario.inference())
        .any(|f| f.training_pct.is_some_and(|t| t.pairs < 2));
    let best = rivals
        .iter()
        .filter(|f| offline(f) > 0.0)
        .max_by(|a, b| offline(a).total_cmp(&offline(b)));
    let ranked = if let (Some(best), true) = (best, of_best_pct < 100.0) {
        format!(
            "{mine:.0} items/s, {:.0}% of the best: {} ({:.0} items/s)",
            mine / offline(best) * 100.0,
            best.label,
            offline(best)
        )
    } else if rivals.is_empty() {
        format!("no other scenario keeps training there; {who}: {mine:.0} items/s")
    } else if behind.is_empty() {
        format!(
            "{mine:.0} items/s, ahead of {}",
            rivals
                .iter()
                .map(|f| f.label)
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!("{mine:.0} items/s, behind {}", behind.join(", "))
    };
    let target = match of_best_pct < 100.0 {
        true => format!(
            "{who}: offline ≥ {of_best_pct:.0}% of the most that any other scenario keeping \
             training ≥ {TRAINING_TARGET_PCT:.0}% of alone gets (items/s)"
        ),
        false => format!(
            "{who}: ahead of every other scenario that keeps training ≥ \
             {TRAINING_TARGET_PCT:.0}% of alone (offline items/s)"
        ),
    };
    rows.push(Target {
        target,
        result: match one_round {
            true => format!("{ranked}; from one round paired, not resolved"),
            false => ranked,
        },
        met: behind.is_empty() && !one_round,
    });
    rows
}
