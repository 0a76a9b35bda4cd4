//! GPU telemetry through NVML (nvml-wrapper): per-GPU utilization and memory, and per-process
//! memory and SM utilization. nvml-wrapper loads `libnvidia-ml.so` at run time, so the
//! enforcer builds and runs on machines without the driver; `open` then says why not.

use std::collections::HashMap;

use nvml_wrapper::{Nvml, enums::device::UsedGpuMemory, error::NvmlError};

use super::process_sm::ProcessSamples;

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
    /// SM utilization (%) over the samples since the previous read, 0 where NVML sampled it
    /// before and a period went by without it; None when unknown (`process_sm`: never sampled,
    /// as an MPS client is not, or no period since the last read).
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
    /// Per device: its per-process samples read so far, so that each read covers only what is
    /// new and knows which processes NVML samples.
    process_samples: HashMap<u32, ProcessSamples>,
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
            process_samples: HashMap::new(),
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
        let running = device
            .running_compute_processes()
            .map_err(failed(" processes"))?;
        let pids: Vec<u32> = running.iter().map(|p| p.pid).collect();
        let process_samples = self.process_samples.entry(index).or_default();
        // Unsupported on some GPUs: then no per-process SM figure, not an error. NVML's
        // "not found" (no sample newer than the last) reads the same: no sample.
        let samples = device
            .process_utilization_stats(process_samples.since())
            .unwrap_or_default();
        let sm_by_pid = process_samples.read(&samples, &pids, utilization_pct);
        let processes = running
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_mib: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes.div_ceil(MIB)),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_pct: sm_by_pid.get(&p.pid).copied(),
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
