//! The scheduling policies the daemon gives threads: SCHED_FIFO to its own event and GPU
//! gating threads (`run_as_fifo`), SCHED_IDLE to offline inference's.
//!
//! Offline inference's threads run under the SCHED_IDLE policy, each of them, on top of their
//! pool group's `cpu.idle`; at shutdown they go back to SCHED_OTHER.
//!
//! The group's `cpu.idle` is what ranks them below training at wakeup (cgroups.rs). It does
//! not change how the load balancer sees them: a normal-policy thread in an idle group counts
//! as cache-hot for `sched_migration_cost` (0.5 ms) after it last ran, so a CPU that training
//! leaves idle does not pull it from the CPU where it waits. A thread with the SCHED_IDLE
//! policy is never cache-hot (kernel/sched/fair.c, `task_hot`; a patch to treat idle groups'
//! threads the same was proposed upstream and not taken). Measured on the 2-CPU VM, ten
//! interleaved pairs of 4 s windows of the co-location scenario (training-sim launched as
//! training beside the offline MLP worker, two threads, on both CPUs): with cpu.idle alone the
//! CPUs sat idle 0.26 s per window on average while both offline threads were runnable nearly
//! all of it (schedstat: run plus wait about the whole window); with SCHED_IDLE threads as
//! well, 0.10 s, and the offline worker got 3% more CPU. Training's step rate was the same
//! (180.3 and 180.4 steps/s).
//!
//! Threads with a real-time or deadline policy are left as they are: someone chose it.
//! Threads created later inherit SCHED_IDLE from their creator; the daemon's periodic
//! reconcile catches the rest.

use std::io;

/// The policy `current` (as `sched_getscheduler` returns it) should become for an offline
/// pool, or None where it stays. The reset-on-fork flag is kept.
pub fn idle_policy_for(current: i32) -> Option<i32> {
    let reset_on_fork = current & libc::SCHED_RESET_ON_FORK;
    match current & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_OTHER | libc::SCHED_BATCH => Some(libc::SCHED_IDLE | reset_on_fork),
        _ => None,
    }
}

/// The policy `current` should go back to at shutdown, or None where it stays.
pub fn normal_policy_for(current: i32) -> Option<i32> {
    let reset_on_fork = current & libc::SCHED_RESET_ON_FORK;
    match current & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_IDLE => Some(libc::SCHED_OTHER | reset_on_fork),
        _ => None,
    }
}

fn policy_of(tid: u32) -> io::Result<i32> {
    // SAFETY: sched_getscheduler reads a thread's policy; a tid that is gone gives ESRCH.
    let policy = unsafe { libc::sched_getscheduler(tid as libc::pid_t) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(policy)
}

/// Sets thread `tid`'s policy (0: the calling thread); `priority` is 0 but for real-time
/// policies.
fn set_policy(tid: u32, policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` outlives the call; the kernel checks the tid and the caller's rights.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread to SCHED_FIFO `rt_priority` (0: leaves it SCHED_OTHER); on
/// failure says which thread stays behind busy CPUs.
pub fn run_as_fifo(rt_priority: i32, thread: &str) {
    if rt_priority <= 0 {
        return;
    }
    if let Err(err) = set_policy(0, libc::SCHED_FIFO, rt_priority) {
        tracing::warn!(
            "{thread} stays SCHED_OTHER (SCHED_FIFO {rt_priority}: {err}); reactions may wait behind busy CPUs"
        );
    }
}

/// What one pass over a pool's threads did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub changed: usize,
    /// Threads whose policy could not be read or set, other than those that exited meanwhile.
    pub failed: usize,
    pub last_error: Option<String>,
}

fn change_all(tids: impl IntoIterator<Item = u32>, wanted: impl Fn(i32) -> Option<i32>) -> Changed {
    let mut report = Changed::default();
    for tid in tids {
        let result = policy_of(tid).and_then(|current| match wanted(current) {
            Some(policy) => set_policy(tid, policy, 0).map(|()| true),
            None => Ok(false),
        });
        match result {
            Ok(true) => report.changed += 1,
            Ok(false) => {}
            // The thread exited between the listing and now.
            Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {}
            Err(err) => {
                report.failed += 1;
                report.last_error = Some(format!("thread {tid}: {err}"));
            }
        }
    }
    report
}

/// Gives every thread in `tids` with a normal policy the SCHED_IDLE policy.
pub fn make_idle(tids: impl IntoIterator<Item = u32>) -> Changed {
    change_all(tids, idle_policy_for)
}

/// Gives every SCHED_IDLE thread in `tids` the SCHED_OTHER policy again (with the nice value
/// it had). Leaving SCHED_IDLE needs CAP_SYS_NICE (or an RLIMIT_NICE that allows it).
pub fn make_normal(tids: impl IntoIterator<Item = u32>) -> Changed {
    change_all(tids, normal_policy_for)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_threads_become_idle_and_back_and_others_are_left_alone() {
        assert_eq!(idle_policy_for(libc::SCHED_OTHER), Some(libc::SCHED_IDLE));
        assert_eq!(idle_policy_for(libc::SCHED_BATCH), Some(libc::SCHED_IDLE));
        assert_eq!(idle_policy_for(libc::SCHED_IDLE), None);
        assert_eq!(idle_policy_for(libc::SCHED_FIFO), None);
        assert_eq!(idle_policy_for(libc::SCHED_RR), None);
        assert_eq!(
            idle_policy_for(libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK),
            Some(libc::SCHED_IDLE | libc::SCHED_RESET_ON_FORK)
        );
        assert_eq!(normal_policy_for(libc::SCHED_IDLE), Some(libc::SCHED_OTHER));
        assert_eq!(
            normal_policy_for(libc::SCHED_IDLE | libc::SCHED_RESET_ON_FORK),
            Some(libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK)
        );
        assert_eq!(normal_policy_for(libc::SCHED_OTHER), None);
        assert_eq!(normal_policy_for(libc::SCHED_FIFO), None);
    }

    /// A thread of this test process: made idle (any user may lower a thread of its own),
    /// then normal again where the test may raise it (root, or CAP_SYS_NICE).
    #[test]
    fn a_real_thread_is_made_idle_and_normal_again() {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        assert_eq!(policy_of(tid).unwrap(), libc::SCHED_OTHER);
        let idle = make_idle([tid]);
        assert_eq!(idle.changed, 1, "{idle:?}");
        assert_eq!(policy_of(tid).unwrap(), libc::SCHED_IDLE);
        assert_eq!(
            make_idle([tid]).changed,
            0,
            "an idle thread is changed again"
        );
        let normal = make_normal([tid]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(normal.changed, 1, "{normal:?}");
            assert_eq!(policy_of(tid).unwrap(), libc::SCHED_OTHER);
        } else {
            assert!(normal.changed + normal.failed == 1, "{normal:?}");
        }
        done_tx.send(()).unwrap();
        thread.join().unwrap();
        // A thread that has exited is no failure.
        assert_eq!(make_idle([tid]), Changed::default());
    }
}
