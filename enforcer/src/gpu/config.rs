//! The `[gpu]` section of the enforcer's config.
//!
//! ```toml
//! [gpu]
//! enabled = "auto"               # "auto": on when NVML finds a GPU; "off"
//! mps = "attach"                 # "attach" to a running MPS control daemon, "start" it, or "off"
//! gate_period_ms = 100           # the freezer duty cycle's period
//! training_memory_reserve_mib = 4096
//!
//! [[pool]]
//! name = "gpu-serve"
//! kind = "online"
//! gpu = true                     # its processes use the GPU: gated, limited, guarded
//! ```

use std::path::PathBuf;

use serde::Deserialize;

use super::clamp::ClampConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuSwitch {
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MpsMode {
    /// Use a control daemon the operator runs; without one, MPS limits are off.
    Attach,
    /// Attach, or start the control daemon when none answers.
    Start,
    Off,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuSection {
    pub enabled: GpuSwitch,
    /// NVML sampling period. The driver refreshes utilization every 1/6 s to 1 s, so sampling
    /// faster only re-reads the same figure.
    pub sample_ms: u64,
    pub mps: MpsMode,
    /// The MPS control program.
    pub mps_control: PathBuf,
    /// `CUDA_MPS_PIPE_DIRECTORY` of the control daemon; unset: NVIDIA's default.
    pub mps_pipe_dir: Option<PathBuf>,
    /// Also set the control daemon's defaults (for servers started later) to inference's
    /// limits. Only right where training does not run under the same MPS control daemon: the
    /// defaults bind every new server, training's too.
    pub mps_set_defaults: bool,
    /// Also set inference's limits on each MPS server whose clients are all inference (for
    /// clients that `enforcer launch` did not start). Only right where inference runs under
    /// a uid of its own: MPS runs one server per uid, and a training process of the same uid
    /// that starts later joins that server and gets its limits. Servers of a uid a training
    /// process runs under are left alone either way.
    pub mps_limit_servers: bool,
    /// Period of the freezer duty cycle.
    pub gate_period_ms: u64,
    /// Inference's share of each period right after training's GPU demand rises.
    pub clamp_run_fraction: f64,
    /// The least share a back-off leaves inference.
    pub min_run_fraction: f64,
    /// Probe above the clamp on training's per-process SM utilization from NVML. Off by
    /// default: on an H100 without MPS that figure stayed near 100% while probing left
    /// training 70% of its pace alone (docs/gpu.md); under MPS NVML does not attribute it.
    pub probe: bool,
    /// How much of its best SM utilization training may lose before inference backs off.
    pub tolerance: f64,
    /// Training idle this long: inference runs ungated.
    pub idle_after_ms: u64,
    /// A share held this long becomes the MPS percentage of new inference clients.
    pub retarget_after_ms: u64,
    /// GPU memory kept free for training to grow into, per device.
    pub training_memory_reserve_mib: u64,
    /// Evict (SIGTERM, then SIGKILL) inference processes that hold memory training needs.
    /// false: only log it.
    pub evict: bool,
}

impl Default for GpuSection {
    fn default() -> Self {
        let clamp = ClampConfig::default();
        Self {
            enabled: GpuSwitch::Auto,
            sample_ms: 200,
            mps: MpsMode::Attach,
            mps_control: PathBuf::from(super::mps::CONTROL_PROGRAM),
            mps_pipe_dir: None,
            mps_set_defaults: false,
            mps_limit_servers: false,
            // 100 ms: short against a training step on the GPU (hundreds of ms for large
            // models) and long against a cgroup freeze write.
            gate_period_ms: 100,
            clamp_run_fraction: clamp.clamp_run_fraction,
            min_run_fraction: clamp.min_run_fraction,
            probe: clamp.probe,
            tolerance: clamp.tolerance,
            idle_after_ms: clamp.idle_after_ns / 1_000_000,
            retarget_after_ms: clamp.retarget_after_ns / 1_000_000,
            training_memory_reserve_mib: 4096,
            evict: true,
        }
    }
}

impl GpuSection {
    /// The policy's tunables.
    pub fn clamp_config(&self) -> ClampConfig {
        ClampConfig {
            clamp_run_fraction: self.clamp_run_fraction,
            min_run_fraction: self.min_run_fraction,
            probe: self.probe,
            tolerance: self.tolerance,
            idle_after_ns: self.idle_after_ms.saturating_mul(1_000_000),
            retarget_after_ns: self.retarget_after_ms.saturating_mul(1_000_000),
            adjust_every_ns: self.sample_ms.max(1000).saturating_mul(1_000_000),
            ..ClampConfig::default()
        }
    }

    /// Checks values serde cannot; returns the field and what is wrong.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (field, value) in [
            ("clamp_run_fraction", self.clamp_run_fraction),
            ("min_run_fraction", self.min_run_fraction),
            ("tolerance", self.tolerance),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err((field, format!("{value} is not a fraction from 0 to 1")));
            }
        }
        if self.min_run_fraction > self.clamp_run_fraction {
            return Err((
                "min_run_fraction",
                format!(
                    "{} is above clamp_run_fraction ({}): the back-off floor must not exceed the \
                     clamp",
                    self.min_run_fraction, self.clamp_run_fraction
                ),
            ));
        }
        if self.sample_ms < 50 {
            return Err((
                "sample_ms",
                format!(
                    "{} ms is too fast: NVML refreshes every 1/6 s at best",
                    self.sample_ms
                ),
            ));
        }
        if !(10..=10_000).contains(&self.gate_period_ms) {
            return Err((
                "gate_period_ms",
                format!("{} ms: use 10 to 10000 ms", self.gate_period_ms),
            ));
        }
        if let Some(dir) = &self.mps_pipe_dir
            && !dir.is_absolute()
        {
            return Err((
                "mps_pipe_dir",
                format!("{} must be an absolute path", dir.display()),
            ));
        }
        Ok(())
    }
}
