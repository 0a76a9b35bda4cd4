//! Reading `task_struct` fields at offsets userspace resolved from the running kernel's BTF.
//!
//! The programs are tp_btf, so the task pointers they get are typed (PTR_TO_BTF_ID): the
//! verifier checks each load against the kernel's BTF and turns it into a fault-safe direct
//! load. The offsets live in .rodata, which the loader freezes; the verifier reads them as
//! constants. Measured here: this path costs about half of a tracepoint program that copies
//! its record with bpf_probe_read_kernel (docs/benchmarks.md).

use aya_ebpf::helpers::bpf_ktime_get_ns;

#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_CPU_OFFSET: u32 = 0;
/// `task_struct.se.cfs_rq`, `cfs_rq.rq` and `rq.clock`: the way from a task to the clock of
/// its run queue. RQ_CLOCK_READABLE is 0 where the kernel lacks one of them (no
/// CONFIG_FAIR_GROUP_SCHED): then the programs read `bpf_ktime_get_ns` instead.
#[unsafe(no_mangle)]
static TASK_CFS_RQ_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static CFS_RQ_RQ_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static RQ_CLOCK_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static RQ_CLOCK_READABLE: u32 = 0;
/// `task_struct.sched_info.last_queued` and `.run_delay`, read when WAITS_FROM_SCHED_INFO is
/// 1 (CONFIG_SCHED_INFO, and the run queue's clock, which they are kept in).
#[unsafe(no_mangle)]
static TASK_LAST_QUEUED_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_RUN_DELAY_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static WAITS_FROM_SCHED_INFO: u32 = 0;
/// `task_struct.se.sum_exec_runtime`, which the scheduler brings up to date for a task it
/// switches out before the sched_switch tracepoint (`put_prev_task`, then `update_curr`).
#[unsafe(no_mangle)]
static TASK_SUM_EXEC_OFFSET: u32 = 0;
/// `task_struct.se.prev_sum_exec_runtime`, which `set_next_entity` sets to
/// `sum_exec_runtime` when the scheduler picks the task to run.
#[unsafe(no_mangle)]
static TASK_PREV_SUM_EXEC_OFFSET: u32 = 0;

/// Whether run-queue waits are read from the scheduler's `sched_info` instead of stamped by
/// the programs. A constant to the verifier (frozen .rodata): the other branch is dead code.
#[inline(always)]
pub fn waits_from_sched_info() -> bool {
    global(&WAITS_FROM_SCHED_INFO) != 0
}

#[inline(always)]
fn global(value: &'static u32) -> usize {
    // SAFETY: a plain read of a static the loader patched before the program was verified;
    // volatile so that LLVM does not fold the build-time placeholder.
    unsafe { core::ptr::read_volatile(value) as usize }
}

/// Loads a `T` at `offset` bytes into a BTF-typed kernel object.
///
/// # Safety
/// `base` must be a BTF-typed pointer and `offset` a field of type `T` in its type.
#[inline(always)]
unsafe fn read_at<T>(base: *const u8, offset: usize) -> T {
    // SAFETY: per the contract above; volatile so that LLVM keeps exactly this load.
    unsafe { core::ptr::read_volatile(base.add(offset).cast::<T>()) }
}

/// A `struct task_struct *` handed to the program by the tracepoint.
#[derive(Clone, Copy)]
pub struct Task(*const u8);

impl Task {
    #[inline(always)]
    pub fn new(pointer: *const u8) -> Self {
        Self(pointer)
    }

    #[inline(always)]
    fn read_u32(self, offset: usize) -> u32 {
        // SAFETY: a BTF-typed pointer from the tracepoint; the verifier checks the field.
        unsafe { read_at::<u32>(self.0, offset) }
    }

    /// The pointer itself, for helpers that take a task.
    #[inline(always)]
    pub fn pointer(self) -> *const u8 {
        self.0
    }

    /// The thread id.
    #[inline(always)]
    pub fn tid(self) -> u32 {
        self.read_u32(global(&TASK_PID_OFFSET))
    }

    /// The clock of the run queue that holds the task, in nanoseconds: `rq->clock`, which the
    /// scheduler brought up to date when it enqueued the task (wakeup) or began this
    /// `__schedule` (switch), so reading it costs three loads instead of a clock read (on this
    /// VM a clock read costs about as much as a no-op program: `enforcer calibrate`). It is
    /// the clock of the kernel's own
    /// `sched_info` run delay, not CLOCK_MONOTONIC: events carry `bpf_ktime_get_ns` instead.
    /// 0 if a pointer on the way is NULL (the loads are fault-safe and then read 0).
    #[inline(always)]
    pub fn rq_clock(self) -> u64 {
        if global(&RQ_CLOCK_READABLE) == 0 {
            // SAFETY: helper without preconditions.
            return unsafe { bpf_ktime_get_ns() };
        }
        // SAFETY: each pointer is BTF-typed (the task's from the tracepoint, the others
        // loaded from BTF-typed fields); the verifier checks every load against the
        // kernel's BTF and makes it fault-safe.
        unsafe {
            let cfs_rq = read_at::<*const u8>(self.0, global(&TASK_CFS_RQ_OFFSET));
            let rq = read_at::<*const u8>(cfs_rq, global(&CFS_RQ_RQ_OFFSET));
            read_at::<u64>(rq, global(&RQ_CLOCK_OFFSET))
        }
    }

    /// `sched_info.last_queued`: the run queue's clock when the task was queued on the run
    /// queue that holds it, 0 while it is not queued. The scheduler keeps it (`sched_info_enqueue`,
    /// and `sched_info_depart` for a task switched out still runnable) and clears it when the
    /// task arrives on a CPU, after the sched_switch tracepoint.
    #[inline(always)]
    pub fn last_queued(self) -> u64 {
        // SAFETY: as in `read_u32`.
        unsafe { read_at::<u64>(self.0, global(&TASK_LAST_QUEUED_OFFSET)) }
    }

    /// `sched_info.run_delay`: the task's total run-queue wait so far, to which the scheduler
    /// adds each completed piece of a wait (at arrival, or at a migration while queued).
    #[inline(always)]
    pub fn run_delay(self) -> u64 {
        // SAFETY: as in `read_u32`.
        unsafe { read_at::<u64>(self.0, global(&TASK_RUN_DELAY_OFFSET)) }
    }

    /// `se.sum_exec_runtime`: the time the task has run in all, as the kernel counts it
    /// (on the run queue's task clock, which leaves out time the hypervisor stole where the
    /// kernel accounts steal; `/proc/<tid>/schedstat`'s first field).
    #[inline(always)]
    pub fn sum_exec_runtime(self) -> u64 {
        // SAFETY: as in `read_u32`.
        unsafe { read_at::<u64>(self.0, global(&TASK_SUM_EXEC_OFFSET)) }
    }

    /// `se.prev_sum_exec_runtime`: `sum_exec_runtime` when the scheduler last picked the task
    /// to run, so that at its switch-out the difference is the slice it ran, whether or not
    /// its switch-in was traced.
    #[inline(always)]
    pub fn prev_sum_exec_runtime(self) -> u64 {
        // SAFETY: as in `read_u32`.
        unsafe { read_at::<u64>(self.0, global(&TASK_PREV_SUM_EXEC_OFFSET)) }
    }

    /// The CPU whose run queue holds the task.
    #[inline(always)]
    pub fn cpu(self) -> u32 {
        self.read_u32(global(&TASK_CPU_OFFSET))
    }
}
