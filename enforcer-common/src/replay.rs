//! The summary `enforcer replay --json` prints as its last line, which `cargo xtask bench`
//! reads back.

use serde::{Deserialize, Serialize};

/// The replay's figures over a whole trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySummary {
    pub intervals: usize,
    pub cpus: usize,
    pub running_cpus_p50: f64,
    pub running_cpus_p90: f64,
    pub demand_cpus_p50: f64,
    pub demand_cpus_p90: f64,
    pub reserved_cores_p50: f64,
    pub reserved_cores_p90: f64,
    /// Share of intervals with offline pools paused, %.
    pub offline_paused_pct: f64,
    /// Intervals with offline paused while training ran on half the CPUs or fewer.
    pub paused_at_half_or_less: usize,
    /// Share of intervals in which training ran on more CPUs than were reserved for it, %.
    pub short_pct: f64,
    /// Decisions the policy took (each changes the reservation, the pause or a pool).
    pub decisions: usize,
}
