//! The server benchmark's figures per scenario, its targets, and its section of
//! docs/benchmarks.md.
//!
//! Ratios are paired within a round: training's throughput over training alone's in the same
//! round, offline's over plain CFS's in the same round. The medians over rounds come with a
//! 95% bootstrap interval where a target depends on them.

use enforcer_common::replay::ReplaySummary;
use serde::{Deserialize, Serialize};

use super::{Measured, SLO_MS, Scenario};
use crate::bench::{
    common::inference::LoadReport,
    common::stats::{bootstrap_median_ci, cell, median, median_of},
    replay,
};

/// One scenario's window in one round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    pub scenario: Scenario,
    pub round: usize,
    /// Images a second where the job counts images (the PyTorch job), else steps a second.
    pub throughput: f64,
    pub counts_images: bool,
    pub step_ms_p50: f64,
    pub step_ms_p99: f64,
    /// CPUs training used on average over its timed part (its loader workers included).
    pub training_cpus: f64,
    pub online: Option<LoadReport>,
    pub offline_items_per_s: Option<f64>,
    pub cpus_left_idle: f64,
    pub steal_pct: f64,
    /// Under reamer: the cores reserved for training (median over the observed intervals)
    /// and the share of intervals with offline paused, %.
    pub reserved_cores_p50: Option<f64>,
    pub offline_paused_pct: Option<f64>,
    pub enforcer_cpu_pct: Option<f64>,
    pub enforcer_rss_mib: Option<f64>,
    /// The CPUs the sensor saw training run on over the timed part, time-weighted mean of the
    /// observed intervals: beside `training_cpus`, the job's own figure.
    pub sensor_running_cpus: Option<f64>,
    /// Training alone, observed: the CPU policy replayed over the window's trace.
    pub replay: Option<ReplaySummary>,
    /// Where inference was confined to part of the machine (the static partition and the
    /// frontier's scenarios). Absent from runs saved before it was recorded.
    #[serde(default)]
    pub confined: Option<Confined>,
}

/// The CPUs a window confined inference to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confined {
    pub cpus: String,
    /// Whether the machine showed SMT siblings, where the CPUs were chosen as whole cores.
    pub smt: Option<bool>,
}

/// What `enforcer observe --json` showed over a window.
pub struct Observed {
    pub reserved_cores_p50: Option<f64>,
    pub offline_paused_pct: Option<f64>,
    /// Training's running CPUs (every job's), weighted by each interval's length.
    pub running_cpus_mean: Option<f64>,
}

impl Observed {
    /// From the intervals of an `observe --json` trace on lines `timed` (0-based, the end
    /// left out); intervals without a field are left out of its figure.
    pub fn from_trace(path: &std::path::Path, timed: std::ops::Range<usize>) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .skip(timed.start)
            .take(timed.len())
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let (mut cpu_seconds, mut seconds) = (0.0, 0.0);
        for line in &lines {
            let (Some(length), Some(jobs)) = (line["seconds"].as_f64(), line["jobs"].as_array())
            else {
                continue;
            };
            let running: f64 = jobs.iter().filter_map(|j| j["running_cpus"].as_f64()).sum();
            cpu_seconds += running * length;
            seconds += length;
        }
        let reserved: Vec<f64> = lines
            .iter()
            .filter_map(|l| l["reserved_cpus"].as_f64())
            .collect();
        let paused: Vec<bool> = lines
            .iter()
            .filter_map(|l| l["offline_paused"].as_bool())
            .collect();
        Self {
            reserved_cores_p50: (!reserved.is_empty()).then(|| median(&reserved)),
            offline_paused_pct: (!paused.is_empty()).then(|| {
                paused.iter().filter(|p| **p).count() as f64 * 100.0 / paused.len() as f64
            }),
            running_cpus_mean: (seconds > 0.0).then(|| cpu_seconds / seconds),
        }
    }
}

/// A median over rounds and its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WithInterval {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

impl WithInterval {
    fn of(values: &[f64], seed: u64) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let (low, high) = bootstrap_median_ci(values, seed);
        Some(Self {
            median: median(values),
            low,
            high,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioFigures {
    pub scenario: Scenario,
    pub label: &'static str,
    pub rounds: usize,
    pub throughput: f64,
    /// Training's throughput as % of alone's in the same round.
    pub training_pct: Option<WithInterval>,
    pub step_ms_p50: f64,
    pub step_ms_p99: f64,
    pub training_cpus: f64,
    /// Requests within the SLO over all rounds, %.
    pub online_within_slo_pct: Option<f64>,
    pub online_p50_ms: Option<f64>,
    pub online_p99_ms: Option<f64>,
    pub offline_items_per_s: Option<f64>,
    /// Offline's items/s as % of plain CFS's in the same round.
    pub offline_pct_of_cfs: Option<WithInterval>,
    pub cpus_left_idle: f64,
    pub reserved_cores_p50: Option<f64>,
    pub offline_paused_pct: Option<f64>,
    pub enforcer_cpu_pct: Option<f64>,
    pub enforcer_rss_mib: Option<f64>,
    /// Training alone, observed: each round's sensor figure and replay.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub observed_rounds: Vec<ObservedRound>,
}

/// One round of training alone, observed at 10 Hz: what watching cost, what the sensor saw,
/// and what the CPU policy would have reserved.
#[derive(Debug, Clone, Serialize)]
pub struct ObservedRound {
    pub round: usize,
    /// Training's throughput as % of alone's in the same round.
    pub training_pct: Option<f64>,
    /// The CPUs the job's processes used over the timed part, by their own accounting.
    pub job_cpus: f64,
    /// The CPUs the sensor saw it run on over the same part.
    pub sensor_running_cpus: Option<f64>,
    pub replay: Option<ReplaySummary>,
}

/// `window`'s `figure` over `reference`'s in the same round, %.
fn ratio_in_round(
    windows: &[Window],
    window: &Window,
    reference: Scenario,
    figure: &impl Fn(&Window) -> Option<f64>,
) -> Option<f64> {
    let base = windows
        .iter()
        .find(|b| b.scenario == reference && b.round == window.round)
        .and_then(figure)?;
    let value = figure(window)?;
    (base > 0.0).then(|| value / base * 100.0)
}

/// Per-round ratios of `scenario`'s `figure` over `reference`'s, %.
fn paired_pct(
    windows: &[Window],
    scenario: Scenario,
    reference: Scenario,
    figure: impl Fn(&Window) -> Option<f64>,
) -> Vec<f64> {
    windows
        .iter()
        .filter(|w| w.scenario == scenario)
        .filter_map(|w| ratio_in_round(windows, w, reference, &figure))
        .collect()
}

pub fn figures(measured: &Measured) -> Vec<ScenarioFigures> {
    let windows = &measured.windows;
    Scenario::ALL
        .iter()
        .enumerate()
        .filter_map(|(k, &scenario)| {
            let mine: Vec<&Window> = windows.iter().filter(|w| w.scenario == scenario).collect();
            if mine.is_empty() {
                return None;
            }
            let seed = 1 + k as u64;
            let training_pct = (scenario != Scenario::Alone)
                .then(|| {
                    let pct =
                        paired_pct(windows, scenario, Scenario::Alone, |w| Some(w.throughput));
                    WithInterval::of(&pct, seed)
                })
                .flatten();
            let offline_pct_of_cfs = (scenario != Scenario::Alone)
                .then(|| {
                    let pct = paired_pct(windows, scenario, Scenario::PlainCfs, |w| {
                        w.offline_items_per_s
                    });
                    WithInterval::of(&pct, seed + 100)
                })
                .flatten();
            let observed_rounds = mine
                .iter()
                .filter(|_| scenario == Scenario::AloneObserved)
                .map(|w| ObservedRound {
                    round: w.round,
                    training_pct: ratio_in_round(windows, w, Scenario::Alone, &|w| {
                        Some(w.throughput)
                    }),
                    job_cpus: w.training_cpus,
                    sensor_running_cpus: w.sensor_running_cpus,
                    replay: w.replay.clone(),
                })
                .collect();
            let online: Vec<&LoadReport> = mine.iter().filter_map(|w| w.online.as_ref()).collect();
            let sent: u64 = online.iter().map(|o| o.sent).sum();
            let within: u64 = online.iter().map(|o| o.within_slo).sum();
            Some(ScenarioFigures {
                scenario,
                label: scenario.label(),
                rounds: mine.len(),
                throughput: median_of(mine.iter().map(|w| w.throughput)).unwrap_or(f64::NAN),
                training_pct,
                step_ms_p50: median_of(mine.iter().map(|w| w.step_ms_p50)).unwrap_or(f64::NAN),
                step_ms_p99: median_of(mine.iter().map(|w| w.step_ms_p99)).unwrap_or(f64::NAN),
                training_cpus: median_of(mine.iter().map(|w| w.training_cpus)).unwrap_or(f64::NAN),
                online_within_slo_pct: (sent > 0).then(|| within as f64 * 100.0 / sent as f64),
                online_p50_ms: median_of(online.iter().filter_map(|o| o.p50_ms)),
                online_p99_ms: median_of(online.iter().filter_map(|o| o.p99_ms)),
                offline_items_per_s: median_of(mine.iter().filter_map(|w| w.offline_items_per_s)),
                offline_pct_of_cfs,
                cpus_left_idle: median_of(mine.iter().map(|w| w.cpus_left_idle))
                    .unwrap_or(f64::NAN),
                reserved_cores_p50: median_of(mine.iter().filter_map(|w| w.reserved_cores_p50)),
                offline_paused_pct: median_of(mine.iter().filter_map(|w| w.offline_paused_pct)),
                enforcer_cpu_pct: median_of(mine.iter().filter_map(|w| w.enforcer_cpu_pct)),
                enforcer_rss_mib: median_of(mine.iter().filter_map(|w| w.enforcer_rss_mib)),
                observed_rounds,
            })
        })
        .collect()
}

/// The server's targets, for reamer with its defaults (docs/benchmarks.md, "Server").
pub const TRAINING_TARGET_PCT: f64 = 99.0;
pub const ONLINE_TARGET_PCT: f64 = 99.0;
pub const OFFLINE_TARGET_PCT: f64 = 70.0;

/// One row of the targets table.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub target: String,
    pub result: String,
    pub met: bool,
}

/// The targets of the scenarios the run measured: reamer's, and those of training alone
/// under a daemon, observed or not.
pub fn targets(figures: &[ScenarioFigures]) -> Vec<Target> {
    let find = |scenario| figures.iter().find(|f| f.scenario == scenario);
    let mut rows = Vec::new();
    if let Some(reamer) = find(Scenario::Reamer) {
        rows.extend(reamer_targets(reamer, figures));
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
                "{:.1}% ({:.1}–{:.1}){}",
                t.median,
                t.low,
                t.high,
                if t.median >= TRAINING_TARGET_PCT && t.low < TRAINING_TARGET_PCT {
                    ": the interval reaches below, not resolved"
                } else {
                    ""
                }
            ),
            met: t.low >= TRAINING_TARGET_PCT,
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

/// Reamer's targets against the other scenarios.
fn reamer_targets(reamer: &ScenarioFigures, figures: &[ScenarioFigures]) -> Vec<Target> {
    let mut rows = vec![training_target("reamer", reamer.training_pct)];
    rows.push(Target {
        target: format!("online ≥ {ONLINE_TARGET_PCT:.0}% of requests within {SLO_MS:.0} ms"),
        result: reamer
            .online_within_slo_pct
            .map_or("not measured".to_owned(), |p| format!("{p:.1}%")),
        met: reamer
            .online_within_slo_pct
            .is_some_and(|p| p >= ONLINE_TARGET_PCT),
    });
    rows.push(Target {
        target: format!("offline ≥ {OFFLINE_TARGET_PCT:.0}% of plain CFS's items/s"),
        result: reamer
            .offline_pct_of_cfs
            .map_or("not measured".to_owned(), |o| {
                format!("{:.0}% ({:.0}–{:.0})", o.median, o.low, o.high)
            }),
        met: reamer
            .offline_pct_of_cfs
            .is_some_and(|o| o.median >= OFFLINE_TARGET_PCT),
    });
    // Ahead: more offline work than every other scenario that keeps training at the target.
    let rivals: Vec<&ScenarioFigures> = figures
        .iter()
        .filter(|f| f.scenario.inference() && f.scenario != Scenario::Reamer)
        .filter(|f| {
            f.training_pct
                .is_some_and(|t| t.median >= TRAINING_TARGET_PCT)
        })
        .collect();
    let mine = reamer.offline_items_per_s.unwrap_or(0.0);
    let behind: Vec<String> = rivals
        .iter()
        .filter(|f| f.offline_items_per_s.unwrap_or(0.0) > mine)
        .map(|f| {
            format!(
                "{} ({:.0} items/s)",
                f.label,
                f.offline_items_per_s.unwrap_or(0.0)
            )
        })
        .collect();
    rows.push(Target {
        target: format!(
            "ahead of every other scenario that keeps training ≥ {TRAINING_TARGET_PCT:.0}% of \
             alone (offline items/s)"
        ),
        result: if rivals.is_empty() {
            format!("no other scenario keeps training there; reamer: {mine:.0} items/s")
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
        },
        met: behind.is_empty(),
    });
    rows
}

fn interval(value: Option<WithInterval>) -> String {
    value.map_or("–".to_owned(), |v| {
        format!("{:.1}% ({:.1}–{:.1})", v.median, v.low, v.high)
    })
}

pub fn markdown(
    measured: &Measured,
    figures: &[ScenarioFigures],
    command: &str,
    machine: &str,
) -> String {
    let counts_images = measured.windows.iter().all(|w| w.counts_images);
    let unit = if counts_images && !measured.windows.is_empty() {
        "images/s"
    } else {
        "steps/s"
    };
    let mut text = format!("Command: `{command}`\n\nMachine: {machine}.\n\n");
    if measured.stand_in {
        text.push_str(
            "**These are not the server's figures**: training was a stand-in on this machine, \
             which only checks the harness end to end.\n\n",
        );
    }
    text.push_str(&format!(
        "Training: {}; {} s timed per window, {} round{}, the scenarios' order rotated each \
         round. Online: the PP-OCR classifier behind KServe v2 (binary tensors), an open-loop \
         Poisson load of {:.0} requests/s from `load-gen`, SLO {SLO_MS:.0} ms; under reamer \
         an online pool with `min_cores = {}`. Offline: `inference-worker offline` over a \
         2048×8 MLP job. Both workers on {} (`--engine {}`). Inference starts before training; every figure is over training's \
         timed part. Percentages of alone and of plain CFS are paired within a round; \
         medians over rounds, with 95% bootstrap intervals.\n\n",
        measured.training,
        measured.seconds,
        measured.rounds,
        if measured.rounds == 1 { "" } else { "s" },
        measured.online_rate,
        super::online_min_cores(measured.cpus),
        crate::bench::colocation::report::engine_label(&measured.engine),
        measured.engine,
    ));
    text.push_str(&format!(
        "![training's pace against offline inference's share of plain CFS's, one point per \
         scenario]({})\n\n",
        super::plot::TRADEOFF_FILE
    ));
    text.push_str(&format!(
        "| scenario | training {unit} | % of alone (95% interval) | step p50 / p99 ms | \
         online within SLO | online p50 / p99 ms | offline items/s | % of plain CFS | CPUs \
         idle | training CPUs | cores reserved | offline paused | enforcer CPU / RSS |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    ));
    for f in figures {
        text.push_str(&format!(
            "| {} | {:.0} | {} | {:.0} / {:.0} | {} | {} / {} | {} | {} | {:.1} of {} | {:.1} | {} | {} | {} |\n",
            f.label,
            f.throughput,
            interval(f.training_pct),
            f.step_ms_p50,
            f.step_ms_p99,
            cell(f.online_within_slo_pct, 1, "%"),
            cell(f.online_p50_ms, 1, ""),
            cell(f.online_p99_ms, 1, ""),
            cell(f.offline_items_per_s, 0, ""),
            f.offline_pct_of_cfs
                .map_or("–".to_owned(), |o| format!("{:.0}%", o.median)),
            f.cpus_left_idle,
            measured.cpus,
            f.training_cpus,
            cell(f.reserved_cores_p50, 1, ""),
            cell(f.offline_paused_pct, 0, "%"),
            match (f.enforcer_cpu_pct, f.enforcer_rss_mib) {
                (Some(cpu), Some(rss)) => format!("{cpu:.1}% / {rss:.0} MiB"),
                _ => "–".to_owned(),
            },
        ));
    }
    text.push_str(&confined_markdown(&measured.windows));
    if let Some(observed) = figures
        .iter()
        .find(|f| f.scenario == Scenario::AloneObserved)
    {
        text.push_str(&observed_markdown(&observed.observed_rounds));
    }
    let targets = targets(figures);
    if !targets.is_empty() {
        text.push_str(
            "\nTargets, for reamer with its defaults and for training alone under a daemon:\n\n\
             | target | result | |\n|---|---|---|\n",
        );
        for t in &targets {
            text.push_str(&format!(
                "| {} | {} | {} |\n",
                t.target,
                t.result,
                if t.met { "met" } else { "**missed**" }
            ));
        }
    }
    text
}

/// Where each scenario that confined inference put it, and whether the cores were whole
/// cores of a machine with SMT siblings: a line under the table, empty where none did.
fn confined_markdown(windows: &[Window]) -> String {
    let mut seen: Vec<(Scenario, &Confined)> = Vec::new();
    for w in windows {
        if let Some(confined) = &w.confined
            && !seen.iter().any(|(s, _)| *s == w.scenario)
        {
            seen.push((w.scenario, confined));
        }
    }
    if seen.is_empty() {
        return String::new();
    }
    seen.sort_by_key(|(s, _)| Scenario::ALL.iter().position(|a| a == s));
    let places: Vec<String> = seen
        .iter()
        .map(|(s, c)| format!("{}: CPUs {}", s.label(), c.cpus))
        .collect();
    let smt = match seen.iter().find_map(|(_, c)| c.smt) {
        Some(true) => {
            " The frontier's CPUs are whole cores, taken from the top; this machine shows SMT \
             siblings, and a core's siblings went together."
        }
        Some(false) => {
            " The frontier's CPUs are whole cores, taken from the top; this machine shows no \
             SMT siblings (one CPU a core)."
        }
        None => "",
    };
    format!(
        "\nInference confined (its online and offline groups, training left the other CPUs): \
         {}.{smt}\n",
        places.join("; ")
    )
}

/// Training alone, observed, round by round.
fn observed_markdown(rounds: &[ObservedRound]) -> String {
    let mut text = format!(
        "\nTraining alone, observed at 10 Hz: the daemon with `[policy] enforce = false` and \
         `enforcer observe --json --interval 0.1` from before training starts, as the trace in \
         enforcer/tests/fixtures/ was recorded. Per round: what watching cost training, the \
         CPUs the sensor saw it run on against the job's own CPU time over the timed part \
         (the observed intervals' edges fall up to 0.1 s outside it), and the CPU policy \
         replayed over the whole trace (`enforcer replay TRACE --json`, the default scenario; \
         the traces are target/bench/server/{}-round-N.jsonl, N from 0):\n\n\
         | round | training, % of alone | job's CPUs | sensor's running CPUs (ratio) | replay: \
         running CPUs p50 / p90 | cores reserved p50 / p90 | offline paused | training on \
         more CPUs than reserved |\n|---|---|---|---|---|---|---|---|\n",
        super::observer_trace_stem(Scenario::AloneObserved),
    );
    for r in rounds {
        let sensor = match r.sensor_running_cpus {
            Some(cpus) if r.job_cpus > 0.0 => format!("{cpus:.2} ({:.3})", cpus / r.job_cpus),
            other => cell(other, 2, ""),
        };
        let replay = match &r.replay {
            Some(p) => format!(
                "{:.2} / {:.2} | {} / {} | {:.1}% | {:.1}%",
                p.running_cpus_p50,
                p.running_cpus_p90,
                p.reserved_cores_p50,
                p.reserved_cores_p90,
                p.offline_paused_pct,
                p.short_pct
            ),
            None => "– | – | – | –".to_owned(),
        };
        text.push_str(&format!(
            "| {} | {} | {:.2} | {sensor} | {replay} |\n",
            r.round + 1,
            cell(r.training_pct, 1, "%"),
            r.job_cpus,
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(scenario: Scenario, round: usize, throughput: f64, offline: Option<f64>) -> Window {
        Window {
            scenario,
            round,
            throughput,
            counts_images: true,
            step_ms_p50: 100.0,
            step_ms_p99: 150.0,
            training_cpus: 2.6,
            online: offline.map(|_| LoadReport {
                sent: 1000,
                within_slo: 995,
                p50_ms: Some(8.0),
                p99_ms: Some(40.0),
            }),
            offline_items_per_s: offline,
            cpus_left_idle: 3.0,
            steal_pct: 0.0,
            reserved_cores_p50: scenario.reamer().then_some(4.0),
            offline_paused_pct: scenario.reamer().then_some(0.0),
            enforcer_cpu_pct: scenario.reamer().then_some(1.0),
            enforcer_rss_mib: scenario.reamer().then_some(20.0),
            sensor_running_cpus: None,
            replay: None,
            confined: None,
        }
    }

    fn replay_summary(running_p50: f64, reserved_p50: f64, paused_at_half: usize) -> ReplaySummary {
        ReplaySummary {
            intervals: 300,
            cpus: 16,
            running_cpus_p50: running_p50,
            running_cpus_p90: running_p50 * 3.0,
            demand_cpus_p50: running_p50,
            demand_cpus_p90: running_p50 * 3.0,
            reserved_cores_p50: reserved_p50,
            reserved_cores_p90: reserved_p50 + 1.0,
            offline_paused_pct: 0.0,
            paused_at_half_or_less: paused_at_half,
            short_pct: 20.0,
            decisions: 12,
        }
    }

    fn measured(windows: Vec<Window>) -> Measured {
        Measured {
            training: "test".to_owned(),
            stand_in: false,
            rounds: 3,
            seconds: 25.0,
            online_rate: 150.0,
            cpus: 16,
            engine: "tract".to_owned(),
            windows,
        }
    }

    #[test]
    fn ratios_are_paired_within_a_round_and_a_miss_is_never_hidden() {
        let mut windows = Vec::new();
        // Alone's pace drifts from round to round; each scenario keeps its ratio to it.
        for (round, alone) in [1000.0, 1100.0, 900.0].into_iter().enumerate() {
            windows.push(window(Scenario::Alone, round, alone, None));
            windows.push(window(Scenario::PlainCfs, round, alone * 0.7, Some(2600.0)));
            windows.push(window(
                Scenario::StaticPartition,
                round,
                alone * 0.995,
                Some(1500.0),
            ));
            windows.push(window(Scenario::Reamer, round, alone * 0.97, Some(2000.0)));
            // Training alone again, watched: no inference, so no rival of reamer's.
            windows.push(window(Scenario::AloneObserved, round, alone, None));
        }
        let figures = figures(&measured(windows));
        let reamer = figures
            .iter()
            .find(|f| f.scenario == Scenario::Reamer)
            .unwrap();
        let pct = reamer.training_pct.unwrap();
        assert!((pct.median - 97.0).abs() < 1e-9, "{pct:?}");
        assert!((pct.low - 97.0).abs() < 1e-9 && (pct.high - 97.0).abs() < 1e-9);
        let offline = reamer.offline_pct_of_cfs.unwrap();
        assert!((offline.median - 2000.0 / 2600.0 * 100.0).abs() < 1e-9);
        assert_eq!(reamer.online_within_slo_pct, Some(99.5));

        let targets = targets(&figures);
        // Reamer's four, then the observed scenario's three.
        assert_eq!(targets.len(), 7);
        assert!(!targets[0].met, "97% of alone misses 99%: {:?}", targets[0]);
        assert!(targets[1].met && targets[2].met);
        // The static partition keeps training at 99.5% but does less offline work: reamer is
        // ahead of it.
        assert!(targets[3].met, "{:?}", targets[3]);
        assert!(targets[3].result.contains("ahead of static partition"));
        assert!(!targets[3].result.contains("observed"), "{:?}", targets[3]);
        let text = markdown(
            &measured(Vec::new()),
            &figures,
            "cargo xtask bench",
            "test machine",
        );
        assert!(text.contains("**missed**"), "{text}");
    }

    /// The machine line of a server run, stamped with its date and build: the plot's title
    /// must hold it.
    const LONG_MACHINE: &str = "Linux 6.18.44-fc-v657-gpu, 16 × Intel(R) Xeon(R) Processor, \
                                126 GiB (run 2026-11-26, build bc6b052-dirty)";

    #[test]
    fn the_plot_has_a_point_for_each_scenario_with_inference_and_reads_cleanly() {
        let mut windows = Vec::new();
        for (round, alone) in [1000.0, 1100.0, 900.0].into_iter().enumerate() {
            windows.push(window(Scenario::Alone, round, alone, None));
            windows.push(window(
                Scenario::PlainCfs,
                round,
                alone * 0.82,
                Some(2600.0),
            ));
            windows.push(window(
                Scenario::OfflineCpuIdle,
                round,
                alone * 0.85,
                Some(2500.0),
            ));
            windows.push(window(
                Scenario::StaticPartition,
                round,
                alone * 0.99,
                Some(1200.0),
            ));
            // The frontier: less of the machine for inference, less of training's pace lost.
            for (scenario, cpus, pace, items) in [
                (Scenario::OfflineCpuIdleQuarter, "12-15", 0.97, 900.0),
                (Scenario::OfflineCpuIdleHalf, "8-15", 0.93, 1700.0),
                (Scenario::OfflineCpuIdleThreeQuarters, "4-15", 0.88, 2300.0),
            ] {
                let mut confined = window(scenario, round, alone * pace, Some(items));
                confined.confined = Some(Confined {
                    cpus: cpus.to_owned(),
                    smt: Some(false),
                });
                windows.push(confined);
            }
            windows.push(window(Scenario::Reamer, round, alone * 0.985, Some(1900.0)));
            windows.push(window(
                Scenario::ReamerOfflineNotPaused,
                round,
                alone * 0.95,
                Some(2300.0),
            ));
            windows.push(window(Scenario::AloneObserved, round, alone, None));
            windows.push(window(Scenario::AloneSensed, round, alone, None));
        }
        let measured = measured(windows);
        let figures = figures(&measured);
        let canvas = super::super::plot::tradeoff(&figures, LONG_MACHINE, false);
        assert_eq!(canvas.problems(), Vec::<String>::new());
        let labels: Vec<&str> = canvas.texts().iter().map(|t| t.text.as_str()).collect();
        let traded = Scenario::ALL
            .into_iter()
            .filter(|&s| s == Scenario::Alone || s.inference());
        for scenario in traded {
            let label = scenario.label().replace('`', "");
            assert!(labels.contains(&label.as_str()), "{label} in {labels:?}");
        }
        // Training alone under a daemon runs no inference: not a trade.
        assert!(!labels.iter().any(|l| l.contains("does not enforce")));

        // The table says where each confined scenario put inference, in the table's order.
        let text = markdown(&measured, &figures, "cargo xtask bench", "test machine");
        let line = text
            .lines()
            .find(|l| l.starts_with("Inference confined"))
            .unwrap_or_else(|| panic!("{text}"));
        let quarter =
            line.find("upper quarter of the cores, offline in a `cpu.idle` group: CPUs 12-15");
        let three =
            line.find("three quarters of the cores, offline in a `cpu.idle` group: CPUs 4-15");
        assert!(
            quarter.is_some() && three.is_some() && quarter < three,
            "{line}"
        );
        assert!(line.contains("no SMT siblings"), "{line}");
    }

    #[test]
    fn a_run_saved_before_confinement_was_recorded_still_reads() {
        let mut value =
            serde_json::to_value(window(Scenario::StaticPartition, 0, 1.0, None)).unwrap();
        value.as_object_mut().unwrap().remove("confined");
        let read: Window = serde_json::from_value(value).unwrap();
        assert_eq!(read.confined, None);
        assert_eq!(confined_markdown(&[read]), "");
    }

    #[test]
    fn an_interval_reaching_below_the_target_is_not_resolved() {
        let mut windows = Vec::new();
        for (round, ratio) in [0.995, 0.999, 0.97, 1.0, 0.992].into_iter().enumerate() {
            windows.push(window(Scenario::Alone, round, 1000.0, None));
            windows.push(window(Scenario::PlainCfs, round, 700.0, Some(2600.0)));
            windows.push(window(
                Scenario::Reamer,
                round,
                1000.0 * ratio,
                Some(2500.0),
            ));
        }
        let targets = targets(&figures(&measured(windows)));
        assert!(!targets[0].met, "{:?}", targets[0]);
        assert!(
            targets[0].result.contains("not resolved"),
            "{:?}",
            targets[0]
        );
    }

    #[test]
    fn the_observed_reservation_and_pause_come_from_the_observe_trace() {
        let path =
            std::env::temp_dir().join(format!("reamer-observed-{}.jsonl", std::process::id()));
        std::fs::write(
            &path,
            "{\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":2,\"offline_paused\":false}\n\
             {\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":4,\"offline_paused\":true}\n\
             {\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":3,\"offline_paused\":false}\n\
             {\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":3,\"offline_paused\":false}\n",
        )
        .unwrap();
        let observed = Observed::from_trace(&path, 0..4);
        assert_eq!(observed.reserved_cores_p50, Some(3.0));
        assert_eq!(observed.offline_paused_pct, Some(25.0));
        assert_eq!(
            observed.running_cpus_mean,
            Some(0.0),
            "no training job ran in these intervals"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_sensors_running_cpus_are_a_time_weighted_mean_over_the_timed_lines_only() {
        let path = std::env::temp_dir().join(format!("reamer-timed-{}.jsonl", std::process::id()));
        let line = |seconds: f64, running: &[f64]| {
            let jobs: Vec<String> = running
                .iter()
                .map(|r| format!("{{\"name\":\"train\",\"running_cpus\":{r}}}"))
                .collect();
            format!(
                "{{\"seconds\":{seconds},\"jobs\":[{}],\"counters\":{{}}}}\n",
                jobs.join(",")
            )
        };
        // Before the timed part (left out), then 0.1 s at 2+1 CPUs and 0.3 s at 1, then after.
        let text = [
            line(0.1, &[12.0]),
            line(0.1, &[2.0, 1.0]),
            line(0.3, &[1.0]),
            line(0.1, &[14.0]),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let observed = Observed::from_trace(&path, 1..3);
        let mean = observed.running_cpus_mean.unwrap();
        assert!(
            (mean - (0.1 * 3.0 + 0.3 * 1.0) / 0.4).abs() < 1e-9,
            "{mean}"
        );
        assert_eq!(
            observed.reserved_cores_p50, None,
            "an observe-only daemon reserves nothing"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn each_observed_round_is_paired_with_its_own_alone_and_every_replay_must_meet_the_targets() {
        let mut windows = Vec::new();
        for (round, (alone, ratio)) in [(1000.0, 0.99), (1100.0, 1.0), (900.0, 0.98)]
            .into_iter()
            .enumerate()
        {
            windows.push(window(Scenario::Alone, round, alone, None));
            let mut observed = window(Scenario::AloneObserved, round, alone * ratio, None);
            observed.sensor_running_cpus = Some(2.6 * 1.01);
            // The last round's replay reserves 6 cores where training ran on 2.8 at the median.
            observed.replay = Some(match round {
                2 => replay_summary(2.8, 6.0, 0),
                _ => replay_summary(2.6, 4.0, 0),
            });
            windows.push(observed);
            windows.push(window(Scenario::AloneSensed, round, alone * 0.995, None));
        }
        let figures = figures(&measured(windows));
        let observed = figures
            .iter()
            .find(|f| f.scenario == Scenario::AloneObserved)
            .unwrap();
        let ratios: Vec<f64> = observed
            .observed_rounds
            .iter()
            .map(|r| r.training_pct.unwrap())
            .collect();
        assert_eq!(ratios.len(), 3);
        for (got, want) in ratios.iter().zip([99.0, 100.0, 98.0]) {
            assert!((got - want).abs() < 1e-9, "{ratios:?}");
        }
        let targets = targets(&figures);
        // No reamer window: the sensed scenario's target, then the observed scenario's three.
        assert_eq!(targets.len(), 4, "{targets:?}");
        assert!(
            targets[0].met,
            "99.5% of alone in every round: {:?}",
            targets[0]
        );
        assert!(
            targets[0].target.starts_with("under a daemon"),
            "{:?}",
            targets[0]
        );
        let targets = &targets[1..];
        assert!(
            !targets[0].met,
            "98% in one round reaches below 99%: {:?}",
            targets[0]
        );
        assert!(
            !targets[1].met,
            "one round's replay misses: {:?}",
            targets[1]
        );
        assert!(
            targets[1].result.contains("round 3: 6 ≤ 4.80"),
            "{:?}",
            targets[1]
        );
        assert!(targets[2].met, "{:?}", targets[2]);
        let text = markdown(&measured(Vec::new()), &figures, "cargo xtask bench", "test");
        assert!(
            text.contains("| 3 | 98.0% | 2.60 | 2.63 (1.010) | 2.80 / 8.40 | 6 / 7 |"),
            "{text}"
        );
    }

    #[test]
    fn a_run_saved_after_a_window_reads_back_to_the_same_report() {
        use crate::bench::saved::{About, Saved};
        let mut observed = window(Scenario::AloneObserved, 0, 990.0, None);
        observed.sensor_running_cpus = Some(2.6);
        observed.replay = Some(replay_summary(2.6, 4.0, 0));
        let windows = vec![
            window(Scenario::Alone, 0, 1000.0, None),
            window(Scenario::PlainCfs, 0, 700.0, Some(2600.0)),
            window(Scenario::Reamer, 0, 990.0, Some(2000.0)),
            observed,
        ];
        let path =
            std::env::temp_dir().join(format!("reamer-server-saved-{}.json", std::process::id()));
        Saved {
            about: About {
                command: "xtask bench --only server".to_owned(),
                machine: "16 CPUs".to_owned(),
                quick: false,
            },
            planned_windows: 8,
            run: measured(windows.clone()),
        }
        .write(&path)
        .unwrap();
        let back = Saved::<Measured>::load(&path, "server").unwrap();
        std::fs::remove_file(&path).unwrap();
        let report = |run: &Measured| markdown(run, &figures(run), "c", "m");
        assert_eq!(report(&back.run), report(&measured(windows)));
    }

    #[test]
    fn a_round_without_its_replay_does_not_meet_the_replay_targets() {
        let mut windows = vec![window(Scenario::Alone, 0, 1000.0, None)];
        let mut observed = window(Scenario::AloneObserved, 0, 1000.0, None);
        observed.replay = Some(replay_summary(2.6, 3.0, 0));
        windows.push(observed);
        windows.push(window(Scenario::Alone, 1, 1000.0, None));
        windows.push(window(Scenario::AloneObserved, 1, 1000.0, None));
        let targets = targets(&figures(&measured(windows)));
        assert!(!targets[1].met && !targets[2].met, "{targets:?}");
    }
}
