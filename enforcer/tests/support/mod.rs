//! What the Kubernetes tests share: the API server stand-in (`reamer_tests::harness::kube_api`,
//! the real protocol of `GET /api/v1/pods`, served on plain threads), a kubelet-shaped cgroup
//! tree (`reamer_tests::harness::kubelet`), and the async steps a tokio test takes with them.

#![allow(dead_code, unused_imports)] // each test file uses part of it

pub use reamer_tests::harness::{
    kube_api::{ApiServer, Shared, api_pod, kubeconfig},
    kubelet::{
        besteffort_weight, dir, frozen, hierarchies, kubelet_mkdir, kubelet_move,
        remove_kubelet_tree, remove_tree, thaw, v2_host,
    },
};
use serde_json::{Value, json};

/// A running BestEffort pod of node-1 in namespace `ml` with role `role`, at resourceVersion
/// `resource_version`.
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

/// Serves `server` on a loopback port; returns its URL.
pub async fn start(server: Shared) -> String {
    reamer_tests::harness::kube_api::start(server)
}

/// Sends one watch event on the open watch, once one is open (waiting without blocking the
/// test's runtime, which polls the watcher).
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

/// A scratch directory for test `instance`, holding a kubeconfig that points at `url`.
pub fn scratch_with_kubeconfig(instance: &str, url: &str) -> std::path::PathBuf {
    let scratch = std::env::temp_dir().join(format!("reamer-{instance}-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("kubeconfig"), kubeconfig(url)).unwrap();
    scratch
}

/// `enforcer run` of `instance` with `config`, following the pods through the kubeconfig in
/// `scratch` (`scratch_with_kubeconfig`), not through a service account.
pub fn start_daemon(
    scratch: &std::path::Path,
    instance: &str,
    config: &str,
) -> reamer_tests::harness::Daemon {
    let mut command = std::process::Command::new(reamer_tests::harness::enforcer_bin());
    command
        .env("KUBECONFIG", scratch.join("kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST");
    reamer_tests::harness::Daemon::start_command(command, instance, config)
}

/// A cgroup file's (or any file's) content, trimmed; the test fails where it cannot be read.
pub fn read(path: std::path::PathBuf) -> String {
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_owned()
}
