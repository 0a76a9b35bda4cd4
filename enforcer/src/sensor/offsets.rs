//! The values of the sensor's read-only globals, from the running kernel's BTF, and a check
//! that each tracepoint passes the arguments the programs read.

use enforcer_common::maps::{PROGRAMS, globals};

use super::btf::{Btf, BtfError};

#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error(
        "the kernel's {tracepoint} tracepoint passes ({found}); the sensor reads ({expected}) \
         as kernels since 5.18 pass it"
    )]
    Prototype {
        tracepoint: &'static str,
        found: String,
        expected: String,
    },
}

/// The arguments each program reads, in order (a prefix of the tracepoint's own).
fn expected_args(tracepoint: &str) -> &'static [&'static str] {
    match tracepoint {
        "sched_switch" => &["bool", "task_struct *", "task_struct *", "unsigned int"],
        "sched_process_fork" => &["task_struct *", "task_struct *"],
        _ => &["task_struct *"],
    }
}

/// Checks the tracepoint prototypes and returns (global name, value) pairs for the loader.
pub fn resolve(btf: &Btf) -> Result<Vec<(&'static str, u32)>, OffsetError> {
    for (_, tracepoint) in PROGRAMS {
        let found = btf.tracepoint_args(tracepoint)?;
        let expected = expected_args(tracepoint);
        if found.len() < expected.len() || found[..expected.len()] != *expected {
            return Err(OffsetError::Prototype {
                tracepoint,
                found: found.join(", "),
                expected: expected.join(", "),
            });
        }
    }
    let pid = btf.member_offset("task_struct", &["pid"])?;
    // Since 5.16 x86 and arm64 keep the CPU in thread_info (inside task_struct); other
    // configurations keep task_struct.cpu.
    let cpu = btf
        .member_offset("task_struct", &["thread_info", "cpu"])
        .or_else(|_| btf.member_offset("task_struct", &["cpu"]))?;
    Ok(vec![
        (globals::TASK_PID_OFFSET, pid),
        (globals::TASK_CPU_OFFSET, cpu),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_kernel_resolves() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIPPED: no /sys/kernel/btf/vmlinux here");
            return;
        };
        let values = resolve(&btf).expect("this kernel has what the sensor reads");
        assert_eq!(values.len(), globals::ALL.len());
    }
}
