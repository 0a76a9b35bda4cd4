//! The kernel's own per-thread run-queue wait, the independent measure the sensor is checked
//! against: the second field of /proc/PID/task/TID/schedstat is `run_delay`, nanoseconds spent
//! runnable but waiting for a CPU (sched_info, kernel/sched/stats.h).

use std::collections::HashMap;

/// run_delay of every thread of `pid` and its descendants, keyed by tid.
pub fn run_delays(pid: u32) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let mut pending = vec![pid];
    while let Some(pid) = pending.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(delay) = std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
            {
                out.insert(tid, delay);
            }
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                pending.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// Total run_delay growth between two readings, over threads present in both.
pub fn growth(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .filter_map(|(tid, a)| Some(a.saturating_sub(*before.get(tid)?)))
        .sum()
}
