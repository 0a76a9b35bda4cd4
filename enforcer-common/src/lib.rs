//! Types shared by the kernel side (`enforcer-ebpf`) and the userspace side (`enforcer`).
//!
//! Only fixed-width integers cross the boundary: no `bool`, enum or `Option`, and no implicit
//! padding, so that both sides agree byte for byte and bpftool can print every field by name
//! from the BTF. Each type carries a compile-time size assertion; the contract test in the
//! enforcer crate checks the compiled object against these sizes.
#![no_std]

pub mod histogram;
pub mod maps;
pub mod types;

pub use types::*;
