//! Tracepoint field offsets, set by userspace at load time from
//! /sys/kernel/tracing/events/sched/*/format.
//!
//! They differ between kernels: on 6.18 `sched_process_fork` stores its comms as `__data_loc`
//! and has `parent_pid` at 12, where older kernels have it at 24. Reading a global through
//! `read_volatile` keeps LLVM from folding the build-time placeholder into the code.

use aya_ebpf::programs::TracePointContext;

macro_rules! offset_globals {
    ($($name:ident),* $(,)?) => {
        $(
            #[unsafe(no_mangle)]
            static $name: u32 = 0;
        )*
    };
}

offset_globals!(
    WAKEUP_PID_OFFSET,
    WAKEUP_CPU_OFFSET,
    WAKEUP_NEW_PID_OFFSET,
    WAKEUP_NEW_CPU_OFFSET,
    SWITCH_PREV_PID_OFFSET,
    SWITCH_PREV_STATE_OFFSET,
    SWITCH_NEXT_PID_OFFSET,
    FORK_PARENT_PID_OFFSET,
    FORK_CHILD_PID_OFFSET,
    EXIT_PID_OFFSET,
);

#[inline(always)]
fn offset(global: &'static u32) -> usize {
    // SAFETY: a plain read of a static the loader patched before the program was verified.
    unsafe { core::ptr::read_volatile(global) as usize }
}

#[inline(always)]
fn read_u32(ctx: &TracePointContext, off: usize) -> Option<u32> {
    // SAFETY: `off` comes from the tracepoint's own format file; the helper checks the read.
    unsafe { ctx.read_at::<u32>(off) }.ok()
}

/// (woken tid, CPU it was enqueued on) for sched_wakeup.
#[inline(always)]
pub fn wakeup(ctx: &TracePointContext) -> Option<(u32, u32)> {
    Some((
        read_u32(ctx, offset(&WAKEUP_PID_OFFSET))?,
        read_u32(ctx, offset(&WAKEUP_CPU_OFFSET))?,
    ))
}

/// (woken tid, CPU it was enqueued on) for sched_wakeup_new.
#[inline(always)]
pub fn wakeup_new(ctx: &TracePointContext) -> Option<(u32, u32)> {
    Some((
        read_u32(ctx, offset(&WAKEUP_NEW_PID_OFFSET))?,
        read_u32(ctx, offset(&WAKEUP_NEW_CPU_OFFSET))?,
    ))
}

/// The fields of sched_switch the sensor uses.
pub struct Switch {
    pub prev_tid: u32,
    /// The task state bits the tracepoint reports for prev.
    pub prev_state: u64,
    pub next_tid: u32,
}

/// sched_switch reports `TASK_REPORT_MAX` (0x100 since 4.14) for a preempted task and 0 for a
/// task that yielded; both stay on the run queue. Any of the low 8 bits means it went to sleep
/// (the print fmt of the tracepoint masks prev_state with TASK_REPORT_MAX - 1 = 0xff).
const SLEEP_STATE_MASK: u64 = 0xff;

impl Switch {
    #[inline(always)]
    pub fn prev_stays_runnable(&self) -> bool {
        self.prev_state & SLEEP_STATE_MASK == 0
    }
}

#[inline(always)]
pub fn switch(ctx: &TracePointContext) -> Option<Switch> {
    let prev_state_off = offset(&SWITCH_PREV_STATE_OFFSET);
    Some(Switch {
        prev_tid: read_u32(ctx, offset(&SWITCH_PREV_PID_OFFSET))?,
        // SAFETY: as in `read_u32`; userspace checked the field is 8 bytes wide.
        prev_state: unsafe { ctx.read_at::<u64>(prev_state_off) }.ok()?,
        next_tid: read_u32(ctx, offset(&SWITCH_NEXT_PID_OFFSET))?,
    })
}

/// (parent tid, child tid) for sched_process_fork.
#[inline(always)]
pub fn fork(ctx: &TracePointContext) -> Option<(u32, u32)> {
    Some((
        read_u32(ctx, offset(&FORK_PARENT_PID_OFFSET))?,
        read_u32(ctx, offset(&FORK_CHILD_PID_OFFSET))?,
    ))
}

/// Exiting tid for sched_process_exit.
#[inline(always)]
pub fn exit(ctx: &TracePointContext) -> Option<u32> {
    read_u32(ctx, offset(&EXIT_PID_OFFSET))
}
