//! The inference pools' cgroups as the enforcement holds them: each pool's cgroup, the CPUs
//! last written into it, and whether the CPU policy has paused it. `write` brings them to an
//! allocation, telling each pool's workers before its cgroup changes.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use enforcer_common::protocol::Grant;
use tracing::{debug, warn};

use super::{
    cgroup::{self, CpuClass, PoolCgroup, PoolFiles},
    cgroup_error::CgroupError,
    freezer::Freezer,
    pod_in_place::{PodInPlace, PodState, Readback, Readings},
    pod_ledger::PodLedger,
};
use crate::{
    config::{PoolKind, PoolSettings},
    policy::Allocation,
};

struct Pool {
    kind: PoolKind,
    cgroup: PoolCgroup,
    /// The CPUs last written into its cpuset; None before the first write.
    applied: Option<BTreeSet<u32>>,
    /// An offline pool that does not use the GPU: the CPU policy may pause it. A GPU pool's
    /// freezer is the duty cycle's to drive.
    pausable: bool,
    /// Paused now by the CPU policy.
    paused: bool,
    uses_gpu: bool,
    /// What the last allocation wanted where writing it failed (the CPUs, the pause): retried
    /// on the tick (`retry_failed`), so a pool is not left frozen or on the wrong CPUs until
    /// the next allocation that happens to differ, which may be hours away.
    pending: Option<(BTreeSet<u32>, bool)>,
    /// Its Kubernetes pods, by UID, written in place (`pod_in_place`).
    pods: BTreeMap<String, PodInPlace>,
}

impl Pool {
    /// The CPUs the pool holds now (every CPU before its first write): what a pod joining it
    /// is given.
    fn current(&self, all_cpus: &BTreeSet<u32>) -> BTreeSet<u32> {
        self.applied.clone().unwrap_or_else(|| all_cpus.clone())
    }

    /// Writes `cpus` and the pause where they differ from what the cgroup holds, noting what
    /// was written in `written` and what failed in `pending`.
    fn write(
        &mut self,
        name: &str,
        cpus: &BTreeSet<u32>,
        paused: bool,
        ledger: &mut PodLedger,
        written: &mut Written,
    ) {
        let mut failed = false;
        // A failure is said once; its retries on every tick only at debug level (a group
        // removed underneath logged twenty warnings a second).
        let retrying = self.pending.is_some();
        let report = |err: &CgroupError| {
            if retrying {
                debug!("pool {name}: still failing: {err}");
            } else {
                warn!("pool {name}: {err} (retried every tick)");
            }
        };
        if self.applied.as_ref() != Some(cpus) {
            match self.cgroup.set_cpus(cpus) {
                Ok(()) => {
                    self.applied = Some(cpus.clone());
                    written.rewritten.push(name.to_owned());
                }
                // A cgroup removed underneath us: say so, keep serving the others.
                Err(err) => {
                    report(&err);
                    failed = true;
                }
            }
        }
        if self.paused != paused {
            let result = match self.cgroup.freezer() {
                Some(freezer) => freezer.set_paused(paused),
                None => Err(CgroupError::NoController {
                    path: self.cgroup.path.clone(),
                    what: "pausing",
                    controller: "freezer (cgroup v1 freezer or v2 cgroup.freeze)",
                }),
            };
            match result {
                Ok(()) => {
                    self.paused = paused;
                    let list = if paused {
                        &mut written.paused
                    } else {
                        &mut written.resumed
                    };
                    list.push(name.to_owned());
                }
                Err(err) => {
                    report(&err);
                    failed = true;
                }
            }
        }
        self.pending = failed.then(|| (cpus.clone(), paused));
        // The pool's pods follow its CPUs, each in its own groups (its pause reached them
        // through its freezer above).
        for pod in self.pods.values_mut() {
            pod.apply(cpus, ledger);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PoolsError {
    #[error("no pool {0:?}")]
    Unknown(String),
    #[error("pid {0} is the enforcer itself: it never joins a pool (idle class, or frozen)")]
    TheEnforcer(u32),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
}

/// What one allocation's writes did, pool by pool.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Pools whose CPUs were rewritten.
    pub rewritten: Vec<String>,
    /// Offline pools frozen by it, and those thawed.
    pub paused: Vec<String>,
    pub resumed: Vec<String>,
}

/// A pod as `status` shows it.
pub(crate) struct PodView {
    pub uid: String,
    pub state: PodState,
    pub foreign_writes: u64,
}

/// A pool as `status` shows it, with where its CPUs and processes are read from.
pub(crate) struct PoolView {
    pub name: String,
    pub kind: PoolKind,
    pub paused: bool,
    pub files: PoolFiles,
}

pub(crate) struct Pools {
    all_cpus: BTreeSet<u32>,
    pools: BTreeMap<String, Pool>,
    /// What reamer changed in pods' groups, written down first for a restarted daemon.
    ledger: PodLedger,
}

impl Pools {
    /// Creates (or adopts) the pools' cgroups under `reamer/<instance>`, and marks the top
    /// `reamer` group idle where there is any pool (`cgroup` says why).
    pub(crate) fn create(
        instance: &str,
        settings: &[PoolSettings],
        all_cpus: BTreeSet<u32>,
    ) -> Result<Self, CgroupError> {
        let mut pools = BTreeMap::new();
        for pool in settings {
            let cgroup =
                PoolCgroup::create_or_adopt(instance, &pool.name, CpuClass::from(&pool.kind))?;
            pools.insert(
                pool.name.clone(),
                Pool {
                    kind: pool.kind,
                    cgroup,
                    applied: None,
                    pausable: !pool.is_online() && !pool.gpu,
                    paused: false,
                    uses_gpu: pool.gpu,
                    pending: None,
                    pods: BTreeMap::new(),
                },
            );
        }
        if !pools.is_empty() {
            cgroup::set_tree_idle(true)?;
        }
        // Whatever a previous daemon of this instance left frozen, narrowed or idle in pods'
        // groups is undone before any pod is taken: the pod may be gone, unmarked, or in a
        // pool that left the config, and the API server may not answer (`pod_ledger`).
        let mut ledger = PodLedger::open(crate::host::paths::pod_ledger(instance));
        ledger.adopt_legacy(&crate::host::paths::legacy_pod_bases(instance));
        let (_, errors) = ledger.release_left();
        for err in errors {
            warn!(
                "a pod's group a previous daemon wrote could not be given back (retried at the next start): {err}"
            );
        }
        Ok(Self {
            all_cpus,
            pools,
            ledger,
        })
    }

    /// Whether the CPU policy has any pool to pause.
    pub(crate) fn any_pausable(&self) -> bool {
        self.pools.values().any(|pool| pool.pausable)
    }

    /// The weight a previous daemon left on an adopted online pool (`PoolCgroup`).
    pub(crate) fn adopted_weight(&self, pool: &str) -> Option<u32> {
        self.pools.get(pool)?.cgroup.adopted_weight()
    }

    /// Writes an online pool's CPU weight.
    pub(crate) fn set_weight(&self, pool: &str, weight: u32) -> Result<(), PoolsError> {
        Ok(self.get(pool)?.cgroup.set_weight(weight)?)
    }

    fn get(&self, pool: &str) -> Result<&Pool, PoolsError> {
        self.pools
            .get(pool)
            .ok_or_else(|| PoolsError::Unknown(pool.to_owned()))
    }

    /// Brings the pools to `allocation`: for each pool whose CPUs or pause changed, its workers
    /// hear of it first (`tell`), then its cgroup is written. A failed write is logged, the
    /// pool keeps its old state, and the write is retried by `retry_failed`.
    pub(crate) fn write(
        &mut self,
        allocation: &Allocation,
        mut tell: impl FnMut(Grant),
    ) -> Written {
        let mut written = Written::default();
        for (name, cpus) in &allocation.pools {
            let Some(pool) = self.pools.get_mut(name) else {
                continue;
            };
            let paused = allocation.offline_paused && pool.pausable;
            let cpus_changed = pool.applied.as_ref() != Some(cpus);
            let pause_changed = pool.paused != paused;
            if !cpus_changed && !pause_changed {
                // Already there: an earlier failed wish is moot.
                pool.pending = None;
                continue;
            }
            // Workers hear of a shrink before the cgroup holds them to it.
            let shrinking = pool
                .applied
                .as_ref()
                .is_some_and(|old| !cpus.is_superset(old));
            tell(Grant {
                pool: name.clone(),
                cpus: cpus.iter().copied().collect(),
                shrinking,
                paused,
            });
            pool.write(name, cpus, paused, &mut self.ledger, &mut written);
        }
        written
    }

    /// Writes again what a failed write left undone (the slow path's tick calls it). The
    /// workers heard of it already, when it was first written.
    pub(crate) fn retry_failed(&mut self) -> Written {
        let mut written = Written::default();
        for (name, pool) in &mut self.pools {
            if let Some((cpus, paused)) = pool.pending.clone() {
                pool.write(name, &cpus, paused, &mut self.ledger, &mut written);
            }
        }
        written
    }

    /// What a worker of `pool` subscribing now is granted: the CPUs last written (all of them
    /// before any write), and whether the pool is paused.
    pub(crate) fn current_grant(&self, pool: &str) -> Result<Grant, PoolsError> {
        let state = self.get(pool)?;
        let cpus = state.applied.as_ref().unwrap_or(&self.all_cpus);
        Ok(Grant {
            pool: pool.to_owned(),
            cpus: cpus.iter().copied().collect(),
            shrinking: false,
            paused: state.paused,
        })
    }

    /// Where `pool` lists its CPUs and processes.
    pub(crate) fn files(&self, pool: &str) -> Result<PoolFiles, PoolsError> {
        Ok(self.get(pool)?.cgroup.files())
    }

    /// Moves process `pid` into `pool`'s cgroup.
    pub(crate) fn add_process(&self, pool: &str, pid: u32) -> Result<(), PoolsError> {
        if pid == std::process::id() {
            return Err(PoolsError::TheEnforcer(pid));
        }
        Ok(self.get(pool)?.cgroup.add_process(pid)?)
    }

    /// Pod `uid` (`key`), whose group is `relative` in each hierarchy, joins `pool`: written in
    /// place from now on, unless `write` is false (observe only) or the CPU manager gave it
    /// CPUs of its own.
    pub(crate) fn attach_pod(
        &mut self,
        pool: &str,
        uid: &str,
        key: &str,
        relative: &Path,
        exclusive_cpus: Option<&str>,
        write: bool,
    ) -> Result<(), PoolsError> {
        let state = self
            .pools
            .get_mut(pool)
            .ok_or_else(|| PoolsError::Unknown(pool.to_owned()))?;
        let offline = state.kind.online().is_none();
        let freezer = state.cgroup.freezer().cloned();
        let cpus = state.current(&self.all_cpus);
        let pod = PodInPlace::attach(
            key,
            relative,
            offline,
            exclusive_cpus,
            write,
            freezer,
            &cpus,
            &mut self.ledger,
        );
        state.pods.insert(uid.to_owned(), pod);
        Ok(())
    }

    /// A container group of pod `uid` appeared: it takes the pool's CPUs and pause at once.
    pub(crate) fn add_pod_container(&mut self, uid: &str, relative: &Path) {
        let all_cpus = &self.all_cpus;
        for pool in self.pools.values_mut() {
            let cpus = pool.current(all_cpus);
            if let Some(pod) = pool.pods.get_mut(uid) {
                pod.add_container(relative, &cpus, &mut self.ledger);
            }
        }
    }

    pub(crate) fn remove_pod_container(&mut self, uid: &str, relative: &Path) {
        for pool in self.pools.values_mut() {
            if let Some(pod) = pool.pods.get_mut(uid) {
                pod.remove_container(relative, &mut self.ledger);
            }
        }
    }

    /// Pod `uid` leaves its pool: thawed, its CPUs the kubelet's, not idle. Returns what
    /// failed.
    pub(crate) fn detach_pod(&mut self, uid: &str) -> Vec<String> {
        let ledger = &mut self.ledger;
        self.pools
            .values_mut()
            .filter_map(|pool| pool.pods.remove(uid))
            .flat_map(|mut pod| pod.release(ledger))
            .collect()
    }

    /// Every written pod's files to read back, by pool and pod (`PodInPlace::readback`).
    pub(crate) fn pod_readbacks(&self) -> Vec<(String, String, Readback)> {
        self.pools
            .iter()
            .flat_map(|(name, pool)| {
                pool.pods.iter().filter_map(move |(uid, pod)| {
                    Some((name.clone(), uid.clone(), pod.readback()?))
                })
            })
            .collect()
    }

    /// What was read back, at `now` (`PodInPlace::check`): what to log.
    pub(crate) fn check_pods(
        &mut self,
        now: Instant,
        readings: Vec<(String, String, Readings)>,
    ) -> Vec<String> {
        let mut notes = Vec::new();
        for (pool_name, uid, reading) in readings {
            let Some(pool) = self.pools.get_mut(&pool_name) else {
                continue;
            };
            let cpus = pool.current(&self.all_cpus);
            if let Some(pod) = pool.pods.get_mut(&uid) {
                notes.extend(pod.check(now, &cpus, reading, &mut self.ledger));
            }
        }
        notes
    }

    /// Every pool's pods, for `status` and /metrics.
    pub(crate) fn pod_views(&self) -> Vec<PodView> {
        self.pools
            .values()
            .flat_map(|pool| {
                pool.pods.iter().map(|(uid, pod)| PodView {
                    uid: uid.clone(),
                    state: pod.state().clone(),
                    foreign_writes: pod.foreign_writes,
                })
            })
            .collect()
    }

    /// Each pool's name and the directory listing its threads: every thread in a pool's
    /// cgroup is a member, whoever put it there and whichever daemon did.
    pub(crate) fn member_dirs(&self) -> Vec<(String, PathBuf)> {
        self.pools
            .iter()
            .filter_map(|(name, pool)| Some((name.clone(), pool.cgroup.member_dir()?)))
            .collect()
    }

    /// The freezers of the pools that use the GPU, for the GPU duty cycle.
    pub(crate) fn gpu_freezers(&self) -> Vec<Arc<Freezer>> {
        let gpu_pools = self.pools.iter().filter(|(_, pool)| pool.uses_gpu);
        gpu_pools
            .filter_map(|(name, pool)| {
                let freezer = pool.cgroup.freezer().cloned();
                if freezer.is_none() {
                    warn!(
                        pool = name.as_str(),
                        "GPU gating off for this pool: no freezer controller (cgroup v1 \
                         freezer or v2 cgroup.freeze)"
                    );
                }
                freezer
            })
            .collect()
    }

    /// Every pool, for `status`.
    pub(crate) fn views(&self) -> Vec<PoolView> {
        self.pools
            .iter()
            .map(|(name, pool)| PoolView {
                name: name.clone(),
                kind: pool.kind,
                paused: pool.paused,
                files: pool.cgroup.files(),
            })
            .collect()
    }

    /// Leaves every inference process runnable on every CPU, unfrozen, at normal priority;
    /// removes pool cgroups that are empty (the others stay for a restarted daemon to adopt).
    pub(crate) fn release(&mut self, instance: &str) {
        for (name, pool) in &mut self.pools {
            for (_, mut pod) in std::mem::take(&mut pool.pods) {
                for err in pod.release(&mut self.ledger) {
                    warn!("pool {name}: releasing pod {} at shutdown: {err}", pod.key);
                }
            }
            for err in pool.cgroup.release(&self.all_cpus) {
                warn!("pool {name}: releasing at shutdown: {err}");
            }
            pool.cgroup.remove_if_empty();
        }
        if let Err(err) = cgroup::release_tree(instance) {
            warn!("releasing the reamer cgroup tree at shutdown: {err}");
        }
    }
}
