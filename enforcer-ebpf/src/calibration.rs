//! Programs that do (almost) nothing, attached only by `enforcer calibrate`.
//!
//! - On sched_switch, a no-op and a single clock read, with run-time statistics on: their
//!   bpf_stats run time is this machine's floor for any program there (the accounting itself,
//!   the dispatch) and for one clock read. The sensor's own cost is what it adds on top of
//!   these, measured in the same run.
//! - With `--floor`, the no-op on sched_switch and one no-op on each of the sensor's other
//!   tracepoints, statistics off: a workload's throughput beside them is what any program on
//!   those tracepoints costs it, whatever the program does.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::btf_tracepoint, programs::BtfTracePointContext};

#[btf_tracepoint(function = "sched_switch")]
pub fn reamer_cal_noop(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn reamer_cal_clk(_ctx: BtfTracePointContext) -> i32 {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    (now & 1) as i32
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn reamer_nop_wake(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn reamer_nop_new(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn reamer_nop_fork(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn reamer_nop_exit(_ctx: BtfTracePointContext) -> i32 {
    0
}
