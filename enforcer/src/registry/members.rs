//! Walking a group's members through /proc and cgroupfs: its threads, and its processes.

use std::{collections::HashSet, path::Path};

use enforcer_common::proc_tree;

use crate::config::Source;

/// All thread ids of the sources, deduplicated.
pub(crate) fn group_threads(sources: &[Source]) -> HashSet<u32> {
    let mut tids = HashSet::new();
    for source in sources {
        match source {
            Source::Cgroup(dir) => cgroup_threads(dir, &mut tids),
            Source::Process(pid) => process_tree_threads(*pid, &mut tids),
        }
    }
    tids
}

/// Processes (not threads) of the sources: pids listed in a cgroup's `cgroup.procs`, and the
/// configured processes themselves.
pub(crate) fn group_processes(sources: &[Source]) -> Vec<u32> {
    let mut pids = Vec::new();
    for source in sources {
        match source {
            Source::Cgroup(dir) => {
                if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                    pids.extend(
                        text.split_whitespace()
                            .filter_map(|p| p.parse::<u32>().ok()),
                    );
                }
            }
            Source::Process(pid) => pids.push(*pid),
        }
    }
    pids
}

/// Threads of a cgroup: `tasks` on v1, `cgroup.threads` on v2; both list thread ids.
fn cgroup_threads(dir: &Path, out: &mut HashSet<u32>) {
    for file in ["tasks", "cgroup.threads"] {
        if let Ok(text) = std::fs::read_to_string(dir.join(file)) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|t| t.parse::<u32>().ok()),
            );
            return;
        }
    }
}

/// Threads of `pid` and of all its descendants.
fn process_tree_threads(pid: u32, out: &mut HashSet<u32>) {
    out.extend(proc_tree::threads(pid).into_iter().map(|task| task.tid));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_tree_includes_every_thread_of_ours() {
        let handle =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(300)));
        let own_threads = || -> HashSet<u32> {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        };
        // Other tests start and end threads meanwhile: only those alive before and after
        // the walk must be in it.
        let before = own_threads();
        let tids = group_threads(&[Source::Process(std::process::id())]);
        let ours: HashSet<u32> = before.intersection(&own_threads()).copied().collect();
        assert!(ours.len() >= 2);
        assert!(ours.is_subset(&tids), "{ours:?} not in {tids:?}");
        handle.join().unwrap();
    }
}
