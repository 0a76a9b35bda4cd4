//! The pod watch against the API server stand-in (`support`): a list, events and
//! bookmarks on the watch, and a fresh list after 410 Gone.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use enforcer::kubernetes::api_watch::{PodChange, WatchError, pod_changes};
use futures::StreamExt as _;
use serde_json::json;
use tokio::sync::mpsc;

mod support;
use support::{ApiServer, Shared, pod, send_event};

/// The next change that is not an error (errors are counted), within 10 s.
async fn next_change(
    changes: &mut mpsc::UnboundedReceiver<Result<PodChange, WatchError>>,
    errors: &mut Vec<String>,
) -> String {
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("a change within 10 s")
            .expect("the watch goes on");
        match item {
            Ok(PodChange::Upsert(pod)) => {
                return format!(
                    "+{} {}",
                    pod.key(),
                    pod.marked("reamer.io/role").unwrap_or("-")
                );
            }
            Ok(PodChange::Removed { key, .. }) => return format!("-{key}"),
            Err(err) => errors.push(err.to_string()),
        }
    }
}

/// The changes the watch of node-1's pods yields from `server`, served on loopback. The watch
/// runs as the daemon runs it: polled all along, not only when a change is awaited (the
/// watcher opens its watch only while polled).
async fn follow(server: &Shared) -> mpsc::UnboundedReceiver<Result<PodChange, WatchError>> {
    let url = support::start(server.clone()).await;
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let (send, changes) = mpsc::unbounded_channel();
    let watch = pod_changes(client, "node-1", Default::default());
    tokio::spawn(async move {
        let mut watch = Box::pin(watch);
        while let Some(change) = watch.next().await {
            if send.send(change).is_err() {
                return;
            }
        }
    });
    changes
}

/// A server with one offline pod, followed: its list's change already taken.
async fn watching_one_pod() -> (
    Shared,
    mpsc::UnboundedReceiver<Result<PodChange, WatchError>>,
    Vec<String>,
) {
    let server: Shared = Arc::new(Mutex::new(ApiServer {
        pods: vec![pod("a", "a-0", "offline", 1)],
        resource_version: 1,
        ..ApiServer::default()
    }));
    let mut changes = follow(&server).await;
    let mut errors = Vec::new();
    assert_eq!(
        next_change(&mut changes, &mut errors).await,
        "+ml/a-0 offline"
    );
    (server, changes, errors)
}

#[tokio::test]
async fn the_watch_lists_follows_events_and_bookmarks_and_relists_after_410_gone() {
    // The list.
    let (server, mut changes, mut errors) = watching_one_pod().await;
    let list = server.lock().unwrap().lists[0].clone();
    assert!(
        list.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "{list}"
    );

    // The watch, from the list's resourceVersion.
    send_event(
        &server,
        json!({"type": "ADDED", "object": pod("b", "b-0", "online", 2)}),
    )
    .await;
    assert_eq!(
        next_change(&mut changes, &mut errors).await,
        "+ml/b-0 online"
    );
    let watch = server.lock().unwrap().watches[0].clone();
    assert!(watch.contains("resourceVersion=1"), "{watch}");
    assert!(watch.contains("allowWatchBookmarks=true"), "{watch}");
    // A bookmark moves the resourceVersion and changes no pod: the next change is the edit.
    send_event(
        &server,
        json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "Pod",
                                              "metadata": {"resourceVersion": "3"}}}),
    )
    .await;
    send_event(
        &server,
        json!({"type": "MODIFIED", "object": pod("b", "b-0", "offline", 4)}),
    )
    .await;
    assert_eq!(
        next_change(&mut changes, &mut errors).await,
        "+ml/b-0 offline"
    );
    send_event(
        &server,
        json!({"type": "DELETED", "object": pod("a", "a-0", "offline", 5)}),
    )
    .await;
    assert_eq!(next_change(&mut changes, &mut errors).await, "-ml/a-0");

    // The server compacted its history past the watch: 410 Gone. Meanwhile b went away and c
    // came; only a fresh list can tell.
    {
        let mut state = server.lock().unwrap();
        state.pods = vec![pod("c", "c-0", "training", 9)];
        state.resource_version = 9;
    }
    send_event(
        &server,
        json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status", "metadata": {},
               "status": "Failure", "message": "too old resource version: 5 (8)",
               "reason": "Expired", "code": 410}}),
    )
    .await;
    server.lock().unwrap().watch = None;
    let mut after = vec![
        next_change(&mut changes, &mut errors).await,
        next_change(&mut changes, &mut errors).await,
    ];
    after.sort();
    assert_eq!(after, ["+ml/c-0 training", "-ml/b-0"]);
    assert_eq!(
        server.lock().unwrap().lists.len(),
        2,
        "a fresh list after 410"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("410") || e.contains("too old")),
        "the 410 is said: {errors:?}"
    );
}

#[tokio::test]
async fn malformed_lines_on_the_watch_cost_no_backoff() {
    let (server, mut changes, mut errors) = watching_one_pod().await;
    // Five lines the API server should never send, then a pod: it arrives at once, not after
    // the seconds of backoff each bad line cost before.
    send_event(
        &server,
        json!({"type": "BOOKMARK", "object": {"apiVersion": "v1",
        "kind": "Pod", "metadata": {"resourceVersion": "1"}}}),
    )
    .await;
    let watch = server.lock().unwrap().watch.clone().unwrap();
    for _ in 0..5 {
        watch.send("{not json".to_owned()).unwrap();
    }
    let sent = std::time::Instant::now();
    send_event(
        &server,
        json!({"type": "ADDED", "object": pod("b", "b-0", "offline", 2)}),
    )
    .await;
    assert_eq!(
        next_change(&mut changes, &mut errors).await,
        "+ml/b-0 offline"
    );
    let took = sent.elapsed();
    println!("a pod after five malformed lines arrived {took:?} after it was sent");
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(errors.len(), 5, "each bad line is said: {errors:?}");
    assert_eq!(
        server.lock().unwrap().watches.len(),
        1,
        "the same watch read on"
    );
}
