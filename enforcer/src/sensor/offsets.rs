//! The values of the sensor's read-only globals, from the running kernel's BTF, and a check
//! that each tracepoint passes the arguments the programs read.

use enforcer_common::maps::{PROGRAMS, globals};

use crate::config::SensorClock;

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
/// `clock` is the one asked for; the run queue's needs fields that some kernels lack, and
/// then the sensor reads the monotonic clock ([`clock_in_use`] says which).
pub(crate) fn resolve(
    btf: &Btf,
    clock: SensorClock,
) -> Result<Vec<(&'static str, u32)>, OffsetError> {
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
    let rq_clock_offsets = match clock {
        SensorClock::RunQueue => rq_clock_path(btf).ok(),
        SensorClock::Monotonic => None,
    };
    let (rq_clock_readable, [task_cfs_rq, cfs_rq_rq, rq_clock]) = match rq_clock_offsets {
        Some(offsets) => (1, offsets),
        None => (0, [0; 3]),
    };
    // sched_info keeps its times in the run queue's clock: usable only alongside it.
    let sched_info_offsets = match rq_clock_readable {
        1 => sched_info_fields(btf).ok(),
        _ => None,
    };
    let (waits_from_sched_info, [last_queued, run_delay]) = match sched_info_offsets {
        Some(offsets) => (1, offsets),
        None => (0, [0; 2]),
    };
    let sum_exec = btf.member_offset("task_struct", &["se", "sum_exec_runtime"])?;
    let prev_sum_exec = btf.member_offset("task_struct", &["se", "prev_sum_exec_runtime"])?;
    Ok(vec![
        (globals::TASK_PID_OFFSET, pid),
        (globals::TASK_CPU_OFFSET, cpu),
        (globals::TASK_CFS_RQ_OFFSET, task_cfs_rq),
        (globals::CFS_RQ_RQ_OFFSET, cfs_rq_rq),
        (globals::RQ_CLOCK_OFFSET, rq_clock),
        (globals::RQ_CLOCK_READABLE, rq_clock_readable),
        (globals::TASK_LAST_QUEUED_OFFSET, last_queued),
        (globals::TASK_RUN_DELAY_OFFSET, run_delay),
        (globals::WAITS_FROM_SCHED_INFO, waits_from_sched_info),
        (globals::TASK_SUM_EXEC_OFFSET, sum_exec),
        (globals::TASK_PREV_SUM_EXEC_OFFSET, prev_sum_exec),
    ])
}

/// The offsets of `task_struct.sched_info.last_queued` and `.run_delay`, which exist only with
/// CONFIG_SCHED_INFO (selected by SCHEDSTATS and TASK_DELAY_ACCT, which distributions enable).
fn sched_info_fields(btf: &Btf) -> Result<[u32; 2], BtfError> {
    Ok([
        btf.member_offset("task_struct", &["sched_info", "last_queued"])?,
        btf.member_offset("task_struct", &["sched_info", "run_delay"])?,
    ])
}

/// A loader with `values` (from [`resolve`]) set as the object's read-only globals: the
/// daemon, `enforcer check` and `enforcer calibrate` load the programs the same way.
pub(crate) fn loader_with<'a>(values: &'a [(&'static str, u32)]) -> aya::EbpfLoader<'a> {
    let mut loader = aya::EbpfLoader::new();
    // `task_cache` is task-local storage, which aya 0.14 creates but has no map type for;
    // userspace never touches it.
    loader.allow_unsupported_maps();
    for (global, value) in values {
        loader.override_global(global, value, true);
    }
    loader
}

/// The offsets of `task_struct.se.cfs_rq`, `cfs_rq.rq` and `rq.clock`. The first two exist
/// only with CONFIG_FAIR_GROUP_SCHED (every distribution kernel with cgroups has it).
fn rq_clock_path(btf: &Btf) -> Result<[u32; 3], BtfError> {
    Ok([
        btf.member_offset("task_struct", &["se", "cfs_rq"])?,
        btf.member_offset("cfs_rq", &["rq"])?,
        btf.member_offset("rq", &["clock"])?,
    ])
}

/// Whether the global `name` was resolved to `value`.
fn is_set(values: &[(&str, u32)], name: &str, value: u32) -> bool {
    values.iter().any(|&(n, v)| n == name && v == value)
}

/// Which clock the sensor's per-switch timestamps come from, and where its waits start, for
/// logs and `enforcer check`.
pub(crate) fn clock_in_use(values: &[(&str, u32)], asked: SensorClock) -> &'static str {
    let readable = is_set(values, globals::RQ_CLOCK_READABLE, 1);
    let sched_info = is_set(values, globals::WAITS_FROM_SCHED_INFO, 1);
    match (readable, asked) {
        (true, _) if sched_info => {
            "run-queue (rq->clock); waits start at the scheduler's own sched_info.last_queued"
        }
        (true, _) => {
            "run-queue (rq->clock); waits start at the sensor's own stamps: the kernel's BTF has \
             no task_struct.sched_info (CONFIG_SCHED_INFO is off)"
        }
        (false, SensorClock::Monotonic) => "monotonic (bpf_ktime_get_ns), as configured",
        (false, SensorClock::RunQueue) => {
            "monotonic (bpf_ktime_get_ns): the kernel's BTF has no task_struct.se.cfs_rq->rq \
             (CONFIG_FAIR_GROUP_SCHED is off), so the run queue's clock cannot be read"
        }
    }
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
        let values = resolve(&btf, SensorClock::RunQueue).expect("the sensor's fields exist");
        let names: Vec<&str> = values.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, globals::ALL);
        assert!(
            rq_clock_path(&btf).is_ok(),
            "this kernel has FAIR_GROUP_SCHED"
        );
        assert!(
            sched_info_fields(&btf).is_ok(),
            "this kernel has SCHED_INFO (its /proc/PID/schedstat is what the tests compare with)"
        );
        let asked = SensorClock::RunQueue;
        assert_eq!(
            clock_in_use(&values, asked),
            "run-queue (rq->clock); waits start at the scheduler's own sched_info.last_queued"
        );

        // The monotonic clock cannot be compared with sched_info's times: own stamps then.
        let values = resolve(&btf, SensorClock::Monotonic).expect("the sensor's fields exist");
        assert!(is_set(&values, globals::RQ_CLOCK_READABLE, 0));
        assert!(is_set(&values, globals::WAITS_FROM_SCHED_INFO, 0));
    }
}
