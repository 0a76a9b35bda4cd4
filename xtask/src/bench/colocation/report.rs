//! The co-location benchmark's figures: per scenario, from its windows, paired by round; and
//! their JSON and Markdown forms.

use serde::{Deserialize, Serialize};

use super::{HEAVY_ONLINE_CPUS, Measured, ONLINE_RATE, SLO_MS, scenario::Scenario};
use crate::{
    bench::common::harvest::HarvestSteps,
    bench::common::inference::LoadReport,
    bench::common::stats::{bootstrap_median_ci, cell, median, min_max, quantile},
    bench::common::verdict,
    wake_probe::WakeLatency,
};

/// An engine's name as the reports write it.
pub(crate) fn engine_label(engine: &str) -> &str {
    match engine {
        "onnxruntime" => "ONNX Runtime",
        other => other,
    }
}

/// What one window of one scenario measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    pub scenario: Scenario,
    pub round: usize,
    pub steps_per_s: f64,
    pub step_ms_p50: f64,
    pub step_ms_p99: f64,
    /// CPUs training used on average.
    pub training_cpus: f64,
    /// Time training's threads spent runnable but waiting for a CPU, ms per second (schedstat,
    /// summed over its threads): the part of the slowdown co-located work causes on this
    /// kernel, without the hypervisor's steal.
    pub training_runqueue_wait_ms_per_s: f64,
    pub online: Option<LoadReport>,
    /// CPUs the online worker used on average.
    pub online_cpus: f64,
    pub offline_items_per_s: Option<f64>,
    /// CPUs the offline worker used on average.
    pub offline_cpus: Option<f64>,
    /// reamer: event to cgroup write of each fast-path decision; the reactive baselines: from
    /// training's start to their first tightening.
    pub reaction_us: Vec<f64>,
    /// The enforcer daemon's, or a baseline controller thread's, CPU use, % of one CPU.
    pub enforcer_cpu_pct: Option<f64>,
    pub enforcer_rss_mib: Option<f64>,
    /// Share of the machine's CPU time the hypervisor stole during the window, %.
    pub steal_pct: f64,
    /// CPUs the kernel left idle on average (idle and iowait in /proc/stat).
    pub cpus_left_idle: f64,
    /// reamer: what the online worker, launched through the enforcer, told it of its SLO
    /// need during the window, and how its latency reports moved the pool's weight.
    pub slo_needs: Option<SloNeeds>,
    /// Under `harvest_by_pace`: what the pace controller did. Absent from runs saved before.
    #[serde(default)]
    pub harvest: Option<HarvestSteps>,
}

/// The SLO needs an online worker sent the enforcer in one window, and the changes of the
/// pool's CPU weight its latency reports made, as the daemon logged them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SloNeeds {
    /// Needs the daemon took (each a change: the worker sends only changes).
    pub told: usize,
    /// The most cores the pool's workers needed together.
    pub max_pool_cores: usize,
    /// Changes of the pool's weight.
    pub weight_changes: usize,
    /// The lowest weight the pool was given, and the last, where it changed.
    pub lowest_weight: Option<u32>,
    pub last_weight: Option<u32>,
}

impl SloNeeds {
    /// From the daemon's log: its `online pool's SLO need … pool_cores=N` and `online pool's
    /// CPU weight changed … to=N` lines.
    pub fn from_daemon_log(log: &str) -> Self {
        let field = |line: &str, name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .and_then(|n| n.parse::<u32>().ok())
        };
        log.lines().fold(Self::default(), |seen, line| {
            if line.contains("online pool's SLO need") {
                Self {
                    told: seen.told + 1,
                    max_pool_cores: field(line, "pool_cores=").map_or(seen.max_pool_cores, |n| {
                        (n as usize).max(seen.max_pool_cores)
                    }),
                    ..seen
                }
            } else if line.contains("online pool's CPU weight changed")
                && let Some(to) = field(line, "to=")
            {
                Self {
                    weight_changes: seen.weight_changes + 1,
                    lowest_weight: Some(seen.lowest_weight.map_or(to, |w| w.min(to))),
                    last_weight: Some(to),
                    ..seen
                }
            } else {
                seen
            }
        })
    }
}

/// The figures of one scenario. Fields that do not apply are null.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub training_steps_per_s: f64,
    /// The slowest and fastest window: for training alone, how far the reference itself
    /// moves from round to round, which bounds how narrow any slowdown's interval can be.
    pub training_steps_per_s_range: [f64; 2],
    pub training_slowdown_pct: f64,
    /// 95% bootstrap interval of the median paired slowdown.
    pub training_slowdown_ci95_pct: [f64; 2],
    /// The smallest and largest paired slowdown of a round.
    pub training_slowdown_range_pct: [f64; 2],
    pub training_step_ms_p50: f64,
    pub training_step_ms_p99: f64,
    /// Training's threads' run-queue wait, ms per second, median of the windows.
    pub training_runqueue_wait_ms_per_s: f64,
    pub online_slo_attainment_pct: Option<f64>,
    pub online_requests_within_slo: Option<u64>,
    pub online_p50_ms: Option<f64>,
    pub online_p99_ms: Option<f64>,
    pub offline_inferences_per_s: Option<f64>,
    pub offline_idle_capacity_pct: Option<f64>,
    /// CPUs the offline worker used, median of the windows.
    pub offline_cpus: Option<f64>,
    /// Offline inferences per CPU-second it used, against its rate alone in the same round,
    /// median of the windows: below 100% the CPU it got did less work than alone (preempted
    /// more often, caches shared), apart from how much CPU it got.
    pub offline_work_per_cpu_pct: Option<f64>,
    /// CPUs the kernel left idle, median of the windows: where offline inference got less
    /// than the idle CPU allows, whether the CPU went unused or to other work.
    pub cpus_left_idle: f64,
    pub reaction_us_p50: Option<f64>,
    pub reaction_us_p99: Option<f64>,
    pub reaction_samples: usize,
    pub enforcer_cpu_pct: Option<f64>,
    pub enforcer_rss_mib: Option<f64>,
    /// CPU time stolen by the hypervisor during its windows, median %.
    pub host_steal_pct: f64,
    pub windows: usize,
}

fn some_median(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| median(values))
}

/// Every scenario's figures, in `Scenario::ALL` order (the scenarios the run had).
pub fn figures(measured: &Measured) -> Vec<(Scenario, Figures)> {
    let alone = |round: usize| {
        measured
            .windows
            .iter()
            .find(|w| w.scenario == Scenario::Alone && w.round == round)
    };
    measured
        .scenarios
        .iter()
        .map(|&scenario| {
            let windows: Vec<&Window> = measured
                .windows
                .iter()
                .filter(|w| w.scenario == scenario)
                .collect();
            let of = |f: fn(&Window) -> f64| windows.iter().map(|w| f(w)).collect::<Vec<_>>();
            // The median of a figure over the windows that have it.
            let median_where_measured = |f: fn(&Window) -> Option<f64>| {
                some_median(&windows.iter().filter_map(|w| f(w)).collect::<Vec<_>>())
            };
            // Paired with training alone in the same round (same seed).
            let slowdowns: Vec<f64> = windows
                .iter()
                .filter_map(|w| {
                    let base = alone(w.round)?;
                    Some((1.0 - w.steps_per_s / base.steps_per_s) * 100.0)
                })
                .collect();
            let (ci_low, ci_high) = bootstrap_median_ci(&slowdowns, 7);
            let (low, high) = min_max(&slowdowns);
            let loads: Vec<&LoadReport> =
                windows.iter().filter_map(|w| w.online.as_ref()).collect();
            let sent: u64 = loads.iter().map(|l| l.sent).sum();
            let within: u64 = loads.iter().map(|l| l.within_slo).sum();
            let p50s: Vec<f64> = loads.iter().filter_map(|l| l.p50_ms).collect();
            let p99s: Vec<f64> = loads.iter().filter_map(|l| l.p99_ms).collect();
            // Offline against what the CPU left idle by training (as it runs alone) and by
            // online inference allows, at offline's own rate per CPU-second.
            let capacity: Vec<f64> = windows
                .iter()
                .filter_map(|w| {
                    let rate = w.offline_items_per_s?;
                    let idle_cpus =
                        measured.cpus as f64 - alone(w.round)?.training_cpus - w.online_cpus;
                    let allowed = measured.offline_per_cpu_s.get(w.round)? * idle_cpus.max(0.0);
                    (allowed > 0.0).then(|| rate / allowed * 100.0)
                })
                .collect();
            let work_per_cpu: Vec<f64> = windows
                .iter()
                .filter_map(|w| {
                    let cpus = w.offline_cpus.filter(|c| *c > 0.0)?;
                    let alone_rate = measured.offline_per_cpu_s.get(w.round)?;
                    Some(w.offline_items_per_s? / cpus / alone_rate * 100.0)
                })
                .collect();
            let mut reactions: Vec<f64> =
                windows.iter().flat_map(|w| w.reaction_us.clone()).collect();
            reactions.sort_by(f64::total_cmp);
            let enforcer_cpu: Vec<f64> =
                windows.iter().filter_map(|w| w.enforcer_cpu_pct).collect();
            let rss = windows
                .iter()
                .filter_map(|w| w.enforcer_rss_mib)
                .reduce(f64::max);
            let figures = Figures {
                training_steps_per_s: median(&of(|w| w.steps_per_s)),
                training_steps_per_s_range: min_max(&of(|w| w.steps_per_s)).into(),
                training_slowdown_pct: median(&slowdowns),
                training_slowdown_ci95_pct: [ci_low, ci_high],
                training_slowdown_range_pct: [low, high],
                training_step_ms_p50: median(&of(|w| w.step_ms_p50)),
                training_step_ms_p99: median(&of(|w| w.step_ms_p99)),
                training_runqueue_wait_ms_per_s: median(&of(|w| w.training_runqueue_wait_ms_per_s)),
                online_slo_attainment_pct: (sent > 0).then(|| within as f64 * 100.0 / sent as f64),
                online_requests_within_slo: (sent > 0).then_some(within),
                online_p50_ms: some_median(&p50s),
                online_p99_ms: some_median(&p99s),
                offline_inferences_per_s: median_where_measured(|w| w.offline_items_per_s),
                offline_idle_capacity_pct: some_median(&capacity),
                offline_cpus: median_where_measured(|w| w.offline_cpus),
                offline_work_per_cpu_pct: some_median(&work_per_cpu),
                cpus_left_idle: median(&of(|w| w.cpus_left_idle)),
                reaction_us_p50: (!reactions.is_empty()).then(|| quantile(&reactions, 0.5)),
                reaction_us_p99: (!reactions.is_empty()).then(|| quantile(&reactions, 0.99)),
                reaction_samples: reactions.len(),
                enforcer_cpu_pct: some_median(&enforcer_cpu),
                enforcer_rss_mib: rss,
                host_steal_pct: median(&of(|w| w.steal_pct)),
                windows: windows.len(),
            };
            (scenario, figures)
        })
        .collect()
}

/// The JSON object `{"<scenario>": {...}}`.
pub fn scenarios_json(figures: &[(Scenario, Figures)]) -> serde_json::Value {
    serde_json::Value::Object(
        figures
            .iter()
            .map(|(s, f)| {
                (
                    s.name().to_owned(),
                    serde_json::to_value(f).expect("serialize"),
                )
            })
            .collect(),
    )
}

fn find(figures: &[(Scenario, Figures)], scenario: Scenario) -> Option<&Figures> {
    figures.iter().find(|(s, _)| *s == scenario).map(|(_, f)| f)
}

/// Which rounds the figures come from: those with little steal, and what was run again.
fn rounds_note(measured: &Measured) -> String {
    let bound = measured.max_steal_pct;
    let mut note = match measured.discarded.as_slice() {
        [] => format!(
            "\nIn every round the host stole at most {bound}% of the CPU in each window: none \
             was run again.\n"
        ),
        discarded => {
            let worst = discarded
                .iter()
                .max_by(|a, b| a.worst_steal_pct.total_cmp(&b.worst_steal_pct))
                .expect("not empty");
            format!(
                "\n{} rounds were run again, with the same seed and order, because the host \
                 stole more than {bound}% of the CPU in one of their windows (the worst: {:.0}%, \
                 in {}): the figures come from the rounds kept.\n",
                discarded.len(),
                worst.worst_steal_pct,
                worst.worst_scenario.label()
            )
        }
    };
    if measured.rounds < measured.rounds_asked {
        note.push_str(&format!(
            "\nOnly {} of the {} rounds asked for were kept: the attempts ran out while the host \
             was busy, and the intervals are the wider for it.\n",
            measured.rounds, measured.rounds_asked
        ));
    }
    note
}

/// What reamer's online worker, launched through the enforcer, told it: the proof that the
/// pool's grants and SLO need were in play, not a pid adopted from outside.
fn slo_needs_note(measured: &Measured) -> String {
    let needs: Vec<SloNeeds> = measured
        .windows
        .iter()
        .filter_map(|w| w.slo_needs)
        .collect();
    if needs.is_empty() {
        return String::new();
    }
    let told: Vec<f64> = needs.iter().map(|n| n.told as f64).collect();
    let max_cores = needs.iter().map(|n| n.max_pool_cores).max().unwrap_or(0);
    let changes: Vec<f64> = needs.iter().map(|n| n.weight_changes as f64).collect();
    let weights = |of: fn(&SloNeeds) -> Option<u32>| -> String {
        let mut seen: Vec<u32> = needs.iter().filter_map(of).collect();
        seen.sort_unstable();
        seen.dedup();
        let seen: Vec<String> = seen.iter().map(u32::to_string).collect();
        seen.join(", ")
    };
    let steered = needs.iter().filter(|n| n.weight_changes > 0).count();
    let weight_note = if steered == 0 {
        " Its latency reports never moved the pool's CPU weight from `cpu_weight`.".to_owned()
    } else {
        format!(
            " Its latency reports moved the pool's CPU weight in {steered} of the windows ({} \
             changes per window, median), as low as {} and ending windows at {} \
             (docs/enforcer.md, \"The online weight, steered by the latency tail\").",
            crate::bench::common::stats::median(&changes),
            weights(|n| n.lowest_weight),
            weights(|n| n.last_weight),
        )
    };
    format!(
        "\nUnder reamer the online worker was started through the enforcer (`enforcer launch \
         --pool online`) and followed the pool's core grants: in {} of its {} windows it told \
         the enforcer its SLO need ({} times per window, median), at most {} {} for the pool.{}\n",
        needs.iter().filter(|n| n.told > 0).count(),
        needs.len(),
        crate::bench::common::stats::median(&told),
        max_cores,
        if max_cores == 1 { "core" } else { "cores" },
        weight_note,
    )
}

/// The host's regime as `wake-probe` saw it before and after the rounds: training alone leaves
/// a vCPU idle and pays the idle case, the co-located scenarios keep the vCPUs busy.
fn wake_note(measured: &Measured) -> String {
    let describe = |wake: &Option<WakeLatency>| {
        wake.as_ref()
            .map_or("not measured (wake-probe failed)".to_owned(), |w| {
                w.describe()
            })
    };
    format!(
        "\nHow slowly this host woke an idle vCPU, which training alone pays and the co-located \
         scenarios, whose vCPUs stay busy, do not (docs/experiments/2026-11-22-idle-vcpu-wake.md): before the rounds, {}; after them, {}.\n",
        describe(&measured.wake_before),
        describe(&measured.wake_after)
    )
}

/// The section from a run, live or saved: its two plots, written beside docs/benchmarks.md
/// where `into_docs` (under target/bench/ otherwise), its Markdown and its scenarios' JSON.
pub fn section(
    measured: &Measured,
    command: &str,
    machine: &str,
    into_docs: bool,
) -> anyhow::Result<(String, serde_json::Value)> {
    let figures = figures(measured);
    let plots = [
        (
            super::plot::tradeoff(&figures, machine),
            super::plot::TRADEOFF_FILE,
        ),
        (super::plot::bars(&figures, machine), super::plot::BARS_FILE),
    ];
    for (canvas, file) in plots {
        crate::bench::plots_written::write(canvas, file, into_docs)?;
    }
    let text = markdown(&figures, measured, command, machine);
    Ok((text, scenarios_json(&figures)))
}

pub fn markdown(
    figures: &[(Scenario, Figures)],
    measured: &Measured,
    command: &str,
    machine: &str,
) -> String {
    let mut out = format!(
        "Command: `{command}`\n\nMachine: {machine}\n\n\
         {} rounds of {} windows of {:.1} s (offline alone, then the {} scenarios in an order \
         rotated every round), each after a lead of {:.1} s in which inference ran without \
         training, its online traffic included{}; training-sim seeded by round; online: PP-OCR cls at {} \
         requests/s (Poisson), each image as binary tensor data, and at {:.0} requests/s in the \
         heavy-online scenarios ({} CPUs of its work: the worker took {:.2} ms of CPU per request \
         alone, measured at the start, and {:.2} ms with the image as JSON numbers), SLO {} ms; \
         offline: a 1024×8 MLP job, batch 8.\n\n\
         ![training's pace against offline inference's share of the idle CPU, one point per \
         scenario]({})\n\n\
         | scenario | training steps/s, median (range) | training slowdown, median [95% CI] (range) | \
         training step p50 / p99 | training run-queue wait | online within SLO | online p50 / p99 | offline inferences/s | offline, % of idle CPU | \
         offline CPUs used, work per CPU-s vs alone | CPUs left idle | reaction p50 / p99 | enforcer CPU / RSS | host steal |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        measured.rounds,
        measured.scenarios.len() + 1,
        measured.window_s,
        measured.scenarios.len(),
        measured.lead_s,
        settle_clause(measured.settle_s),
        ONLINE_RATE,
        measured.heavy_online_rate,
        HEAVY_ONLINE_CPUS,
        measured.online_cpu_ms_per_request,
        measured.online_cpu_ms_per_json_request,
        SLO_MS,
        super::plot::TRADEOFF_FILE,
    );
    for (scenario, f) in figures {
        let slowdown = if *scenario == Scenario::Alone {
            "(baseline)".to_owned()
        } else {
            format!(
                "{:.1}% [{:.1}, {:.1}] ({:.1} to {:.1})",
                f.training_slowdown_pct,
                f.training_slowdown_ci95_pct[0],
                f.training_slowdown_ci95_pct[1],
                f.training_slowdown_range_pct[0],
                f.training_slowdown_range_pct[1]
            )
        };
        let reaction = match (f.reaction_us_p50, f.reaction_us_p99) {
            (Some(p50), Some(p99)) if p99 >= 10_000.0 => {
                format!("{:.0} / {:.0} ms", p50 / 1e3, p99 / 1e3)
            }
            (Some(p50), Some(p99)) => format!("{p50:.0} / {p99:.0} µs"),
            _ => "–".to_owned(),
        };
        out.push_str(&format!(
            "| {} | {:.1} ({:.0} to {:.0}) | {slowdown} | {:.2} / {:.2} ms | {:.0} ms/s | {} | {} / {} | {} | {} \
             | {} / {} | {:.2} | {reaction} | {} / {} | {:.0}% |\n",
            scenario.label(),
            f.training_steps_per_s,
            f.training_steps_per_s_range[0],
            f.training_steps_per_s_range[1],
            f.training_step_ms_p50,
            f.training_step_ms_p99,
            f.training_runqueue_wait_ms_per_s,
            cell(f.online_slo_attainment_pct, 1, "%"),
            cell(f.online_p50_ms, 1, ""),
            cell(f.online_p99_ms, 1, " ms"),
            cell(f.offline_inferences_per_s, 0, ""),
            cell(f.offline_idle_capacity_pct, 0, "%"),
            cell(f.offline_cpus, 2, ""),
            cell(f.offline_work_per_cpu_pct, 0, "%"),
            f.cpus_left_idle,
            cell(f.enforcer_cpu_pct, 1, "%"),
            cell(f.enforcer_rss_mib, 0, " MiB"),
            f.host_steal_pct,
        ));
    }
    out.push_str(&format!(
        "\n![online requests within the SLO and the reaction's p99, scenario by scenario]({})\n",
        super::plot::BARS_FILE
    ));
    let faster_than_alone = figures
        .iter()
        .filter(|(s, f)| *s != Scenario::Alone && f.training_slowdown_pct < 0.0)
        .count();
    if faster_than_alone > 0 {
        out.push_str(&format!(
            "\nIn {faster_than_alone} of {} scenarios training ran faster beside inference than \
             alone (a negative slowdown): on this host the reference itself is not stable, see \
             the host steal column and how slowly an idle vCPU woke (below).\n",
            measured.scenarios.len() - 1
        ));
    }
    out.push_str(&rounds_note(measured));
    out.push_str(&slo_needs_note(measured));
    out.push_str(&wake_note(measured));
    out.push_str(&harvest_note(measured));
    out.push_str(&pace_targets::table(figures, measured));
    out.push_str(&format!(
        "\nThe workers ran on {} (`inference-worker --engine {}`){}.\n",
        engine_label(&measured.engine),
        measured.engine,
        if measured.scenarios.contains(&Scenario::ReamerTract) {
            "; in \"reamer, workers on tract\", on tract"
        } else {
            ""
        }
    ));
    for note in &measured.notes {
        out.push_str(&format!("\nOn this host: {note}.\n"));
    }
    // Requests within the SLO are compared at the heavy online load: at the base load a
    // static core meets the SLO too, and the count cannot tell the two apart.
    let (Some(reamer), Some(reamer_heavy), Some(static_heavy)) = (
        find(figures, Scenario::Reamer),
        find(figures, Scenario::ReamerHeavyOnline),
        find(figures, Scenario::StaticPartitionHeavyOnline),
    ) else {
        out.push_str(
            "
(A run of some scenarios only: no verdict against reamer's targets.)
",
        );
        return out;
    };
    let more_within = match (
        reamer_heavy.online_requests_within_slo,
        static_heavy.online_requests_within_slo,
    ) {
        (Some(r), Some(s)) if s > 0 => Some((r as f64 / s as f64 - 1.0) * 100.0),
        _ => None,
    };
    let [ci_low, ci_high] = reamer.training_slowdown_ci95_pct;
    let slowdown_verdict = verdict::interval_at_most(ci_low, ci_high, 1.0);
    let attainment_met = reamer.online_slo_attainment_pct.map(|a| a >= 99.0);
    let more_verdict = more_within_verdict(more_within, static_heavy.online_slo_attainment_pct);
    let offline_met = reamer.offline_idle_capacity_pct.map(|c| c >= 90.0);
    let reaction_met = reamer.reaction_us_p99.map(|p| p <= 500.0);
    out.push_str(&format!(
        "\nreamer against its targets:\n\n| target | anchor | reamer | |\n|---|---|---|---|\n\
         | training slowdown ≤ 1% | Cloud Reamer 3.2% | {:.1}% [{:.1}, {:.1}] | {} |\n\
         | online attainment ≥ 99% | | {} | {} |\n\
         | ≥ 46% more requests within the SLO than the static partition, heavy online | Cloud Reamer +46% | {} | {} |\n\
         | offline ≥ 90% of the idle CPU | | {} | {} |\n\
         | reaction p99 ≤ 500 µs | Koordinator 1 s | {} | {} |\n",
        reamer.training_slowdown_pct,
        reamer.training_slowdown_ci95_pct[0],
        reamer.training_slowdown_ci95_pct[1],
        slowdown_verdict,
        cell(reamer.online_slo_attainment_pct, 1, "%"),
        verdict::met_where_measured(attainment_met),
        more_within.map_or("–".to_owned(), |m| format!("{m:+.0}%")),
        more_verdict,
        // One decimal: at 0 a value just under the target printed as the target itself.
        cell(reamer.offline_idle_capacity_pct, 1, "%"),
        verdict::met_where_measured(offline_met),
        cell(reamer.reaction_us_p99, 0, " µs"),
        verdict::met_where_measured(reaction_met),
    ));
    out
}

/// The header's words on training's untimed run before each window: none without one.
fn settle_clause(settle_s: f64) -> String {
    match settle_s > 0.0 {
        true => format!(
            ", then {settle_s:.0} s of training, untimed, with inference beside it (`--settle`)"
        ),
        false => String::new(),
    }
}

/// What the pace controller did in each of its windows: its signal, when its search first
/// ended, its level as the window began, and how long its probes held offline back within the
/// window (what it cost offline). Empty where it did not run.
fn harvest_note(measured: &Measured) -> String {
    let window_s = measured.window_s;
    let by_pace: Vec<(usize, &HarvestSteps)> = measured
        .windows
        .iter()
        .filter_map(|w| Some((w.round, w.harvest.as_ref()?)))
        .collect();
    if by_pace.is_empty() {
        return String::new();
    }
    let since_training = |at_s: f64| at_s + measured.settle_s;
    let lines: Vec<String> = by_pace
        .iter()
        .map(|(round, harvest)| {
            let signal = harvest.signal_words();
            let settled = harvest.settled_at_s().map_or(
                "its search had not ended by the window's end".to_owned(),
                |at_s| {
                    format!(
                        "its search ended {:.0} s after training started",
                        since_training(at_s)
                    )
                },
            );
            format!(
                "- round {}: {signal}; {settled}; `{}` as the window began, `{}` at its end; \
                 offline held back {:.1} s of the {window_s:.0} s; judged: {}",
                round + 1,
                harvest.level_at(0.0),
                harvest.level_at(window_s),
                harvest.held_s(window_s),
                harvest.judgments(),
            )
        })
        .collect();
    let settled: Vec<f64> = by_pace
        .iter()
        .filter_map(|(_, h)| h.settled_at_s().map(since_training))
        .collect();
    let held_pct: Vec<f64> = by_pace
        .iter()
        .map(|(_, h)| h.held_s(window_s) / window_s * 100.0)
        .collect();
    let settling = match settled.is_empty() {
        true => "Its search did not end in any window".to_owned(),
        false => format!(
            "Its search ended a median {:.0} s after training started (in {} of {} windows)",
            median(&settled),
            settled.len(),
            by_pace.len()
        ),
    };
    format!(
        "\nThe pace controller (`harvest_by_pace = true`, from training-sim's progress reports), \
         window by window: each level is a rung of its ladder (docs/enforcer.md, \"Offline's \
         share, set by training's pace\"); \"judged\" lists each verdict as the level it went \
         to, then the level it judged, the verdict, and training's pace there over its pace \
         with offline held back (the mean of the cycles, and its 95% interval), and each new \
         phase it saw, with how far the held pace moved. {settling}; its probes held offline \
         back a median {:.1}% of the timed window.\n\n{}\n",
        median(&held_pct),
        lines.join("\n")
    )
}

/// The verdict on "at least 46% more requests within the SLO than the static partition"
/// (`more_within_pct`), given the static partition's own attainment. Requests are counted at
/// the benchmark's one offered load: where the static partition answered nearly all of them
/// in time too, no scheduler can answer 46% more, and the comparison says nothing either way.
fn more_within_verdict(
    more_within_pct: Option<f64>,
    static_attainment_pct: Option<f64>,
) -> &'static str {
    let static_met_slo = static_attainment_pct.is_some_and(|a| a >= 99.0);
    match more_within_pct.map(|m| m >= 46.0) {
        Some(false) if static_met_slo => {
            "**not resolved**: at this load the static partition met the SLO too"
        }
        met => verdict::met_where_measured(met),
    }
}

mod pace_targets;
#[cfg(test)]
mod tests;
