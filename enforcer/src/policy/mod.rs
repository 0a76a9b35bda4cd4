//! The decisions, pure: no kernel, no cgroups, a clock passed in. Each module is driven by
//! signals and unit-tested on recorded ones.
//!
//! - `cores`: which cores training reserves and which each pool gets, from training's demand,
//!   the sensor's contention events and the online pools' SLO needs.
//! - `demand`: training's demand estimate, the median of its per-tick demand over a window.
//! - `online_need`: an online pool's SLO need, from its workers' reports.
//! - `online_weight`: an online pool's CPU weight, steered by its workers' latency tail.
//! - `pace`: a training job's pace, from the progress it reports.
//! - `harvest`: how much offline inference may take, found from that pace.

pub(crate) mod busy_pace;
pub(crate) mod cores;
pub(crate) mod demand;
pub(crate) mod harvest;
pub(crate) mod online_need;
pub(crate) mod online_weight;
pub(crate) mod pace;

pub(crate) use cores::{Allocation, Decision, Policy, PoolSpec};
