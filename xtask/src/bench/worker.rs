//! The inference worker's two engines against ONNX Runtime in Python: single-threaded latency
//! per batch size on the shipped PP-OCR models, all pinned to the same CPU, repetitions
//! interleaved (the worker on tract, the worker on ONNX Runtime, Python's ONNX Runtime, then
//! again...) so the VM's drift hits all alike.
//! Targets: the worker on ONNX Runtime within 1.15x of ONNX Runtime's own per-core throughput
//! in Python (the wrapper is not where the time goes); tract within 1.5x.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::Value;

use super::common::{
    cpus::machine_cpus,
    inference::OFFLINE_MLP,
    stats::{median, min_max},
};
use crate::{
    cargo::{release_bin, workspace_root},
    models::{self, SHIPPED},
};

/// One model at one batch size.
#[derive(Debug, Serialize)]
pub struct EngineRow {
    pub model: String,
    pub batch: usize,
    /// Median over the repetitions of each repetition's p50: the worker on tract, the worker
    /// on ONNX Runtime, ONNX Runtime in Python.
    pub tract_p50_ms: f64,
    pub worker_ort_p50_ms: f64,
    pub ort_p50_ms: f64,
    /// tract's p50 over Python ONNX Runtime's, per repetition: median and range.
    pub ratio: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// The worker-on-ONNX-Runtime's p50 over Python ONNX Runtime's, per repetition.
    pub worker_ort_ratio: f64,
    pub worker_ort_ratio_min: f64,
    pub worker_ort_ratio_max: f64,
    /// Items per second on one core.
    pub tract_per_core_per_s: f64,
    pub worker_ort_per_core_per_s: f64,
    pub ort_per_core_per_s: f64,
}

/// One operator type's time in one engine's profile.
#[derive(Debug, Serialize)]
pub struct OpTime {
    pub op: String,
    pub ms_per_run: f64,
    pub share_pct: f64,
}

/// Where each engine's time goes on one model at one batch size, from each engine's own
/// per-operator profile (the timers add overhead: compare shares, not totals, with the
/// latency table).
#[derive(Debug, Serialize)]
pub struct OpProfile {
    pub model: String,
    pub batch: usize,
    pub tract: Vec<OpTime>,
    pub ort: Vec<OpTime>,
}

#[derive(Debug, Serialize)]
pub struct WorkerBench {
    pub ort_engine: String,
    pub repetitions: usize,
    pub runs: usize,
    pub rows: Vec<EngineRow>,
    pub profiles: Vec<OpProfile>,
}

/// Operator types listed per engine and profile.
const TOP_OPS: usize = 6;

fn op_profiles(output: &[u8]) -> anyhow::Result<Vec<(usize, Vec<OpTime>)>> {
    let value: Value = serde_json::from_slice(output)?;
    value["op_profiles"]
        .as_array()
        .context("no op_profiles")?
        .iter()
        .map(|p| {
            let ops = p["ops"]
                .as_array()
                .context("ops")?
                .iter()
                .take(TOP_OPS)
                .map(|o| {
                    Ok(OpTime {
                        op: o["op"].as_str().context("op")?.to_owned(),
                        ms_per_run: o["ms_per_run"].as_f64().context("ms")?,
                        share_pct: o["share_pct"].as_f64().context("share")?,
                    })
                })
                .collect::<anyhow::Result<_>>()?;
            Ok((p["batch"].as_u64().context("batch")? as usize, ops))
        })
        .collect()
}

const BATCHES: &str = "1,8";
/// The item shape of the co-location benchmark's offline MLP (`common::inference::Mlp`).
const MLP_INPUT_SHAPE: &str = "16";
/// The CPU both engines are pinned to: not CPU 0, where most interrupts land.
const CPU: &str = "1";

fn p50s(output: &[u8], what: &str) -> anyhow::Result<(String, Vec<(usize, f64)>)> {
    let value: Value = serde_json::from_slice(output).with_context(|| {
        format!(
            "{what} printed no JSON: {}",
            String::from_utf8_lossy(output)
        )
    })?;
    let rows = value["results"]
        .as_array()
        .context("results")?
        .iter()
        .map(|r| {
            Ok((
                r["batch"].as_u64().context("batch")? as usize,
                r["p50_ms"].as_f64().context("p50")?,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((value["engine"].as_str().unwrap_or("?").to_owned(), rows))
}

fn output_of(mut command: Command, what: &str) -> anyhow::Result<Vec<u8>> {
    let output = command
        .output()
        .with_context(|| format!("cannot run {what}"))?;
    if !output.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(output.stdout)
}

fn run_engine(command: Command, what: &str) -> anyhow::Result<(String, Vec<(usize, f64)>)> {
    p50s(&output_of(command, what)?, what)
}

pub fn run(
    repetitions: usize,
    runs: usize,
    progress: &dyn Fn(&str),
) -> anyhow::Result<WorkerBench> {
    models::ensure_models()?;
    models::ensure_onnxruntime_library()?;
    let python = models::ensure_onnxruntime()?;
    let script = workspace_root().join("xtask/scripts/ort_latency.py");
    let cpu = if machine_cpus() > 1 { CPU } else { "0" };
    let mut rows = Vec::new();
    let mut ort_engine = String::new();
    let mut profiles = Vec::new();
    // The shipped models, then the co-location benchmark's offline model: what a harvested
    // core is worth to the offline job depends on that one.
    let mlp = workspace_root().join("target/bench/worker/mlp-1024x8.onnx");
    std::fs::create_dir_all(mlp.parent().context("path")?)?;
    OFFLINE_MLP.make(&mlp)?;
    let measured: Vec<(&str, PathBuf, &str)> = SHIPPED
        .iter()
        .map(|m| (m.name, models::path_of(m), m.input_shape))
        .chain([("mlp-1024x8", mlp, MLP_INPUT_SHAPE)])
        .collect();
    for (name, path, input_shape) in &measured {
        let path = path.to_str().context("path")?;
        // Per batch size: the p50 of each repetition, per engine.
        let mut tract: Vec<Vec<(usize, f64)>> = Vec::new();
        let mut worker_ort: Vec<Vec<(usize, f64)>> = Vec::new();
        let mut ort: Vec<Vec<(usize, f64)>> = Vec::new();
        // Both engines take the same options; tract through its `bench` subcommand, ONNX
        // Runtime through the script.
        let engine_args = |runs: usize| {
            let runs = runs.to_string();
            [
                "--model",
                path,
                "--input-shape",
                input_shape,
                "--batches",
                BATCHES,
                "--runs",
                &runs,
                "--cpu",
                cpu,
            ]
            .map(str::to_owned)
        };
        let worker_command = |runs: usize, engine: &str| {
            let mut command = Command::new(release_bin("inference-worker"));
            command
                .arg("bench")
                .args(engine_args(runs))
                .args(["--engine", engine])
                .env("RUST_LOG", "warn");
            command
        };
        let tract_command = |runs: usize| worker_command(runs, "tract");
        let ort_command = |runs: usize| {
            let mut command = Command::new(&python);
            command.arg(&script).args(engine_args(runs));
            command
        };
        for rep in 0..repetitions {
            progress(&format!(
                "worker: {} repetition {}/{repetitions}",
                name,
                rep + 1
            ));
            tract.push(run_engine(tract_command(runs), "inference-worker bench --engine tract")?.1);
            worker_ort.push(
                run_engine(
                    worker_command(runs, "onnxruntime"),
                    "inference-worker bench --engine onnxruntime",
                )?
                .1,
            );
            let (engine, results) = run_engine(ort_command(runs), "ort_latency.py")?;
            ort_engine = engine;
            ort.push(results);
        }
        // The per-operator profiles run apart from the timed repetitions: their timers cost.
        progress(&format!("worker: {name} per-operator profiles"));
        let profile_runs = runs.min(10);
        let mut command = tract_command(profile_runs);
        command.arg("--ops");
        let tract_ops = op_profiles(&output_of(command, "inference-worker bench --ops")?)?;
        let mut command = ort_command(profile_runs);
        command.arg("--ops");
        let ort_ops = op_profiles(&output_of(command, "ort_latency.py --ops")?)?;
        for ((batch, tract), (_, ort)) in tract_ops.into_iter().zip(ort_ops) {
            profiles.push(OpProfile {
                model: (*name).to_owned(),
                batch,
                tract,
                ort,
            });
        }
        for (index, &(batch, _)) in tract[0].iter().enumerate() {
            let t: Vec<f64> = tract.iter().map(|r| r[index].1).collect();
            let w: Vec<f64> = worker_ort.iter().map(|r| r[index].1).collect();
            let o: Vec<f64> = ort.iter().map(|r| r[index].1).collect();
            let ratios: Vec<f64> = t.iter().zip(&o).map(|(t, o)| t / o).collect();
            let (ratio_min, ratio_max) = min_max(&ratios);
            let worker_ratios: Vec<f64> = w.iter().zip(&o).map(|(w, o)| w / o).collect();
            let (worker_ort_ratio_min, worker_ort_ratio_max) = min_max(&worker_ratios);
            let (tract_p50_ms, worker_ort_p50_ms, ort_p50_ms) =
                (median(&t), median(&w), median(&o));
            rows.push(EngineRow {
                model: (*name).to_owned(),
                batch,
                tract_p50_ms,
                worker_ort_p50_ms,
                ort_p50_ms,
                ratio: median(&ratios),
                ratio_min,
                ratio_max,
                worker_ort_ratio: median(&worker_ratios),
                worker_ort_ratio_min,
                worker_ort_ratio_max,
                tract_per_core_per_s: batch as f64 * 1e3 / tract_p50_ms,
                worker_ort_per_core_per_s: batch as f64 * 1e3 / worker_ort_p50_ms,
                ort_per_core_per_s: batch as f64 * 1e3 / ort_p50_ms,
            });
        }
    }
    Ok(WorkerBench {
        ort_engine,
        repetitions,
        runs,
        rows,
        profiles,
    })
}

pub fn markdown(bench: &WorkerBench, command: &str, machine: &str) -> String {
    let mut out = format!(
        "Command: `{command}`\n\nMachine: {machine}\n\n\
         The worker (`inference-worker bench`) on its two engines, tract 0.23 and ONNX Runtime \
         (loaded from target/onnxruntime/), against {} in Python \
         (`xtask/scripts/ort_latency.py`), each on one thread pinned to the same CPU, the same \
         inputs (the shipped PP-OCR models, and the co-location benchmark's offline MLP); {} \
         interleaved repetitions of {} timed runs after 3 warm-up runs. Latency: \
         median of the repetitions' p50. Ratios, per repetition, median [min, max]: the \
         worker's p50 over Python ONNX Runtime's. Targets: the worker on ONNX Runtime within \
         1.15x (the wrapper is not where the time goes); tract within 1.5x.\n\n\
         | model | batch | worker, ONNX Runtime p50 | Python ONNX Runtime p50 | ratio | within 1.15x | tract p50 | ratio | within 1.5x | items/s per core: worker, ONNX Runtime | tract | Python ONNX Runtime |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
        bench.ort_engine, bench.repetitions, bench.runs
    );
    let verdict = |ratio: f64, target: f64| if ratio <= target { "yes" } else { "**no**" };
    for row in &bench.rows {
        out.push_str(&format!(
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2}x [{:.2}, {:.2}] | {} | {:.2} ms | {:.2}x [{:.2}, {:.2}] | {} | {:.1} | {:.1} | {:.1} |\n",
            row.model,
            row.batch,
            row.worker_ort_p50_ms,
            row.ort_p50_ms,
            row.worker_ort_ratio,
            row.worker_ort_ratio_min,
            row.worker_ort_ratio_max,
            verdict(row.worker_ort_ratio, 1.15),
            row.tract_p50_ms,
            row.ratio,
            row.ratio_min,
            row.ratio_max,
            verdict(row.ratio, 1.5),
            row.worker_ort_per_core_per_s,
            row.tract_per_core_per_s,
            row.ort_per_core_per_s,
        ));
    }
    out.push_str(
        "\nWhere the time goes: each engine's own per-operator profile (tract: a timer around \
         every node of the optimized plan; ONNX Runtime: its profiler's kernel times), the \
         operator types that take the most, per run. The timers add overhead, so read the \
         shares, not the totals.\n",
    );
    for profile in &bench.profiles {
        out.push_str(&format!(
            "\n{} at batch {}:\n\n| # | tract operator | ms/run | share | ONNX Runtime operator | ms/run | share |\n|---|---|---|---|---|---|---|\n",
            profile.model, profile.batch
        ));
        for rank in 0..profile.tract.len().max(profile.ort.len()) {
            let cell = |ops: &[OpTime]| {
                ops.get(rank).map_or_else(
                    || " | | ".to_owned(),
                    |o| format!("{} | {:.2} | {:.0}%", o.op, o.ms_per_run, o.share_pct),
                )
            };
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                rank + 1,
                cell(&profile.tract),
                cell(&profile.ort)
            ));
        }
    }
    out
}
