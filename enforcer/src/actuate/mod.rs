//! The actuators: everything that changes the machine for a decision. Pool cgroups (cpuset,
//! idle class, weight), the one freezer owner, threads' scheduling policies, the grants that
//! tell workers first, the decision log, and the sensor's map of CPUs where a contention
//! report would change nothing.

pub mod cgroup;
pub(crate) mod cgroup_error;
pub(crate) mod container_cpuset;
pub(crate) mod decision_log;
pub(crate) mod freezer;
pub(crate) mod grants;
pub(crate) mod pod_in_place;
pub(crate) mod pod_ledger;
pub(crate) mod pod_weight;
pub(crate) mod pools;
pub(crate) mod quiet_cpus;
pub mod thread_policy;
