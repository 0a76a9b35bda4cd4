//! The actuators: everything that changes the machine for a decision. Pool cgroups (cpuset,
//! idle class, weight), the one freezer owner, threads' scheduling policies, the grants that
//! tell workers first, the decision log, and the sensor's map of CPUs where a contention
//! report would change nothing.

pub mod cgroup;
pub mod cgroup_error;
pub mod container_cpuset;
pub mod decision_log;
pub mod freezer;
pub mod grants;
pub mod pod_in_place;
pub mod pod_ledger;
pub mod pod_weight;
pub mod pools;
pub mod quiet_cpus;
pub mod thread_policy;
