//! Names of the sensor's maps and programs, so userspace never types one by hand.
//!
//! The kernel keeps at most 15 characters of a map or program name (BPF_OBJ_NAME_LEN is 16
//! with the terminating NUL) and truncates longer ones silently; the contract test checks it.

/// Training threads' classification: `u32` tid → [`crate::ThreadState`], written by userspace
/// and the fork hook.
pub const THREAD_STATE: &str = "thread_state";
/// Inference threads' classification, in a map of its own so that no number of inference
/// threads can leave training's unclassified: `u32` tid → [`crate::ThreadState`].
pub const POOL_THREADS: &str = "pool_threads";
/// Task-local storage ([`crate::TaskCache`]): each thread's class, copied from
/// `thread_state`, and its wait in progress. Not pinned: a cache, rebuilt by every daemon
/// (bpftool cannot dump task storage anyway).
pub const TASK_CACHE: &str = "task_cache";
/// Single-entry `u64` array: bumped by userspace whenever it changes `thread_state`, so that
/// the programs copy classes into `task_cache` again.
pub const CLASSIFY_GEN: &str = "classify_gen";
/// Per training job, per CPU: [`crate::JobStats`] indexed by job id.
pub const JOB_STATS: &str = "job_stats";
/// One [`crate::CpuState`] per CPU, indexed by CPU number; only that CPU writes its slot.
pub const CPU_STATE: &str = "cpu_state";
/// Per-CPU diagnostic counters indexed by the `COUNTER_*` constants.
pub const COUNTERS: &str = "counters";
/// Ring buffer of [`crate::SensorEvent`]s: the only thing that wakes userspace.
pub const EVENTS: &str = "events";
/// Single-entry array holding the runtime [`crate::Settings`].
pub const SETTINGS: &str = "settings";
/// `u32` per CPU, written by the enforcer: 1 where training holds the CPU. The sensor does not
/// report training queued behind inference there: the enforcer has nothing left to do on it.
pub const RESERVED_CPUS: &str = "reserved_cpus";

/// Every map the sensor pins, in a stable order.
pub const ALL_MAPS: [&str; 9] = [
    RESERVED_CPUS,
    CLASSIFY_GEN,
    THREAD_STATE,
    POOL_THREADS,
    JOB_STATS,
    CPU_STATE,
    COUNTERS,
    EVENTS,
    SETTINGS,
];

/// Program names and the scheduler tracepoints they attach to, as BTF-enabled (tp_btf)
/// programs: their arguments are the tracepoint's own (task pointers, prev_state), read
/// without a helper call.
pub const PROGRAMS: [(&str, &str); 5] = [
    ("reamer_wakeup", "sched_wakeup"),
    ("reamer_wake_new", "sched_wakeup_new"),
    ("reamer_switch", "sched_switch"),
    ("reamer_fork", "sched_process_fork"),
    ("reamer_exit", "sched_process_exit"),
];

/// Calibration programs (sched_switch), attached only by `enforcer calibrate`.
pub const CALIBRATION_PROGRAMS: [&str; 2] = ["reamer_cal_noop", "reamer_cal_clk"];

/// A no-op program for each tracepoint of [`PROGRAMS`], in the same order, attached only by
/// `enforcer calibrate --floor`: what any program on the sensor's tracepoints costs a workload.
/// The one on sched_switch is the calibration no-op.
pub const FLOOR_PROGRAMS: [(&str, &str); 5] = [
    ("reamer_nop_wake", "sched_wakeup"),
    ("reamer_nop_new", "sched_wakeup_new"),
    ("reamer_cal_noop", "sched_switch"),
    ("reamer_nop_fork", "sched_process_fork"),
    ("reamer_nop_exit", "sched_process_exit"),
];

/// Names of the read-only globals that carry `task_struct` field offsets, resolved at load
/// time from the running kernel's BTF (Rust eBPF has no CO-RE, so nothing is fixed at build
/// time).
pub mod globals {
    /// `task_struct.pid`: the thread id.
    pub const TASK_PID_OFFSET: &str = "TASK_PID_OFFSET";
    /// `task_struct.thread_info.cpu` (or `task_struct.cpu` on kernels that keep it there):
    /// the CPU whose run queue the task is on.
    pub const TASK_CPU_OFFSET: &str = "TASK_CPU_OFFSET";
    /// `task_struct.se.cfs_rq`, `cfs_rq.rq` and `rq.clock`: the way from a task to its run
    /// queue's clock, which the sensor reads instead of calling `bpf_ktime_get_ns`.
    pub const TASK_CFS_RQ_OFFSET: &str = "TASK_CFS_RQ_OFFSET";
    pub const CFS_RQ_RQ_OFFSET: &str = "CFS_RQ_RQ_OFFSET";
    pub const RQ_CLOCK_OFFSET: &str = "RQ_CLOCK_OFFSET";
    /// 1 when the three offsets above were found (the kernel has CONFIG_FAIR_GROUP_SCHED),
    /// 0 when the sensor falls back to `bpf_ktime_get_ns`.
    pub const RQ_CLOCK_READABLE: &str = "RQ_CLOCK_READABLE";
    /// `task_struct.sched_info.last_queued` and `.run_delay`: the scheduler's own record of
    /// when the task was queued and of its total run-queue wait (CONFIG_SCHED_INFO).
    pub const TASK_LAST_QUEUED_OFFSET: &str = "TASK_LAST_QUEUED_OFFSET";
    pub const TASK_RUN_DELAY_OFFSET: &str = "TASK_RUN_DELAY_OFFSET";
    /// 1 when waits are read from `sched_info` (its fields exist and the sensor's clock is
    /// the run queue's, the clock they are kept in), 0 when the programs stamp wait starts
    /// themselves.
    pub const WAITS_FROM_SCHED_INFO: &str = "WAITS_FROM_SCHED_INFO";
    /// `task_struct.se.sum_exec_runtime`: the kernel's own total of the time the task ran,
    /// which training's run time is taken from.
    pub const TASK_SUM_EXEC_OFFSET: &str = "TASK_SUM_EXEC_OFFSET";
    /// `task_struct.se.prev_sum_exec_runtime`: `sum_exec_runtime` when the scheduler last
    /// picked the task to run, the start of its current slice by the kernel's own count.
    pub const TASK_PREV_SUM_EXEC_OFFSET: &str = "TASK_PREV_SUM_EXEC_OFFSET";
    pub const ALL: [&str; 11] = [
        TASK_PID_OFFSET,
        TASK_CPU_OFFSET,
        TASK_CFS_RQ_OFFSET,
        CFS_RQ_RQ_OFFSET,
        RQ_CLOCK_OFFSET,
        RQ_CLOCK_READABLE,
        TASK_LAST_QUEUED_OFFSET,
        TASK_RUN_DELAY_OFFSET,
        WAITS_FROM_SCHED_INFO,
        TASK_SUM_EXEC_OFFSET,
        TASK_PREV_SUM_EXEC_OFFSET,
    ];
}
