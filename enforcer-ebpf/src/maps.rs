//! The sensor's maps. Declared as BTF maps so that bpftool prints their keys and values with
//! field names. Names must match `enforcer_common::maps` (the contract test checks).

use aya_ebpf::{
    btf_maps::{Array, HashMap, PerCpuArray, RingBuf},
    macros::btf_map,
};
use enforcer_common::{
    CpuState, EVENTS_RING_BYTES, JobStats, MAX_CPUS, MAX_JOBS, MAX_POOL_THREADS, MAX_THREADS,
    NR_COUNTERS, SensorEvent, Settings, TaskCache, ThreadState,
};

use crate::task_storage::TaskStorage;

/// Training threads: tid → class and group. Filled by userspace for registered threads,
/// extended at fork, pruned at exit. The programs read it only when a thread's `task_cache`
/// entry is stale.
#[btf_map(name = "thread_state")]
pub static THREAD_STATE: HashMap<u32, ThreadState, { MAX_THREADS as usize }> = HashMap::new();

/// Inference threads, the same way, in a map of their own: a pool that starts tens of
/// thousands of threads fills this one, never training's. Its size is set at load.
#[btf_map(name = "pool_threads")]
pub static POOL_THREADS: HashMap<u32, ThreadState, { MAX_POOL_THREADS as usize }> = HashMap::new();

/// Per task: its class copied from `thread_state`, and its wait in progress.
#[btf_map(name = "task_cache")]
pub static TASK_CACHE: TaskStorage<TaskCache> = TaskStorage::new();

/// Bumped by userspace after it changes `thread_state`: `task_cache` entries copied at an
/// older generation are copied again.
#[btf_map(name = "classify_gen")]
pub static CLASSIFY_GEN: Array<u64, 1> = Array::new();

/// Per-job statistics, per CPU: no atomics on the switch path, summed by userspace.
#[btf_map(name = "job_stats")]
pub static JOB_STATS: PerCpuArray<JobStats, { MAX_JOBS as usize }> = PerCpuArray::new();

/// Indexed by CPU number. A plain array (not per-CPU) so that a wakeup on one CPU can read
/// what another CPU is running; each slot is written only by its own CPU.
#[btf_map(name = "cpu_state")]
pub static CPU_STATE: Array<CpuState, { MAX_CPUS as usize }> = Array::new();

/// Per-CPU diagnostic counters (`COUNTER_*`).
#[btf_map(name = "counters")]
pub static COUNTERS: PerCpuArray<u64, { NR_COUNTERS as usize }> = PerCpuArray::new();

/// Events for userspace.
#[btf_map(name = "events")]
pub static EVENTS: RingBuf<SensorEvent, { EVENTS_RING_BYTES as usize }> = RingBuf::new();

/// Runtime knobs; userspace may rewrite them while the programs run.
#[btf_map(name = "settings")]
pub static SETTINGS: Array<Settings, 1> = Array::new();

/// 1 for each CPU where a contention report would change nothing (written by userspace
/// only): training holds it already, or training holds every core the enforcer may give it.
#[btf_map(name = "reserved_cpus")]
pub static RESERVED_CPUS: Array<u32, { MAX_CPUS as usize }> = Array::new();

/// Whether a contention report for `cpu` would change nothing, so none is sent.
#[inline(always)]
pub fn report_changes_nothing(cpu: u32) -> bool {
    RESERVED_CPUS.get(cpu).is_some_and(|r| *r != 0)
}

#[inline(always)]
pub fn count(index: u32) {
    if let Some(counter) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot of this CPU; tracepoint programs do not nest on one CPU.
        unsafe { *counter += 1 };
    }
}
