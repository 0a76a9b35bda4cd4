//! GPU sharing: NVML telemetry with each process attributed to its training job or pool, MPS
//! limits for inference clients, an instant freezer clamp of the GPU pools when training's
//! GPU demand rises, held only while training needs the GPU (its launching thread's busy
//! share, `launcher`), and a memory guard. Without NVML everything here reports itself
//! disabled and the CPU side runs unchanged.

pub mod attribution;
pub mod clamp;
pub mod duty_cycle;
pub mod launcher;
pub mod memory_guard;
pub mod mps;
pub mod pipe_dir;
pub mod report;
pub mod service;
pub mod telemetry;
