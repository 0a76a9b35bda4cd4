//! The co-location benchmark's own cgroups, for the baselines that are not reamer: inference
//! pinned (static partition), low weight (shares), a CFS quota (the polling and PSI
//! controllers). They live at `reamer/<instance>/<name>`, the same place the enforcer keeps
//! its pools, so that in the reamer scenario the enforcer adopts them as its pools' groups
//! (that scenario's workers are started through the enforcer).
//!
//! Plain files, on cgroup v1 (the cpu and cpuset hierarchies) or v2 (one unified tree with the
//! cpu and cpuset controllers enabled down to the group). Only groups under `reamer/` are made
//! or written.

use std::{
    io,
    path::{Path, PathBuf},
};

const ROOT: &str = "/sys/fs/cgroup";

/// cgroup v1's default `cpu.shares`.
pub const DEFAULT_SHARES: u64 = 1024;

/// The cgroup2 tree, wherever this host mounts it: the root on a v2 host, `unified` on a
/// hybrid one.
pub fn unified_root() -> Option<PathBuf> {
    [ROOT.to_owned(), format!("{ROOT}/unified")]
        .into_iter()
        .map(PathBuf::from)
        .find(|dir| {
            dir.join("cgroup.procs").exists() && dir.join("cgroup.subtree_control").exists()
        })
}

/// Whether this host has cgroup v2 alone (one tree at the root, no v1 hierarchies).
pub fn is_v2_host() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {value:?} to {}: {e}", path.display()),
        )
    })
}

/// The CPUs online, as the kernel lists them ("0-1").
pub fn online_cpus() -> io::Result<String> {
    Ok(std::fs::read_to_string("/sys/devices/system/cpu/online")?
        .trim()
        .to_owned())
}

/// One group of the benchmark.
#[derive(Debug, Clone)]
pub struct Group {
    /// The directory holding the cpu controller's files.
    cpu: PathBuf,
    /// The directory holding the cpuset controller's files (the same as `cpu` on v2).
    cpuset: PathBuf,
    v2: bool,
}

impl Group {
    /// Makes `reamer/<instance>/<name>` where it is missing (it may have been removed by an
    /// enforcer that found it empty at shutdown); leaves an existing one as it is.
    pub fn ensure(instance: &str, name: &str) -> io::Result<Self> {
        let relative = format!("reamer/{instance}/{name}");
        if is_v2_host() {
            let mut dir = PathBuf::from(ROOT);
            for part in relative.split('/') {
                // A child gets the cpu and cpuset controllers only if its parent hands them down.
                write(&dir.join("cgroup.subtree_control"), "+cpu +cpuset")?;
                dir.push(part);
                std::fs::create_dir_all(&dir)?;
            }
            return Ok(Self {
                cpu: dir.clone(),
                cpuset: dir,
                v2: true,
            });
        }
        let cpu = Path::new(ROOT).join("cpu").join(&relative);
        std::fs::create_dir_all(&cpu)?;
        let mut cpuset = Path::new(ROOT).join("cpuset");
        for part in relative.split('/') {
            let parent = cpuset.clone();
            cpuset.push(part);
            std::fs::create_dir_all(&cpuset)?;
            // A v1 cpuset starts empty and takes no process until it has CPUs and memory nodes.
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if std::fs::read_to_string(cpuset.join(file))?
                    .trim()
                    .is_empty()
                {
                    write(
                        &cpuset.join(file),
                        std::fs::read_to_string(parent.join(file))?.trim(),
                    )?;
                }
            }
        }
        Ok(Self {
            cpu,
            cpuset,
            v2: false,
        })
    }

    /// Moves process `pid` (every thread of it) into the group.
    pub fn add_process(&self, pid: u32) -> io::Result<()> {
        write(&self.cpu.join("cgroup.procs"), &pid.to_string())?;
        if !self.v2 {
            write(&self.cpuset.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Restricts the group to `cpus` (a kernel CPU list, "1" or "0-3").
    pub fn set_cpus(&self, cpus: &str) -> io::Result<()> {
        write(&self.cpuset.join("cpuset.cpus"), cpus)
    }

    /// The group's weight, as v1 `cpu.shares` (2 to 262144); converted to v2's `cpu.weight`
    /// the way runc does.
    pub fn set_shares(&self, shares: u64) -> io::Result<()> {
        let shares = shares.clamp(2, 262_144);
        if self.v2 {
            write(
                &self.cpu.join("cpu.weight"),
                &(1 + (shares - 2) * 9999 / 262_142).to_string(),
            )
        } else {
            write(&self.cpu.join("cpu.shares"), &shares.to_string())
        }
    }

    /// A CFS bandwidth limit of `cpus` CPUs over a 100 ms period; None removes it.
    pub fn set_quota(&self, cpus: Option<f64>) -> io::Result<()> {
        const PERIOD_US: i64 = 100_000;
        // The kernel refuses a quota under 1 ms.
        let quota = cpus.map(|c| ((c * PERIOD_US as f64) as i64).max(1000));
        if self.v2 {
            let max = quota.map_or("max".to_owned(), |q| q.to_string());
            write(&self.cpu.join("cpu.max"), &format!("{max} {PERIOD_US}"))
        } else {
            write(&self.cpu.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(
                &self.cpu.join("cpu.cfs_quota_us"),
                &quota.unwrap_or(-1).to_string(),
            )
        }
    }

    /// `cpu.idle` (kernel 5.15 on, v1 and v2): the group's threads are scheduled as
    /// SCHED_IDLE against the groups beside it, what the kernel gives background work without
    /// any agent.
    pub fn set_idle(&self, idle: bool) -> io::Result<()> {
        write(&self.cpu.join("cpu.idle"), if idle { "1" } else { "0" })
    }

    /// No control: every CPU, the default weight, no quota, the normal scheduling class.
    pub fn reset(&self) -> io::Result<()> {
        // cpu.idle first: the kernel refuses a weight for an idle group (EINVAL).
        self.set_idle(false)?;
        self.set_cpus(&online_cpus()?)?;
        self.set_shares(DEFAULT_SHARES)?;
        self.set_quota(None)
    }
}

/// A group `reamer/<instance>/<name>` with the freezer: v1's freezer hierarchy, or v2's
/// `cgroup.freeze`. What the enforcer's pause does to a pool, for tests of what a frozen
/// process goes through.
pub struct FreezerGroup {
    dir: PathBuf,
    v2: bool,
}

impl FreezerGroup {
    pub fn ensure(instance: &str, name: &str) -> io::Result<Self> {
        let relative = format!("reamer/{instance}/{name}");
        let (dir, v2) = match unified_root().filter(|_| is_v2_host()) {
            Some(root) => (root.join(&relative), true),
            None => (Path::new(ROOT).join("freezer").join(&relative), false),
        };
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir, v2 })
    }

    pub fn add_process(&self, pid: u32) -> io::Result<()> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    /// Freezes (true) or thaws the group, and waits until the kernel says it is done.
    pub fn set_frozen(&self, frozen: bool) -> io::Result<()> {
        if self.v2 {
            write(
                &self.dir.join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
            )?;
        } else {
            write(
                &self.dir.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            )?;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.is_frozen()? != frozen {
            if std::time::Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the freezer did not settle",
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(())
    }

    fn is_frozen(&self) -> io::Result<bool> {
        if self.v2 {
            let events = std::fs::read_to_string(self.dir.join("cgroup.events"))?;
            return Ok(events.lines().any(|l| l == "frozen 1"));
        }
        let state = std::fs::read_to_string(self.dir.join("freezer.state"))?;
        Ok(state.trim() == "FROZEN")
    }
}

/// A cgroup2 group `reamer/<instance>/<name>` with no controller of its own: a process in it
/// is scheduled exactly as before, and the group's `cpu.pressure` measures its CPU stalls
/// (PSI). Returns the group's directory.
pub fn unified_group(instance: &str, name: &str) -> io::Result<PathBuf> {
    let root = unified_root()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no cgroup2 tree is mounted"))?;
    let dir = root.join(format!("reamer/{instance}/{name}"));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Removes the benchmark's groups (their processes gone): `names` under `reamer/<instance>`,
/// then the instance and `reamer` where empty, in every hierarchy.
pub fn remove_groups(instance: &str, names: &[&str]) {
    let mut roots: Vec<PathBuf> = ["cpu", "cpuset", "freezer"]
        .iter()
        .map(|c| Path::new(ROOT).join(c))
        .collect();
    roots.extend(unified_root());
    for root in roots {
        for name in names {
            let _ = std::fs::remove_dir(root.join(format!("reamer/{instance}/{name}")));
            // The enforcer's cpu group for an online pool on cgroup v1.
            let _ = std::fs::remove_dir(root.join(format!("reamer-online.{instance}.{name}")));
        }
        let _ = std::fs::remove_dir(root.join(format!("reamer/{instance}")));
        let _ = std::fs::remove_dir(root.join("reamer"));
    }
}
