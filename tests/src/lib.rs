//! What reamer's tests and benchmarks run beside the enforcer, and how they drive it.
//!
//! - `workloads`: what the workload binaries share. The binaries (`training-sim`, `load-gen`,
//!   `cpu-hog`, `fork-tree`, `switch-bench`, `wake-probe`, `grant-client`) are real processes
//!   that the tests and benchmarks run under a real enforcer daemon on the real kernel.
//! - `harness`: a daemon of the test's own instance, the inference worker, the tests' cgroups,
//!   the GPU.
//! - `measure`: what the kernel says a process or the machine used (/proc).
//! - `baselines`: the controllers the co-location benchmark compares reamer with.

pub mod baselines;
pub mod harness;
pub mod measure;
pub mod workloads;
