//! The `[gpu]` section of the enforcer's config, and the settings the GPU side takes from it.
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

use std::{path::PathBuf, time::Duration};

use serde::Deserialize;

use super::InvalidField;

/// The MPS control program NVIDIA ships.
pub(crate) const MPS_CONTROL_PROGRAM: &str = "nvidia-cuda-mps-control";

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
    /// `CUDA_MPS_PIPE_DIRECTORY` of the control daemon; unset: NVIDIA's default to attach,
    /// /run/reamer/mps for a daemon the enforcer starts (never world-writable /tmp).
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
    /// Clamp only while training needs the GPU: let inference run where training's launching
    /// thread waits on its input pipeline (its DataLoader), and clamp at once where it is
    /// GPU-bound (`gpu::launcher`, docs/gpu.md). false: clamp whenever training is active.
    pub clamp_on_need: bool,
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
        let clamp = ClampSettings::default();
        Self {
            enabled: GpuSwitch::Auto,
            sample_ms: 200,
            mps: MpsMode::Attach,
            mps_control: PathBuf::from(MPS_CONTROL_PROGRAM),
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
            clamp_on_need: clamp.on_need,
            idle_after_ms: clamp.idle_after_ns / 1_000_000,
            retarget_after_ms: clamp.retarget_after_ns / 1_000_000,
            training_memory_reserve_mib: 4096,
            evict: true,
        }
    }
}

impl GpuSection {
    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), InvalidField> {
        let invalid = |field, message| Err(InvalidField { field, message });
        for (field, value) in [
            ("clamp_run_fraction", self.clamp_run_fraction),
            ("min_run_fraction", self.min_run_fraction),
            ("tolerance", self.tolerance),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return invalid(field, format!("{value} is not a fraction from 0 to 1"));
            }
        }
        if self.min_run_fraction > self.clamp_run_fraction {
            return invalid(
                "min_run_fraction",
                format!(
                    "{} is above clamp_run_fraction ({}): the back-off floor must not exceed the \
                     clamp",
                    self.min_run_fraction, self.clamp_run_fraction
                ),
            );
        }
        if self.sample_ms < 50 {
            return invalid(
                "sample_ms",
                format!(
                    "{} ms is too fast: NVML refreshes every 1/6 s at best",
                    self.sample_ms
                ),
            );
        }
        if !(10..=10_000).contains(&self.gate_period_ms) {
            return invalid(
                "gate_period_ms",
                format!("{} ms: use 10 to 10000 ms", self.gate_period_ms),
            );
        }
        if let Some(dir) = &self.mps_pipe_dir
            && !dir.is_absolute()
        {
            return invalid(
                "mps_pipe_dir",
                format!("{} must be an absolute path", dir.display()),
            );
        }
        Ok(())
    }

    /// The settings the GPU side runs with.
    pub fn settings(&self) -> GpuSettings {
        GpuSettings {
            enabled: self.enabled == GpuSwitch::Auto,
            sample_every: Duration::from_millis(self.sample_ms),
            mps: self.mps,
            mps_control: self.mps_control.clone(),
            mps_pipe_dir: self.mps_pipe_dir.clone(),
            mps_set_defaults: self.mps_set_defaults,
            mps_limit_servers: self.mps_limit_servers,
            gate_period: Duration::from_millis(self.gate_period_ms),
            clamp: ClampSettings {
                clamp_run_fraction: self.clamp_run_fraction,
                min_run_fraction: self.min_run_fraction,
                probe: self.probe,
                tolerance: self.tolerance,
                on_need: self.clamp_on_need,
                idle_after_ns: self.idle_after_ms.saturating_mul(1_000_000),
                retarget_after_ns: self.retarget_after_ms.saturating_mul(1_000_000),
                adjust_every_ns: self.sample_ms.max(1000).saturating_mul(1_000_000),
                ..ClampSettings::default()
            },
            training_memory_reserve_mib: self.training_memory_reserve_mib,
            evict: self.evict,
        }
    }
}

/// The GPU side's settings (docs/gpu.md).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSettings {
    /// false: `enabled = "off"`; true: on where NVML finds a GPU.
    pub enabled: bool,
    pub sample_every: Duration,
    pub mps: MpsMode,
    pub mps_control: PathBuf,
    pub mps_pipe_dir: Option<PathBuf>,
    pub mps_set_defaults: bool,
    pub mps_limit_servers: bool,
    pub gate_period: Duration,
    pub clamp: ClampSettings,
    pub training_memory_reserve_mib: u64,
    pub evict: bool,
}

/// The GPU policy's tunables (`gpu::clamp`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClampSettings {
    /// Inference's run fraction right after training's demand rises.
    pub clamp_run_fraction: f64,
    /// The lowest run fraction a back-off goes to.
    pub min_run_fraction: f64,
    /// Probe above the clamp on training's per-process SM utilization (see `gpu::clamp` for
    /// why it is off by default).
    pub probe: bool,
    /// How much a probe adds to the run fraction.
    pub step: f64,
    /// The share of its best SM utilization training may lose before inference backs off.
    pub tolerance: f64,
    /// Time between two adjustments, ns: at least one fresh NVML sample.
    pub adjust_every_ns: u64,
    /// Training's CPU use (CPUs) at or above which it counts as active.
    pub active_cpus: f64,
    /// Training's CPU use over one short read (the daemon's 10 ms, while a GPU pool is gated)
    /// at or above which a step counts as starting: its launch thread issues kernels, then
    /// spins in CUDA's synchronisation, near one CPU. Higher than `active_cpus`, so that a
    /// short blip of a training job's helper threads does not clamp inference.
    pub rise_cpus: f64,
    /// Training's SM utilization (%) at or above which it counts as active.
    pub active_sm_pct: f64,
    /// Without either signal for this long, ns, inference is ungated.
    pub idle_after_ns: u64,
    /// A run fraction held this long, ns, becomes an MPS percentage.
    pub retarget_after_ns: u64,
    /// Clamp only while training needs the GPU (`gpu::launcher`).
    pub on_need: bool,
    /// The launching thread's median busy share below which training waits on its input:
    /// the clamp is let go.
    pub input_bound_below: f64,
    /// The share at or above which it is GPU-bound again: the clamp comes back. Apart from
    /// `input_bound_below`, so that a share between the two changes nothing.
    pub gpu_bound_above: f64,
    /// The window of launcher samples whose median is taken, ns.
    pub need_window_ns: u64,
    /// How long a job found waiting on its input is remembered after it goes idle, ns: its
    /// next step (a loader-bound job idles between batches often) is not clamped at its rise.
    pub need_memory_ns: u64,
}

impl Default for ClampSettings {
    fn default() -> Self {
        const MS: u64 = 1_000_000;
        Self {
            clamp_run_fraction: 0.1,
            min_run_fraction: 0.1,
            probe: false,
            step: 0.1,
            tolerance: 0.05,
            // NVML's utilization counters cover 1/6 s to 1 s depending on the GPU.
            adjust_every_ns: 1000 * MS,
            active_cpus: 0.05,
            rise_cpus: 0.5,
            active_sm_pct: 5.0,
            idle_after_ns: 2000 * MS,
            retarget_after_ns: 10_000 * MS,
            on_need: true,
            // A GPU-bound step keeps its launching thread busy throughout (it spins in CUDA's
            // synchronisation); one that waits on its DataLoader leaves it asleep for the
            // wait. The bars are set apart, and are not measured yet: the GPU benchmark's two
            // jobs are what checks them (docs/gpu.md).
            input_bound_below: 0.6,
            gpu_bound_above: 0.85,
            // Five NVML samples at the default 200 ms.
            need_window_ns: 1000 * MS,
            need_memory_ns: 30_000 * MS,
        }
    }
}
