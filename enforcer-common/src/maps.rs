//! Names of the sensor's maps and programs, so userspace never types one by hand.
//!
//! The kernel keeps at most 15 characters of a map or program name (BPF_OBJ_NAME_LEN is 16
//! with the terminating NUL) and truncates longer ones silently; the contract test checks it.

/// Per-thread classification and run-queue state: `u32` tid → [`crate::ThreadState`].
pub const THREAD_STATE: &str = "thread_state";
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

/// Every map the sensor pins, in a stable order.
pub const ALL_MAPS: [&str; 6] = [
    THREAD_STATE,
    JOB_STATS,
    CPU_STATE,
    COUNTERS,
    EVENTS,
    SETTINGS,
];

/// Program names: (program, tracepoint category, tracepoint name).
pub const PROGRAMS: [(&str, &str, &str); 5] = [
    ("reamer_wakeup", "sched", "sched_wakeup"),
    ("reamer_wakeup_new", "sched", "sched_wakeup_new"),
    ("reamer_switch", "sched", "sched_switch"),
    ("reamer_fork", "sched", "sched_process_fork"),
    ("reamer_exit", "sched", "sched_process_exit"),
];

/// Names of the read-only globals that carry tracepoint field offsets, resolved at load time
/// from tracefs `format` files (Rust eBPF has no CO-RE, so nothing is fixed at build time).
pub mod globals {
    pub const WAKEUP_PID_OFFSET: &str = "WAKEUP_PID_OFFSET";
    pub const WAKEUP_CPU_OFFSET: &str = "WAKEUP_CPU_OFFSET";
    pub const WAKEUP_NEW_PID_OFFSET: &str = "WAKEUP_NEW_PID_OFFSET";
    pub const WAKEUP_NEW_CPU_OFFSET: &str = "WAKEUP_NEW_CPU_OFFSET";
    pub const SWITCH_PREV_PID_OFFSET: &str = "SWITCH_PREV_PID_OFFSET";
    pub const SWITCH_PREV_STATE_OFFSET: &str = "SWITCH_PREV_STATE_OFFSET";
    pub const SWITCH_NEXT_PID_OFFSET: &str = "SWITCH_NEXT_PID_OFFSET";
    pub const FORK_PARENT_PID_OFFSET: &str = "FORK_PARENT_PID_OFFSET";
    pub const FORK_CHILD_PID_OFFSET: &str = "FORK_CHILD_PID_OFFSET";
    pub const EXIT_PID_OFFSET: &str = "EXIT_PID_OFFSET";
}
