//! Workload generators and the harness of reamer's privileged integration tests.
//!
//! The binaries (`training-sim`, `cpu-hog`, `fork-tree`, `switch-bench`) are real processes
//! that the tests and benchmarks run under a real enforcer daemon on the real kernel.

pub mod cpu_work;
pub mod harness;
pub mod rng;
pub mod schedstat;
pub mod worker;
