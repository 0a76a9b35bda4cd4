//! Running `wake-probe`: how long this machine takes to wake a thread on another CPU, with the
//! CPUs idle and kept busy. On a VM with a busy host the first is far slower, which moves any
//! workload that leaves a vCPU idle (docs/experiments/2026-11-22-idle-vcpu-wake.md).

use std::process::Command;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::cargo::release_bin;

/// Round-trip percentiles of one `wake-probe` run, µs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakeLatency {
    pub idle_p50_us: f64,
    pub idle_p99_us: f64,
    pub busy_p50_us: f64,
    pub busy_p99_us: f64,
}

impl WakeLatency {
    /// Runs `wake-probe` for `rounds` rounds of `pings` round trips per case (each round trip
    /// is followed by a 500 µs pause: 300 pings and 2 rounds take about a second).
    pub fn probe(rounds: usize, pings: usize) -> anyhow::Result<Self> {
        let output = Command::new(release_bin("wake-probe"))
            .args([
                "--rounds",
                &rounds.to_string(),
                "--pings",
                &pings.to_string(),
            ])
            .output()
            .context("running wake-probe")?;
        if !output.status.success() {
            bail!("{}", String::from_utf8_lossy(&output.stderr).trim());
        }
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).context("wake-probe's report")?;
        let field = |case: &str, name: &str| {
            report[case][name]
                .as_f64()
                .with_context(|| format!("wake-probe's report has no {case}.{name}"))
        };
        Ok(Self {
            idle_p50_us: field("idle", "p50_us")?,
            idle_p99_us: field("idle", "p99_us")?,
            busy_p50_us: field("kept_busy", "p50_us")?,
            busy_p99_us: field("kept_busy", "p99_us")?,
        })
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        format!(
            "a thread woken on another CPU answers in p50 {:.0} µs, p99 {:.1} ms when the CPUs \
             were idle, and in p50 {:.0} µs, p99 {:.1} ms when idle-class work kept them busy \
             (wake-probe)",
            self.idle_p50_us,
            self.idle_p99_us / 1e3,
            self.busy_p50_us,
            self.busy_p99_us / 1e3
        )
    }
}
