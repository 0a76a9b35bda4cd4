//! The CPU policy over the trace recorded on the 16-CPU GPU server (ResNet-50 alone), as
//! `enforcer replay` runs it: what training would have had reserved, against the targets of
//! the issue that introduced the replay. No root, no GPU: the trace is in the repository.

use std::{path::Path, process::Command};

use anyhow::{Context as _, bail};
use enforcer_common::replay::ReplaySummary;
use serde::Serialize;

use crate::cargo::{release_bin, workspace_root};

/// The shipped trace, relative to the repository's root.
pub const TRACE: &str = "enforcer/tests/fixtures/resnet50-h100-16cpu-alone.observe.jsonl";
/// The machine it was recorded on (the trace predates `online_cpus`).
pub const TRACE_CPUS: usize = 16;
/// The decision log of the daemon that recorded the trace: the policy before the replay's.
pub const RECORDED_DECISIONS: &str =
    "enforcer/tests/fixtures/resnet50-h100-16cpu-alone.decisions.jsonl";

/// `enforcer replay --json`'s summary, and what the recording daemon's own policy did.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayBench {
    #[serde(flatten)]
    pub summary: ReplaySummary,
    pub recorded: RecordedPolicy,
}

/// The recording daemon's reservations, from its decision log.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedPolicy {
    /// Seconds from its first decision to its last.
    pub span_s: f64,
    pub max_cores: usize,
    /// Seconds it held all but one of the cores or more.
    pub seconds_at_all_but_one_or_more: f64,
}

/// Reads the recording daemon's decision log: each decision's time and the cores training
/// held after it.
fn recorded_policy(cpus: usize) -> anyhow::Result<RecordedPolicy> {
    let path = workspace_root().join(RECORDED_DECISIONS);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut steps = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}: a line is not JSON", path.display()))?;
        // Lines without a time are other records (weights, GPU decisions).
        if let (Some(at), Some(cores)) = (
            value["at_ns"].as_u64(),
            value["training_cores_after"].as_u64(),
        ) {
            steps.push((at, cores as usize));
        }
    }
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
        bail!("{}: no decisions", path.display());
    };
    let seconds_at_all_but_one_or_more = steps
        .windows(2)
        .filter(|pair| pair[0].1 + 1 >= cpus)
        .map(|pair| (pair[1].0 - pair[0].0) as f64 / 1e9)
        .sum();
    Ok(RecordedPolicy {
        span_s: (last.0 - first.0) as f64 / 1e9,
        max_cores: steps.iter().map(|s| s.1).max().unwrap_or(0),
        seconds_at_all_but_one_or_more,
    })
}

/// The replay's targets: the median reservation at most this many cores above the median of
/// the CPUs training ran on...
pub const RESERVED_ABOVE_RUNNING: f64 = 2.0;

pub fn reserved_bound(summary: &ReplaySummary) -> f64 {
    summary.running_cpus_p50 + RESERVED_ABOVE_RUNNING
}

pub fn reserved_target_met(summary: &ReplaySummary) -> bool {
    summary.reserved_cores_p50 <= reserved_bound(summary)
}

/// ...and offline never paused while training ran on half the CPUs or fewer.
pub fn pause_target_met(summary: &ReplaySummary) -> bool {
    summary.paused_at_half_or_less == 0
}

/// `enforcer replay TRACE --json` with the default scenario (`cpus`: the traced machine's
/// CPUs, for a trace that does not record them), run from the repository's root.
pub fn replay_trace(trace: &Path, cpus: Option<usize>) -> anyhow::Result<ReplaySummary> {
    let mut command = Command::new(release_bin("enforcer"));
    command
        .current_dir(workspace_root())
        .arg("replay")
        .arg(trace)
        .arg("--json");
    if let Some(cpus) = cpus {
        command.args(["--cpus", &cpus.to_string()]);
    }
    let output = command.output().context("running enforcer replay")?;
    if !output.status.success() {
        bail!(
            "enforcer replay failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let stdout = String::from_utf8(output.stdout).context("enforcer replay's output")?;
    let summary = stdout
        .lines()
        .last()
        .context("enforcer replay printed nothing")?;
    serde_json::from_str(summary).context("reading enforcer replay's summary")
}

/// The enforcer's replay of the shipped trace, with its default scenario.
pub fn run(progress: &dyn Fn(&str)) -> anyhow::Result<ReplayBench> {
    progress("replaying the GPU server's ResNet-50 trace through the CPU policy");
    Ok(ReplayBench {
        summary: replay_trace(Path::new(TRACE), Some(TRACE_CPUS))?,
        recorded: recorded_policy(TRACE_CPUS)?,
    })
}

fn met(met: bool) -> &'static str {
    match met {
        true => "met",
        false => "**missed**",
    }
}

pub fn markdown(bench: &ReplayBench) -> String {
    let (summary, recorded) = (&bench.summary, &bench.recorded);
    let reserved_bound = reserved_bound(summary);
    let reserved_met = met(reserved_target_met(summary));
    let pause_met = met(pause_target_met(summary));
    format!(
        "Command: `enforcer replay {TRACE} --cpus {TRACE_CPUS} --json` (run by `cargo xtask bench \
         --only replay`), with the default scenario: the default policy, an online pool of \
         `min_cores = 2` and an offline pool.\n\n\
         | figure | value | target | |\n|---|---|---|---|\n\
         | intervals of 100 ms | {} | | |\n\
         | training's running CPUs, median / p90 | {:.2} / {:.2} | | |\n\
         | cores reserved for training, median / p90 | {} / {} | median ≤ median running + {RESERVED_ABOVE_RUNNING} = {:.2} | {reserved_met} |\n\
         | intervals with offline paused | {:.1}% | | |\n\
         | of which with training on {} CPUs or fewer | {} | none | {pause_met} |\n\
         | intervals with training on more CPUs than reserved (`short_pct`) | {:.1}% | reported | |\n\
         | decisions | {} | | |\n\n\
         The recording daemon's own policy (its decision log, {RECORDED_DECISIONS}), over the \
         {:.1} s its decisions span: at most {} cores reserved, and {} or more for {:.1} s.\n",
        summary.intervals,
        summary.running_cpus_p50,
        summary.running_cpus_p90,
        summary.reserved_cores_p50,
        summary.reserved_cores_p90,
        reserved_bound,
        summary.offline_paused_pct,
        summary.cpus / 2,
        summary.paused_at_half_or_less,
        summary.short_pct,
        summary.decisions,
        recorded.span_s,
        recorded.max_cores,
        TRACE_CPUS - 1,
        recorded.seconds_at_all_but_one_or_more,
    )
}
