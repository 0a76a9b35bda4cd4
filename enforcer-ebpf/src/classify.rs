//! Thread classification: what userspace registered in `thread_state`, inherited at fork.
//!
//! In `sched_wakeup` the current task is the waker, not the wakee, so the current cgroup does
//! not classify the wakee; a tid-keyed map does, and it is the same lookup on every hook.

use enforcer_common::ThreadState;

use crate::maps::THREAD_STATE;

/// The mutable state of a classified thread, or None for "other".
#[inline(always)]
pub fn thread(tid: u32) -> Option<&'static mut ThreadState> {
    // SAFETY: hash values stay valid for the program's run; a concurrent delete of the same
    // tid (its exit on another CPU) leaves the element readable until an RCU grace period.
    THREAD_STATE.get_ptr_mut(tid).map(|p| unsafe { &mut *p })
}

/// Copies the parent's class to the child; Err when the map is full.
#[inline(always)]
pub fn inherit(parent: u32, child: u32) -> Option<Result<(), i64>> {
    let state = thread(parent)?;
    let inherited = ThreadState {
        class: state.class,
        group: state.group,
        runnable_since_ns: 0,
        report_ran_since_ns: 0,
    };
    Some(THREAD_STATE.insert(child, inherited, 0).map_err(i64::from))
}

/// Forgets an exited thread.
#[inline(always)]
pub fn forget(tid: u32) {
    let _ = THREAD_STATE.remove(tid);
}
