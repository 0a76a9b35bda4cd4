//! The five tracepoint programs. Each entry point is thin; the work is bounded and constant
//! per event (a few map lookups, no loops), and nothing here logs on the per-switch path.

use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use aya_log_ebpf::warn;
use enforcer_common::{
    CLASS_OFFLINE, CLASS_ONLINE, CLASS_TRAINING, COUNTER_BAD_JOB_ID, COUNTER_FORKS_INHERITED,
    COUNTER_THREAD_MAP_FULL, COUNTER_WAIT_CLOCK_SKEW, CpuState, EVENT_ENQUEUED_BEHIND_INFERENCE,
    EVENT_LONG_WAIT, EVENT_PREEMPTED_BY_INFERENCE, JobStats, MAX_JOBS, NR_CLASSES, SensorEvent,
    histogram::{NR_BUCKETS, bucket_of},
};

use crate::{
    classify, events, fields,
    maps::{CPU_STATE, JOB_STATS, SETTINGS, count},
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

#[tracepoint]
pub fn reamer_wakeup(ctx: TracePointContext) -> u32 {
    if let Some((tid, cpu)) = fields::wakeup(&ctx) {
        on_wakeup(tid, cpu);
    }
    0
}

#[tracepoint]
pub fn reamer_wakeup_new(ctx: TracePointContext) -> u32 {
    if let Some((tid, cpu)) = fields::wakeup_new(&ctx) {
        on_wakeup(tid, cpu);
    }
    0
}

/// A thread became runnable on `target_cpu`. For a training thread: start its wait, and if
/// that CPU is running inference, tell userspace now; this is the earliest moment training's
/// demand for that CPU is visible.
#[inline(always)]
fn on_wakeup(tid: u32, target_cpu: u32) {
    if tid == 0 {
        return;
    }
    let Some(thread) = classify::thread(tid) else {
        return;
    };
    if thread.class != CLASS_TRAINING {
        return;
    }
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    thread.runnable_since_ns = now;
    let job = thread.group;

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
    if let Some(stats) = job_stats_here(job) {
        stats.behind_inference += 1;
    }
    if let Some(here) = this_cpu_state() {
        let event = SensorEvent {
            ts_ns: now,
            wait_ns: 0,
            kind: EVENT_ENQUEUED_BEHIND_INFERENCE,
            job,
            tid,
            cpu: target_cpu,
            holder_class,
            holder_group,
        };
        events::send(here, &event);
    }
}

#[tracepoint]
pub fn reamer_switch(ctx: TracePointContext) -> u32 {
    if let Some(switch) = fields::switch(&ctx) {
        on_switch(&switch);
    }
    0
}

/// Per-CPU time accounting, the end of one training thread's wait and the start of another's.
#[inline(always)]
fn on_switch(switch: &fields::Switch) {
    let Some(here) = this_cpu_state() else { return };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: as above.
    let cpu = unsafe { bpf_get_smp_processor_id() };

    // What ran since the last switch, attributed to the class that was current. The slot
    // describes `prev` only if it was initialised by a switch to it (not before attach).
    let known_prev = here.switched_at_ns != 0 && here.current_tid == switch.prev_tid;
    if known_prev && now >= here.switched_at_ns {
        let ran = now - here.switched_at_ns;
        let class = here.current_class as usize;
        if class < NR_CLASSES {
            here.class_ns[class] += ran;
        }
        if here.current_class == CLASS_TRAINING {
            if let Some(stats) = job_stats_here(here.current_group) {
                stats.run_ns += ran;
            }
        }
    }

    // A training thread switched out: still runnable means its wait starts now.
    let prev_training_waits = known_prev && here.current_class == CLASS_TRAINING && {
        match classify::thread(switch.prev_tid) {
            Some(prev) if switch.prev_stays_runnable() => {
                prev.runnable_since_ns = now;
                true
            }
            Some(prev) => {
                prev.runnable_since_ns = 0;
                false
            }
            None => false,
        }
    };
    let prev_job = here.current_group;

    let (next_class, next_group) = classify::class_of(switch.next_tid);
    if next_class == CLASS_TRAINING {
        if let Some(next) = classify::thread(switch.next_tid) {
            let since = next.runnable_since_ns;
            next.runnable_since_ns = 0;
            if since != 0 {
                finish_wait(here, cpu, next_group, switch.next_tid, since, now);
            }
        }
    }

    if prev_training_waits && is_inference(next_class) {
        if let Some(stats) = job_stats_here(prev_job) {
            stats.behind_inference += 1;
        }
        let event = SensorEvent {
            ts_ns: now,
            wait_ns: 0,
            kind: EVENT_PREEMPTED_BY_INFERENCE,
            job: prev_job,
            tid: switch.prev_tid,
            cpu,
            holder_class: next_class,
            holder_group: next_group,
        };
        events::send(here, &event);
    }

    here.current_class = next_class;
    here.current_group = next_group;
    here.current_tid = switch.next_tid;
    here.switched_at_ns = now;
}

/// Records a completed run-queue wait of a training thread that starts running now.
#[inline(always)]
fn finish_wait(here: &mut CpuState, cpu: u32, job: u32, tid: u32, since: u64, now: u64) {
    // The wait may have started on another CPU; their clocks can disagree by a little.
    if now < since {
        count(COUNTER_WAIT_CLOCK_SKEW);
        return;
    }
    let wait = now - since;
    let Some(stats) = job_stats_here(job) else {
        return;
    };
    stats.wait_ns += wait;
    stats.waits += 1;
    if wait > stats.max_wait_ns {
        stats.max_wait_ns = wait;
    }
    // LLVM proves bucket_of() < NR_BUCKETS and drops any bounds check, but the verifier
    // cannot follow that proof ("math between map_value pointer and register with unbounded
    // min value"). The volatile round trip hides the value from LLVM, so the check below stays
    // and gives the verifier its bound.
    let bucket = bucket_of(wait);
    // SAFETY: reads a local.
    let bucket = unsafe { core::ptr::read_volatile(&bucket) };
    if bucket < NR_BUCKETS {
        stats.wait_hist[bucket] += 1;
    }
    let threshold = SETTINGS.get(0).map_or(u64::MAX, |s| s.wait_threshold_ns);
    if threshold != 0 && wait > threshold {
        stats.long_waits += 1;
        let event = SensorEvent {
            ts_ns: now,
            wait_ns: wait,
            kind: EVENT_LONG_WAIT,
            job,
            tid,
            cpu,
            holder_class: CLASS_TRAINING,
            holder_group: job,
        };
        events::send(here, &event);
    }
}

#[tracepoint]
pub fn reamer_fork(ctx: TracePointContext) -> u32 {
    let Some((parent, child)) = fields::fork(&ctx) else {
        return 0;
    };
    match classify::inherit(parent, child) {
        None => {}
        Some(Ok(())) => count(COUNTER_FORKS_INHERITED),
        Some(Err(err)) => {
            count(COUNTER_THREAD_MAP_FULL);
            warn!(
                &ctx,
                "thread_state full: child {} of {} unclassified ({})", child, parent, err
            );
        }
    }
    0
}

#[tracepoint]
pub fn reamer_exit(ctx: TracePointContext) -> u32 {
    if let Some(tid) = fields::exit(&ctx) {
        if tid != 0 {
            classify::forget(tid);
        }
    }
    0
}
