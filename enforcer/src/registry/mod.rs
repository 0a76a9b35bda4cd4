//! Which threads belong to which training job or inference pool, and keeping the kernel's
//! `thread_state` map in step with that.
//!
//! A group's members come from cgroups (all their threads) and processes (their threads and
//! descendants). New threads and children are classified by the sensor itself at fork; the
//! periodic reconcile here catches what existed before registration and anything the fork
//! hook could not insert.

pub(crate) mod members;
pub(crate) mod pods;

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
};

use aya::maps::MapData;
use enforcer_common::{
    CLASS_OFFLINE, CLASS_ONLINE, CLASS_TRAINING, MAX_JOBS, ThreadState, protocol::gpu::Owner,
};

pub(crate) use self::members::{group_processes, group_threads};
use crate::{
    config::{InvalidName, Settings, Source, validate_name},
    host::procfs,
};

/// A training job or an inference pool.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub name: String,
    pub class: GroupClass,
    /// Index of the job in `job_stats`, or the pool's number.
    pub id: u32,
    pub sources: Vec<Source>,
    /// Threads found at the last reconcile.
    pub threads: usize,
    /// Declared by the config: kept whether or not it has members. A job launched through
    /// the control socket ends when its last process exits, a pod's with its last pod.
    pub from_config: bool,
    /// When a launched job's last process exited. It keeps its figures for status until a
    /// new job needs its slot (`training_job`).
    pub ended: Option<std::time::Instant>,
}

/// What a group is: a training job, or an online or offline pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupClass {
    Training,
    Online,
    Offline,
}

impl GroupClass {
    /// The class the sensor's maps hold for the group's threads (`enforcer_common::CLASS_*`).
    pub(crate) fn kernel(self) -> u32 {
        match self {
            Self::Training => CLASS_TRAINING,
            Self::Online => CLASS_ONLINE,
            Self::Offline => CLASS_OFFLINE,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Training => "training job",
            Self::Online => "online pool",
            Self::Offline => "offline pool",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    #[error("the sensor tracks at most {MAX_JOBS} training jobs; {name:?} would be one more")]
    TooManyJobs { name: String },
    #[error(
        "unknown pool {name:?}: pools come from the config's [[pool]] entries (known: {known})"
    )]
    UnknownPool { name: String, known: String },
    #[error("{name:?} is already a {existing}; a name names one group")]
    NameTaken {
        name: String,
        existing: &'static str,
    },
    #[error("no process with pid {pid}")]
    NoSuchProcess { pid: u32 },
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    #[error(
        "training job name {0:?} (from a pod) is not `namespace/name`: letters, digits, '-', \
         '_', '.' and one '/', at most 317 characters"
    )]
    PodJobName(String),
}

/// The job of `jobs` (training jobs, copied out of the registry so that its lock is not held
/// over /proc) that process `pid` belongs to, its main thread one of the job's: whom a
/// progress report counts for. Walks the jobs' members, as a reconcile does.
pub(crate) fn training_job_of(jobs: &[Group], pid: u32) -> Option<&Group> {
    jobs.iter()
        .filter(|job| job.ended.is_none())
        .find(|job| group_threads(&job.sources).contains(&pid))
}

/// What one reconcile pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reconciled {
    pub classified: usize,
    pub newly_classified: usize,
    /// Training threads `thread_state` had no room for.
    pub failed: usize,
    /// Inference threads `pool_threads` had no room for (`[sensor] max_inference_threads`).
    pub failed_inference: usize,
    /// The offline pools' threads this pass found: the daemon gives them SCHED_IDLE.
    pub offline_threads: Vec<u32>,
    /// Launched training jobs whose last process exited this pass: their slots are free for
    /// the next new job.
    pub jobs_ended: Vec<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub training: Vec<Group>,
    pub pools: Vec<Group>,
    /// The Kubernetes pods whose container groups are members, by UID (`pods`).
    pub pods: std::collections::BTreeMap<String, pods::PodMember>,
    /// Training pods refused for want of a job id, by UID, oldest first: taken when one frees.
    pub waiting: std::collections::BTreeMap<String, pods::WaitingPod>,
    /// Pods marked for reamer that it does not take, by UID: (`namespace/name`, why), for
    /// status.
    pub refused: std::collections::BTreeMap<String, (String, String)>,
    /// When each process source started (/proc's start time), read when it was added: a pid
    /// reused by another process between two reconciles is that other process, not a member.
    started: HashMap<u32, u64>,
    /// Ids of training jobs removed in this daemon's life: the sensor's totals for them are
    /// the removed job's. Ids never freed keep what a previous daemon's pinned totals hold,
    /// for the job re-adopted there.
    freed: std::collections::BTreeSet<u32>,
    /// Ids given to new jobs whose totals must be zeroed before they are read
    /// (`take_to_zero`): the slow path would read an ended job's hours of run time as one
    /// tick's demand of the new one.
    to_zero: Vec<u32>,
}

/// Whether `pid` still runs and is the process that was added (the start time noted then);
/// forgets it where not.
fn still_the_process_added(started: &mut HashMap<u32, u64>, pid: u32) -> bool {
    let same = procfs::is_alive(pid)
        && started
            .get(&pid)
            .is_some_and(|&at| procfs::start_time(pid) == Some(at));
    if !same {
        started.remove(&pid);
    }
    same
}

impl Registry {
    /// The groups the config declares.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        let training = settings.training.iter().enumerate().map(|(i, job)| Group {
            name: job.name.clone(),
            class: GroupClass::Training,
            id: i as u32,
            sources: job.sources.clone(),
            threads: 0,
            from_config: true,
            ended: None,
        });
        let pools = settings.pools.iter().enumerate().map(|(i, pool)| Group {
            name: pool.name.clone(),
            class: if pool.is_online() {
                GroupClass::Online
            } else {
                GroupClass::Offline
            },
            id: i as u32,
            sources: pool.sources.clone(),
            threads: 0,
            from_config: true,
            ended: None,
        });
        let mut registry = Self {
            training: training.collect(),
            pools: pools.collect(),
            pods: Default::default(),
            waiting: Default::default(),
            refused: Default::default(),
            started: HashMap::new(),
            freed: Default::default(),
            to_zero: Vec::new(),
        };
        let pids: Vec<u32> = registry
            .training
            .iter()
            .chain(&registry.pools)
            .flat_map(|group| &group.sources)
            .filter_map(|source| match source {
                Source::Process(pid) => Some(*pid),
                Source::Cgroup(_) => None,
            })
            .collect();
        for pid in pids {
            registry.remember_start(pid);
        }
        registry
    }

    /// Notes when process `pid` started, so that the reconcile knows it again.
    fn remember_start(&mut self, pid: u32) {
        if let Some(started) = procfs::start_time(pid) {
            self.started.insert(pid, started);
        }
    }

    /// Adds process `pid` to training job `name`, creating the job if it is new.
    pub(crate) fn add_training_process(
        &mut self,
        name: &str,
        pid: u32,
    ) -> Result<&Group, RegistryError> {
        validate_name(name)?;
        check_process(pid)?;
        let index = self.training_job(name)?;
        self.remember_start(pid);
        let job = &mut self.training[index];
        if !job.sources.contains(&Source::Process(pid)) {
            job.sources.push(Source::Process(pid));
        }
        Ok(job)
    }

    /// The index of training job `name`, created where it is new. The caller has checked the
    /// name (`validate_name` for the config's and launched jobs; pods' are `namespace/name`).
    fn training_job(&mut self, name: &str) -> Result<usize, RegistryError> {
        if let Some(pool) = self.pools.iter().find(|p| p.name == name) {
            return Err(RegistryError::NameTaken {
                name: name.to_owned(),
                existing: pool.class.label(),
            });
        }
        if let Some(index) = self.training.iter().position(|j| j.name == name) {
            return Ok(index);
        }
        // The lowest id no job holds, else the slot of the launched job that ended first.
        let free = (0..MAX_JOBS).find(|id| !self.training.iter().any(|j| j.id == *id));
        let Some(id) = free.or_else(|| self.evict_ended()) else {
            return Err(RegistryError::TooManyJobs {
                name: name.to_owned(),
            });
        };
        if self.freed.remove(&id) {
            self.to_zero.push(id);
        }
        self.training.push(Group {
            name: name.to_owned(),
            class: GroupClass::Training,
            id,
            sources: Vec::new(),
            threads: 0,
            from_config: false,
            ended: None,
        });
        Ok(self.training.len() - 1)
    }

    /// A training job goes: its id is free, its totals to be zeroed for the next job.
    fn remove_job(&mut self, index: usize) -> Group {
        let job = self.training.remove(index);
        self.freed.insert(job.id);
        job
    }

    /// Removes the launched job that ended first, for its slot; its id, where there is one.
    fn evict_ended(&mut self) -> Option<u32> {
        let (index, _) = self
            .training
            .iter()
            .enumerate()
            .filter_map(|(index, job)| Some((index, job.ended?)))
            .min_by_key(|(_, ended)| *ended)?;
        Some(self.remove_job(index).id)
    }

    /// The ids given to new jobs whose totals the caller must zero in the sensor before it
    /// lets go of the registry; it gives back with `zero_again` any it could not.
    pub(crate) fn take_to_zero(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.to_zero)
    }

    pub(crate) fn zero_again(&mut self, ids: Vec<u32>) {
        self.to_zero.extend(ids);
    }

    /// Whether a training pod waiting for a slot could have one now: an id no job holds, or
    /// a launched job that ended.
    pub(crate) fn slot_available(&self) -> bool {
        self.training.len() < MAX_JOBS as usize || self.training.iter().any(|j| j.ended.is_some())
    }

    /// Adds process `pid` to the configured pool `name`.
    pub(crate) fn add_pool_process(
        &mut self,
        name: &str,
        pid: u32,
    ) -> Result<&Group, RegistryError> {
        check_process(pid)?;
        if !self.pools.iter().any(|p| p.name == name) {
            return Err(self.unknown_pool(name));
        }
        self.remember_start(pid);
        let pool = self
            .pools
            .iter_mut()
            .find(|p| p.name == name)
            .expect("checked above");
        if !pool.sources.contains(&Source::Process(pid)) {
            pool.sources.push(Source::Process(pid));
        }
        Ok(pool)
    }

    /// The error for a pool `name` the config does not define, naming those it does.
    fn unknown_pool(&self, name: &str) -> RegistryError {
        let known: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
        RegistryError::UnknownPool {
            name: name.to_owned(),
            known: if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            },
        }
    }

    /// Makes every thread in `dir` (a pool's own cgroup) a member of pool `name`.
    pub(crate) fn add_pool_cgroup(&mut self, name: &str, dir: PathBuf) {
        if let Some(pool) = self.pools.iter_mut().find(|p| p.name == name) {
            let source = Source::Cgroup(dir);
            if !pool.sources.contains(&source) {
                pool.sources.push(source);
            }
        }
    }

    /// Writes every member thread's class into the sensor's map of its kind: training's into
    /// `training_map` (`thread_state`), inference's into `pool_map` (`pool_threads`), out of
    /// the other where it was there (a relabelled pod's). Threads already classified the same
    /// way are left alone: `newly_classified` counts the writes, and only writes make the
    /// sensor copy classes again (`Sensor::classes_changed`).
    pub(crate) fn reconcile(
        &mut self,
        training_map: &mut aya::maps::HashMap<MapData, u32, ThreadState>,
        pool_map: &mut aya::maps::HashMap<MapData, u32, ThreadState>,
    ) -> Reconciled {
        let mut report = Reconciled::default();
        let started = &mut self.started;
        for group in self.training.iter_mut().chain(self.pools.iter_mut()) {
            // A registered process that has exited leaves the group: its pid may be reused by
            // an unrelated process, which must not be classified as training or inference.
            // Alive is not enough: the pid may already be that other process's, which the
            // start time tells apart.
            group.sources.retain(|source| match source {
                Source::Process(pid) => still_the_process_added(started, *pid),
                Source::Cgroup(_) => true,
            });
            let tids = group_threads(&group.sources);
            group.threads = tids.len();
            if group.class == GroupClass::Offline {
                report.offline_threads.extend(&tids);
            }
            let (map, other) = if group.class == GroupClass::Training {
                (&mut *training_map, &mut *pool_map)
            } else {
                (&mut *pool_map, &mut *training_map)
            };
            for tid in tids {
                report.classified += 1;
                if let Ok(existing) = map.get(&tid, 0)
                    && existing.class == group.class.kernel()
                    && existing.group == group.id
                {
                    continue;
                }
                let state = ThreadState {
                    class: group.class.kernel(),
                    group: group.id,
                };
                let _ = other.remove(&tid);
                match map.insert(tid, state, 0) {
                    Ok(()) => report.newly_classified += 1,
                    Err(_) if group.class == GroupClass::Training => report.failed += 1,
                    Err(_) => report.failed_inference += 1,
                }
            }
        }
        // A launched job whose processes have all exited ends: its figures stay for status
        // until a new job needs its slot. A pod's job goes with its last pod (`leave_pod`),
        // even while its containers are not there yet. One given a process again goes on.
        let pods = &self.pods;
        for job in &mut self.training {
            let empty = !job.from_config
                && job.sources.is_empty()
                && !pods
                    .values()
                    .any(|pod| pod.class == GroupClass::Training && pod.group == job.name);
            match (empty, job.ended) {
                (true, None) => {
                    job.ended = Some(std::time::Instant::now());
                    report.jobs_ended.push(job.name.clone());
                }
                (false, Some(_)) => job.ended = None,
                _ => {}
            }
        }
        report
    }

    /// The training jobs that run: threads at the last reconcile, and not ended. A job the
    /// config declares whose groups are empty does not run, nor does a launched one that
    /// ended and keeps its figures for status.
    pub(crate) fn running_training_jobs(&self) -> Vec<String> {
        let running = self.training.iter();
        let running = running.filter(|job| job.threads > 0 && job.ended.is_none());
        running.map(|job| job.name.clone()).collect()
    }

    /// Every thread id of every group, with its owner (a process's pid is its main thread's
    /// id): what the GPU side attributes GPU processes by.
    pub(crate) fn owners(&self) -> HashMap<u32, Owner> {
        let mut owners = HashMap::new();
        for job in &self.training {
            for tid in group_threads(&job.sources) {
                owners.insert(tid, Owner::Training(job.name.clone()));
            }
        }
        for pool in &self.pools {
            for tid in group_threads(&pool.sources) {
                owners.insert(tid, Owner::Pool(pool.name.clone()));
            }
        }
        owners
    }

    /// Every thread of the offline pools now (a fresh walk, for shutdown).
    pub(crate) fn offline_threads(&self) -> HashSet<u32> {
        self.pools
            .iter()
            .filter(|pool| pool.class == GroupClass::Offline)
            .flat_map(|pool| group_threads(&pool.sources))
            .collect()
    }
}

fn check_process(pid: u32) -> Result<(), RegistryError> {
    if !procfs::exists(pid) {
        return Err(RegistryError::NoSuchProcess { pid });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_is_a_member_only_while_it_is_the_process_that_was_added() {
        let me = std::process::id();
        let mut registry = Registry::default();
        registry.add_training_process("t", me).unwrap();
        assert!(still_the_process_added(&mut registry.started, me));
        // The same pid with another start time: another process that reused it.
        *registry.started.get_mut(&me).unwrap() += 1;
        assert!(!still_the_process_added(&mut registry.started, me));
        assert!(
            !registry.started.contains_key(&me),
            "forgotten, so it stays out"
        );
        assert!(!still_the_process_added(&mut registry.started, me));
    }

    #[test]
    fn jobs_are_created_on_first_launch_and_names_are_unique() {
        let mut registry = Registry::default();
        let pid = std::process::id();
        let id = registry.add_training_process("train-a", pid).unwrap().id;
        assert_eq!(
            registry.add_training_process("train-a", pid).unwrap().id,
            id
        );
        assert_eq!(registry.training[0].sources, vec![Source::Process(pid)]);
        assert_ne!(
            registry.add_training_process("train-b", pid).unwrap().id,
            id
        );
        assert!(matches!(
            registry.add_pool_process("nope", pid),
            Err(RegistryError::UnknownPool { .. })
        ));
        assert!(matches!(
            registry.add_training_process("x", 4_194_305),
            Err(RegistryError::NoSuchProcess { pid: 4_194_305 })
        ));
        assert!(registry.add_training_process("bad name", pid).is_err());
    }

    #[test]
    fn only_jobs_with_threads_that_have_not_ended_run() {
        let mut registry = Registry::default();
        let pid = std::process::id();
        for name in ["a", "b", "c"] {
            registry.add_training_process(name, pid).unwrap();
        }
        // Before a reconcile has counted their threads: none runs yet.
        assert!(registry.running_training_jobs().is_empty());
        for job in &mut registry.training {
            job.threads = 2;
        }
        assert_eq!(registry.running_training_jobs(), ["a", "b", "c"]);
        // One ended (its figures kept for status), one's groups empty.
        registry.training[0].ended = Some(std::time::Instant::now());
        registry.training[1].threads = 0;
        assert_eq!(registry.running_training_jobs(), ["c"]);
    }
}
