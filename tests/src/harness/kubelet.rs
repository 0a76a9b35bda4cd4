//! A cgroup tree laid out as the kubelet lays it out (cgroupfs driver): each level made in
//! every hierarchy, a v1 cpuset given its parent's CPUs and memory nodes as runc gives them,
//! processes moved in as runc moves them. For the Kubernetes tests and the soak, under the
//! tests' `reamer` subtree.

use std::path::{Path, PathBuf};

/// Whether the host runs cgroup v2 alone.
pub fn v2_host() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The directory of group `relative` (under the hierarchies' root) holding `controller`.
pub fn dir(controller: &str, relative: &str) -> PathBuf {
    if v2_host() {
        PathBuf::from(format!("/sys/fs/cgroup/{relative}"))
    } else {
        PathBuf::from(format!("/sys/fs/cgroup/{controller}/{relative}"))
    }
}

/// The hierarchies a kubelet (and runc) makes a group in, in runc's order: cpuset before cpu,
/// freezer after.
pub fn hierarchies() -> &'static [&'static str] {
    if v2_host() {
        &["unified"]
    } else {
        &["cpuset", "cpu", "freezer"]
    }
}

/// Makes group `relative` as the kubelet and runc would: each level in each hierarchy, a v1
/// cpuset given its parent's CPUs and memory nodes (a new one has none), v2 controllers
/// enabled for the children.
pub fn kubelet_mkdir(relative: &str) {
    for controller in hierarchies() {
        let mut path = String::new();
        for part in relative.split('/') {
            let parent = dir(controller, &path);
            path = if path.is_empty() {
                part.to_owned()
            } else {
                format!("{path}/{part}")
            };
            let here = dir(controller, &path);
            if here.exists() {
                continue;
            }
            if v2_host() {
                let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+cpu +cpuset");
            }
            std::fs::create_dir(&here)
                .unwrap_or_else(|e| panic!("creating {}: {e}", here.display()));
            if *controller == "cpuset" {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let value = std::fs::read_to_string(parent.join(file)).unwrap();
                    std::fs::write(here.join(file), value.trim()).unwrap();
                }
            }
        }
    }
}

/// Moves process `pid` into group `relative` in every hierarchy, as runc does.
pub fn kubelet_move(pid: u32, relative: &str) {
    for controller in hierarchies() {
        let procs = dir(controller, relative).join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", procs.display()));
    }
}

/// Removes a test's kubelet tree `dir` (under the tests' `reamer` subtree) and everything under
/// it, then the `reamer` group above it where nothing else is left there.
pub fn remove_kubelet_tree(dir: &Path) {
    remove_tree(dir);
    if let Some(parent) = dir.parent().filter(|p| p.ends_with("reamer")) {
        let _ = std::fs::remove_dir(parent);
    }
}

/// Removes `dir` and everything under it, deepest first (cgroupfs removes only empty groups).
pub fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The weight file the kubelet writes on a pod's group, and what it writes for a BestEffort
/// pod: 2 shares (v1), which v2 writes as weight 1.
pub fn besteffort_weight() -> (&'static str, &'static str) {
    if v2_host() {
        ("cpu.weight", "1")
    } else {
        ("cpu.shares", "2")
    }
}

/// Whether group `relative`'s freezer holds it frozen, or on its way (a task enters the
/// freezer only when it next runs): v1's FROZEN or FREEZING, v2's `cgroup.freeze` 1.
pub fn frozen(relative: &str) -> bool {
    let read = |file: &str| {
        std::fs::read_to_string(dir("freezer", relative).join(file)).unwrap_or_default()
    };
    if v2_host() {
        read("cgroup.freeze").trim() == "1"
    } else {
        matches!(read("freezer.state").trim(), "FROZEN" | "FREEZING")
    }
}

/// Thaws group `dir` (a freezer directory), whatever froze it: a test's cleanup, so that its
/// processes can die (on v1 a frozen task ignores SIGKILL).
pub fn thaw(dir: &Path) {
    let (file, thawed) = if v2_host() {
        ("cgroup.freeze", "0")
    } else {
        ("freezer.state", "THAWED")
    };
    let _ = std::fs::write(dir.join(file), thawed);
}
