//! The pods of this node, from the API server: a list, then a watch from the list's
//! resourceVersion, with bookmarks, and a fresh list whenever the server answers 410 Gone
//! (kube-runtime's watcher, the same protocol client-go's informers speak). A field selector
//! on `spec.nodeName` keeps it to this node's pods.
//!
//! The watch yields changes against the last state it knew, so that a consumer holds no copy
//! of its own: a relist says which pods went away while the watch was down. What it knows of
//! each pod is only what the enforcer reads (`Pod::trimmed`), and a list comes in pages of
//! `LIST_PAGE` pods, so that neither the pods kept nor a relist in flight grows with what
//! tenants write into their pods.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::{Api, Client, runtime::watcher};

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

/// Pods per list page. An object can hold up to about 1.5 MiB (etcd's limit), and a page is
/// held whole while it is read: 50 pods bound a page to tens of MiB where kube-runtime's
/// default of 500 allowed hundreds.
const LIST_PAGE: u32 = 50;

/// The API's Pod, in the enforcer's own reading of it (`pod.rs`): the same JSON, so a
/// field's meaning is the API's, tested on recorded objects. Only what is read of it is kept:
/// reamer's marks, the labels in `labels_read`, the controlling owner.
pub fn from_api(pod: &ApiPod, labels_read: &BTreeSet<String>) -> Result<Pod, WatchError> {
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("?")
    );
    serde_json::to_value(pod)
        .and_then(serde_json::from_value::<Pod>)
        .map(|pod| pod.trimmed(labels_read))
        .map_err(|error| WatchError::Unreadable { key, error })
}

/// The pods the watch knows, by UID, and the changes each watcher event makes to them.
#[derive(Default)]
pub struct PodStore {
    pods: BTreeMap<String, Pod>,
    /// A relist in progress: the pods it has listed so far.
    relisting: Option<BTreeMap<String, Pod>>,
    /// The labels kept of each pod besides reamer's own (the selectors').
    labels_read: BTreeSet<String>,
}

impl PodStore {
    pub fn new(labels_read: BTreeSet<String>) -> Self {
        Self {
            labels_read,
            ..Self::default()
        }
    }

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
            watcher::Event::InitApply(pod) => match from_api(&pod, &self.labels_read) {
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
            watcher::Event::Apply(pod) => match from_api(&pod, &self.labels_read) {
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

/// The wait before the watch goes on after an error (`RetryPace::after`).
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MOST: Duration = Duration::from_secs(5);

/// How long the watch waits after each error before it goes on.
///
/// kube-runtime's default backoff waits after any error, from 0.8 s doubling up to 30 s, and
/// forgets only after two minutes without one. A malformed object on a watch that is
/// otherwise healthy went through it too: after five of them a pod added next was taken 3.7
/// to 6.6 s later, where pods are enforced within 100 ms of their groups; and after the API
/// server came back, the relist waited 9 to 13 s of backoff accumulated while it was away.
/// Here:
/// - an object that does not parse costs no wait: the watch goes on reading the same stream
///   (it is said, as an error item);
/// - a failed connection, list or watch waits 200 ms, doubling to at most 5 s, with jitter;
/// - any event that arrives resets it.
#[derive(Debug, Default)]
pub struct RetryPace {
    last: Option<Duration>,
}

impl RetryPace {
    /// The wait after `error`.
    pub fn after(&mut self, error: &watcher::Error) -> Duration {
        if matches!(
            error,
            watcher::Error::WatchFailed(kube::Error::SerdeError(_))
        ) {
            return Duration::ZERO;
        }
        let next = self
            .last
            .map_or(RETRY_FIRST, |last| (last * 2).min(RETRY_MOST));
        self.last = Some(next);
        // Up to a quarter less, so that the nodes of a cluster do not all come back at once.
        let jitter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.subsec_nanos() % 1000);
        next - next * jitter / 4000
    }

    /// An event arrived: the connection is good again.
    pub fn after_event(&mut self) {
        self.last = None;
    }
}

/// The changes to the pods on `node`, for as long as the stream is polled. Errors (the API
/// server unreachable, a watch that failed, an object that does not parse) come as items, and
/// the watch goes on after each at the pace of `RetryPace`.
pub fn pod_changes(
    client: Client,
    node: &str,
    labels_read: BTreeSet<String>,
) -> impl Stream<Item = Result<PodChange, WatchError>> + Send + use<> {
    let pods: Api<ApiPod> = Api::all(client);
    let config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node}"))
        .page_size(LIST_PAGE);
    let mut store = PodStore::new(labels_read);
    let events = Box::pin(watcher(pods, config));
    let paced = futures::stream::unfold(
        (events, RetryPace::default(), Duration::ZERO),
        |(mut events, mut pace, wait)| async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let event = events.next().await?;
            let wait = match &event {
                Ok(_) => {
                    pace.after_event();
                    Duration::ZERO
                }
                Err(err) => pace.after(err),
            };
            Some((event, (events, pace, wait)))
        },
    );
    paced.flat_map(move |event| {
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
    fn a_malformed_object_costs_no_wait_and_a_failure_waits_at_most_five_seconds() {
        let mut pace = RetryPace::default();
        let malformed = || {
            let parse = serde_json::from_str::<serde_json::Value>("{not json").unwrap_err();
            watcher::Error::WatchFailed(kube::Error::SerdeError(parse))
        };
        let refused = || watcher::Error::NoResourceVersion;
        assert_eq!(pace.after(&malformed()), Duration::ZERO);
        let waits: Vec<Duration> = (0..8).map(|_| pace.after(&refused())).collect();
        assert!(
            waits[0] <= RETRY_FIRST && waits[0] >= RETRY_FIRST * 3 / 4,
            "{waits:?}"
        );
        assert!(waits[1] > waits[0]);
        assert!(waits.iter().all(|w| *w <= RETRY_MOST), "{waits:?}");
        assert!(waits[7] >= RETRY_MOST * 3 / 4, "{waits:?}");
        assert_eq!(pace.after(&malformed()), Duration::ZERO, "{waits:?}");
        pace.after_event();
        assert!(pace.after(&refused()) <= RETRY_FIRST, "an event resets it");
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
