//! The node's Kubernetes pods, consumed: each change `kubernetes::node_groups` yields becomes
//! registry members (whose threads the sensor then classifies) and, for inference pods, their
//! pool's decisions written into their own groups (`actuate::pod_in_place`).
//!
//! The API server unreachable, at start or later, changes nothing already known: the watch
//! retries with backoff, and the daemon keeps enforcing on the pods and groups it has.

use std::{sync::Arc, time::Duration};

use tracing::{info, warn};

use super::{loops, state::Shared};
use crate::{
    actuate::thread_policy,
    config::{PoolSettings, kubernetes::KubernetesSection},
    kubernetes::{
        classify::{Classifier, Role},
        node_groups::{self, NodeChange, NodeGroups},
        pod_cgroup::kubelet_hierarchy,
    },
};

/// The longest wait between two attempts at a client for the API server.
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(60);

/// Starts following the node's pods on the daemon's runtime.
pub(crate) fn start(
    shared: Arc<Shared>,
    settings: KubernetesSection,
    pools: &[PoolSettings],
) -> tokio::task::JoinHandle<()> {
    let classifier = Classifier::of_pools(
        pools.iter().map(|p| (p.name.clone(), p.is_online())),
        settings.selector.clone(),
    )
    .with_claims(settings.claims.clone());
    tokio::spawn(async move {
        let Some(node) = settings.node_name() else {
            warn!(
                "Kubernetes: no node name ([kubernetes] node_name, $NODE_NAME or the host \
                 name): pods are not followed"
            );
            return;
        };
        let client = connect(&node).await;
        let hierarchy = kubelet_hierarchy();
        let state_file = settings.cpu_manager_state.clone();
        let groups = NodeGroups::new(classifier, settings.layout(), hierarchy.clone());
        let mut changes = match node_groups::follow(client, node.clone(), groups, state_file) {
            Ok(changes) => changes,
            Err(err) => {
                warn!(
                    "Kubernetes: cannot watch pod groups (inotify): {err}; pods are not followed"
                );
                return;
            }
        };
        info!(node, hierarchy = %hierarchy.display(), "Kubernetes: following the node's pods");
        while let Some(change) = changes.recv().await {
            // Cgroup writes, /proc walks and the daemon's locks: off the async runtime, one
            // change at a time and in order.
            let (shared, hierarchy) = (shared.clone(), hierarchy.clone());
            let applied =
                tokio::task::spawn_blocking(move || apply(&shared, &hierarchy, change)).await;
            if let Err(err) = applied {
                warn!("Kubernetes: applying a pod change failed: {err}");
            }
        }
    })
}

/// A client for the API server: the service account in a pod, else $KUBECONFIG or
/// ~/.kube/config. Retried with backoff, logged, until one is had.
async fn connect(node: &str) -> kube::Client {
    let mut backoff = Duration::from_secs(1);
    loop {
        match kube::Client::try_default().await {
            Ok(client) => return client,
            Err(err) => warn!(
                node,
                retry_in_s = backoff.as_secs(),
                "Kubernetes: no client for the API server (in a pod: its service account; \
                 elsewhere: $KUBECONFIG or ~/.kube/config): {err}"
            ),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_CONNECT_BACKOFF);
    }
}

/// One change, applied. Locks are taken in `Shared`'s order: registry, enforcement, sensor.
fn apply(shared: &Shared, hierarchy: &std::path::Path, change: NodeChange) {
    match change {
        NodeChange::Joined(pod) => {
            let mut registry = shared.registry.lock().expect("registry poisoned");
            if let Err(err) = registry.join_pod(&pod) {
                if registry.waiting.contains_key(&pod.uid) {
                    warn!(
                        pod = pod.key,
                        "Kubernetes: training pod waits for a job slot, unmeasured until a job \
                         ends: {err}"
                    );
                } else {
                    warn!(pod = pod.key, "Kubernetes: pod not taken: {err}");
                }
                return;
            }
            // A training pod's new job may have an ended job's id: its totals go first.
            loops::zero_new_jobs(
                &mut registry,
                &mut shared.sensor.lock().expect("sensor poisoned"),
            );
            if let Role::Pool { pool, .. } = &pod.role {
                let attached = shared
                    .enforcement
                    .lock()
                    .expect("enforcement poisoned")
                    .attach_pod(
                        pool,
                        &pod.uid,
                        &pod.key,
                        &pod.group,
                        pod.exclusive_cpus.as_deref(),
                    );
                if let Err(err) = attached {
                    warn!(pod = pod.key, "Kubernetes: pod not placed: {err}");
                }
            }
            info!(pod = pod.key, role = ?pod.role, exclusive_cpus = ?pod.exclusive_cpus, "Kubernetes: pod joined");
        }
        NodeChange::ContainerAppeared { uid, group } => {
            let mut registry = shared.registry.lock().expect("registry poisoned");
            if !registry.pods.contains_key(&uid) {
                return;
            }
            registry.add_pod_container(&uid, hierarchy.join(&group));
            shared
                .enforcement
                .lock()
                .expect("enforcement poisoned")
                .pools_mut()
                .add_pod_container(&uid, &group);
            // The runtime puts the container's processes in after making its group: those
            // there already are classified now, the rest by the reconcile within a second.
            let mut sensor = shared.sensor.lock().expect("sensor poisoned");
            loops::classify(&mut registry, &mut sensor);
        }
        NodeChange::ContainerGone { uid, group } => {
            let mut registry = shared.registry.lock().expect("registry poisoned");
            registry.remove_pod_container(&uid, &hierarchy.join(&group));
            shared
                .enforcement
                .lock()
                .expect("enforcement poisoned")
                .pools_mut()
                .remove_pod_container(&uid, &group);
        }
        NodeChange::Left { uid, key } => {
            let mut registry = shared.registry.lock().expect("registry poisoned");
            let threads = registry.leave_pod(&uid);
            let failed = shared
                .enforcement
                .lock()
                .expect("enforcement poisoned")
                .pools_mut()
                .detach_pod(&uid);
            for err in failed {
                warn!(pod = key, "Kubernetes: releasing the pod's groups: {err}");
            }
            unclassify(shared, &threads);
            drop(registry);
            info!(
                pod = key,
                still_running_threads = threads.len(),
                "Kubernetes: pod left"
            );
        }
        NodeChange::Refused { uid, key, reason } => {
            warn!(
                pod = key,
                "Kubernetes: pod marked for reamer not taken: {reason}"
            );
            let mut registry = shared.registry.lock().expect("registry poisoned");
            registry.refused.insert(uid, (key, reason));
        }
        NodeChange::RefusalEnded { uid } => {
            let mut registry = shared.registry.lock().expect("registry poisoned");
            registry.refused.remove(&uid);
        }
        NodeChange::WatchFailed(message) => {
            warn!("Kubernetes: {message} (retrying; what is known stays enforced)");
        }
    }
}

/// Threads of a pod that left and still run: no longer training's or inference's to the
/// sensor, and out of SCHED_IDLE.
fn unclassify(shared: &Shared, threads: &[u32]) {
    if threads.is_empty() {
        return;
    }
    let mut sensor = shared.sensor.lock().expect("sensor poisoned");
    for tid in threads {
        let _ = sensor.maps.thread_state.remove(tid);
        let _ = sensor.maps.pool_threads.remove(tid);
    }
    if let Err(err) = sensor.classes_changed() {
        warn!("a left pod's threads stay classified to the sensor until the next change: {err}");
    }
    drop(sensor);
    thread_policy::make_normal(threads.iter().copied());
}
