//! The server benchmark's figures per scenario and its section of docs/benchmarks.md; its
//! targets are in `targets`.
//!
//! Ratios are paired within a round: training's throughput over training alone's in the same
//! round, offline's over plain CFS's in the same round. The medians over rounds come with a
//! 95% bootstrap interval where a target depends on them, and from one round with none.

use enforcer_common::replay::ReplaySummary;
use serde::{Deserialize, Serialize};

use super::{Measured, SLO_MS, Scenario};
use crate::bench::{
    common::inference::LoadReport,
    common::stats::{bootstrap_median_ci, cell, median, median_of},
    common::verdict,
};

mod targets;
pub use targets::targets;

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
    /// Under `harvest_by_pace`: what the pace controller did. Absent from runs saved before.
    #[serde(default)]
    pub harvest: Option<crate::bench::common::harvest::HarvestSteps>,
    /// Each step's time over the timed part, ms, in order: its pace against itself
    /// (`pace_noise`), and under the pace controller its pace beside the controller's steps,
    /// both timed from the timed part's start. Absent from runs saved before; in runs saved
    /// before every scenario kept them, training alone's only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_ms: Vec<f64>,
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
    /// The rounds it pairs. From one, `low` and `high` are the one ratio: no interval at all.
    pub pairs: usize,
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
            pairs: values.len(),
        })
    }

    /// The interval, where there are pairs enough to have one.
    pub fn interval(&self) -> Option<[f64; 2]> {
        (self.pairs >= 2).then_some([self.low, self.high])
    }

    /// `97.7% (96.1–99.0)`, or `97.7% (one round paired, no interval)`.
    fn percent(&self, digits: usize) -> String {
        match self.interval() {
            Some([low, high]) => {
                format!("{:.digits$}% ({low:.digits$}–{high:.digits$})", self.median)
            }
            None => format!("{:.digits$}% (one round paired, no interval)", self.median),
        }
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

fn interval(value: Option<WithInterval>) -> String {
    value.map_or("–".to_owned(), |v| v.percent(1))
}

/// The section (`section_name`, the docs section it writes) from a run, live or saved: its
/// plot, written beside docs/benchmarks.md where `into_docs` (under target/bench/ otherwise),
/// the job's step times per scenario under target/bench/server/ (`enforcer replay-pace`'s
/// recordings), its Markdown and its JSON.
pub fn section(
    measured: &Measured,
    command: &str,
    machine: &str,
    section_name: &str,
    into_docs: bool,
) -> anyhow::Result<(String, serde_json::Value)> {
    let figures = figures(measured);
    let plot = super::plot::tradeoff_file(section_name);
    crate::bench::plots_written::write(
        super::plot::tradeoff(&figures, machine, measured.stand_in),
        &plot,
        into_docs,
    )?;
    let text = markdown(measured, &figures, command, machine, &plot);
    for path in
        super::pace_noise::write_recordings(&measured.windows, &super::bench_dir(), section_name)?
    {
        eprintln!(
            "[bench] the job's steps, for `enforcer replay-pace`: {}",
            path.display()
        );
    }
    let json = serde_json::json!({
        "scenarios": figures,
        "targets": targets(&figures),
        "run": measured,
    });
    Ok((text, json))
}

/// The section's Markdown; `plot` the file name of its plot, beside docs/benchmarks.md.
pub fn markdown(
    measured: &Measured,
    figures: &[ScenarioFigures],
    command: &str,
    machine: &str,
    plot: &str,
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
    let process = match measured.one_training_process {
        true => {
            "one training process through the whole run, timed for a part of it in each \
             window, while what runs beside it changes between windows"
        }
        false => "the training job started afresh in each window",
    };
    text.push_str(&format!(
        "Training: {}; {process}; {} s timed per window, {} round{}, the scenarios' order \
         rotated each round. Online: the PP-OCR classifier behind KServe v2 (binary tensors), \
         an open-loop Poisson load of {:.0} requests/s from `load-gen`, SLO {SLO_MS:.0} ms; \
         under reamer an online pool with `min_cores = {}`. Offline: `inference-worker \
         offline` over a 2048×8 MLP job. Both workers on {} (`--engine {}`). Inference starts \
         before training's timed part; every figure is over that timed part. Percentages of \
         alone and of plain CFS are paired within a round; medians over rounds, with 95% \
         bootstrap intervals.\n\n",
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
         scenario]({plot})\n\n"
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
    text.push_str(&super::harvest::markdown(
        &measured.windows,
        measured.pace_lead_s,
    ));
    text.push_str(&super::level_cost::markdown(&measured.windows));
    text.push_str(&super::pace_noise::markdown(&measured.windows));
    if let Some(observed) = figures
        .iter()
        .find(|f| f.scenario == Scenario::AloneObserved)
    {
        text.push_str(&observed_markdown(
            &observed.observed_rounds,
            measured.one_training_process,
        ));
    }
    let targets = targets(figures);
    if !targets.is_empty() {
        text.push_str(
            "\nTargets, for reamer's scenarios and for training alone under a daemon:\n\n",
        );
        text.push_str(&verdict::table(&targets));
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
fn observed_markdown(rounds: &[ObservedRound], one_training_process: bool) -> String {
    let from = match one_training_process {
        true => {
            "before the timed part starts (the trace in enforcer/tests/fixtures/ was recorded \
             from before the job started)"
        }
        false => "before training starts, as the trace in enforcer/tests/fixtures/ was recorded",
    };
    let mut text = format!(
        "\nTraining alone, observed at 10 Hz: the daemon with `[policy] enforce = false` and \
         `enforcer observe --json --interval 0.1` from {from}. Per round: what watching cost \
         training, the CPUs the sensor saw it run on against the job's own CPU time over the \
         timed part (the observed intervals' edges fall up to 0.1 s outside it), and the CPU \
         policy replayed over the whole trace (`enforcer replay TRACE --json`, the default scenario; \
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
mod tests;
