//! Kubernetes pods as group members: a training pod's container groups are its job's, an
//! inference pod's its pool's. A pod joins (its job is created where it is the first), each
//! container group is added as it appears, and a pod that leaves takes its groups out and
//! hands back the threads still in them, for the daemon to unclassify (a relabelled pod runs
//! on, and must not stay counted as training or inference).
//!
//! A training pod that finds every job id taken (`MAX_JOBS`) waits, its containers noted as
//! they come, and is taken when a job ends and its id is freed: it is never left
//! unprotected for its whole life because it arrived at a busy moment. Status and /metrics
//! show it as waiting until then.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use super::{GroupClass, Registry, RegistryError, group_threads};
use crate::{
    config::Source,
    kubernetes::{classify::Role, node_groups::ManagedPod},
};

/// A managed pod, as `status` names it.
#[derive(Debug, Clone)]
pub(crate) struct PodMember {
    /// `namespace/name`.
    pub key: String,
    /// Its job or pool.
    pub group: String,
    pub class: GroupClass,
    /// Its container groups, in the hierarchy threads are listed from.
    pub containers: Vec<PathBuf>,
    /// The CPU manager's exclusive CPUs, where it has any.
    pub exclusive_cpus: Option<String>,
}

/// A training pod refused for want of a job id, waiting for one.
#[derive(Debug, Clone)]
pub(crate) struct WaitingPod {
    pub pod: ManagedPod,
    /// Its container groups seen meanwhile, in the hierarchy threads are listed from.
    pub containers: Vec<PathBuf>,
    /// Why it was not taken.
    pub reason: String,
    since: Instant,
}

impl PodMember {
    /// "training", "online" or "offline", by its group's class.
    pub(crate) fn role(&self) -> &'static str {
        match self.class {
            GroupClass::Training => "training",
            GroupClass::Online => "online",
            GroupClass::Offline => "offline",
        }
    }
}

/// Longest pod job name taken: a namespace (63) and a name (253) with their '/'.
const MAX_POD_JOB_NAME: usize = 63 + 1 + 253;

impl Registry {
    /// Pod `pod` joins its job (created where new) or its pool. A training pod that finds
    /// every job id taken waits for one (`retry_waiting`), and the error says so.
    pub(crate) fn join_pod(&mut self, pod: &ManagedPod) -> Result<(), RegistryError> {
        let (group, class) = match &pod.role {
            Role::Training { job } => {
                check_pod_job_name(job)?;
                if let Err(err) = self.training_job(job) {
                    if matches!(err, RegistryError::TooManyJobs { .. }) {
                        self.waiting
                            .entry(pod.uid.clone())
                            .or_insert_with(|| WaitingPod {
                                pod: pod.clone(),
                                containers: Vec::new(),
                                reason: err.to_string(),
                                since: Instant::now(),
                            });
                    }
                    return Err(err);
                }
                (job.clone(), GroupClass::Training)
            }
            Role::Pool { pool, .. } => {
                let found = self.pools.iter().find(|p| &p.name == pool);
                let class = found.ok_or_else(|| self.unknown_pool(pool))?.class;
                (pool.clone(), class)
            }
        };
        self.waiting.remove(&pod.uid);
        self.pods.insert(
            pod.uid.clone(),
            PodMember {
                key: pod.key.clone(),
                group,
                class,
                containers: Vec::new(),
                exclusive_cpus: pod.exclusive_cpus.clone(),
            },
        );
        Ok(())
    }

    /// Container group `dir` of pod `uid` becomes a member of the pod's group.
    pub(crate) fn add_pod_container(&mut self, uid: &str, dir: PathBuf) {
        if let Some(waiting) = self.waiting.get_mut(uid) {
            if !waiting.containers.contains(&dir) {
                waiting.containers.push(dir);
            }
            return;
        }
        let Some(pod) = self.pods.get_mut(uid) else {
            return;
        };
        if pod.containers.contains(&dir) {
            return;
        }
        pod.containers.push(dir.clone());
        let (class, name) = (pod.class, pod.group.clone());
        if let Some(group) = self.group_mut(class, &name) {
            group.sources.push(Source::Cgroup(dir));
        }
    }

    /// Container group `dir` of pod `uid` is gone.
    pub(crate) fn remove_pod_container(&mut self, uid: &str, dir: &Path) {
        if let Some(waiting) = self.waiting.get_mut(uid) {
            waiting.containers.retain(|c| c != dir);
        }
        let Some(pod) = self.pods.get_mut(uid) else {
            return;
        };
        pod.containers.retain(|c| c != dir);
        let (class, name) = (pod.class, pod.group.clone());
        if let Some(group) = self.group_mut(class, &name) {
            group
                .sources
                .retain(|s| !matches!(s, Source::Cgroup(d) if d == dir));
        }
    }

    /// Pod `uid` leaves: its container groups are taken out of its group, a training job
    /// left with no member goes, and the threads its groups still hold are returned.
    pub(crate) fn leave_pod(&mut self, uid: &str) -> Vec<u32> {
        // A waiting pod's threads were never classified.
        self.waiting.remove(uid);
        let Some(pod) = self.pods.remove(uid) else {
            return Vec::new();
        };
        let sources: Vec<Source> = pod.containers.iter().cloned().map(Source::Cgroup).collect();
        let threads = group_threads(&sources).into_iter().collect();
        if let Some(group) = self.group_mut(pod.class, &pod.group) {
            group.sources.retain(|s| !sources.contains(s));
        }
        let emptied = pod.class == GroupClass::Training
            && !self
                .pods
                .values()
                .any(|p| p.class == GroupClass::Training && p.group == pod.group);
        if emptied
            && let Some(index) = self
                .training
                .iter()
                .position(|job| job.name == pod.group && !job.from_config && job.sources.is_empty())
        {
            self.remove_job(index);
        }
        threads
    }

    /// Takes the waiting training pods, oldest first, while job ids are free. Returns the
    /// pods taken.
    pub(crate) fn retry_waiting(&mut self) -> Vec<String> {
        let mut order: Vec<(Instant, String)> = self
            .waiting
            .iter()
            .map(|(uid, waiting)| (waiting.since, uid.clone()))
            .collect();
        order.sort();
        let mut taken = Vec::new();
        for (_, uid) in order {
            let waiting = self.waiting.remove(&uid).expect("listed above");
            match self.join_pod(&waiting.pod) {
                Ok(()) => {
                    for dir in waiting.containers {
                        self.add_pod_container(&uid, dir);
                    }
                    taken.push(waiting.pod.key);
                }
                Err(_) => {
                    // Still no id: it keeps its place and what it saw.
                    self.waiting.insert(uid, waiting);
                    break;
                }
            }
        }
        taken
    }

    fn group_mut(&mut self, class: GroupClass, name: &str) -> Option<&mut super::Group> {
        let groups = if class == GroupClass::Training {
            &mut self.training
        } else {
            &mut self.pools
        };
        groups.iter_mut().find(|g| g.name == name)
    }
}

/// A pod's job name: `namespace/name`, or its `reamer.io/job` (a label value's characters).
fn check_pod_job_name(name: &str) -> Result<(), RegistryError> {
    let fits = !name.is_empty()
        && name.len() <= MAX_POD_JOB_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if fits {
        Ok(())
    } else {
        Err(RegistryError::PodJobName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use enforcer_common::MAX_JOBS;

    use super::*;
    use crate::kubernetes::classify::RoleName;

    fn pod(uid: &str, role: Role) -> ManagedPod {
        ManagedPod {
            uid: uid.to_owned(),
            key: format!("ml/{uid}"),
            role,
            group: PathBuf::from("kubepods"),
            exclusive_cpus: None,
        }
    }

    #[test]
    fn a_training_pods_job_lives_while_one_of_its_pods_does_and_frees_its_id() {
        let mut registry = Registry::default();
        let job = Role::Training {
            job: "ml/resnet".to_owned(),
        };
        registry.join_pod(&pod("a", job.clone())).unwrap();
        registry.join_pod(&pod("b", job)).unwrap();
        let dir = std::env::temp_dir();
        registry.add_pod_container("a", dir.join("a1"));
        registry.add_pod_container("a", dir.join("a1"));
        registry.add_pod_container("b", dir.join("b1"));
        assert_eq!(registry.training.len(), 1);
        assert_eq!(registry.training[0].sources.len(), 2);
        registry.leave_pod("a");
        assert_eq!(
            registry.training[0].sources,
            [Source::Cgroup(dir.join("b1"))]
        );
        registry.remove_pod_container("b", &dir.join("b1"));
        registry.leave_pod("b");
        assert!(
            registry.training.is_empty(),
            "its last pod gone, the job goes"
        );

        registry
            .join_pod(&pod(
                "c",
                Role::Training {
                    job: "ml/other".to_owned(),
                },
            ))
            .unwrap();
        assert_eq!(registry.training[0].id, 0, "the freed id is taken again");
        assert_eq!(
            registry.take_to_zero(),
            [0],
            "with the ended job's totals to zero first"
        );
        let err = registry
            .join_pod(&pod(
                "d",
                Role::Training {
                    job: "ml/a b".to_owned(),
                },
            ))
            .unwrap_err();
        assert!(err.to_string().contains("ml/a b"), "{err}");
        let err = registry
            .join_pod(&pod(
                "e",
                Role::Pool {
                    pool: "batch".to_owned(),
                    kind: RoleName::Offline,
                },
            ))
            .unwrap_err();
        assert!(matches!(err, RegistryError::UnknownPool { .. }), "{err}");
    }

    #[test]
    fn a_training_pod_refused_for_want_of_an_id_waits_and_is_taken_when_one_frees() {
        let mut registry = Registry::default();
        let training = |n: usize| {
            pod(
                &format!("p{n}"),
                Role::Training {
                    job: format!("ml/job-{n}"),
                },
            )
        };
        for n in 0..MAX_JOBS as usize {
            registry.join_pod(&training(n)).unwrap();
        }
        let late = training(64);
        let err = registry.join_pod(&late).unwrap_err();
        assert!(matches!(err, RegistryError::TooManyJobs { .. }), "{err}");
        assert!(registry.waiting["p64"].reason.contains("at most 64"));
        let dir = std::env::temp_dir().join("late-container");
        registry.add_pod_container("p64", dir.clone());
        assert!(registry.retry_waiting().is_empty(), "no id free yet");

        registry.leave_pod("p3");
        assert!(registry.slot_available());
        assert_eq!(registry.retry_waiting(), ["ml/p64"]);
        assert_eq!(registry.take_to_zero(), [3]);
        assert!(registry.waiting.is_empty());
        let job = registry
            .training
            .iter()
            .find(|job| job.name == "ml/job-64")
            .unwrap();
        assert_eq!(job.id, 3);
        assert_eq!(
            job.sources,
            [Source::Cgroup(dir)],
            "the container it had meanwhile"
        );

        // A waiting pod that leaves waits no more.
        registry.join_pod(&training(65)).unwrap_err();
        registry.leave_pod("p65");
        assert!(registry.waiting.is_empty());
    }
}
