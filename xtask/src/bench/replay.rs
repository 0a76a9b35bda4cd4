//! The CPU policy over the trace recorded on the 16-CPU GPU server (ResNet-50 alone), as
//! `enforcer replay` runs it: what training would have had reserved, against its targets.
//! No root, no GPU: the trace is in the repository.

use std::{path::Path, process::Command};

use anyhow::{Context as _, bail};
use enforcer_common::replay::ReplaySummary;

use crate::{
    bench::common::verdict::met,
    cargo::{release_bin, workspace_root},
};

/// The shipped trace, relative to the repository's root. It records its machine's CPU count.
pub const TRACE: &str = "enforcer/tests/fixtures/resnet50-h200-16cpu-alone.observe.jsonl";

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
pub fn run(progress: &dyn Fn(&str)) -> anyhow::Result<ReplaySummary> {
    progress("replaying the GPU server's ResNet-50 trace through the CPU policy");
    replay_trace(Path::new(TRACE), None)
}

pub fn markdown(summary: &ReplaySummary) -> String {
    let reserved_bound = reserved_bound(summary);
    let reserved_met = met(reserved_target_met(summary));
    let pause_met = met(pause_target_met(summary));
    format!(
        "Command: `enforcer replay {TRACE} --json` (run by `cargo xtask bench --only replay`), \
         with the default scenario: the default policy, an online pool of `min_cores = 2` and \
         an offline pool.\n\n\
         | figure | value | target | |\n|---|---|---|---|\n\
         | intervals of 100 ms | {} | | |\n\
         | training's running CPUs, median / p90 | {:.2} / {:.2} | | |\n\
         | cores reserved for training, median / p90 | {} / {} | median ≤ median running + {RESERVED_ABOVE_RUNNING} = {:.2} | {reserved_met} |\n\
         | intervals with offline paused | {:.1}% | | |\n\
         | of which with training on {} CPUs or fewer | {} | none | {pause_met} |\n\
         | intervals with training on more CPUs than reserved (`short_pct`) | {:.1}% | reported | |\n\
         | decisions | {} | | |\n",
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
    )
}
