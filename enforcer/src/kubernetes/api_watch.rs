//! The pods of this node, from the API server: a list, then a watch from the list's
//! resourceVersion, with bookmarks, and a fresh list whenever the server answers 410 Gone
//! (kube-runtime's watcher, the same protocol client-go's informers speak). A field selector
//! on `spec.nodeName` keeps it to this node's pods.
//!
//! The watch yields changes against the last state it knew, so that a consumer holds no copy
//! of its own: a relist says which pods went away while the watch was down.

use std::collections::BTreeMap;

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt as _, watcher},
};

use super::pod::Pod;

/// A change to the node's pods.
#[derive(Debug, Clone)]
pub enum PodChange {
    /// A pod that is new, or changed.
    Upsert(Box<Pod>),
    /// A pod that is gone: deleted, or missing from a relist.
    Removed { uid: String, key: String },
}

/// Why the watch could not yield a change; it goes on after each.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("the API server's pod watch failed: {0}")]
    Watch(#[from] watcher::Error),
    #[error("pod {key}: not a pod the enforcer can read: {error}")]
    Unreadable {
        key: String,
        error: serde_json::Error,
    },
}

/// The API's Pod, in the enforcer's own reading of it (`pod.rs`): the same JSON, so a
/// field's meaning is the API's, tested on recorded objects.
pub fn from_api(pod: &ApiPod) -> Result<Pod, WatchError> {
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("?")
    );
    serde_json::to_value(pod)
        .and_then(serde_json::from_value)
        .map_err(|error| WatchError::Unreadable { key, error })
}

/// The pods the watch knows, by UID, and the changes each watcher event makes to them.
#[derive(Default)]
pub struct PodStore {
    pods: BTreeMap<String, Pod>,
    /// A relist in progress: the pods it has listed so far.
    relisting: Option<BTreeMap<String, Pod>>,
}

impl PodStore {
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values()
    }

    /// Applies one watcher event; returns the changes it makes.
    pub fn apply(&mut self, event: watcher::Event<ApiPod>) -> Vec<Result<PodChange, WatchError>> {
        match event {
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(pod) => match from_api(&pod) {
                Ok(pod) => {
                    self.relisting
                        .get_or_insert_with(BTreeMap::new)
                        .insert(pod.metadata.uid.clone(), pod);
                    Vec::new()
                }
                Err(err) => vec![Err(err)],
            },
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let mut changes: Vec<Result<PodChange, WatchError>> = self
                    .pods
                    .iter()
                    .filter(|(uid, _)| !listed.contains_key(*uid))
                    .map(|(uid, pod)| {
                        Ok(PodChange::Removed {
                            uid: uid.clone(),
                            key: pod.key(),
                        })
                    })
                    .collect();
                changes.extend(
                    listed
                        .values()
                        .map(|pod| Ok(PodChange::Upsert(Box::new(pod.clone())))),
                );
                self.pods = listed;
                changes
            }
            watcher::Event::Apply(pod) => match from_api(&pod) {
                Ok(pod) => {
                    self.pods.insert(pod.metadata.uid.clone(), pod.clone());
                    vec![Ok(PodChange::Upsert(Box::new(pod)))]
                }
                Err(err) => vec![Err(err)],
            },
            watcher::Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let known = self.pods.remove(&uid);
                let key = known.map_or_else(
                    || {
                        format!(
                            "{}/{}",
                            pod.metadata.namespace.as_deref().unwrap_or("default"),
                            pod.metadata.name.as_deref().unwrap_or("?")
                        )
                    },
                    |pod| pod.key(),
                );
                vec![Ok(PodChange::Removed { uid, key })]
            }
        }
    }
}

/// The changes to the pods on `node`, for as long as the stream is polled. Errors (the API
/// server unreachable, a watch that failed) come as items, and the watch retries them with
/// kube-runtime's default backoff (exponential, up to about 5 minutes apart).
pub fn pod_changes(
    client: Client,
    node: &str,
) -> impl Stream<Item = Result<PodChange, WatchError>> + Send + use<> {
    let pods: Api<ApiPod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut store = PodStore::default();
    watcher(pods, config)
        .default_backoff()
        .flat_map(move |event| {
            let changes = match event {
                Ok(event) => store.apply(event),
                Err(err) => vec![Err(WatchError::from(err))],
            };
            futures::stream::iter(changes)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_pod(uid: &str, name: &str) -> ApiPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "uid": uid,
                         "labels": {"reamer.io/role": "offline"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
            "status": {"qosClass": "BestEffort"}
        }))
        .unwrap()
    }

    fn keys(changes: Vec<Result<PodChange, WatchError>>) -> Vec<String> {
        changes
            .into_iter()
            .map(|change| match change.unwrap() {
                PodChange::Upsert(pod) => format!("+{}", pod.key()),
                PodChange::Removed { key, .. } => format!("-{key}"),
            })
            .collect()
    }

    #[test]
    fn a_relist_removes_the_pods_that_went_away_while_the_watch_was_down() {
        let mut store = PodStore::default();
        assert!(store.apply(watcher::Event::Init).is_empty());
        assert!(
            store
                .apply(watcher::Event::InitApply(api_pod("a", "a-0")))
                .is_empty()
        );
        assert!(
            store
                .apply(watcher::Event::InitApply(api_pod("b", "b-0")))
                .is_empty()
        );
        assert_eq!(
            keys(store.apply(watcher::Event::InitDone)),
            ["+ml/a-0", "+ml/b-0"]
        );
        assert_eq!(
            keys(store.apply(watcher::Event::Apply(api_pod("c", "c-0")))),
            ["+ml/c-0"]
        );
        assert_eq!(
            keys(store.apply(watcher::Event::Delete(api_pod("a", "a-0")))),
            ["-ml/a-0"]
        );
        // The watch lost (410 Gone): the relist has only b; c went away meanwhile.
        store.apply(watcher::Event::Init);
        store.apply(watcher::Event::InitApply(api_pod("b", "b-0")));
        assert_eq!(
            keys(store.apply(watcher::Event::InitDone)),
            ["-ml/c-0", "+ml/b-0"]
        );
        assert_eq!(store.pods().count(), 1);
    }
}
