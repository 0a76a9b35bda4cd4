//! A process tree's threads, through /proc: the enforcer classifies a launched process's threads
//! and descendants by it, and the tests read the kernel's own per-thread figures with it.

use std::{collections::HashSet, path::PathBuf};

/// One thread of a process tree, and its `/proc/<pid>/task/<tid>` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub tid: u32,
    pub dir: PathBuf,
}

/// Every thread of `pid` and of all its descendants (through each thread's `children`), each
/// once; a process that exits meanwhile is passed over. (Tested through the registry's
/// `group_threads`, which the enforcer classifies launched processes by.)
pub fn threads(pid: u32) -> Vec<Task> {
    let mut found = Vec::new();
    let mut pending = vec![pid];
    let mut seen_processes = HashSet::new();
    while let Some(pid) = pending.pop() {
        if !seen_processes.insert(pid) {
            continue;
        }
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
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                pending.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
            found.push(Task {
                tid,
                dir: task.path(),
            });
        }
    }
    found
}
