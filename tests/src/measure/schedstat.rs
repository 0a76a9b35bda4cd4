//! The kernel's own per-thread run-queue wait, the independent measure the sensor is checked
//! against: the second field of /proc/PID/task/TID/schedstat is `run_delay`, nanoseconds spent
//! runnable but waiting for a CPU (sched_info, kernel/sched/stats.h).

use std::collections::HashMap;

use enforcer_common::proc_tree;

/// run_delay of every thread of `pid` and its descendants, keyed by tid.
pub fn run_delays(pid: u32) -> HashMap<u32, u64> {
    proc_tree::threads(pid)
        .into_iter()
        .filter_map(|task| {
            let schedstat = std::fs::read_to_string(task.dir.join("schedstat")).ok()?;
            Some((task.tid, schedstat.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect()
}

/// Total run_delay growth between two readings, over threads present in both.
pub fn growth(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .filter_map(|(tid, a)| Some(a.saturating_sub(*before.get(tid)?)))
        .sum()
}
