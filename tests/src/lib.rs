//! Workload generators, the baselines the benchmark compares against, and the harness of
//! reamer's privileged integration tests.
//!
//! The binaries (`training-sim`, `load-gen`, `cpu-hog`, `fork-tree`, `switch-bench`,
//! `wake-probe`) are real
//! processes that the tests and benchmarks run under a real enforcer daemon on the real kernel.

pub mod baseline_controllers;
pub mod bench_cgroup;
pub mod cpu_work;
pub mod gpu;
pub mod harness;
pub mod proc_stats;
pub mod quantile;
pub mod rng;
pub mod schedstat;
pub mod worker;
