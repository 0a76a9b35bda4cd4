//! reamer's enforcer: the library behind the `enforcer` binary. The data flows down the
//! layers, and the imports with it:
//!
//! - `cli`: the commands (the binary's edge);
//! - `daemon`: `enforcer run`, its threads, the control socket, snapshots and metrics;
//! - `actuate` and `gpu`: what changes the machine for a decision;
//! - `policy`: the decisions, pure;
//! - `sensor` and `registry`: what the kernel measures, and whose each thread is;
//! - `kubernetes`: the node's pods, classified by label, and their containers' cgroups;
//! - `config` and `host`: the settings, and the machine they run on.
//!
//! docs/architecture.md draws it.

pub mod actuate;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod gpu;
pub mod host;
pub mod kubernetes;
pub mod policy;
pub mod registry;
pub mod sensor;
