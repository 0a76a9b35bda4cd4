//! The five BTF-enabled tracepoint programs. Each entry point is thin; the work is bounded and constant
//! per event (a few map lookups, no loops), and nothing here logs on the per-switch path.

use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use aya_log_ebpf::warn;
use enforcer_common::{
    CLASS_IDLE, CLASS_OFFLINE, CLASS_ONLINE, CLASS_OTHER, CLASS_TRAINING, COUNTER_BAD_JOB_ID,
    COUNTER_FORKS_INHERITED, COUNTER_POOL_THREAD_MAP_FULL, COUNTER_SWITCH_FROM_UNKNOWN,
    COUNTER_THREAD_MAP_FULL, COUNTER_UNTRACED_TRAINING_SLICE, COUNTER_WAIT_CLOCK_SKEW, CpuState,
    EVENT_ENQUEUED_BEHIND_INFERENCE, EVENT_LONG_WAIT, EVENT_PREEMPTED_BY_INFERENCE, JobStats,
    MAX_JOBS, NR_CLASSES, RUN_DELAY_SEEN, SensorEvent, TaskCache, WAIT_THRESHOLD_UNIT_NS,
    histogram::{NR_BUCKETS, bucket_of},
};

use crate::{
    classify::{self, Inherited},
    events,
    maps::{CPU_STATE, JOB_STATS, SETTINGS, count, report_changes_nothing},
    task::{self, Task},
};

#[inline(always)]
fn is_inference(class: u32) -> bool {
    class == CLASS_ONLINE || class == CLASS_OFFLINE
}

#[inline(always)]
fn this_cpu_state() -> Option<&'static mut CpuState> {
    // SAFETY: SMP processor id is this CPU; its slot is written only by programs running here,
    // which do not nest.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    CPU_STATE.get_ptr_mut(cpu).map(|p| unsafe { &mut *p })
}

/// This CPU's statistics of training job `job`.
#[inline(always)]
fn job_stats_here(job: u32) -> Option<&'static mut JobStats> {
    if job >= MAX_JOBS {
        count(COUNTER_BAD_JOB_ID);
        return None;
    }
    // SAFETY: per-CPU slot, see `this_cpu_state`.
    JOB_STATS.get_ptr_mut(job).map(|p| unsafe { &mut *p })
}

/// sched_wakeup(struct task_struct *p)
#[btf_tracepoint(function = "sched_wakeup")]
pub fn reamer_wakeup(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(Task::new(ctx.arg(0)));
    0
}

/// sched_wakeup_new(struct task_struct *p)
#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn reamer_wake_new(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(Task::new(ctx.arg(0)));
    0
}

/// A thread became runnable on its CPU. For a training thread: stamp the start of its wait
/// (unless sched_info keeps it), and if that CPU is running inference, tell userspace now;
/// this is the earliest moment training's demand for that CPU is visible.
///
/// Where sched_info keeps the waits, the thread is classified only when the CPU runs
/// inference: most wakeups land elsewhere, and the wakee's `task_cache` is often cold here
/// (it last ran on another CPU). Measured side by side under hackbench, that lookup was most
/// of a wakeup's cost (docs/sensor.md, "Wakeups").
#[inline(always)]
fn on_wakeup(task: Task) {
    let tid = task.tid();
    if tid == 0 {
        return;
    }
    let stamped = match task::waits_from_sched_info() {
        true => None,
        false => match training_thread(task) {
            Some(thread) => {
                // The wait starts at the enqueue: the clock the scheduler just read for it.
                thread.runnable_since_ns = task.rq_clock();
                Some(thread)
            }
            None => return,
        },
    };
    let target_cpu = task.cpu();
    let Some(holder) = CPU_STATE.get(target_cpu) else {
        return;
    };
    // Another CPU's slot, written concurrently: read each field once.
    // SAFETY: valid reference into the array map.
    let holder_class = unsafe { core::ptr::read_volatile(&holder.current_class) };
    let holder_group = unsafe { core::ptr::read_volatile(&holder.current_group) };
    if !is_inference(holder_class) {
        return;
    }
    let Some(thread) = stamped.or_else(|| training_thread(task)) else {
        return;
    };
    let job = thread.group;
    if let Some(stats) = job_stats_here(job) {
        stats.behind_inference += 1;
    }
    if holder_class == CLASS_OFFLINE {
        thread.behind_offline = 1;
    }
    // Training holds this CPU already, or all it may: a report would only wake the enforcer.
    if report_changes_nothing(target_cpu) {
        return;
    }
    if let Some(here) = this_cpu_state() {
        let event = SensorEvent {
            ts_ns: monotonic_ns(),
            wait_ns: 0,
            kind: EVENT_ENQUEUED_BEHIND_INFERENCE,
            job,
            tid,
            cpu: target_cpu,
            holder_class,
            holder_group,
        };
        // Time to running is measured for reports that reached userspace, the ones the
        // enforcer may have acted on.
        if events::send(here, &event, true) {
            thread.report_ran_since_ns = event.ts_ns;
        }
    }
}

/// The cache entry of `task` if it is a training thread.
#[inline(always)]
fn training_thread(task: Task) -> Option<&'static mut TaskCache> {
    classify::thread(task).filter(|thread| thread.class == CLASS_TRAINING)
}

/// CLOCK_MONOTONIC, for what userspace compares with its own clock: event timestamps and the
/// time from a report to the thread running. Only events and reports read it; everything per
/// switch uses the run queue's clock ([`Task::rq_clock`]).
#[inline(always)]
fn monotonic_ns() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// What the sensor takes from one context switch.
struct Switch {
    /// The task switched out, classified only when it may start waiting.
    prev: Task,
    /// The task switched in; also the way to this CPU's run-queue clock.
    next: Task,
    prev_tid: u32,
    /// prev stays on the run queue: it was preempted, or yielded while TASK_RUNNING.
    prev_stays_runnable: bool,
    next_tid: u32,
}

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state): the prototype of kernels since 5.18, checked against BTF by the
/// loader. A task that was not preempted and whose state is not TASK_RUNNING (0) went to sleep.
#[btf_tracepoint(function = "sched_switch")]
pub fn reamer_switch(ctx: BtfTracePointContext) -> i32 {
    let preempt: u64 = ctx.arg(0);
    let prev = Task::new(ctx.arg(1));
    let next = Task::new(ctx.arg(2));
    let prev_state: u64 = ctx.arg(3);
    on_switch(&Switch {
        prev,
        next,
        prev_tid: prev.tid(),
        prev_stays_runnable: preempt & 1 != 0 || prev_state & 0xffff_ffff == 0,
        next_tid: next.tid(),
    });
    0
}

/// Per-CPU time accounting, and the end of a training thread's wait (the start of one is the
/// scheduler's own record, or the sensor's stamp: see [`ending_wait`]).
///
/// At most two classifications (task-storage lookups), and one on the common path: `next`
/// always, `prev` only when it is a preempted training thread that must be stamped or
/// reported. A training thread that goes to sleep keeps a stale `runnable_since_ns`,
/// harmlessly: it can only run again after a wakeup, which overwrites it. A switch between
/// two tasks of the same class and group, neither training, does not even read the clock: the
/// CPU's time segment simply goes on.
#[inline(always)]
fn on_switch(switch: &Switch) {
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let Some(here) = CPU_STATE.get_ptr_mut(cpu) else {
        return;
    };
    // SAFETY: this CPU's own slot; programs on one CPU do not nest.
    let here = unsafe { &mut *here };
    // The slot describes `prev` only if a switch to it initialised it (not before attach).
    let known_prev = here.switched_at_ns != 0 && here.current_tid == switch.prev_tid;
    // A slot initialised, naming another task: the kernel ran `prev` here without a
    // sched_switch into it (docs/sensor.md, "Switches the kernel does not trace").
    if !known_prev && here.switched_at_ns != 0 {
        count(COUNTER_SWITCH_FROM_UNKNOWN);
        count_untraced_training_slice(switch.prev);
    }

    let next = match switch.next_tid {
        0 => None,
        _ => classify::thread(switch.next),
    };
    let (next_class, next_group) = match (switch.next_tid, &next) {
        (0, _) => (CLASS_IDLE, 0),
        (_, None) => (CLASS_OTHER, 0),
        (_, Some(thread)) => (thread.class, thread.group),
    };
    if known_prev
        && next_class != CLASS_TRAINING
        && next_class == here.current_class
        && next_group == here.current_group
    {
        here.current_tid = switch.next_tid;
        return;
    }

    // `__schedule` brought the clock up to date before picking `next`, except right after a
    // wakeup that preempted (the kernel skips that update as redundant): such a wait reads as
    // 0 instead of a few microseconds, as in the kernel's own sched_info run delay.
    let now = switch.next.rq_clock();
    let prev_training = known_prev && here.current_class == CLASS_TRAINING;
    let prev_job = here.current_group;
    // Looked up once: the common training switch is between two threads of one job (a map
    // lookup and its increment took about 10 ns in isolation here, in a throwaway
    // calibration program).
    let mut prev_stats = match prev_training {
        true => job_stats_here(prev_job),
        false => None,
    };
    // What ran since the segment began, charged to the class that was current.
    if known_prev && now >= here.switched_at_ns {
        let ran = now - here.switched_at_ns;
        let class = here.current_class as usize;
        if class < NR_CLASSES {
            here.class_ns[class] += ran;
        }
    }
    // A training thread's slice: the kernel's own count of the time it ran since it was
    // switched in, so that the job's run time is the threads' `sum_exec_runtime`.
    let prev_slice_ns = match prev_training {
        true => switch
            .prev
            .sum_exec_runtime()
            .checked_sub(here.training_exec_start_ns),
        false => None,
    };
    if let (Some(stats), Some(ran)) = (&mut prev_stats, prev_slice_ns) {
        stats.run_ns += ran;
    }

    // A preempted training thread: its wait starts now. The scheduler notes that in its
    // sched_info, so the thread is looked up only to stamp the start where waits do not come
    // from there, or to report it behind inference.
    let prev_preempted = prev_training && switch.prev_stays_runnable;
    let mut prev_waiting =
        match prev_preempted && (!task::waits_from_sched_info() || is_inference(next_class)) {
            true => classify::thread(switch.prev),
            false => None,
        };
    if let Some(prev) = &mut prev_waiting
        && !task::waits_from_sched_info()
    {
        prev.runnable_since_ns = now;
    }

    // A training thread switched in: its wait ends now, and the enforcer can tell when a
    // thread it reacted for actually ran.
    if let Some(next) = next
        && next.class == CLASS_TRAINING
    {
        if next.report_ran_since_ns != 0 {
            let reported = next.report_ran_since_ns;
            next.report_ran_since_ns = 0;
            record_report_ran(next.group, reported, monotonic_ns());
        }
        // Written only when set: the common switch-in leaves the entry's line clean.
        let behind_offline = next.behind_offline != 0;
        if behind_offline {
            next.behind_offline = 0;
        }
        if let Some(ns) = ending_wait(next, switch.next, now) {
            let mut stats = match next.group == prev_job && prev_stats.is_some() {
                true => prev_stats.as_deref_mut(),
                false => job_stats_here(next.group),
            };
            if behind_offline && let Some(stats) = stats.as_deref_mut() {
                stats.offline_wait_ns += ns;
            }
            let wait = Wait {
                job: next.group,
                tid: switch.next_tid,
                ns,
            };
            finish_wait(here, cpu, stats, &wait);
        }
    }

    if let Some(prev) = prev_waiting
        && is_inference(next_class)
    {
        // prev was training, so these are its job's statistics.
        if let Some(stats) = &mut prev_stats {
            stats.behind_inference += 1;
        }
        if next_class == CLASS_OFFLINE {
            prev.behind_offline = 1;
        }
        // As at wakeup: no report where it would change nothing.
        if !report_changes_nothing(cpu) {
            let event = SensorEvent {
                ts_ns: monotonic_ns(),
                wait_ns: 0,
                kind: EVENT_PREEMPTED_BY_INFERENCE,
                job: prev_job,
                tid: switch.prev_tid,
                cpu,
                holder_class: next_class,
                holder_group: next_group,
            };
            if events::send(here, &event, true) {
                prev.report_ran_since_ns = event.ts_ns;
            }
        }
    }

    // The training slice that starts here, for the run time at its end and, while it runs,
    // for userspace; written before `current_class` (see `CpuState`).
    // SAFETY: this CPU's own slot (above); volatile keeps the stores in this order.
    unsafe {
        if next_class == CLASS_TRAINING {
            // From one training slice to the next on this CPU, the start moves on by the slice
            // that ended instead of reading the clock (a helper call: the `reamer_cal_clk`
            // floor less the no-op's in docs/benchmarks.md, tens of ns here, as much as the
            // rest of the switch): between two training slices the CPU only switched. The
            // stamp falls behind the clock by what run time leaves out (the switches
            // themselves, time the hypervisor stole), so a slice in progress reads that much
            // long until a slice after another class's restarts the stamp; completed slices
            // count exactly.
            let since = match (prev_slice_ns, here.training_since_ns) {
                (Some(ran), since) if since != 0 => since + ran,
                _ => monotonic_ns(),
            };
            let exec_start = switch.next.sum_exec_runtime();
            core::ptr::write_volatile(&mut here.training_exec_start_ns, exec_start);
            core::ptr::write_volatile(&mut here.training_since_ns, since);
        } else if here.training_since_ns != 0 {
            core::ptr::write_volatile(&mut here.training_since_ns, 0);
        }
        core::ptr::write_volatile(&mut here.current_class, next_class);
    }
    here.current_group = next_group;
    here.current_tid = switch.next_tid;
    here.switched_at_ns = now;
}

/// The slice of `prev`, switched out here after a switch-in the kernel did not trace, where it
/// is a training thread: the kernel's own count since it picked the thread
/// (`sum_exec_runtime` less `prev_sum_exec_runtime`), which needs no stamp from the switch-in.
/// On the Firecracker VM the guest agent's threads are switched in and never out through
/// `sched_switch`, and a training slice after one was lost whole: 9 to 20 such switches in a
/// 6 s run of the sensor's run-time test, and up to 43% of the job's run time missing in it.
/// Only on this rare path: the common one counts from the switch-in's stamp without looking
/// `prev` up.
#[inline(always)]
fn count_untraced_training_slice(prev: Task) {
    let Some(thread) = classify::thread(prev) else {
        return;
    };
    if thread.class != CLASS_TRAINING {
        return;
    }
    let ran = prev
        .sum_exec_runtime()
        .saturating_sub(prev.prev_sum_exec_runtime());
    count(COUNTER_UNTRACED_TRAINING_SLICE);
    if let Some(stats) = job_stats_here(thread.group) {
        stats.run_ns += ran;
    }
}

/// A thread reported behind inference at `reported` runs `now` (both CLOCK_MONOTONIC):
/// aggregate the delay.
#[inline(always)]
fn record_report_ran(job: u32, reported: u64, now: u64) {
    if now < reported {
        count(COUNTER_WAIT_CLOCK_SKEW);
        return;
    }
    let Some(stats) = job_stats_here(job) else {
        return;
    };
    let delay = now - reported;
    stats.reports_ran += 1;
    stats.report_to_ran_ns += delay;
    count_in(&mut stats.report_to_ran_hist, delay);
}

/// Adds one value to a log-linear histogram. The verifier follows `bucket_of`'s bound (see
/// there), so the only check is the one LLVM may drop.
#[inline(always)]
fn count_in(hist: &mut [u64; NR_BUCKETS], ns: u64) {
    if let Some(count) = hist.get_mut(bucket_of(ns)) {
        *count += 1;
    }
}

/// The run-queue wait that ends as training thread `task` (`entry` its cache) is switched in
/// at `now`, or None when there is none to count.
#[inline(always)]
fn ending_wait(entry: &mut TaskCache, task: Task, now: u64) -> Option<u64> {
    if task::waits_from_sched_info() {
        return sched_info_wait(entry, task, now);
    }
    let since = entry.runnable_since_ns;
    if since == 0 {
        return None;
    }
    entry.runnable_since_ns = 0;
    // The wait may have started on another CPU; their clocks can disagree by a little.
    if now < since {
        count(COUNTER_WAIT_CLOCK_SKEW);
        return None;
    }
    Some(now - since)
}

/// The wait as the scheduler's sched_info counts it, which it is about to add to the task's
/// `run_delay` (`sched_info_arrive`, right after this tracepoint): the piece on this run queue
/// since `last_queued`, plus the pieces it already added since the thread last ran (a
/// migration while queued ends one piece on the old run queue and starts one here). Both ends
/// of a piece are the same run queue's clock, so no cross-CPU order is involved.
#[inline(always)]
fn sched_info_wait(entry: &mut TaskCache, task: Task, now: u64) -> Option<u64> {
    let queued = task.last_queued();
    // Not queued through the scheduler's accounting: it adds nothing either.
    if queued == 0 {
        return None;
    }
    if now < queued {
        count(COUNTER_WAIT_CLOCK_SKEW);
        return None;
    }
    let piece = now - queued;
    let total = task.run_delay();
    let earlier = match entry.run_delay_seen_ns & RUN_DELAY_SEEN {
        0 => 0,
        _ => total.saturating_sub(entry.run_delay_seen_ns & !RUN_DELAY_SEEN),
    };
    entry.run_delay_seen_ns = RUN_DELAY_SEEN | (total + piece);
    Some(earlier + piece)
}

/// A run-queue wait of `ns` of a training thread of job `job`.
struct Wait {
    job: u32,
    tid: u32,
    ns: u64,
}

/// Records a wait that ends now, in `stats` (the job's statistics on this CPU).
#[inline(always)]
fn finish_wait(here: &mut CpuState, cpu: u32, stats: Option<&mut JobStats>, wait_of: &Wait) {
    let wait = wait_of.ns;
    let Some(stats) = stats else {
        return;
    };
    stats.wait_ns += wait;
    stats.waits += 1;
    if wait > stats.max_wait_ns {
        stats.max_wait_ns = wait;
    }
    count_in(&mut stats.wait_hist, wait);
    // Thresholds are whole microseconds, so a shorter wait cannot cross one: no settings
    // lookup for the many short waits.
    if wait <= WAIT_THRESHOLD_UNIT_NS {
        return;
    }
    let threshold = SETTINGS.get(0).map_or(u64::MAX, |s| s.wait_threshold_ns);
    if threshold != 0 && wait > threshold {
        stats.long_waits += 1;
        let event = SensorEvent {
            ts_ns: monotonic_ns(),
            wait_ns: wait,
            kind: EVENT_LONG_WAIT,
            job: wait_of.job,
            tid: wait_of.tid,
            cpu,
            holder_class: CLASS_TRAINING,
            holder_group: wait_of.job,
        };
        // Informational (the enforcer acts on demand, not on single long waits): no wakeup.
        let _ = events::send(here, &event, false);
    }
}

/// sched_process_fork(struct task_struct *parent, struct task_struct *child): fires for new
/// threads as well as new processes, before the child first runs.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn reamer_fork(ctx: BtfTracePointContext) -> i32 {
    let parent = Task::new(ctx.arg(0)).tid();
    let child = Task::new(ctx.arg(1)).tid();
    match classify::inherit(parent, child) {
        Inherited::Nothing => {}
        Inherited::Training(Ok(())) | Inherited::Pool(Ok(())) => count(COUNTER_FORKS_INHERITED),
        Inherited::Training(Err(err)) => {
            count(COUNTER_THREAD_MAP_FULL);
            warn!(
                &ctx,
                "thread_state full: child {} of {} unclassified ({})", child, parent, err
            );
        }
        // Said by the counter alone: a pool that keeps its map full would flood the log.
        Inherited::Pool(Err(_)) => count(COUNTER_POOL_THREAD_MAP_FULL),
    }
    0
}

/// sched_process_exit(struct task_struct *p, ...): fires for every exiting thread.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn reamer_exit(ctx: BtfTracePointContext) -> i32 {
    let tid = Task::new(ctx.arg(0)).tid();
    if tid != 0 {
        classify::forget(tid);
    }
    0
}
