//! The node's managed pods as the daemon consumes them: which pod is training or joins which
//! pool, and each of its container groups as it appears and goes. The API server's watch says
//! what a pod is; inotify on the pod's group says, within a millisecond of the runtime's
//! mkdir, that a container exists (`container_watch` says why the API is too late for that).
//!
//! `NodeGroups` is the bookkeeping, pure: pods and group events in, changes out. `follow`
//! runs it on the watch and the inotify thread, and hands the changes to the daemon.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use futures::StreamExt as _;
use tokio::sync::mpsc;

use super::{
    api_watch::{PodChange, pod_changes},
    classify::{Classifier, Role},
    container_watch::{self, GroupEvent, WatchCommand},
    cpu_manager::ExclusivePods,
    pod::Pod,
    pod_cgroup::{KubeletLayout, pod_group},
};

/// A pod reamer manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ManagedPod {
    pub uid: String,
    /// `namespace/name`.
    pub key: String,
    pub role: Role,
    /// The pod's group, relative to each cgroup hierarchy's root (the kubelet's cgroup root
    /// included): the same path in cgroup v2's tree and in every v1 hierarchy.
    pub group: PathBuf,
    /// The CPUs the CPU manager gave it for its own, described, where it did: such a pod's
    /// groups are the kubelet's alone.
    pub exclusive_cpus: Option<String>,
}

/// A change the daemon acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeChange {
    /// A pod to manage, new or changed in what it is (a change comes as `Left` first).
    Joined(ManagedPod),
    /// A container group appeared in a managed pod's group, relative like the pod's.
    ContainerAppeared {
        uid: String,
        group: PathBuf,
    },
    ContainerGone {
        uid: String,
        group: PathBuf,
    },
    /// A managed pod is no longer: deleted, being deleted, finished, or no longer marked.
    Left {
        uid: String,
        key: String,
    },
    /// A pod marked for reamer that cannot be taken, and why (said once per reason). Status
    /// shows it until `RefusalEnded`.
    Refused {
        uid: String,
        key: String,
        reason: String,
    },
    /// A refused pod is taken now, or no longer marked, or gone.
    RefusalEnded {
        uid: String,
    },
    /// The API server's watch failed; it is retried with backoff, and what is known stays.
    WatchFailed(String),
}

struct Tracked {
    pod: ManagedPod,
    /// Its container groups' names (children of its group).
    containers: BTreeSet<String>,
}

/// The managed pods, and what each event changes of them.
pub(crate) struct NodeGroups {
    classifier: Classifier,
    layout: KubeletLayout,
    /// The hierarchy whose pod groups are watched: cgroup v2's tree, or v1's `cpu`.
    hierarchy: PathBuf,
    pods: BTreeMap<String, Tracked>,
    /// The last refusal said for each pod, so that a pod refused for the same reason at
    /// every change of its status is said once.
    refused: BTreeMap<String, String>,
}

impl NodeGroups {
    pub(crate) fn new(classifier: Classifier, layout: KubeletLayout, hierarchy: PathBuf) -> Self {
        Self {
            classifier,
            layout,
            hierarchy,
            pods: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    /// The managed pod `uid`, where it is one: for the tests to read.
    #[cfg(test)]
    fn pod(&self, uid: &str) -> Option<&ManagedPod> {
        self.pods.get(uid).map(|tracked| &tracked.pod)
    }

    /// What `pod` makes of it now, with the CPU manager's exclusive pods: the changes, and
    /// the pod groups to start or stop watching.
    pub(crate) fn on_pod(&mut self, pod: &Pod, exclusive: &ExclusivePods) -> Step {
        let uid = pod.metadata.uid.clone();
        let mut step = Step::default();
        let wanted = match self.managed(pod, exclusive) {
            Ok(wanted) => {
                if self.refused.remove(&uid).is_some() {
                    step.changes
                        .push(NodeChange::RefusalEnded { uid: uid.clone() });
                }
                wanted
            }
            Err(reason) => {
                if self.refused.get(&uid) != Some(&reason) {
                    self.refused.insert(uid.clone(), reason.clone());
                    step.changes.push(NodeChange::Refused {
                        uid: uid.clone(),
                        key: pod.key(),
                        reason,
                    });
                }
                None
            }
        };
        let unchanged = match (&wanted, self.pods.get(&uid)) {
            (Some(wanted), Some(tracked)) => *wanted == tracked.pod,
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return step;
        }
        // Changed in what it is: its groups leave the old role before joining the new one.
        let containers = self.leave(&uid, &mut step).unwrap_or_default();
        if let Some(wanted) = wanted {
            step.watch.push(self.hierarchy.join(&wanted.group));
            step.changes.push(NodeChange::Joined(wanted.clone()));
            for child in &containers {
                step.changes.push(NodeChange::ContainerAppeared {
                    uid: uid.clone(),
                    group: wanted.group.join(child),
                });
            }
            self.pods.insert(
                uid,
                Tracked {
                    pod: wanted,
                    containers,
                },
            );
        }
        step
    }

    /// A pod gone from the API (deleted, or missing from a relist).
    pub(crate) fn on_removed(&mut self, uid: &str) -> Step {
        let mut step = Step::default();
        if self.refused.remove(uid).is_some() {
            step.changes.push(NodeChange::RefusalEnded {
                uid: uid.to_owned(),
            });
        }
        self.leave(uid, &mut step);
        step
    }

    /// A change among the watched pod groups' children.
    pub(crate) fn on_group(&mut self, event: GroupEvent) -> Vec<NodeChange> {
        let (pod_dir, child, appeared) = match event {
            GroupEvent::Created { pod_dir, child } => (pod_dir, child, true),
            GroupEvent::Removed { pod_dir, child } => (pod_dir, child, false),
            // Its containers went with it, each said by its own event first.
            GroupEvent::PodGone { .. } => return Vec::new(),
        };
        let hierarchy = &self.hierarchy;
        let Some((uid, tracked)) = self
            .pods
            .iter_mut()
            .find(|(_, tracked)| hierarchy.join(&tracked.pod.group) == pod_dir)
        else {
            return Vec::new();
        };
        let group = tracked.pod.group.join(&child);
        let uid = uid.clone();
        // A container listed when the watch began may also come as an event: said once.
        if appeared {
            return match tracked.containers.insert(child) {
                true => vec![NodeChange::ContainerAppeared { uid, group }],
                false => Vec::new(),
            };
        }
        if tracked.containers.remove(&child) {
            return vec![NodeChange::ContainerGone { uid, group }];
        }
        Vec::new()
    }

    /// Takes pod `uid` out; returns the container groups it had.
    fn leave(&mut self, uid: &str, step: &mut Step) -> Option<BTreeSet<String>> {
        let tracked = self.pods.remove(uid)?;
        step.unwatch.push(self.hierarchy.join(&tracked.pod.group));
        step.changes.push(NodeChange::Left {
            uid: uid.to_owned(),
            key: tracked.pod.key,
        });
        Some(tracked.containers)
    }

    /// The pod as reamer manages it (`managed_pod`).
    fn managed(&self, pod: &Pod, exclusive: &ExclusivePods) -> Result<Option<ManagedPod>, String> {
        managed_pod(
            pod,
            &self.classifier,
            &self.layout,
            &self.hierarchy,
            exclusive,
        )
    }
}

/// The pod as reamer manages it; Ok(None) where it is not managed (unmarked, done, or not
/// admitted by the kubelet yet); the reason where it is marked but cannot be taken. The daemon
/// and `enforcer pods` both decide by it, so they agree.
pub(crate) fn managed_pod(
    pod: &Pod,
    classifier: &Classifier,
    layout: &KubeletLayout,
    hierarchy: &Path,
    exclusive: &ExclusivePods,
) -> Result<Option<ManagedPod>, String> {
    // A pod being deleted or finished is let go at once: the kubelet must be able to stop
    // it, which a frozen container would not let it.
    if pod.is_finished() {
        return Ok(None);
    }
    let Some(role) = classifier.classify(pod).map_err(|err| err.to_string())? else {
        return Ok(None);
    };
    let Some(qos) = pod.status.qos_class else {
        // The kubelet has not admitted it yet: its next status change brings the class.
        return Ok(None);
    };
    let (_, driver) = layout.resolve(hierarchy)?;
    let relative = pod_group(driver, qos, &pod.metadata.uid).map_err(|err| err.to_string())?;
    Ok(Some(ManagedPod {
        uid: pod.metadata.uid.clone(),
        key: pod.key(),
        role,
        group: layout.under_root(&relative),
        exclusive_cpus: exclusive.of(&pod.metadata.uid).map(str::to_owned),
    }))
}

/// What one event makes: the changes, and the pod groups to start and stop watching.
#[derive(Debug, Default)]
pub(crate) struct Step {
    pub changes: Vec<NodeChange>,
    pub watch: Vec<PathBuf>,
    pub unwatch: Vec<PathBuf>,
}

/// Follows the node's pods (the API server's watch) and their container groups (inotify),
/// and sends each change to the daemon, until the receiver is dropped.
pub(crate) fn follow(
    client: kube::Client,
    node: String,
    mut groups: NodeGroups,
    cpu_manager_state: PathBuf,
) -> std::io::Result<mpsc::UnboundedReceiver<NodeChange>> {
    let (commands, mut group_events) = container_watch::spawn(true)?;
    let (out, changes) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let labels_read = groups.classifier.labels_read();
        let mut pods = Box::pin(pod_changes(client, &node, labels_read));
        let mut exclusive_error: Option<String> = None;
        loop {
            let step = tokio::select! {
                change = pods.next() => match change {
                    None => return,
                    Some(Err(err)) => Step {
                        changes: vec![NodeChange::WatchFailed(err.to_string())],
                        ..Step::default()
                    },
                    Some(Ok(PodChange::Upsert(pod))) => {
                        let exclusive =
                            read_exclusive(&cpu_manager_state, &mut exclusive_error, &out);
                        groups.on_pod(&pod, &exclusive)
                    }
                    Some(Ok(PodChange::Removed { uid, .. })) => groups.on_removed(&uid),
                },
                Some(event) = group_events.recv() => Step {
                    changes: groups.on_group(event),
                    ..Step::default()
                },
            };
            for dir in step.unwatch {
                let _ = commands.send(WatchCommand::Unwatch(dir));
            }
            for dir in step.watch {
                let _ = commands.send(WatchCommand::Watch(dir));
            }
            for change in step.changes {
                if out.send(change).is_err() {
                    return;
                }
            }
        }
    });
    Ok(changes)
}

/// The CPU manager's exclusive pods now. A checkpoint that cannot be read is said once (until
/// it can be again), and counts as none.
fn read_exclusive(
    path: &Path,
    said: &mut Option<String>,
    out: &mpsc::UnboundedSender<NodeChange>,
) -> ExclusivePods {
    match ExclusivePods::read(path) {
        Ok(pods) => {
            *said = None;
            pods
        }
        Err(err) => {
            if said.as_ref() != Some(&err) {
                let _ = out.send(NodeChange::WatchFailed(format!(
                    "the CPU manager's checkpoint: {err}; no pod is taken as having exclusive \
                     CPUs until it can be read"
                )));
                *said = Some(err);
            }
            ExclusivePods::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::classify::RoleName;

    const UID: &str = "aaaaaaaa-0000-4000-8000-000000000001";

    fn pod(labels: serde_json::Value, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "batch-0", "namespace": "ml", "uid": UID, "labels": labels},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": phase, "qosClass": "BestEffort"}
        }))
        .unwrap()
    }

    fn groups(root: &Path) -> NodeGroups {
        let classifier = Classifier::new(
            [
                ("batch".to_owned(), RoleName::Offline),
                ("serve".to_owned(), RoleName::Online),
            ]
            .into(),
            Vec::new(),
        );
        let layout = KubeletLayout {
            cgroup_root: PathBuf::from("/k"),
            driver: None,
        };
        NodeGroups::new(classifier, layout, root.to_owned())
    }

    #[test]
    fn a_pod_joins_its_containers_come_and_go_and_a_relabel_moves_them() {
        let root = std::env::temp_dir().join(format!("reamer-node-groups-{}", std::process::id()));
        std::fs::create_dir_all(root.join("k/kubepods")).unwrap();
        let mut node = groups(&root);
        let none = ExclusivePods::default();
        let pod_group = PathBuf::from(format!("k/kubepods/besteffort/pod{UID}"));

        let step = node.on_pod(
            &pod(serde_json::json!({"reamer.io/role": "offline"}), "Running"),
            &none,
        );
        assert_eq!(step.watch, [root.join(&pod_group)]);
        let NodeChange::Joined(joined) = &step.changes[0] else {
            panic!("{:?}", step.changes)
        };
        assert_eq!(joined.group, pod_group);
        assert_eq!(
            joined.role,
            Role::Pool {
                pool: "batch".to_owned(),
                kind: RoleName::Offline
            }
        );
        // The same pod again (a status change): nothing to do.
        let again = node.on_pod(
            &pod(serde_json::json!({"reamer.io/role": "offline"}), "Running"),
            &none,
        );
        assert!(again.changes.is_empty() && again.watch.is_empty());

        let created = GroupEvent::Created {
            pod_dir: root.join(&pod_group),
            child: "c1".to_owned(),
        };
        let appeared = NodeChange::ContainerAppeared {
            uid: UID.to_owned(),
            group: pod_group.join("c1"),
        };
        assert_eq!(
            node.on_group(created.clone()),
            std::slice::from_ref(&appeared)
        );
        assert!(
            node.on_group(created).is_empty(),
            "listed and notified: said once"
        );

        // Relabelled online: it leaves the offline pool, joins the online one with its container.
        let moved = node.on_pod(
            &pod(serde_json::json!({"reamer.io/role": "online"}), "Running"),
            &none,
        );
        assert!(matches!(&moved.changes[0], NodeChange::Left { .. }));
        assert!(
            matches!(&moved.changes[1], NodeChange::Joined(p) if p.role == Role::Pool { pool: "serve".to_owned(), kind: RoleName::Online })
        );
        assert_eq!(moved.changes[2], appeared);

        assert_eq!(
            node.on_group(GroupEvent::Removed {
                pod_dir: root.join(&pod_group),
                child: "c1".to_owned()
            }),
            [NodeChange::ContainerGone {
                uid: UID.to_owned(),
                group: pod_group.join("c1")
            }]
        );
        // Finished: let go at once.
        let done = node.on_pod(
            &pod(serde_json::json!({"reamer.io/role": "online"}), "Succeeded"),
            &none,
        );
        assert_eq!(
            done.changes,
            [NodeChange::Left {
                uid: UID.to_owned(),
                key: "ml/batch-0".to_owned()
            }]
        );
        assert_eq!(done.unwatch, [root.join(&pod_group)]);
        assert!(node.pod(UID).is_none());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_refusal_is_said_once_and_the_cpu_managers_pods_are_marked() {
        let root = std::env::temp_dir().join(format!("reamer-node-refused-{}", std::process::id()));
        std::fs::create_dir_all(root.join("k/kubepods")).unwrap();
        let mut node = groups(&root);
        let bad = pod(
            serde_json::json!({"reamer.io/role": "offline", "reamer.io/pool": "gone"}),
            "Running",
        );
        let step = node.on_pod(&bad, &ExclusivePods::default());
        assert!(
            matches!(&step.changes[..], [NodeChange::Refused { reason, .. }] if reason.contains("\"gone\""))
        );
        assert!(
            node.on_pod(&bad, &ExclusivePods::default())
                .changes
                .is_empty()
        );

        let exclusive = ExclusivePods::parse(&format!(
            r#"{{"policyName":"static","entries":{{"{UID}":{{"main":"2-3"}}}}}}"#
        ))
        .unwrap();
        let step = node.on_pod(
            &pod(serde_json::json!({"reamer.io/role": "offline"}), "Running"),
            &exclusive,
        );
        assert!(
            matches!(&step.changes[..], [NodeChange::RefusalEnded { .. }, NodeChange::Joined(p)] if p.exclusive_cpus.as_deref() == Some("main: 2-3")),
            "the refusal ends as the pod is taken: {:?}",
            step.changes
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
