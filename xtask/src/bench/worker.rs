//! The inference worker against ONNX Runtime: single-threaded latency per batch size on the
//! shipped PP-OCR models, both engines pinned to the same CPU, repetitions interleaved
//! (tract, then ONNX Runtime, then tract again...) so the VM's drift hits both alike.
//! Target: tract within 1.5x of ONNX Runtime per core.

use std::process::Command;

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::Value;

use super::stats::{median, min_max};
use crate::{
    cargo::{release_bin, workspace_root},
    models::{self, SHIPPED},
};

/// One model at one batch size.
#[derive(Debug, Serialize)]
pub struct EngineRow {
    pub model: String,
    pub batch: usize,
    /// Median over the repetitions of each repetition's p50.
    pub tract_p50_ms: f64,
    pub ort_p50_ms: f64,
    /// tract's p50 over ONNX Runtime's, per repetition: median and range.
    pub ratio: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// Items per second on one core.
    pub tract_per_core_per_s: f64,
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
    let python = models::ensure_onnxruntime()?;
    let script = workspace_root().join("xtask/scripts/ort_latency.py");
    let cpu = if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        CPU
    } else {
        "0"
    };
    let mut rows = Vec::new();
    let mut ort_engine = String::new();
    let mut profiles = Vec::new();
    for model in &SHIPPED {
        let path = models::path_of(model);
        let path = path.to_str().context("path")?;
        // Per batch size: the p50 of each repetition, per engine.
        let mut tract: Vec<Vec<(usize, f64)>> = Vec::new();
        let mut ort: Vec<Vec<(usize, f64)>> = Vec::new();
        // Both engines take the same options; tract through its `bench` subcommand, ONNX
        // Runtime through the script.
        let engine_args = |runs: usize| {
            let runs = runs.to_string();
            [
                "--model",
                path,
                "--input-shape",
                model.input_shape,
                "--batches",
                BATCHES,
                "--runs",
                &runs,
                "--cpu",
                cpu,
            ]
            .map(str::to_owned)
        };
        let tract_command = |runs: usize| {
            let mut command = Command::new(release_bin("inference-worker"));
            command
                .arg("bench")
                .args(engine_args(runs))
                .env("RUST_LOG", "warn");
            command
        };
        let ort_command = |runs: usize| {
            let mut command = Command::new(&python);
            command.arg(&script).args(engine_args(runs));
            command
        };
        for rep in 0..repetitions {
            progress(&format!(
                "worker: {} repetition {}/{repetitions}",
                model.name,
                rep + 1
            ));
            tract.push(run_engine(tract_command(runs), "inference-worker bench")?.1);
            let (engine, results) = run_engine(ort_command(runs), "ort_latency.py")?;
            ort_engine = engine;
            ort.push(results);
        }
        // The per-operator profiles run apart from the timed repetitions: their timers cost.
        progress(&format!("worker: {} per-operator profiles", model.name));
        let profile_runs = runs.min(10);
        let mut command = tract_command(profile_runs);
        command.arg("--ops");
        let tract_ops = op_profiles(&output_of(command, "inference-worker bench --ops")?)?;
        let mut command = ort_command(profile_runs);
        command.arg("--ops");
        let ort_ops = op_profiles(&output_of(command, "ort_latency.py --ops")?)?;
        for ((batch, tract), (_, ort)) in tract_ops.into_iter().zip(ort_ops) {
            profiles.push(OpProfile {
                model: model.name.to_owned(),
                batch,
                tract,
                ort,
            });
        }
        for (index, &(batch, _)) in tract[0].iter().enumerate() {
            let t: Vec<f64> = tract.iter().map(|r| r[index].1).collect();
            let o: Vec<f64> = ort.iter().map(|r| r[index].1).collect();
            let ratios: Vec<f64> = t.iter().zip(&o).map(|(t, o)| t / o).collect();
            let (ratio_min, ratio_max) = min_max(&ratios);
            let (tract_p50_ms, ort_p50_ms) = (median(&t), median(&o));
            rows.push(EngineRow {
                model: model.name.to_owned(),
                batch,
                tract_p50_ms,
                ort_p50_ms,
                ratio: median(&ratios),
                ratio_min,
                ratio_max,
                tract_per_core_per_s: batch as f64 * 1e3 / tract_p50_ms,
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
         tract 0.23 (`inference-worker bench`) against {} (`xtask/scripts/ort_latency.py`), \
         each on one thread pinned to the same CPU, the same inputs; {} interleaved \
         repetitions of {} timed runs after 3 warm-up runs. Latency: median of the \
         repetitions' p50. Ratio: tract / ONNX Runtime per repetition, median [min, max]. \
         Target: at most 1.5x.\n\n\
         | model | batch | tract p50 | ONNX Runtime p50 | ratio | tract items/s per core | ONNX Runtime items/s per core | within 1.5x |\n\
         |---|---|---|---|---|---|---|---|\n",
        bench.ort_engine, bench.repetitions, bench.runs
    );
    for row in &bench.rows {
        out.push_str(&format!(
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2}x [{:.2}, {:.2}] | {:.1} | {:.1} | {} |\n",
            row.model,
            row.batch,
            row.tract_p50_ms,
            row.ort_p50_ms,
            row.ratio,
            row.ratio_min,
            row.ratio_max,
            row.tract_per_core_per_s,
            row.ort_per_core_per_s,
            if row.ratio <= 1.5 { "yes" } else { "**no**" }
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
