//! reamer's scheduler sensor.
//!
//! Five tracepoint programs keep, in the kernel, everything the enforcer needs to know about
//! training threads: their run-queue waits (a histogram per job, per CPU), how long they ran,
//! which class each CPU is running, and they wake userspace through the ring buffer only when
//! a training thread lands behind inference or waits too long. Nothing is sent per context
//! switch. The programs are BTF-enabled tracepoints (tp_btf); the `task_struct` offsets they
//! read come from the running kernel's BTF at load time (see `task.rs`), never from the
//! headers this was built against.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
mod calibration;
#[cfg(target_arch = "bpf")]
mod classify;
#[cfg(target_arch = "bpf")]
mod events;
#[cfg(target_arch = "bpf")]
mod maps;
#[cfg(target_arch = "bpf")]
mod programs;
#[cfg(target_arch = "bpf")]
mod task;
#[cfg(target_arch = "bpf")]
mod task_storage;

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any path that could reach this, so it is never emitted in practice.
    loop {}
}

/// Built for the host only so that `cargo clippy --workspace` works; the real object is built
/// for bpfel-unknown-none by enforcer/build.rs.
#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
