//! The scheduling policies the daemon gives threads: SCHED_FIFO to its own event and GPU
//! gating threads (`run_as_fifo`), SCHED_IDLE to offline inference's.
//!
//! Offline inference's threads run under the SCHED_IDLE policy, each of them, on top of their
//! pool group's `cpu.idle`; at shutdown they go back to SCHED_OTHER.
//!
//! The group's `cpu.idle` is what ranks them below training at wakeup (`actuate::cgroup`). It does
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
pub(crate) fn idle_policy_for(current: i32) -> Option<i32> {
    let reset_on_fork = current & libc::SCHED_RESET_ON_FORK;
    match current & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_OTHER | libc::SCHED_BATCH => Some(libc::SCHED_IDLE | reset_on_fork),
        _ => None,
    }
}

/// The policy `current` should go back to at shutdown, or None where it stays.
pub(crate) fn normal_policy_for(current: i32) -> Option<i32> {
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

/// Moves the calling thread to SCHED_FIFO `rt_priority` (0: leaves it SCHED_OTHER). Where
/// the kernel refuses, the thread stays SCHED_OTHER with the shortest time slice EEVDF takes
/// ([`ask_shortest_slice`]), and the log says so.
///
/// The refusal is common: with CONFIG_RT_GROUP_SCHED a real-time thread needs real-time
/// runtime in its cpu cgroup, and a group has none unless given it (cgroup v1
/// `cpu.rt_runtime_us`, 0 by default below the root; cgroup v2 has no such file, so only the
/// root group can run real-time threads). A daemon started under a service manager's or a
/// container's group is refused there, as on the cgroup v2 GPU host, where such an event
/// thread read some events 4.0 ms after they were sent: one tick at HZ=250.
pub(crate) fn run_as_fifo(rt_priority: i32, thread: &str) {
    if rt_priority <= 0 {
        return;
    }
    let Err(Refused { err, slice }) = fifo_or_shortest_slice(rt_priority) else {
        return;
    };
    match slice {
        Ok(()) => tracing::warn!(
            "{thread} stays SCHED_OTHER (SCHED_FIFO {rt_priority}: {err}), with the shortest \
             time slice ({} µs), so that its wakeups preempt tasks with the default one",
            SHORTEST_SLICE_NS / 1000
        ),
        Err(slice_err) => tracing::warn!(
            "{thread} stays SCHED_OTHER (SCHED_FIFO {rt_priority}: {err}; shortest slice: \
             {slice_err}); reactions may wait behind busy CPUs"
        ),
    }
}

/// SCHED_FIFO refused, and what asking for the shortest slice instead gave.
pub(crate) struct Refused {
    pub err: io::Error,
    pub slice: io::Result<()>,
}

/// Moves the calling thread to SCHED_FIFO `rt_priority`; where the kernel refuses, asks for
/// the shortest slice instead ([`run_as_fifo`] says why). `enforcer check` tries the same on a
/// thread of its own.
pub(crate) fn fifo_or_shortest_slice(rt_priority: i32) -> Result<(), Refused> {
    set_policy(0, libc::SCHED_FIFO, rt_priority).map_err(|err| Refused {
        err,
        slice: ask_shortest_slice(),
    })
}

/// The shortest slice EEVDF accepts from `sched_setattr` (it clamps `sched_runtime` to
/// 0.1-100 ms).
pub(crate) const SHORTEST_SLICE_NS: u64 = 100_000;

/// The kernel's `struct sched_attr` as of its first extension (SCHED_ATTR_SIZE_VER1, 56
/// bytes).
#[repr(C)]
#[derive(Debug, Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Keeps the calling thread SCHED_OTHER, at its nice value, with the shortest time slice
/// (`sched_runtime` on a fair thread, Linux 6.12+; no privilege needed). EEVDF lets a waking
/// thread whose slice is shorter than the running task's preempt it at once
/// (`PREEMPT_SHORT`) where its virtual deadline comes first, which a short slice makes
/// likely; with the default slice a woken thread may wait for the running task's slice, or
/// for the next tick.
pub fn ask_shortest_slice() -> io::Result<()> {
    // SAFETY: getpriority reads the calling thread's nice value; -1 is also a valid value,
    // so errno is cleared and checked.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    };
    if nice == -1 && io::Error::last_os_error().raw_os_error() != Some(0) {
        return Err(io::Error::last_os_error());
    }
    let attr = SchedAttr {
        size: size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_nice: nice,
        sched_runtime: SHORTEST_SLICE_NS,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a valid sched_attr of the size it states; pid 0 is the calling thread.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Kernels before custom slices take the call and ignore `sched_runtime`.
    match own_slice_ns()? {
        SHORTEST_SLICE_NS => Ok(()),
        kept => Err(io::Error::other(format!(
            "the kernel kept a {kept} ns slice (custom slices need Linux 6.12+)"
        ))),
    }
}

/// The calling thread's time slice as the kernel keeps it (`sched_runtime` of a fair thread).
pub(crate) fn own_slice_ns() -> io::Result<u64> {
    Ok(attributes_of(0)?.sched_runtime)
}

/// Thread `tid`'s scheduling attributes (0: the calling thread).
fn attributes_of(tid: u32) -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: the kernel writes at most `size` bytes into `attr`.
    if unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::pid_t,
            &mut attr,
            size_of::<SchedAttr>() as u32,
            0,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// The thread of this process named `name` (its `comm`), if one runs.
///
/// Looked for up to three times: a listing of `/proc/self/task` walks the thread list by
/// position, and a thread that exits meanwhile can make it skip one that runs (the lib tests'
/// threads, coming and going, made the slice test miss its own thread once).
pub(crate) fn own_thread_named(name: &str) -> Option<u32> {
    let listed = || {
        std::fs::read_dir("/proc/self/task")
            .ok()?
            .flatten()
            .find(|task| {
                std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .and_then(|task| task.file_name().to_str()?.parse().ok())
    };
    (0..3).find_map(|_| listed())
}

/// How thread `tid` is scheduled, in a few words: "SCHED_FIFO 10", "SCHED_OTHER, 0.1 ms
/// slice". For `enforcer status`, which says how the event thread runs.
pub(crate) fn describe(tid: u32) -> String {
    let Ok(attr) = attributes_of(tid) else {
        return "unknown".to_owned();
    };
    let slice = || format!("{} ms slice", attr.sched_runtime as f64 / 1e6);
    match attr.sched_policy as i32 & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_FIFO => format!("SCHED_FIFO {}", attr.sched_priority),
        libc::SCHED_RR => format!("SCHED_RR {}", attr.sched_priority),
        libc::SCHED_OTHER => format!("SCHED_OTHER, {}", slice()),
        libc::SCHED_BATCH => format!("SCHED_BATCH, {}", slice()),
        libc::SCHED_IDLE => format!("SCHED_IDLE, {}", slice()),
        other => format!("policy {other}"),
    }
}

/// What one pass over a pool's threads did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changed {
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
pub(crate) fn make_idle(tids: impl IntoIterator<Item = u32>) -> Changed {
    change_all(tids, idle_policy_for)
}

/// Gives every SCHED_IDLE thread in `tids` the SCHED_OTHER policy again (with the nice value
/// it had). Leaving SCHED_IDLE needs CAP_SYS_NICE (or an RLIMIT_NICE that allows it).
pub(crate) fn make_normal(tids: impl IntoIterator<Item = u32>) -> Changed {
    change_all(tids, normal_policy_for)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_refused_real_time_can_ask_for_the_shortest_slice() {
        // On a thread of its own: the slice is the thread's and stays with it.
        std::thread::Builder::new()
            .name("slice-probe".to_owned())
            .spawn(|| {
                let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
                let mut version = release.split(['.', '-']).map(|n| n.parse().unwrap_or(0));
                if (version.next().unwrap_or(0), version.next().unwrap_or(0)) < (6u32, 12u32) {
                    eprintln!("SKIPPED: Linux {} keeps no custom slice", release.trim());
                    return;
                }
                let before = own_slice_ns().expect("sched_getattr");
                ask_shortest_slice().expect("sched_setattr with sched_runtime");
                let after = own_slice_ns().expect("sched_getattr");
                assert_eq!(after, SHORTEST_SLICE_NS, "slice before {before} ns");
                let tid = own_thread_named("slice-probe").expect("this thread, by its name");
                assert_eq!(describe(tid), "SCHED_OTHER, 0.1 ms slice");
                assert_eq!(
                    policy_of(0).expect("policy") & !libc::SCHED_RESET_ON_FORK,
                    libc::SCHED_OTHER
                );
            })
            .expect("spawn")
            .join()
            .expect("the thread's assertions");
    }

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
        // The joiner wakes when the kernel clears the thread's tid (CLONE_CHILD_CLEARTID, in
        // exit_mm), before the thread is released: until then it can still be changed, which
        // made this test fail now and then. Wait until it is gone.
        let task = format!("/proc/self/task/{tid}");
        for _ in 0..1000 {
            if !std::path::Path::new(&task).exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // A thread that has exited is no failure.
        assert_eq!(make_idle([tid]), Changed::default());
    }
}
