//! `#[repr(C)]` values stored in the sensor's maps and ring buffer.

use crate::histogram::NR_BUCKETS;

/// Most training jobs the sensor tracks at once (index space of [`JobStats`]).
pub const MAX_JOBS: u32 = 64;
/// Most CPUs the sensor supports (entries of the `cpu_state` array).
pub const MAX_CPUS: u32 = 1024;
/// Most training threads classified at once (entries of the `thread_state` hash).
pub const MAX_THREADS: u32 = 65536;
/// Most inference threads classified at once (entries of the `pool_threads` hash) by
/// default; `[sensor] max_inference_threads` sets it at load. A map of their own: however many
/// threads inference starts, training's room is untouched.
pub const MAX_POOL_THREADS: u32 = 65536;
/// Ring buffer size in bytes: a power of two and a multiple of the page size.
pub const EVENTS_RING_BYTES: u32 = 256 * 1024;

/// Thread classes. A thread belongs to one training job, one online or offline inference
/// pool, or none of them ("other"). `CLASS_IDLE` is the per-CPU idle task (pid 0) and appears
/// only in per-CPU time accounting, never in `thread_state`.
pub const CLASS_OTHER: u32 = 0;
pub const CLASS_TRAINING: u32 = 1;
pub const CLASS_ONLINE: u32 = 2;
pub const CLASS_OFFLINE: u32 = 3;
pub const CLASS_IDLE: u32 = 4;
pub const NR_CLASSES: usize = 5;

/// Value of `thread_state`, keyed by tid: what userspace (and the fork hook) registered.
///
/// `group` is the training job id (index into `job_stats`) or the inference pool id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState {
    pub class: u32,
    pub group: u32,
}

/// Value of `task_cache`, the task-local storage the programs reach from a task pointer
/// without hashing its tid: the thread's class, copied from `thread_state`, and its wait in
/// progress.
///
/// `generation` is the `classify_gen` the class was copied at; 0 (a new entry) or any older
/// value makes the programs copy it again.
///
/// Where waits come from the scheduler's `sched_info` (the default, docs/sensor.md "Waits"),
/// `run_delay_seen_ns` is the kernel's `run_delay` total as of the thread's last switch-in,
/// with [`RUN_DELAY_SEEN`] set, or 0 before the first one under its current class. Otherwise
/// `runnable_since_ns` is the sensor clock's time (CLOCK_MONOTONIC, by configuration or for
/// want of the run queue's) at which a training thread became runnable (woken or preempted),
/// or 0 while it runs or sleeps.
///
/// `report_ran_since_ns` is non-zero when the thread was reported queued behind inference at
/// that CLOCK_MONOTONIC time: its next switch-in adds the time since the report to its job's
/// `report_to_ran_hist`.
///
/// `behind_offline` is 1 while the thread waits in a wait that began queued behind offline
/// inference, or preempted for it: its switch-in adds the whole wait to `offline_wait_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskCache {
    pub generation: u64,
    pub class: u32,
    pub group: u32,
    pub runnable_since_ns: u64,
    pub report_ran_since_ns: u64,
    pub run_delay_seen_ns: u64,
    pub behind_offline: u32,
    pub _pad: u32,
}

/// Marks `TaskCache::run_delay_seen_ns` as a value, so that a total of 0 (a thread that never
/// waited) is not taken for "nothing seen yet". A run delay reaches bit 63 after 292 years.
pub const RUN_DELAY_SEEN: u64 = 1 << 63;

/// Per training job, per CPU (the CPU on which each quantity was observed).
///
/// `run_ns + wait_ns` integrated over an interval, divided by its length, is the job's CPU
/// demand: the average number of its threads that were runnable or running. `run_ns` counts a
/// thread's slice when it ends; the slices in progress are in `CpuState`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobStats {
    /// Time the job's threads spent running, in completed slices: the growth of each thread's
    /// `se.sum_exec_runtime` (the kernel's figure, `/proc/<tid>/schedstat`'s first field)
    /// from its switch-in to its switch-out.
    pub run_ns: u64,
    /// Time the job's threads spent runnable but waiting for a CPU (completed waits).
    pub wait_ns: u64,
    /// Number of completed run-queue waits.
    pub waits: u64,
    /// Longest single wait seen.
    pub max_wait_ns: u64,
    /// Times a thread of the job was enqueued on, or preempted on, a CPU running inference.
    pub behind_inference: u64,
    /// Waits longer than the configured threshold.
    pub long_waits: u64,
    /// The part of `wait_ns` in waits that began behind offline inference (the thread queued
    /// on a CPU running it, or preempted for it): what offline inference costs training in
    /// waits, which a pause takes away.
    pub offline_wait_ns: u64,
    /// Run-queue wait histogram, see [`crate::histogram`].
    pub wait_hist: [u64; NR_BUCKETS],
    /// Reports behind inference whose thread has since run, their total and histogram of the
    /// time from report to running: the enforcer's "event to training ran", kept in the kernel
    /// so that measuring it wakes nobody.
    pub reports_ran: u64,
    pub report_to_ran_ns: u64,
    pub report_to_ran_hist: [u64; NR_BUCKETS],
}

impl Default for JobStats {
    fn default() -> Self {
        Self {
            run_ns: 0,
            wait_ns: 0,
            waits: 0,
            max_wait_ns: 0,
            behind_inference: 0,
            long_waits: 0,
            offline_wait_ns: 0,
            wait_hist: [0; NR_BUCKETS],
            reports_ran: 0,
            report_to_ran_ns: 0,
            report_to_ran_hist: [0; NR_BUCKETS],
        }
    }
}

/// One CPU's view of what it runs, indexed by CPU number. Only that CPU writes it; other CPUs
/// read `current_class` to tell whether a training thread is being enqueued behind inference,
/// and userspace reads the training segment in progress.
///
/// Padded to 192 bytes (three cache lines) so that no two CPUs write the same cache line. An
/// array map's values lie back to back from `bpf_array.value`, which is only 8-byte aligned
/// (on the development kernel 312 bytes into the map's page-aligned memory, 56 bytes into a
/// cache line). When slots were 72 bytes, most neighbouring CPUs shared a line: mapped onto
/// such a pair, the two CPUs of the development VM paid 38 to 82 ns more per event, both
/// switching (docs/sensor.md, "One cache line per CPU"). At a stride of three lines the 88
/// bytes in use, starting at most 56 bytes into a line, end within the third, and the rest of
/// the slot is padding.
///
/// `training_since_ns` lies after `current_class` and is written before it: a reader that
/// copies the slot from its start and sees `current_class` training also sees the start of
/// that training segment, never an older one (the program writes both with volatile stores,
/// in that order, and x86 keeps stores in order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// Time of the last context switch on this CPU, on the sensor clock (0 before the first
    /// one was seen).
    pub switched_at_ns: u64,
    /// CLOCK_MONOTONIC time of the last event this CPU sent to userspace, for per-CPU rate
    /// limiting.
    pub last_event_ns: u64,
    /// Class, group and tid of the task now running here.
    pub current_class: u32,
    pub current_group: u32,
    pub current_tid: u32,
    pub _pad: u32,
    /// CLOCK_MONOTONIC time at which the training thread running here was switched in; 0
    /// while no training thread runs here. Userspace adds the time since to the job's run
    /// time, so that a slice in progress counts in the interval it happens in.
    pub training_since_ns: u64,
    /// That thread's `se.sum_exec_runtime` when it was switched in: at its switch-out the
    /// job's `run_ns` grows by the kernel's own count of the time it ran.
    pub training_exec_start_ns: u64,
    /// Time spent running each class, indexed by `CLASS_*`.
    pub class_ns: [u64; NR_CLASSES],
    /// Never written: keeps the next CPU's slot off this one's cache lines.
    pub _line_pad: [u64; 13],
}

/// Runtime knobs, in the single entry of the `settings` array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// A training thread that waited longer than this raises an `EVENT_LONG_WAIT`; 0: never.
    /// Waits of at most [`WAIT_THRESHOLD_UNIT_NS`] are not compared, so a threshold is in
    /// effect a whole number of microseconds (the config's unit).
    pub wait_threshold_ns: u64,
    /// Minimum spacing of events sent by one CPU; closer ones are counted and dropped.
    pub event_min_interval_ns: u64,
}

/// The unit of `Settings::wait_threshold_ns`: 1 µs.
pub const WAIT_THRESHOLD_UNIT_NS: u64 = 1000;

/// A training thread was woken onto a CPU whose current task is inference.
pub const EVENT_ENQUEUED_BEHIND_INFERENCE: u32 = 1;
/// A running training thread was preempted by inference and stays runnable.
pub const EVENT_PREEMPTED_BY_INFERENCE: u32 = 2;
/// A training thread waited in the run queue longer than `wait_threshold_ns`.
pub const EVENT_LONG_WAIT: u32 = 3;

/// What the sensor sends through the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SensorEvent {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the sensor saw it.
    pub ts_ns: u64,
    /// For `EVENT_LONG_WAIT`, the wait; otherwise 0.
    pub wait_ns: u64,
    pub kind: u32,
    /// Training job id.
    pub job: u32,
    pub tid: u32,
    /// The CPU the training thread is queued on.
    pub cpu: u32,
    /// Class and group of the task that holds that CPU.
    pub holder_class: u32,
    pub holder_group: u32,
}

/// Indexes of the per-CPU `counters` array: what the sensor saw and what it dropped.
pub const COUNTER_EVENTS_SENT: u32 = 0;
/// Events not sent because the CPU sent one less than `event_min_interval_ns` ago.
pub const COUNTER_EVENTS_RATE_LIMITED: u32 = 1;
/// Events lost because the ring buffer was full.
pub const COUNTER_EVENTS_RINGBUF_FULL: u32 = 2;
/// Waits discarded because the dequeue timestamp was older than the enqueue one (clocks read
/// on two CPUs).
pub const COUNTER_WAIT_CLOCK_SKEW: u32 = 3;
/// Training threads' children not classified at fork because `thread_state` was full.
pub const COUNTER_THREAD_MAP_FULL: u32 = 4;
/// Training threads whose job id was out of range.
pub const COUNTER_BAD_JOB_ID: u32 = 5;
/// Children classified at fork by inheriting their parent's class.
pub const COUNTER_FORKS_INHERITED: u32 = 6;
/// Events where a thread's `task_cache` entry could not be had (the kernel could not allocate
/// it, or the storage was busy on this CPU): the thread counted as unclassified for that event.
pub const COUNTER_TASK_CACHE_MISSING: u32 = 7;
/// Inference threads' children not classified at fork because `pool_threads` was full.
pub const COUNTER_POOL_THREAD_MAP_FULL: u32 = 8;
/// Switches away from a task that the CPU's state did not name: the kernel ran that task
/// without a `sched_switch` into it (docs/sensor.md, "Switches the kernel does not trace").
pub const COUNTER_SWITCH_FROM_UNKNOWN: u32 = 9;
/// Of those, switches away from a training thread: its slice, which no reading saw in
/// progress, went into its job's `run_ns` whole at its end.
pub const COUNTER_UNTRACED_TRAINING_SLICE: u32 = 10;
pub const NR_COUNTERS: u32 = 11;

/// Human names of the counters, indexed like them.
pub const COUNTER_NAMES: [&str; NR_COUNTERS as usize] = [
    "events_sent",
    "events_rate_limited",
    "events_ringbuf_full",
    "wait_clock_skew",
    "thread_map_full",
    "bad_job_id",
    "forks_inherited",
    "task_cache_missing",
    "pool_thread_map_full",
    "switches_from_unknown_task",
    "untraced_training_slices",
];

const _: () = assert!(core::mem::size_of::<ThreadState>() == 8);
const _: () = assert!(core::mem::size_of::<TaskCache>() == 48);
const _: () = assert!(core::mem::size_of::<JobStats>() == 72 + 16 * NR_BUCKETS);
const _: () = assert!(core::mem::size_of::<CpuState>() == 192);
// The fields in use fit in three cache lines from any 8-byte-aligned start (see `CpuState`).
const _: () = assert!(core::mem::offset_of!(CpuState, _line_pad) <= 192 - 56);
// Written before `current_class`, read after it (see `CpuState`).
const _: () = assert!(
    core::mem::offset_of!(CpuState, training_since_ns)
        > core::mem::offset_of!(CpuState, current_class)
);
const _: () = assert!(core::mem::size_of::<Settings>() == 16);
const _: () = assert!(core::mem::size_of::<SensorEvent>() == 40);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: every type is #[repr(C)], made only of fixed-width integers, with no padding
    // (the size assertions above pin the layout).
    unsafe impl aya::Pod for super::ThreadState {}
    unsafe impl aya::Pod for super::TaskCache {}
    unsafe impl aya::Pod for super::JobStats {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::Settings {}
    unsafe impl aya::Pod for super::SensorEvent {}
}
