//! Thread classification: what userspace registered in `thread_state` (training) and
//! `pool_threads` (inference), inherited at fork, reached through each task's `task_cache`
//! entry. Two maps, so that inference filling its own leaves training's room untouched.
//!
//! In `sched_wakeup` the current task is the waker, not the wakee, so the current cgroup does
//! not classify the wakee; the wakee's own task does. `thread_state` (tid → class) stays the
//! registry, the map userspace writes, iterates and re-adopts after a restart; the programs
//! read it once per thread and per `classify_gen`, and otherwise only the task's storage.

use enforcer_common::{CLASS_OTHER, COUNTER_TASK_CACHE_MISSING, TaskCache};

use crate::{
    maps::{CLASSIFY_GEN, POOL_THREADS, TASK_CACHE, THREAD_STATE, count},
    task::Task,
};

/// The cache entry of a classified thread, or None for "other".
#[inline(always)]
pub fn thread(task: Task) -> Option<&'static mut TaskCache> {
    // SAFETY: the task pointer comes from the tracepoint's arguments.
    let Some(entry) = (unsafe { TASK_CACHE.get_or_create(task.pointer()) }) else {
        count(COUNTER_TASK_CACHE_MISSING);
        return None;
    };
    // At least 1 (the loader writes it before attaching), so a new, zeroed entry is stale.
    let generation = CLASSIFY_GEN.get(0).map_or(0, |g| *g);
    if entry.generation != generation {
        refresh(entry, task.tid(), generation);
    }
    match entry.class {
        CLASS_OTHER => None,
        _ => Some(entry),
    }
}

/// Copies the thread's class from `thread_state`. A thread whose class changed drops the wait
/// or report it had in progress: it began under the old class.
#[inline(always)]
fn refresh(entry: &mut TaskCache, tid: u32, generation: u64) {
    // SAFETY: the value is copied out at once; hash values stay readable for the program's
    // run even if the tid's exit on another CPU deletes them.
    let state = unsafe { THREAD_STATE.get(tid) }.or_else(|| unsafe { POOL_THREADS.get(tid) });
    let (class, group) = match state {
        Some(state) => (state.class, state.group),
        None => (CLASS_OTHER, 0),
    };
    if class != entry.class || group != entry.group {
        entry.class = class;
        entry.group = group;
        entry.runnable_since_ns = 0;
        entry.report_ran_since_ns = 0;
        entry.run_delay_seen_ns = 0;
        entry.behind_offline = 0;
    }
    entry.generation = generation;
}

/// What a fork inherited.
pub enum Inherited {
    /// The parent is neither training's nor inference's.
    Nothing,
    Training(Result<(), i64>),
    Pool(Result<(), i64>),
}

/// Copies the parent's class to the child, in the parent's map; the insert's result says
/// whether that map was full.
#[inline(always)]
pub fn inherit(parent: u32, child: u32) -> Inherited {
    // SAFETY: as in `refresh`.
    if let Some(state) = unsafe { THREAD_STATE.get(parent) } {
        let inherited = *state;
        return Inherited::Training(THREAD_STATE.insert(child, inherited, 0).map_err(i64::from));
    }
    // SAFETY: as in `refresh`.
    match unsafe { POOL_THREADS.get(parent) } {
        Some(state) => {
            let inherited = *state;
            Inherited::Pool(POOL_THREADS.insert(child, inherited, 0).map_err(i64::from))
        }
        None => Inherited::Nothing,
    }
}

/// Forgets an exited thread, in whichever map holds it. Its `task_cache` entry goes with the
/// task.
#[inline(always)]
pub fn forget(tid: u32) {
    let _ = THREAD_STATE.remove(tid);
    let _ = POOL_THREADS.remove(tid);
}
