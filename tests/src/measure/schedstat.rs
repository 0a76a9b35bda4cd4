//! The kernel's own per-thread scheduling figures, the independent measure the sensor is
//! checked against: /proc/PID/task/TID/schedstat holds `sum_exec_runtime` (nanoseconds the
//! thread ran), then `run_delay` (nanoseconds spent runnable but waiting for a CPU;
//! sched_info, kernel/sched/stats.h), then the number of slices.

use std::collections::HashMap;

use enforcer_common::proc_tree;

/// The schedstat field at `index` of every thread of `pid` and its descendants, by tid.
fn field_of_threads(pid: u32, index: usize) -> HashMap<u32, u64> {
    proc_tree::threads(pid)
        .into_iter()
        .filter_map(|task| {
            let schedstat = std::fs::read_to_string(task.dir.join("schedstat")).ok()?;
            Some((
                task.tid,
                schedstat.split_whitespace().nth(index)?.parse().ok()?,
            ))
        })
        .collect()
}

/// `sum_exec_runtime` of every thread of `pid` and its descendants, keyed by tid.
pub fn run_times(pid: u32) -> HashMap<u32, u64> {
    field_of_threads(pid, 0)
}

/// `run_delay` of every thread of `pid` and its descendants, keyed by tid.
pub fn run_delays(pid: u32) -> HashMap<u32, u64> {
    field_of_threads(pid, 1)
}

/// Total growth between two readings, over threads present in both.
pub fn growth(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .filter_map(|(tid, a)| Some(a.saturating_sub(*before.get(tid)?)))
        .sum()
}
