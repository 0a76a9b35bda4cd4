//! GPU sharing: NVML telemetry with each process attributed to its training job or pool, MPS
//! limits for inference clients, an instant freezer clamp of the GPU pools when training's
//! GPU demand rises, held only while training needs the GPU (its launching thread's busy
//! share, `launcher`), and a memory guard. Without NVML everything here reports itself
//! disabled and the CPU side runs unchanged.

pub(crate) mod attribution;
pub(crate) mod clamp;
pub mod duty_cycle;
pub(crate) mod launcher;
pub(crate) mod memory_guard;
pub(crate) mod mps;
pub(crate) mod pipe_dir;
pub(crate) mod process_sm;
pub(crate) mod report;
pub(crate) mod service;
pub(crate) mod telemetry;
pub(crate) mod training_busy;
