//! reamer's enforcer: the library behind the `enforcer` binary (loader, registry, control
//! socket, daemon). The binary is a thin shell over it.

pub mod cgroup_support;
pub mod cgroups;
pub mod check;
pub mod config;
pub mod control;
pub mod daemon;
pub mod enforce;
pub mod events;
pub mod gpu;
pub mod journal;
pub mod launch;
pub mod metrics;
pub mod observe;
pub mod online_weight;
pub mod paths;
pub mod policy;
pub mod preflight;
pub mod registry;
pub mod relaunch_board;
pub mod relaunch_command;
pub mod sensor;
pub mod status;
pub mod supervise;
pub mod thread_policy;
pub mod topology;
