//! reamer's enforcer: the library behind the `enforcer` binary. The data flows down the
//! layers, and the imports with it:
//!
//! - `cli`: the commands (the binary's edge);
//! - `daemon`: `enforcer run`, its threads, the control socket, snapshots and metrics;
//! - `gpu` and `actuate`: what changes the machine for a decision (the GPU side gates through
//!   the freezer `actuate` owns);
//! - `policy`: the decisions, pure;
//! - `registry` and `sensor`: whose each thread is, and what the kernel measures;
//! - `config`: the settings;
//! - `kubernetes`: the node's pods, classified by label, and their containers' cgroups;
//! - `host`: the machine they run on.
//!
//! docs/architecture.md draws it, and `tests/layering.rs` holds the imports to it.
//!
//! Public are the modules something outside the library uses: the binary (`cli`), the
//! integration tests (`actuate`, `daemon`, `gpu`, `host`, `kubernetes`, `sensor`) and the
//! config's fuzz target (`config`). `policy` and `registry` are the crate's own.

pub mod actuate;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod gpu;
pub mod host;
pub mod kubernetes;
pub(crate) mod policy;
pub(crate) mod registry;
pub mod sensor;
