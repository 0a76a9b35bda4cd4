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
//! The library's surface is what something outside it uses, and no more: the binary (`cli`),
//! the config's fuzz target (`config::Config`, `Machine`), and the integration tests
//! (`daemon::Daemon` built and run in-process, `daemon::admission`, `actuate::cgroup`,
//! `gpu::duty_cycle`, `host::paths` and `host::user_namespace`, the `kubernetes` pieces that
//! read the kubelet's layout and the API server's watch, `sensor::object`), with
//! `actuate::thread_policy` for the slice probe example. Everything else is `pub(crate)`;
//! `unreachable_pub` warns of a `pub` that no one outside can reach. `policy` and `registry`
//! are the crate's own.

// Items visible beyond the crate are only those of the modules above that are public.
#![warn(unreachable_pub)]

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
