//! What the GPU side reports in snapshots, and the decisions it logs: `enforcer status`
//! renders them, `/metrics` exports them, `enforcer status --json` prints them as they are.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuReport {
    /// `[gpu] enabled = "off"`.
    Off,
    /// No NVML, no driver or no GPU: why, in one line.
    Disabled {
        reason: String,
    },
    Active(Box<GpuActive>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuActive {
    pub driver: String,
    pub devices: Vec<DeviceReport>,
    /// Devices NVML failed to read at the last sample, with the error.
    pub device_errors: Vec<String>,
    /// Pools with `gpu = true`: the ones gated and guarded.
    pub gated_pools: Vec<String>,
    pub gate: GateStats,
    pub training_active: bool,
    /// Training's launching threads' latest busy share (the clamp's need signal, from 0:
    /// waiting on its input, to 1: GPU-bound); None before two samples of a training GPU
    /// process.
    #[serde(default)]
    pub launcher_busy: Option<f64>,
    /// The MPS active-thread percentage new inference clients get.
    pub client_percentage: u32,
    pub mps: MpsReport,
    pub evictions: u64,
    pub recent: Vec<GpuDecisionRecord>,
}

/// The duty-cycle gate's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GateStats {
    pub run_fraction: f64,
    pub freezes: u64,
    /// The latest freeze's cgroup writes, µs (every gated pool).
    pub last_freeze_write_us: f64,
}

/// A GPU decision, as the decision log and the status hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDecisionRecord {
    pub at_ns: u64,
    pub decision: GpuDecision,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum GpuDecision {
    /// Run inference for this fraction of each duty-cycle period (1: never frozen).
    Gate { run_fraction: f64, why: ClampReason },
    /// Give new inference clients this MPS active-thread percentage.
    Retarget { percentage: u32 },
}

/// Why inference's run fraction changed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ClampReason {
    TrainingRose {
        signal: Signal,
    },
    /// Training kept its SM utilization: inference may run more.
    Probe {
        training_sm_pct: f64,
    },
    /// Training lost SM utilization: inference runs less.
    TrainingSlowed {
        training_sm_pct: f64,
        best_sm_pct: f64,
    },
    TrainingIdle,
    /// Training's launching thread waits on its input pipeline (median busy share below the
    /// bar): the GPU has room, and inference runs ungated.
    TrainingInputBound {
        launcher_busy: f64,
    },
    /// It is busy again: the step is GPU-bound, and the clamp is back.
    TrainingGpuBound {
        launcher_busy: f64,
    },
}

/// Which signal saw training's demand rise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Cpu,
    Nvml,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub index: u32,
    pub name: String,
    pub utilization_pct: u32,
    pub memory_used_mib: u64,
    pub memory_total_mib: u64,
    pub training_mib: u64,
    pub inference_mib: u64,
    pub other_mib: u64,
    pub training_sm_pct: Option<f64>,
    /// The pinned-memory limit a new inference client gets on this device.
    pub new_client_limit_mib: u64,
    pub processes: Vec<ProcessReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub owner: Option<Owner>,
    pub used_mib: Option<u64>,
    pub sm_pct: Option<u32>,
}

/// Whose a GPU process is: a training job's or an inference pool's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Owner {
    Training(String),
    Pool(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum MpsReport {
    Off,
    /// Configured, but no control daemon could be used: why.
    Unavailable {
        reason: String,
    },
    Attached {
        /// Whether the enforcer started the control daemon.
        started: bool,
        /// Read back from the control daemon at the last reconcile.
        in_force: Option<LimitsInForce>,
        /// The last command that failed, if the latest reconcile had one.
        last_error: Option<String>,
    },
}

/// A pinned device-memory limit, in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemLimitMib(pub u64);

/// What the MPS control daemon has in force, read back after setting it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitsInForce {
    /// For servers started from now on.
    pub default_thread_percentage: f64,
    /// Per device ordinal: the default pinned limit (None: no limit).
    pub default_mem_limits: Vec<(u32, Option<MemLimitMib>)>,
    pub servers: Vec<ServerLimits>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerLimits {
    pub pid: u32,
    pub thread_percentage: f64,
    pub mem_limits: Vec<(u32, Option<MemLimitMib>)>,
}
