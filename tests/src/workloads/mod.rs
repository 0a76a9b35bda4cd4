//! What the workload binaries share.

pub mod cpu_work;
pub mod progress;
