//! The GPU benchmark's figures, from the windows the benchmark (`bench::gpu`) measured, and their section of
//! docs/benchmarks.md.
//!
//! References: training alone's step rate (its steps over its run), and inference's rate in
//! the shared scenario while training idles (nothing limits it then). Every other rate is a
//! share of one of those, the median over the rounds.

use serde::Serialize;

use super::{GpuRun, LEAD, Scenario, Trace, TrainingJob, Window, Workload};
use crate::bench::common::{
    stats::{median, median_of, min_max},
    verdict::{self, Target},
};

/// "Restored": a run of this many consecutive training steps at 90% of alone's pace or better.
const RESTORED_STEPS: usize = 10;
const RESTORED_SHARE: f64 = 0.9;
/// Inference's idle-phase rate is read over the last this-long of the lead, after the
/// process's first batches and any ungating.
const IDLE_SPAN_NS: u64 = 2_000_000_000;

#[derive(Debug, Serialize)]
pub struct ScenarioFigures {
    pub scenario: Scenario,
    pub label: String,
    pub windows: usize,
    /// Training's steps per second over its run, % of alone: median, min, max.
    pub training_pct: f64,
    pub training_pct_range: (f64, f64),
    /// Training's steps in its first second, % of alone's rate.
    pub training_first_second_pct: f64,
    /// From training's start to the start of its first run of `RESTORED_STEPS` steps at
    /// `RESTORED_SHARE` of alone's pace, ms; None where a window never got there.
    pub restored_after_ms: Option<f64>,
    pub windows_restored: usize,
    /// Inference's rate while training idles / runs, % of the reference.
    pub inference_idle_pct: Option<f64>,
    pub inference_busy_pct: Option<f64>,
    /// Inference's rate while training runs, % of its rate then in the shared scenario.
    pub inference_busy_of_shared_pct: Option<f64>,
    /// Reamer: from training's start to the clamp decision, ms.
    pub clamp_after_ms: Option<f64>,
    /// Reamer: inference's mean run fraction of each gate period while training ran.
    pub mean_run_fraction: Option<f64>,
}

fn rate_in(trace: &Trace, from_ns: u64, to_ns: u64) -> f64 {
    let steps = trace
        .done_ns
        .iter()
        .filter(|&&t| t >= from_ns && t < to_ns)
        .count();
    steps as f64 / ((to_ns - from_ns) as f64 / 1e9)
}

/// Steps per second over the whole loop.
fn rate(trace: &Trace) -> f64 {
    let last = trace.done_ns.last().copied().unwrap_or(trace.started_ns);
    trace.done_ns.len() as f64 / (last.saturating_sub(trace.started_ns).max(1) as f64 / 1e9)
}

fn training_end(window: &Window) -> u64 {
    let training = &window.training;
    training
        .done_ns
        .last()
        .copied()
        .unwrap_or(training.started_ns)
}

/// Inference's rate while training idled (the last `IDLE_SPAN_NS` of the lead) and while it ran.
fn inference_rates(window: &Window) -> Option<(f64, f64)> {
    let inference = window.inference.as_ref()?;
    let lead_end = inference.t0_ns + LEAD.as_nanos() as u64;
    let idle = rate_in(inference, lead_end - IDLE_SPAN_NS, lead_end);
    let busy = rate_in(inference, window.training.started_ns, training_end(window));
    Some((idle, busy))
}

/// Milliseconds from training's start to the first of `RESTORED_STEPS` steps at
/// `RESTORED_SHARE` of `alone_step_ns`'s pace.
fn restored_after_ms(trace: &Trace, alone_step_ns: f64) -> Option<f64> {
    let mut ends = vec![trace.started_ns];
    ends.extend(&trace.done_ns);
    let budget = RESTORED_STEPS as f64 * alone_step_ns / RESTORED_SHARE;
    ends.windows(RESTORED_STEPS + 1)
        .find(|run| (run[RESTORED_STEPS] - run[0]) as f64 <= budget)
        .map(|run| (run[0] - trace.started_ns) as f64 / 1e6)
}

/// The gate in force at `at_ns`, by the decisions before it (ungated before the first).
fn gate_at(window: &Window, at_ns: u64) -> f64 {
    window
        .gate_changes
        .iter()
        .take_while(|c| c.at_ns <= at_ns)
        .last()
        .map_or(1.0, |c| c.run_fraction)
}

fn clamp_after_ms(window: &Window) -> Option<f64> {
    let start = window.training.started_ns;
    if gate_at(window, start) < 1.0 {
        // Still clamped from training's warm-up: no reaction to time.
        return None;
    }
    window
        .gate_changes
        .iter()
        .find(|c| c.at_ns >= start && c.run_fraction < 1.0)
        .map(|c| (c.at_ns - start) as f64 / 1e6)
}

/// The run fraction averaged over training's run, each decision weighted by how long it held.
fn mean_run_fraction(window: &Window) -> f64 {
    let (start, end) = (window.training.started_ns, training_end(window));
    let mut points = vec![(start, gate_at(window, start))];
    points.extend(
        window
            .gate_changes
            .iter()
            .filter(|c| c.at_ns > start && c.at_ns < end)
            .map(|c| (c.at_ns, c.run_fraction)),
    );
    points.push((end, f64::NAN));
    let weighted: f64 = points
        .windows(2)
        .map(|pair| pair[0].1 * (pair[1].0 - pair[0].0) as f64)
        .sum();
    weighted / (end - start).max(1) as f64
}

pub fn figures(run: &GpuRun) -> Vec<ScenarioFigures> {
    let of = |scenario: Scenario| -> Vec<&Window> {
        run.windows
            .iter()
            .filter(|w| w.scenario == scenario)
            .collect()
    };
    let alone = of(Scenario::TrainingAlone);
    let alone_rate = median(&alone.iter().map(|w| rate(&w.training)).collect::<Vec<_>>());
    let alone_step_ns = 1e9 / alone_rate;
    let inference_reference = median(
        &of(Scenario::Shared)
            .iter()
            .filter_map(|w| inference_rates(w).map(|(idle, _)| idle))
            .collect::<Vec<_>>(),
    );
    let shared_busy = median_of(
        of(Scenario::Shared)
            .iter()
            .filter_map(|w| inference_rates(w).map(|(_, busy)| busy)),
    );
    Scenario::ALL
        .iter()
        .filter_map(|&scenario| {
            let windows = of(scenario);
            if windows.is_empty() {
                return None;
            }
            let training: Vec<f64> = windows
                .iter()
                .map(|w| 100.0 * rate(&w.training) / alone_rate)
                .collect();
            let first_second: Vec<f64> = windows
                .iter()
                .map(|w| {
                    let start = w.training.started_ns;
                    100.0 * rate_in(&w.training, start, start + 1_000_000_000) / alone_rate
                })
                .collect();
            let restored: Vec<f64> = windows
                .iter()
                .filter_map(|w| restored_after_ms(&w.training, alone_step_ns))
                .collect();
            let inference: Vec<(f64, f64)> =
                windows.iter().filter_map(|w| inference_rates(w)).collect();
            let reamer = scenario == Scenario::Reamer;
            Some(ScenarioFigures {
                scenario,
                label: scenario.label(),
                windows: windows.len(),
                training_pct: median(&training),
                training_pct_range: min_max(&training),
                training_first_second_pct: median(&first_second),
                windows_restored: restored.len(),
                restored_after_ms: (restored.len() == windows.len()).then(|| median(&restored)),
                inference_idle_pct: median_of(
                    inference
                        .iter()
                        .map(|(idle, _)| 100.0 * idle / inference_reference),
                ),
                inference_busy_pct: median_of(
                    inference
                        .iter()
                        .map(|(_, busy)| 100.0 * busy / inference_reference),
                ),
                inference_busy_of_shared_pct: shared_busy.and_then(|shared| {
                    median_of(inference.iter().map(|(_, busy)| 100.0 * busy / shared))
                }),
                clamp_after_ms: reamer
                    .then(|| median_of(windows.iter().filter_map(|w| clamp_after_ms(w))))
                    .flatten(),
                mean_run_fraction: reamer.then(|| {
                    median(
                        &windows
                            .iter()
                            .map(|w| mean_run_fraction(w))
                            .collect::<Vec<_>>(),
                    )
                }),
            })
        })
        .collect()
}

/// Inference's model, said against training's.
fn inference_model(training: &Workload, inference: Option<&Workload>) -> String {
    match inference {
        None => "none ran".to_owned(),
        Some(i) if (i.layers, i.width) == (training.layers, training.width) => {
            format!("the same shape, batch {}", i.batch)
        }
        Some(i) => format!(
            "a {}-layer {}-wide MLP, batch {}",
            i.layers, i.width, i.batch
        ),
    }
}

fn pct(value: Option<f64>) -> String {
    value.map_or("–".to_owned(), |v| format!("{v:.0}%"))
}

/// Training's job, in words.
fn training_model(run: &GpuRun) -> String {
    let workload = &run.training_workload;
    match run.job {
        TrainingJob::Mlp => format!(
            "a {}-layer {}-wide bf16 MLP, batch {}, SGD",
            workload.layers, workload.width, workload.batch
        ),
        TrainingJob::Resnet50Loader => format!(
            "torchvision ResNet-50, bf16 autocast, batch {}, SGD, fed by a DataLoader of {} \
             worker processes that augment generated 320×320 images on the CPU",
            workload.batch,
            workload
                .loader_workers
                .map_or("?".to_owned(), |w| w.to_string())
        ),
    }
}

/// The GPU section's targets for this job (docs/benchmarks.md, "GPU"), against the figures.
fn targets(run: &GpuRun, figures: &[ScenarioFigures]) -> Vec<Target> {
    let of = |scenario| figures.iter().find(|f| f.scenario == scenario);
    let (Some(reamer), Some(shared)) = (of(Scenario::Reamer), of(Scenario::Shared)) else {
        return Vec::new();
    };
    match run.job {
        TrainingJob::Mlp => vec![
            Target {
                target: "training ≥ 94% of alone".to_owned(),
                result: format!("{:.1}%", reamer.training_pct),
                met: reamer.training_pct >= 94.0,
            },
            Target {
                target: "inference while training runs ≥ 10% of its rate alone".to_owned(),
                result: pct(reamer.inference_busy_pct),
                met: reamer.inference_busy_pct.is_some_and(|p| p >= 10.0),
            },
        ],
        TrainingJob::Resnet50Loader => {
            let of_shared = 100.0 * reamer.training_pct / shared.training_pct;
            vec![
                Target {
                    target: "training within 1% of its shared pace".to_owned(),
                    result: format!("{of_shared:.1}% of shared"),
                    met: of_shared >= 99.0,
                },
                Target {
                    target: "inference while training runs ≥ 90% of shared".to_owned(),
                    result: pct(reamer.inference_busy_of_shared_pct),
                    met: reamer
                        .inference_busy_of_shared_pct
                        .is_some_and(|p| p >= 90.0),
                },
            ]
        }
    }
}

/// The GPU section of docs/benchmarks.md, a part per training job, and its JSON.
pub fn section(runs: &[GpuRun], command: &str, machine: &str) -> (String, serde_json::Value) {
    let mut text = String::new();
    let mut json = Vec::new();
    for run in runs {
        let figures = figures(run);
        text.push_str(&format!("#### {}\n\n", run.job.label()));
        text.push_str(&markdown(run, &figures, command, machine));
        text.push('\n');
        json.push(serde_json::json!({"scenarios": figures, "run": run}));
    }
    (text, serde_json::Value::Array(json))
}

pub fn markdown(run: &GpuRun, figures: &[ScenarioFigures], command: &str, machine: &str) -> String {
    let mut text = format!(
        "Command: `{command}`\n\nMachine: {machine}; GPU: {}; {}.\n\n\
         Each window: inference runs alone for {:.0} s while training holds its CUDA context \
         idle, then training runs for {:.0} s. Training: {}; inference: {}, forward only; \
         every step ends with a synchronize. \"Back to 90%\": from training's first kernel \
         to the start of its first {RESTORED_STEPS} consecutive steps at 90% of alone's pace \
         or better.\n\n\
         | scenario | windows | training throughput (% of alone; min–max) | training's first second | back to 90% after | inference while training idles | inference while training runs | the same, % of shared |\n\
         |---|---|---|---|---|---|---|---|\n",
        run.gpu,
        run.mps,
        run.lead_s,
        run.train_s,
        training_model(run),
        inference_model(&run.training_workload, run.inference_workload.as_ref()),
    );
    for f in figures {
        let restored = match f.restored_after_ms {
            Some(ms) => format!("{ms:.0} ms"),
            None => format!(
                "not in {} of {} windows",
                f.windows - f.windows_restored,
                f.windows
            ),
        };
        text.push_str(&format!(
            "| {} | {} | {:.0}% ({:.0}–{:.0}) | {:.0}% | {} | {} | {} | {} |\n",
            f.label,
            f.windows,
            f.training_pct,
            f.training_pct_range.0,
            f.training_pct_range.1,
            f.training_first_second_pct,
            restored,
            pct(f.inference_idle_pct),
            pct(f.inference_busy_pct),
            pct(f.inference_busy_of_shared_pct),
        ));
    }
    let targets = targets(run, figures);
    if !targets.is_empty() {
        text.push('\n');
        text.push_str(&verdict::table(&targets));
    }
    text.push_str(&format!(
        "\nThe need signal's cost (`[gpu] clamp_on_need`): one read of \
         `/proc/PID/task/PID/schedstat` per training GPU process per NVML sample, {:.1} µs a \
         read here (the mean of {} reads timed by the benchmark).\n",
        run.launcher_read_us,
        super::COST_READS,
    ));
    if let Some(reamer) = figures.iter().find(|f| f.scenario == Scenario::Reamer) {
        text.push_str(&format!(
            "\nUnder reamer, from training's first kernel to the clamp decision: {}; \
             inference's mean share of each gate period while training ran: {}.\n",
            reamer
                .clamp_after_ms
                .map_or("no clamp measured".to_owned(), |ms| format!(
                    "{ms:.0} ms (median)"
                )),
            reamer
                .mean_run_fraction
                .map_or("–".to_owned(), |f| format!("{:.0}%", 100.0 * f)),
        ));
    }
    if let Some(status) = &run.status_sample {
        text.push_str(&format!(
            "\n`enforcer status` in the middle of the first reamer window's training:\n\n```\n{}\n```\n",
            status.trim_end()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::gpu::GateChange;

    const MS: u64 = 1_000_000;

    /// Steps ending at these milliseconds after a start at 1000 ms.
    fn trace(ends_ms: &[u64]) -> Trace {
        Trace {
            t0_ns: 0,
            started_ns: 1000 * MS,
            done_ns: ends_ms.iter().map(|ms| (1000 + ms) * MS).collect(),
        }
    }

    fn window(training: Trace, gates: &[(u64, f64)]) -> Window {
        Window {
            scenario: Scenario::Reamer,
            round: 0,
            training,
            inference: None,
            gate_changes: gates
                .iter()
                .map(|&(at_ms, run_fraction)| GateChange {
                    at_ns: at_ms * MS,
                    run_fraction,
                    reason: "test".to_owned(),
                })
                .collect(),
        }
    }

    #[test]
    fn restored_is_the_start_of_the_first_run_of_steps_at_90_percent_pace() {
        // Three slow steps of 30 ms, then steps of 10 ms: alone's pace is 10 ms a step. Ten
        // steps from 60 ms include one slow one and take 120 ms, over the 111 ms allowed.
        let mut ends = vec![30, 60, 90];
        ends.extend((1..=12).map(|i| 90 + 10 * i));
        let restored = restored_after_ms(&trace(&ends), 10.0 * MS as f64);
        assert_eq!(restored, Some(90.0));
        // At alone's pace from the first step: restored at once.
        let ends: Vec<u64> = (1..=12).map(|i| 10 * i).collect();
        assert_eq!(
            restored_after_ms(&trace(&ends), 10.0 * MS as f64),
            Some(0.0)
        );
        // Never faster than 20 ms a step: never restored.
        let ends: Vec<u64> = (1..=30).map(|i| 20 * i).collect();
        assert_eq!(restored_after_ms(&trace(&ends), 10.0 * MS as f64), None);
    }

    #[test]
    fn the_clamp_is_timed_from_training_start_unless_a_clamp_was_already_in_force() {
        let ends: Vec<u64> = (1..=10).map(|i| 10 * i).collect();
        // Clamped by warm-up, ungated before the start, clamped 16 ms after it.
        let timed = window(trace(&ends), &[(200, 0.1), (600, 1.0), (1016, 0.1)]);
        assert_eq!(clamp_after_ms(&timed), Some(16.0));
        // Still clamped from warm-up at the start: nothing to time.
        let held = window(trace(&ends), &[(900, 0.1), (1016, 0.1)]);
        assert_eq!(clamp_after_ms(&held), None);
    }

    #[test]
    fn the_mean_run_fraction_weighs_each_gate_by_how_long_it_held() {
        // Training runs from 1000 to 1100 ms: ungated for 20 ms, then at 0.1.
        let ends: Vec<u64> = (1..=10).map(|i| 10 * i).collect();
        let w = window(trace(&ends), &[(600, 1.0), (1020, 0.1)]);
        let mean = mean_run_fraction(&w);
        assert!((mean - (0.2 * 1.0 + 0.8 * 0.1)).abs() < 1e-9, "{mean}");
    }

    /// Steps at `per_s` a second from `from_ns` to `to_ns`.
    fn steady(from_ns: u64, to_ns: u64, per_s: f64) -> Vec<u64> {
        let step = (1e9 / per_s) as u64;
        (1..)
            .map(|i| from_ns + i * step)
            .take_while(|&t| t <= to_ns)
            .collect()
    }

    /// A window of `scenario`: training at `training_per_s` for 8 s after the lead; inference
    /// (where it runs) at `idle_per_s` during the lead and `busy_per_s` beside training.
    fn full_window(
        scenario: Scenario,
        training_per_s: f64,
        inference: Option<(f64, f64)>,
    ) -> Window {
        let lead = LEAD.as_nanos() as u64;
        let end = lead + 8_000_000_000;
        Window {
            scenario,
            round: 0,
            training: Trace {
                t0_ns: 0,
                started_ns: lead,
                done_ns: steady(lead, end, training_per_s),
            },
            inference: inference.map(|(idle, busy)| {
                let mut done_ns = steady(0, lead, idle);
                done_ns.extend(steady(lead, end, busy));
                Trace {
                    t0_ns: 0,
                    started_ns: 0,
                    done_ns,
                }
            }),
            gate_changes: Vec::new(),
        }
    }

    fn run_of(job: TrainingJob, windows: Vec<Window>) -> GpuRun {
        let workload = Workload {
            layers: 0,
            width: 0,
            batch: 128,
            job: Some(job.arg().to_owned()),
            loader_workers: Some(6),
        };
        GpuRun {
            job,
            launcher_read_us: 2.5,
            gpu: "test GPU".to_owned(),
            mps: "MPS".to_owned(),
            lead_s: LEAD.as_secs_f64(),
            train_s: 8.0,
            windows,
            training_workload: workload.clone(),
            inference_workload: Some(workload),
            status_sample: None,
        }
    }

    #[test]
    fn a_run_saved_after_a_window_reads_back_to_the_same_report() {
        use crate::bench::saved::{About, Saved};
        let run = run_of(
            TrainingJob::Resnet50Loader,
            vec![
                full_window(Scenario::TrainingAlone, 10.0, None),
                full_window(Scenario::Reamer, 9.5, Some((100.0, 76.0))),
            ],
        );
        let path =
            std::env::temp_dir().join(format!("reamer-gpu-saved-{}.json", std::process::id()));
        Saved {
            about: About {
                command: "xtask bench --only gpu".to_owned(),
                machine: "H100".to_owned(),
                quick: false,
            },
            planned_windows: 8,
            run: vec![run.clone()],
        }
        .write(&path)
        .unwrap();
        let back = Saved::<Vec<GpuRun>>::load(&path, "gpu").unwrap();
        std::fs::remove_file(&path).unwrap();
        let report = |run: &GpuRun| markdown(run, &figures(run), "c", "m");
        assert_eq!(back.run.len(), 1);
        assert_eq!(report(&back.run[0]), report(&run));
        assert!(
            back.report_command(&path, "gpu", "--gpu-from")
                .contains("cut short after 2 of its 8 windows")
        );
    }

    #[test]
    fn each_job_is_held_to_its_own_targets() {
        // Loader-bound: shared costs training nothing; reamer keeps its pace and inference's.
        let windows = vec![
            full_window(Scenario::TrainingAlone, 10.0, None),
            full_window(Scenario::Shared, 10.0, Some((100.0, 80.0))),
            full_window(Scenario::Reamer, 10.0, Some((100.0, 76.0))),
        ];
        let run = run_of(TrainingJob::Resnet50Loader, windows);
        let loader = figures(&run);
        let reamer = loader
            .iter()
            .find(|f| f.scenario == Scenario::Reamer)
            .unwrap();
        let of_shared = reamer.inference_busy_of_shared_pct.unwrap();
        assert!((of_shared - 95.0).abs() < 1.0, "{of_shared}");
        let met: Vec<bool> = targets(&run, &loader).iter().map(|t| t.met).collect();
        assert_eq!(met, [true, true]);
        let text = markdown(
            &run,
            &loader,
            "cargo xtask bench --only gpu",
            "test machine",
        );
        assert!(
            text.contains("ResNet-50") && text.contains("6 worker processes"),
            "{text}"
        );
        assert!(text.contains("2.5 µs a read"), "{text}");

        // GPU-bound: reamer's inference starved below a tenth of its rate alone is a miss.
        let windows = vec![
            full_window(Scenario::TrainingAlone, 10.0, None),
            full_window(Scenario::Shared, 5.5, Some((100.0, 60.0))),
            full_window(Scenario::Reamer, 9.5, Some((100.0, 5.0))),
        ];
        let run = run_of(TrainingJob::Mlp, windows);
        let gpu_bound = figures(&run);
        let met: Vec<bool> = targets(&run, &gpu_bound).iter().map(|t| t.met).collect();
        assert_eq!(met, [true, false]);
        assert!(markdown(&run, &gpu_bound, "c", "m").contains("| **missed** |"));
    }

    #[test]
    fn inference_is_described_against_trainings_model() {
        let training = Workload {
            layers: 4,
            width: 8192,
            batch: 2048,
            job: None,
            loader_workers: None,
        };
        let same = Workload {
            batch: 1024,
            ..training.clone()
        };
        assert_eq!(
            inference_model(&training, Some(&same)),
            "the same shape, batch 1024"
        );
        let other = Workload {
            layers: 2,
            width: 4096,
            batch: 64,
            job: None,
            loader_workers: None,
        };
        assert_eq!(
            inference_model(&training, Some(&other)),
            "a 2-layer 4096-wide MLP, batch 64"
        );
    }

    #[test]
    fn rates_count_steps_in_their_span() {
        let t = trace(&[10, 20, 30, 40]);
        // Steps ending in [1000, 1025) ms: two in 25 ms.
        assert!((rate_in(&t, 1000 * MS, 1025 * MS) - 80.0).abs() < 1e-9);
        // Four steps over 40 ms.
        assert!((rate(&t) - 100.0).abs() < 1e-9);
    }
}
