//! What the Kubernetes tests share: removing a kubelet-shaped cgroup tree, and an API server
//! stand-in on loopback, speaking the real protocol:
//! `GET /api/v1/pods` lists (a PodList with its resourceVersion), and with `watch=true`
//! streams watch events as JSON lines, fed by the test (ADDED, MODIFIED, DELETED, BOOKMARK,
//! and an ERROR 410 Gone that forces a fresh list). Pods are objects of the real schema. No
//! cluster can run here; this is the API server's side of the protocol, nothing more.

#![allow(dead_code)] // each test file uses part of it

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::Body,
    extract::{RawQuery, State},
    routing::get,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

#[derive(Default)]
pub struct ApiServer {
    pub pods: Vec<Value>,
    pub resource_version: u64,
    pub lists: Vec<String>,
    pub watches: Vec<String>,
    /// The open watch's stream, fed by the test.
    pub watch: Option<mpsc::UnboundedSender<String>>,
}

pub type Shared = Arc<Mutex<ApiServer>>;

pub fn pod(uid: &str, name: &str, role: &str, resource_version: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid,
                     "resourceVersion": resource_version.to_string(),
                     "labels": {"reamer.io/role": role}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "worker"}]},
        "status": {"phase": "Running", "qosClass": "BestEffort", "containerStatuses": [
            {"name": "main", "ready": true, "restartCount": 0, "image": "worker", "imageID": "",
             "containerID": format!("containerd://{:0>64}", uid.len())}]}
    })
}

/// A running pod of node-1 in namespace `ml`, owned by Job `<name>-job`, with `labels` and
/// QoS class `qos`, and one container `main` whose status names `container_id`
/// ("containerd://<id>"), or none yet (the runtime still making it).
pub fn api_pod(
    uid: &str,
    name: &str,
    labels: Value,
    qos: &str,
    container_id: Option<&str>,
) -> Value {
    let statuses = match container_id {
        Some(id) => json!([{"name": "main", "ready": true, "restartCount": 0, "image": "x",
                            "imageID": "", "containerID": id}]),
        None => json!([]),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": labels,
                     "resourceVersion": "1",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": format!("{name}-job"), "uid": "0",
                                          "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running", "qosClass": qos, "containerStatuses": statuses}
    })
}

pub async fn pods(
    State(server): State<Shared>,
    RawQuery(query): RawQuery,
) -> axum::response::Response {
    let query = query.unwrap_or_default();
    let mut server = server.lock().unwrap();
    if query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
    {
        server.watches.push(query);
        let (send, receive) = mpsc::unbounded_channel::<String>();
        server.watch = Some(send);
        let lines = futures::stream::unfold(receive, |mut receive| async move {
            let line = receive.recv().await?;
            Some((Ok::<_, std::io::Error>(format!("{line}\n")), receive))
        });
        return axum::response::Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(lines))
            .unwrap();
    }
    // A list in pages, as the API server serves `limit`: the next page's `continue` token is
    // where it starts (the real one is opaque; a client only hands it back).
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let start = param("continue").unwrap_or(0).min(server.pods.len());
    let end = param("limit").map_or(server.pods.len(), |limit| {
        (start + limit.max(1)).min(server.pods.len())
    });
    let mut metadata = json!({"resourceVersion": server.resource_version.to_string()});
    if end < server.pods.len() {
        metadata["continue"] = json!(end.to_string());
    }
    server.lists.push(query);
    let list = json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": metadata,
        "items": server.pods[start..end],
    });
    axum::response::Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(list.to_string()))
        .unwrap()
}

/// Serves `server` on a loopback port; returns its URL.
pub async fn start(server: Shared) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = Router::new()
        .route("/api/v1/pods", get(pods))
        .with_state(server);
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// A kubeconfig that points kube's clients at `url`, with no credentials.
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {url}\n\
         contexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: nobody\n\
         current-context: stand-in\nusers:\n- name: nobody\n  user: {{}}\n"
    )
}

pub fn v2_host() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The directory of group `relative` (under the hierarchies' root) holding `controller`.
pub fn dir(controller: &str, relative: &str) -> PathBuf {
    if v2_host() {
        PathBuf::from(format!("/sys/fs/cgroup/{relative}"))
    } else {
        PathBuf::from(format!("/sys/fs/cgroup/{controller}/{relative}"))
    }
}

/// The hierarchies a kubelet (and runc) makes a group in, in runc's order: cpuset before cpu,
/// freezer after.
pub fn hierarchies() -> &'static [&'static str] {
    if v2_host() {
        &["unified"]
    } else {
        &["cpuset", "cpu", "freezer"]
    }
}

/// Makes group `relative` as the kubelet and runc would: each level in each hierarchy, a v1
/// cpuset given its parent's CPUs and memory nodes (a new one has none), v2 controllers
/// enabled for the children.
pub fn kubelet_mkdir(relative: &str) {
    for controller in hierarchies() {
        let mut path = String::new();
        for part in relative.split('/') {
            let parent = dir(controller, &path);
            path = if path.is_empty() {
                part.to_owned()
            } else {
                format!("{path}/{part}")
            };
            let here = dir(controller, &path);
            if here.exists() {
                continue;
            }
            if v2_host() {
                let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+cpu +cpuset");
            }
            std::fs::create_dir(&here)
                .unwrap_or_else(|e| panic!("creating {}: {e}", here.display()));
            if *controller == "cpuset" {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let value = std::fs::read_to_string(parent.join(file)).unwrap();
                    std::fs::write(here.join(file), value.trim()).unwrap();
                }
            }
        }
    }
}

/// Moves process `pid` into group `relative` in every hierarchy, as runc does.
pub fn kubelet_move(pid: u32, relative: &str) {
    for controller in hierarchies() {
        let procs = dir(controller, relative).join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", procs.display()));
    }
}

/// Removes a test's kubelet tree `dir` (under the tests' `reamer` subtree) and everything under
/// it, then the `reamer` group above it where nothing else is left there.
pub fn remove_kubelet_tree(dir: &std::path::Path) {
    remove_tree(dir);
    if let Some(parent) = dir.parent().filter(|p| p.ends_with("reamer")) {
        let _ = std::fs::remove_dir(parent);
    }
}

/// Removes `dir` and everything under it, deepest first (cgroupfs removes only empty groups).
pub fn remove_tree(dir: &std::path::Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Sends one watch event on the open watch, once one is open.
pub async fn send_event(server: &Shared, event: Value) {
    for _ in 0..500 {
        if let Some(watch) = server.lock().unwrap().watch.as_ref() {
            watch.send(event.to_string()).unwrap();
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the watcher never opened a watch");
}
