//! Which threads belong to which training job or inference pool, and keeping the kernel's
//! `thread_state` map in step with that.
//!
//! A group's members come from cgroups (all their threads) and processes (their threads and
//! descendants). New threads and children are classified by the sensor itself at fork; the
//! periodic reconcile here catches what existed before registration and anything the fork
//! hook could not insert.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use aya::maps::{HashMap, MapData};
use enforcer_common::{CLASS_OFFLINE, CLASS_ONLINE, CLASS_TRAINING, MAX_JOBS, ThreadState};

use crate::config::{Config, GroupConfig, PoolKind};

/// Where a group's threads come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Every thread in this cgroup directory.
    Cgroup(PathBuf),
    /// This process, its threads and its descendants.
    Process(u32),
}

/// A training job or an inference pool.
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    /// `CLASS_TRAINING`, `CLASS_ONLINE` or `CLASS_OFFLINE`.
    pub class: u32,
    /// Index of the job in `job_stats`, or the pool's number.
    pub id: u32,
    pub sources: Vec<Source>,
    /// Threads found at the last reconcile.
    pub threads: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
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
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidName(String);

/// What one reconcile pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    pub classified: usize,
    pub newly_classified: usize,
    pub failed: usize,
    /// The offline pools' threads this pass found: the daemon gives them SCHED_IDLE.
    pub offline_threads: Vec<u32>,
}

#[derive(Debug, Default)]
pub struct Registry {
    pub training: Vec<Group>,
    pub pools: Vec<Group>,
}

fn class_name(class: u32) -> &'static str {
    match class {
        CLASS_TRAINING => "training job",
        CLASS_ONLINE => "online pool",
        CLASS_OFFLINE => "offline pool",
        _ => "group",
    }
}

fn sources_of(group: &GroupConfig) -> Vec<Source> {
    let cgroup = group
        .cgroup
        .iter()
        .map(|c| Source::Cgroup(c.get_ref().clone()));
    let pids = group.pids.iter().map(|p| Source::Process(*p.get_ref()));
    cgroup.chain(pids).collect()
}

impl Registry {
    /// The groups the config declares (already validated).
    pub fn from_config(config: &Config) -> Self {
        let training = config.training.iter().enumerate().map(|(i, job)| Group {
            name: job.name.get_ref().clone(),
            class: CLASS_TRAINING,
            id: i as u32,
            sources: sources_of(job),
            threads: 0,
        });
        let pools = config.pool.iter().enumerate().map(|(i, pool)| Group {
            name: pool.name.get_ref().clone(),
            class: match pool.pool_kind() {
                PoolKind::Online => CLASS_ONLINE,
                PoolKind::Offline => CLASS_OFFLINE,
            },
            id: i as u32,
            sources: sources_of(pool),
            threads: 0,
        });
        Self {
            training: training.collect(),
            pools: pools.collect(),
        }
    }

    /// Adds process `pid` to training job `name`, creating the job if it is new.
    pub fn add_training_process(&mut self, name: &str, pid: u32) -> Result<&Group, RegistryError> {
        crate::config::validate_name(name).map_err(InvalidName)?;
        check_process(pid)?;
        if self.pools.iter().any(|p| p.name == name) {
            let existing = self
                .pools
                .iter()
                .find(|p| p.name == name)
                .map_or("pool", |p| class_name(p.class));
            return Err(RegistryError::NameTaken {
                name: name.to_owned(),
                existing,
            });
        }
        let index = match self.training.iter().position(|j| j.name == name) {
            Some(index) => index,
            None => {
                if self.training.len() >= MAX_JOBS as usize {
                    return Err(RegistryError::TooManyJobs {
                        name: name.to_owned(),
                    });
                }
                let id = self.training.len() as u32;
                self.training.push(Group {
                    name: name.to_owned(),
                    class: CLASS_TRAINING,
                    id,
                    sources: Vec::new(),
                    threads: 0,
                });
                self.training.len() - 1
            }
        };
        let job = &mut self.training[index];
        if !job.sources.contains(&Source::Process(pid)) {
            job.sources.push(Source::Process(pid));
        }
        Ok(job)
    }

    /// Adds process `pid` to the configured pool `name`.
    pub fn add_pool_process(&mut self, name: &str, pid: u32) -> Result<&Group, RegistryError> {
        check_process(pid)?;
        let known = self
            .pools
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let Some(pool) = self.pools.iter_mut().find(|p| p.name == name) else {
            let known = if known.is_empty() {
                "none".to_owned()
            } else {
                known
            };
            return Err(RegistryError::UnknownPool {
                name: name.to_owned(),
                known,
            });
        };
        if !pool.sources.contains(&Source::Process(pid)) {
            pool.sources.push(Source::Process(pid));
        }
        Ok(pool)
    }

    /// Makes every thread in `dir` (a pool's own cgroup) a member of pool `name`.
    pub fn add_pool_cgroup(&mut self, name: &str, dir: PathBuf) {
        if let Some(pool) = self.pools.iter_mut().find(|p| p.name == name) {
            let source = Source::Cgroup(dir);
            if !pool.sources.contains(&source) {
                pool.sources.push(source);
            }
        }
    }

    /// Writes every member thread's class into `thread_state`. Threads already classified the
    /// same way are left alone: `newly_classified` counts the writes, and only writes make the
    /// sensor copy classes again (`Sensor::classes_changed`).
    pub fn reconcile(&mut self, map: &mut HashMap<MapData, u32, ThreadState>) -> Reconciled {
        let mut report = Reconciled::default();
        for group in self.training.iter_mut().chain(self.pools.iter_mut()) {
            // A registered process that has exited leaves the group: its pid may be reused by
            // an unrelated process, which must not be classified as training or inference.
            group.sources.retain(|source| match source {
                Source::Process(pid) => process_alive(*pid),
                Source::Cgroup(_) => true,
            });
            let tids = group_threads(&group.sources);
            group.threads = tids.len();
            if group.class == CLASS_OFFLINE {
                report.offline_threads.extend(&tids);
            }
            for tid in tids {
                report.classified += 1;
                if let Ok(existing) = map.get(&tid, 0)
                    && existing.class == group.class
                    && existing.group == group.id
                {
                    continue;
                }
                let state = ThreadState {
                    class: group.class,
                    group: group.id,
                };
                match map.insert(tid, state, 0) {
                    Ok(()) => report.newly_classified += 1,
                    Err(_) => report.failed += 1,
                }
            }
        }
        report
    }

    /// Every thread of the offline pools now (a fresh walk, for shutdown).
    pub fn offline_threads(&self) -> HashSet<u32> {
        self.pools
            .iter()
            .filter(|pool| pool.class == CLASS_OFFLINE)
            .flat_map(|pool| group_threads(&pool.sources))
            .collect()
    }
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rfind(')')
                .map(|i| stat[i + 1..].trim_start().chars().next())?;
            state.map(|c| c != 'Z' && c != 'X')
        })
        .unwrap_or(false)
}

fn check_process(pid: u32) -> Result<(), RegistryError> {
    if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        return Err(RegistryError::NoSuchProcess { pid });
    }
    Ok(())
}

/// All thread ids of the sources, deduplicated.
pub fn group_threads(sources: &[Source]) -> HashSet<u32> {
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
pub fn group_processes(sources: &[Source]) -> Vec<u32> {
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

/// Threads of `pid` and of all its descendants, through /proc/PID/task/TID/children.
fn process_tree_threads(pid: u32, out: &mut HashSet<u32>) {
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
            out.insert(tid);
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                pending.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_tree_includes_every_thread_of_ours() {
        let handle =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(300)));
        let tids = group_threads(&[Source::Process(std::process::id())]);
        let ours: HashSet<u32> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        assert!(ours.len() >= 2);
        assert!(ours.is_subset(&tids), "{ours:?} not in {tids:?}");
        handle.join().unwrap();
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
}
