//! GPU telemetry through NVML (nvml-wrapper): per-GPU utilization and memory, and per-process
//! memory and SM utilization. nvml-wrapper loads `libnvidia-ml.so` at run time, so the
//! enforcer builds and runs on machines without the driver; `open` then says why not.

use std::collections::HashMap;

use nvml_wrapper::{Nvml, enums::device::UsedGpuMemory, error::NvmlError};

const MIB: u64 = 1024 * 1024;

/// Why the GPU side cannot run here, in the operator's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unavailable {
    #[error("libnvidia-ml.so cannot be loaded ({0}): no NVIDIA driver is installed")]
    NoLibrary(String),
    #[error("the NVIDIA driver is installed but not loaded (no GPU, or its module is missing)")]
    DriverNotLoaded,
    #[error("NVML refused access to the driver (permissions)")]
    NoPermission,
    #[error("NVML failed to start: {0}")]
    Init(NvmlError),
    #[error("NVML cannot count the GPUs: {0}")]
    Count(NvmlError),
    #[error("NVML found no GPU on this machine")]
    NoGpu,
}

impl From<NvmlError> for Unavailable {
    /// NVML's init errors.
    fn from(err: NvmlError) -> Self {
        match err {
            NvmlError::LibloadingError(inner) => Self::NoLibrary(inner.to_string()),
            NvmlError::DriverNotLoaded => Self::DriverNotLoaded,
            NvmlError::NoPermission => Self::NoPermission,
            other => Self::Init(other),
        }
    }
}

/// A device NVML failed to read at a sample: which, what, and NVML's error.
#[derive(Debug, thiserror::Error)]
#[error("GPU {index}{what}: {error}")]
pub(crate) struct DeviceError {
    pub index: u32,
    /// What was being read, with its leading space (" memory"), or nothing for the device.
    pub what: &'static str,
    pub error: NvmlError,
}

/// One GPU process, as NVML sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct GpuProcess {
    pub pid: u32,
    /// None where the driver does not report it.
    pub used_mib: Option<u64>,
    /// SM utilization (%) over the samples since the previous read; None when NVML has no
    /// sample for it (idle, or unsupported: under MPS the server is what NVML sees).
    pub sm_pct: Option<u32>,
}

/// One GPU, sampled.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct GpuSample {
    pub index: u32,
    pub name: String,
    /// Percent of the last sample period during which a kernel ran.
    pub utilization_pct: u32,
    pub memory_used_mib: u64,
    pub memory_total_mib: u64,
    pub processes: Vec<GpuProcess>,
}

pub(crate) struct GpuTelemetry {
    nvml: Nvml,
    count: u32,
    /// Per device: the timestamp of the newest process-utilization sample read, so each read
    /// covers only what is new.
    last_seen_us: HashMap<u32, u64>,
}

impl GpuTelemetry {
    /// Loads NVML and counts the GPUs. The error is the one line an operator needs: whether
    /// the library, the driver or the GPUs are missing.
    pub(crate) fn open() -> Result<Self, Unavailable> {
        let nvml = Nvml::init()?;
        let count = nvml.device_count().map_err(Unavailable::Count)?;
        if count == 0 {
            return Err(Unavailable::NoGpu);
        }
        Ok(Self {
            nvml,
            count,
            last_seen_us: HashMap::new(),
        })
    }

    pub(crate) fn device_count(&self) -> u32 {
        self.count
    }

    pub(crate) fn driver_version(&self) -> String {
        self.nvml
            .sys_driver_version()
            .unwrap_or_else(|e| format!("unknown ({e})"))
    }

    /// Samples every GPU. A device that fails a call is reported with what could be read, so
    /// that one lost GPU does not blind the enforcer to the others.
    pub(crate) fn sample(&mut self) -> Vec<Result<GpuSample, DeviceError>> {
        (0..self.count)
            .map(|index| self.sample_one(index))
            .collect()
    }

    fn sample_one(&mut self, index: u32) -> Result<GpuSample, DeviceError> {
        let failed = |what| move |error| DeviceError { index, what, error };
        let device = self.nvml.device_by_index(index).map_err(failed(""))?;
        let name = device.name().unwrap_or_else(|_| format!("GPU {index}"));
        let utilization_pct = device
            .utilization_rates()
            .map(|u| u.gpu)
            .map_err(failed(" utilization"))?;
        let memory = device.memory_info().map_err(failed(" memory"))?;
        let since = self.last_seen_us.get(&index).copied();
        // Unsupported on some GPUs and under MPS: then no per-process SM figure, not an error.
        let samples = device.process_utilization_stats(since).unwrap_or_default();
        if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
            self.last_seen_us.insert(index, newest);
        }
        let mut sm_by_pid: HashMap<u32, (u64, u32)> = HashMap::new();
        for sample in &samples {
            let entry = sm_by_pid.entry(sample.pid).or_default();
            entry.0 += u64::from(sample.sm_util);
            entry.1 += 1;
        }
        let processes = device
            .running_compute_processes()
            .map_err(failed(" processes"))?
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_mib: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes.div_ceil(MIB)),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_pct: sm_by_pid
                    .get(&p.pid)
                    .map(|(sum, n)| (*sum / u64::from((*n).max(1))) as u32),
            })
            .collect();
        Ok(GpuSample {
            index,
            name,
            utilization_pct,
            memory_used_mib: memory.used.div_ceil(MIB),
            memory_total_mib: memory.total / MIB,
            processes,
        })
    }
}
