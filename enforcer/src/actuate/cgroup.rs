//! One inference pool's cgroups, on cgroup v1 (the cpu, cpuset and freezer hierarchies) or v2,
//! through cgroups-rs. Only groups the enforcer created are touched, and only processes it was
//! asked to place.
//!
//! - Offline pools live at `reamer/<instance>/<pool>` with `cpu.idle = 1` (SCHED_IDLE for the
//!   whole group, kernel 5.15+; written directly, cgroups-rs has no setter). The kernel ranks
//!   an idle group only against its siblings, so the top `reamer` group is marked idle too
//!   (`set_tree_idle`): offline pools then rank below everything else on the machine
//!   (docs/experiments/2026-11-22-idle-top-group.md).
//! - Online pools stay in the normal class at a weight below training's
//!   (`[[pool]] cpu_weight`), in a top-level group of their own,
//!   `reamer-online.<instance>.<pool>`: only a top-level group's weight counts against
//!   training, and under the idle `reamer` group it would be idle. On v1 that is the pool's
//!   cpu group (its cpuset and freezer stay under `reamer/<instance>/`); on v2, where one tree
//!   holds every controller, the pool's only group. A cpu group rather than the threads' nice
//!   value, which ranks a thread only within its own group (with autogroup, its session)
//!   (docs/experiments/2026-11-22-online-pool-weight.md). Instance names hold no '.', so the
//!   name is unambiguous.
//! - `cpuset.cpus` is the fast path's one write. It returns only once the kernel has moved
//!   every pool thread off a removed CPU (through that CPU's stopper thread where one runs
//!   there), so it costs more than the write itself; the file is held open from creation to
//!   spare the path walk (docs/experiments/2026-11-22-fast-path-latency.md). CFS quota writes
//!   take about a hundred times longer and stay off the fast path.

use std::{
    collections::BTreeSet,
    fs::File,
    io::Write as _,
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    sync::Arc,
};

use cgroups_rs::{
    CgroupPid,
    fs::{Cgroup, Controller as _, cpu::CpuController, cpuset::CpuSetController, hierarchies},
};
use enforcer_common::cpu_list;

use super::{cgroup_error::CgroupError, freezer::Freezer};
use crate::{config::PoolKind, host::paths};

/// Controllers an offline pool needs; an online pool on v1 joins all but `cpu` (above).
const CONTROLLERS: [&str; 3] = ["cpu", "cpuset", "freezer"];
/// The top of every instance's tree, idle in the cpu hierarchy while a daemon runs.
const TREE: &str = "reamer";
/// The prefix of online pools' top-level groups beside the idle `TREE` (module comment): on
/// cgroup v1 their cpu group, on v2 their only group.
const ONLINE_CPU_GROUP_PREFIX: &str = "reamer-online";
/// The scale of `cpu_weight`: cgroup v2's `cpu.weight`, where a default process has 100.
pub const DEFAULT_CPU_WEIGHT: u32 = 100;
/// cgroup v1's `cpu.shares` of a default process, the weight `DEFAULT_CPU_WEIGHT` stands for.
const DEFAULT_CPU_SHARES: u64 = 1024;

/// How a pool ranks for the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuClass {
    /// SCHED_IDLE for the whole group: offline pools.
    Idle,
    /// The normal class at this weight, on cgroup v2's scale (`DEFAULT_CPU_WEIGHT` is a
    /// default process's): online pools.
    Weight(u32),
}

impl From<&PoolKind> for CpuClass {
    /// Offline pools idle, online pools at their configured weight.
    fn from(kind: &PoolKind) -> Self {
        match kind {
            PoolKind::Online(online) => Self::Weight(online.cpu_weight),
            PoolKind::Offline => Self::Idle,
        }
    }
}

/// cgroup v1's `cpu.shares` for a weight on v2's scale, within the kernel's 2 to 262144.
fn shares_for_weight(weight: u32) -> u64 {
    (u64::from(weight) * DEFAULT_CPU_SHARES / u64::from(DEFAULT_CPU_WEIGHT)).clamp(2, 262_144)
}

/// A weight on v2's scale for cgroup v1's `cpu.shares`: the inverse of `shares_for_weight`,
/// rounded, so that every weight it wrote reads back as itself (the write floors
/// `weight × 10.24`, which loses less than a tenth of a weight).
fn weight_for_shares(shares: u64) -> u32 {
    let weight =
        (shares * u64::from(DEFAULT_CPU_WEIGHT) + DEFAULT_CPU_SHARES / 2) / DEFAULT_CPU_SHARES;
    u32::try_from(weight).unwrap_or(u32::MAX)
}

/// Where a pool's group lives, relative to each hierarchy's root: `reamer/<instance>/<pool>`,
/// but an online pool on cgroup v2 has its one group at the top level, where its weight
/// counts against training (module comment).
fn pool_path(instance: &str, pool: &str, class: CpuClass, v2: bool) -> String {
    match class {
        CpuClass::Weight(_) if v2 => format!("{ONLINE_CPU_GROUP_PREFIX}.{instance}.{pool}"),
        _ => format!("{TREE}/{instance}/{pool}"),
    }
}

/// One pool's cgroup.
pub struct PoolCgroup {
    /// `pool_path`: `reamer/<instance>/<pool>`, or an online pool's top-level group on v2 (on
    /// v1 an online pool has only its cpu group at `reamer-online.<instance>.<pool>`).
    pub path: String,
    cgroup: Cgroup,
    /// cgroup v1, online pools: the pool's cpu group, `reamer-online.<instance>.<pool>`.
    online_cpu_group: Option<Cgroup>,
    /// `cpuset.cpus`, held open from creation: the fast path's write then skips walking the
    /// path and opening and closing a cgroup file, which together cost as much as the write
    /// itself on this VM (kernfs lookups and allocations on a cold cache).
    cpus_file: Option<File>,
    /// An online pool adopted with its processes: the weight a previous daemon left on its
    /// group, at or below the configured one (steered down, `online_weight`), kept rather
    /// than overwritten, for the enforcer to resume steering from.
    adopted_weight: Option<u32>,
    /// The group's freezer, shared with the GPU duty cycle (`freezer`); None without one.
    freezer: Option<Arc<Freezer>>,
}

/// Where a pool's cgroup lists its CPUs and processes: read by `status` without holding
/// the handle (and the daemon's lock around it).
#[derive(Debug, Clone)]
pub struct PoolFiles {
    /// The directory of `cpuset.cpus`.
    cpuset_dir: Option<PathBuf>,
    /// Every hierarchy's directory of the pool's group (`cgroup.procs` in each; on v1 a process
    /// moved in by hand may be in one and not the others).
    procs_dirs: Vec<PathBuf>,
}

impl PoolFiles {
    /// The CPUs the pool may run on now, as the kernel lists them.
    pub fn cpus(&self) -> Option<String> {
        let dir = self.cpuset_dir.as_ref()?;
        std::fs::read_to_string(dir.join("cpuset.cpus"))
            .ok()
            .map(|s| s.trim().to_owned())
    }

    /// Processes in the pool, in any hierarchy, sorted.
    pub fn processes(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .procs_dirs
            .iter()
            .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

impl PoolCgroup {
    /// Creates the pool's cgroup, or adopts it if a previous daemon left it with its processes.
    /// An adopted pool left frozen (a daemon that died in the middle of a GPU duty cycle, or
    /// with the offline pools paused) is thawed: no daemon holds it frozen any more, and the
    /// new one pauses it again at its first demand sample if training is still short.
    pub fn create_or_adopt(
        instance: &str,
        pool_name: &str,
        class: CpuClass,
    ) -> Result<Self, CgroupError> {
        let hierarchy = hierarchies::auto();
        let v2 = hierarchy.v2();
        let idle = class == CpuClass::Idle;
        let path = pool_path(instance, pool_name, class, v2);
        let path_under_tree = format!("{TREE}/{instance}/{pool_name}");
        let controllers: Vec<String> = CONTROLLERS
            .iter()
            .filter(|&&c| idle || v2 || c != "cpu")
            .map(|c| (*c).to_owned())
            .collect();
        // cgroup v2 freezes through every group's own `cgroup.freeze`: the freezer is no
        // controller there, cgroups-rs refuses to enable one by that name ("specified
        // controller is not in the list of supported controllers", seen on a v2-only host),
        // and a handle loaded with it gets the freezer all the same.
        let to_enable = controllers
            .iter()
            .filter(|&c| !(v2 && c == "freezer"))
            .cloned()
            .collect();
        let created = Cgroup::new_with_specified_controllers(hierarchy, &path, Some(to_enable))
            .map_err(|e| CgroupError::op(&path, "creating", e))?;
        let cgroup = if v2 {
            Cgroup::load_with_specified_controllers(hierarchies::auto(), &path, controllers)
        } else {
            created
        };
        let online_cpu_group = if idle || v2 {
            None
        } else {
            let cpu_path = format!("{ONLINE_CPU_GROUP_PREFIX}.{instance}.{pool_name}");
            let group = Cgroup::new_with_specified_controllers(
                hierarchies::auto(),
                &cpu_path,
                Some(vec!["cpu".to_owned()]),
            )
            .map_err(|e| CgroupError::op(&cpu_path, "creating", e))?;
            // No cpu hierarchy mounted: nothing to weigh, as before.
            let has_cpu = group.controller_of::<CpuController>().is_some();
            has_cpu.then_some(group)
        };
        let cpus_file = cgroup
            .controller_of::<CpuSetController>()
            .and_then(|cpuset| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(cpuset.path().join("cpuset.cpus"))
                    .ok()
            });
        let mut pool = Self {
            path,
            cgroup,
            online_cpu_group,
            cpus_file,
            adopted_weight: None,
            freezer: None,
        };
        if pool.cpu_dir().is_some() {
            pool.set_idle(idle)?;
        }
        if let CpuClass::Weight(weight) = class {
            // Only a group that still holds processes was a previous daemon's: a fresh one
            // has the kernel's default weight, which says nothing about steering.
            pool.adopted_weight = (!pool.processes().is_empty())
                .then(|| pool.weight())
                .flatten()
                .filter(|left| *left <= weight);
            if pool.adopted_weight.is_none() {
                pool.set_weight(weight)?;
            }
        }
        for pid in pool.processes() {
            pool.place_in_cpu_group(pid)?;
        }
        if pool.online_cpu_group.is_some()
            && let Some(root) = tree_cpu_dir().as_deref().and_then(std::path::Path::parent)
        {
            // An older daemon made a v1 online pool's cpu group under the idle tree; its
            // processes have just left it, so the empty group goes (rmdir refuses otherwise).
            let _ = std::fs::remove_dir(root.join(&pool.path));
        }
        if v2 && !idle {
            pool.take_over_group_under_tree(&path_under_tree)?;
        }
        // An adopted pool left frozen (a daemon that died in the middle of a GPU duty cycle,
        // or with the offline pools paused) is thawed here.
        let freezer_handle = Cgroup::load(hierarchies::auto(), &pool.path);
        pool.freezer = Freezer::adopt(pool_name, freezer_handle)?.map(Arc::new);
        Ok(pool)
    }

    /// cgroup v2, online pools: an older daemon kept the pool at `reamer/<instance>/<pool>`,
    /// under the idle tree. Its processes move to the pool's group, and the emptied one goes.
    fn take_over_group_under_tree(&self, old_path: &str) -> Result<(), CgroupError> {
        let old = Cgroup::load(hierarchies::auto(), old_path);
        if !old.exists() {
            return Ok(());
        }
        let processes = old.procs();
        for process in &processes {
            self.add_process(process.pid as u32)?;
        }
        if !processes.is_empty() {
            tracing::info!(
                pool = self.path,
                old_path,
                processes = processes.len(),
                "moved the pool's processes out of an older daemon's group under the idle tree"
            );
        }
        old.delete()
            .map_err(|e| CgroupError::op(old_path, "removing the emptied group", e))
    }

    /// The pool's freezer, for whoever stops the pool (`freezer`).
    pub fn freezer(&self) -> Option<&Arc<Freezer>> {
        self.freezer.as_ref()
    }

    /// Where the pool's CPUs and processes are listed, for reading without this handle.
    pub fn files(&self) -> PoolFiles {
        PoolFiles {
            cpuset_dir: self.member_dir(),
            procs_dirs: self
                .cgroup
                .subsystems()
                .iter()
                .map(|s| s.to_controller().path().to_owned())
                .collect(),
        }
    }

    /// The directory whose thread list (`tasks` on v1, `cgroup.threads` on v2) names every
    /// thread in the pool.
    pub fn member_dir(&self) -> Option<PathBuf> {
        let cpuset: &CpuSetController = self.cgroup.controller_of()?;
        Some(cpuset.path().to_owned())
    }

    fn error(
        &self,
        what: impl Into<String>,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> CgroupError {
        CgroupError::op(&self.path, what, e)
    }

    fn no_controller(&self, what: &'static str, controller: &'static str) -> CgroupError {
        CgroupError::NoController {
            path: self.path.clone(),
            what,
            controller,
        }
    }

    fn cpu_dir(&self) -> Option<PathBuf> {
        let cpu: &CpuController = self.cgroup.controller_of()?;
        Some(cpu.path().to_owned())
    }

    /// SCHED_IDLE for the whole group (offline pools): the kernel preempts it for any sibling
    /// at wakeup, online pools included; against training it is the idle `reamer` group
    /// (`set_tree_idle`) that ranks it below.
    pub fn set_idle(&self, idle: bool) -> Result<(), CgroupError> {
        let dir = self
            .cpu_dir()
            .ok_or_else(|| self.no_controller("writing cpu.idle", "cpu"))?;
        std::fs::write(dir.join("cpu.idle"), if idle { "1" } else { "0" })
            .map_err(|e| self.error("writing cpu.idle (kernel 5.15+)", e))
    }

    /// The weight of the pool's cpu group, on v2's scale (v1: as `cpu.shares`). Where the pool
    /// has no cpu group (no cpu hierarchy), there is nothing to weigh.
    pub fn set_weight(&self, weight: u32) -> Result<(), CgroupError> {
        let group = self.online_cpu_group.as_ref().unwrap_or(&self.cgroup);
        let Some(cpu) = group.controller_of::<CpuController>() else {
            return Ok(());
        };
        let value = if group.v2() {
            u64::from(weight)
        } else {
            shares_for_weight(weight)
        };
        cpu.set_shares(value)
            .map_err(|e| self.error(format!("setting the cpu weight to {weight}"), e))
    }

    /// The weight of the pool's cpu group now, on v2's scale; None where it has no cpu group
    /// or the file cannot be read.
    fn weight(&self) -> Option<u32> {
        let group = self.online_cpu_group.as_ref().unwrap_or(&self.cgroup);
        let cpu: &CpuController = group.controller_of()?;
        let file = if group.v2() {
            "cpu.weight"
        } else {
            "cpu.shares"
        };
        let value: u64 = std::fs::read_to_string(cpu.path().join(file))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(if group.v2() {
            u32::try_from(value).ok()?
        } else {
            weight_for_shares(value)
        })
    }

    /// The weight a previous daemon left on this adopted online pool (`adopted_weight`).
    pub fn adopted_weight(&self) -> Option<u32> {
        self.adopted_weight
    }

    /// Restricts the pool to `cpus`: one write(2) on the held `cpuset.cpus`. Where that fails
    /// (the cgroup was removed underneath: ENODEV) the write goes by path, as a cgroup made
    /// again at the same path would be found there, and its error names what is wrong.
    pub fn set_cpus(&self, cpus: &BTreeSet<u32>) -> Result<(), CgroupError> {
        let list = cpu_list::format(cpus);
        if let Some(mut file) = self.cpus_file.as_ref()
            && file.write_all(list.as_bytes()).is_ok()
        {
            return Ok(());
        }
        let cpuset: &CpuSetController = self
            .cgroup
            .controller_of()
            .ok_or_else(|| self.no_controller("writing cpuset.cpus", "cpuset"))?;
        cpuset
            .set_cpus(&list)
            .map_err(|e| self.error("writing cpuset.cpus", e))
    }

    /// Moves process `pid` (all its threads) into the pool.
    pub fn add_process(&self, pid: u32) -> Result<(), CgroupError> {
        self.cgroup
            .add_task_by_tgid(CgroupPid::from(u64::from(pid)))
            .map_err(|e| self.error(format!("moving pid {pid} in"), e))?;
        self.place_in_cpu_group(pid)
    }

    /// cgroup v1, online pools: the process joins the pool's cpu group, out of the idle
    /// `reamer` tree and wherever else it was (its weight is the pool's). Offline pools and v2
    /// have the cpu controller in the pool's own group, which `add_process` joined; without a
    /// cpu hierarchy there is no idle tree to leave.
    fn place_in_cpu_group(&self, pid: u32) -> Result<(), CgroupError> {
        let Some(group) = &self.online_cpu_group else {
            return Ok(());
        };
        group
            .add_task_by_tgid(CgroupPid::from(u64::from(pid)))
            .map_err(|e| self.error(format!("moving pid {pid} into its cpu group"), e))
    }

    /// Processes in the pool.
    pub fn processes(&self) -> Vec<u32> {
        self.files().processes()
    }

    /// Leaves every process runnable: thawed, all CPUs, normal weight. Used at shutdown, so
    /// that no inference is left frozen or starved without the daemon. Thawed first, and every
    /// step is tried whatever the others did: returns what failed.
    pub fn release(&self, all_cpus: &BTreeSet<u32>) -> Vec<CgroupError> {
        let mut steps = Vec::new();
        if let Some(freezer) = &self.freezer {
            steps.push(freezer.release());
        }
        steps.push(self.set_cpus(all_cpus));
        if self.cpu_dir().is_some() {
            steps.push(self.set_idle(false));
        }
        // After cpu.idle 0: the kernel refuses a weight for an idle group (EINVAL).
        steps.push(self.set_weight(DEFAULT_CPU_WEIGHT));
        steps.into_iter().filter_map(Result::err).collect()
    }

    /// Removes the cgroup if no process is left in it.
    pub fn remove_if_empty(&self) {
        if self.processes().is_empty() {
            let _ = self.cgroup.delete();
            if let Some(group) = &self.online_cpu_group {
                let _ = group.delete();
            }
        }
    }
}

/// The top `reamer` group's directory in the cpu hierarchy, where it exists.
fn tree_cpu_dir() -> Option<PathBuf> {
    let cgroup = Cgroup::load(hierarchies::auto(), TREE);
    let cpu: &CpuController = cgroup.controller_of()?;
    Some(cpu.path().to_owned()).filter(|dir| dir.is_dir())
}

/// Marks the top `reamer` group idle, or normal again: what ranks offline inference below
/// training (see the module's comment). Does nothing where no pool made the group.
pub fn set_tree_idle(idle: bool) -> Result<(), CgroupError> {
    let Some(dir) = tree_cpu_dir() else {
        return Ok(());
    };
    std::fs::write(dir.join("cpu.idle"), if idle { "1" } else { "0" })
        .map_err(|e| CgroupError::op(TREE, "writing cpu.idle (kernel 5.15+)", e))
}

/// At shutdown: removes `reamer/<instance>` and `reamer` in every hierarchy where they are
/// empty (rmdir refuses harmlessly where another instance or an adoptable pool still lives),
/// and leaves `reamer` normal again unless another instance still uses the tree, so that no
/// process left behind stays idle without a daemon.
pub fn release_tree(instance: &str) -> Result<(), CgroupError> {
    for path in [format!("{TREE}/{instance}"), TREE.to_owned()] {
        let cgroup = Cgroup::load(hierarchies::auto(), &path);
        for subsystem in cgroup.subsystems() {
            let _ = std::fs::remove_dir(subsystem.to_controller().path());
        }
    }
    let Some(dir) = tree_cpu_dir() else {
        return Ok(());
    };
    let another_instance = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().is_dir() && entry.file_name() != instance)
        .any(|entry| instance_uses_tree(&entry.file_name().to_string_lossy(), &entry.path()));
    if another_instance {
        return Ok(());
    }
    set_tree_idle(false)
}

/// Whether another instance, whose cpu group is `dir`, still needs the tree idle: its daemon
/// answers on its control socket, or its pools hold processes (a daemon restarting adopts
/// them). A group left empty by a daemon that is gone does not count: it would keep the tree
/// idle for nobody, and any later process placed under the tree with it.
fn instance_uses_tree(name: &str, dir: &Path) -> bool {
    UnixStream::connect(paths::socket_path(name)).is_ok() || holds_a_process(dir)
}

/// Whether the cgroup at `dir`, or any group below it, holds a process.
fn holds_a_process(dir: &Path) -> bool {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    if !procs.trim().is_empty() {
        return true;
    }
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .any(|entry| holds_a_process(&entry.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_online_pool_has_a_top_level_group_on_v2_and_every_other_pool_is_under_the_tree() {
        let online = CpuClass::Weight(50);
        assert_eq!(
            pool_path("node", "web", online, true),
            "reamer-online.node.web"
        );
        // On v1 only its cpu group is top-level; its cpuset and freezer groups stay in the tree.
        assert_eq!(pool_path("node", "web", online, false), "reamer/node/web");
        for v2 in [false, true] {
            assert_eq!(
                pool_path("node", "batch", CpuClass::Idle, v2),
                "reamer/node/batch"
            );
        }
    }

    #[test]
    fn weights_on_v2_scale_become_v1_shares_within_the_kernels_range() {
        assert_eq!(shares_for_weight(DEFAULT_CPU_WEIGHT), DEFAULT_CPU_SHARES);
        assert_eq!(shares_for_weight(30), 307);
        assert_eq!(shares_for_weight(0), 2);
        assert_eq!(shares_for_weight(10_000), 102_400);
    }

    #[test]
    fn every_weight_written_as_v1_shares_reads_back_as_itself() {
        for weight in 1..=10_000 {
            assert_eq!(
                weight_for_shares(shares_for_weight(weight)),
                weight,
                "weight {weight} ({} shares)",
                shares_for_weight(weight)
            );
        }
        assert_eq!(weight_for_shares(DEFAULT_CPU_SHARES), DEFAULT_CPU_WEIGHT);
    }

    #[test]
    fn a_group_holds_a_process_when_it_or_a_group_below_it_lists_one() {
        let root = std::env::temp_dir().join(format!("reamer-holds-{}", std::process::id()));
        let pool = root.join("batch");
        std::fs::create_dir_all(&pool).unwrap();
        std::fs::write(root.join("cgroup.procs"), "").unwrap();
        std::fs::write(pool.join("cgroup.procs"), "\n").unwrap();
        assert!(!holds_a_process(&root), "empty groups hold no process");
        std::fs::write(pool.join("cgroup.procs"), "4242\n").unwrap();
        assert!(holds_a_process(&root), "a process in a pool below");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
