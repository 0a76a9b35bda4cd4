//! Types shared by the kernel side (`enforcer-ebpf`) and the userspace side (`enforcer`).
//!
//! Only fixed-width integers cross the boundary: no `bool`, enum or `Option`, and no implicit
//! padding, so that both sides agree byte for byte and bpftool can print every field by name
//! from the BTF. Each type carries a compile-time size assertion; the contract test in the
//! enforcer crate checks the compiled object against these sizes.
//!
//! With the `std` feature (userspace only) the crate also holds what the enforcer, the
//! inference worker, the tests and xtask share: the control socket's protocol
//! ([`protocol`]), kernel CPU lists ([`cpu_list`]), a process tree's threads
//! ([`proc_tree`]), quantiles ([`stats`]), the workloads' random generator ([`rng`]) and
//! `enforcer replay`'s summary ([`replay`]), and the open-file limit ([`open_files`]). With
//! `http`, also the bounded HTTP/1 server loop of `/metrics` and the worker ([`http_serve`]).
#![cfg_attr(not(feature = "std"), no_std)]

pub mod histogram;
pub mod maps;
pub mod types;

#[cfg(feature = "std")]
pub mod cpu_list;
#[cfg(feature = "http")]
pub mod http_serve;
#[cfg(feature = "std")]
pub mod open_files;
#[cfg(feature = "std")]
pub mod proc_tree;
#[cfg(feature = "std")]
pub mod protocol;
#[cfg(feature = "std")]
pub mod replay;
#[cfg(feature = "std")]
pub mod rng;
#[cfg(feature = "std")]
pub mod stats;

pub use types::*;
