//! Two programs that do (almost) nothing, attached only by `enforcer calibrate`: their
//! bpf_stats run time is this machine's floor for any program on sched_switch (the accounting
//! itself, the trampoline) and for one clock read. The sensor's own cost is what it adds on
//! top of these, measured in the same run.

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
