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

/// A process the test started, killed when the test ends however it ends; reaped by the
/// kubelet tree's guard where it was frozen.
pub struct Started(pub std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        // A frozen process dies only once thawed: it is not waited for past a second.
        for _ in 0..100 {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// `cpu-hog` with `threads` spinning threads, for two minutes at most.
pub fn hog(threads: usize) -> Started {
    Started(
        std::process::Command::new(reamer_tests::harness::target_dir().join("cpu-hog"))
            .args(["--threads", &threads.to_string(), "--seconds", "120"])
            .spawn()
            .expect("starting cpu-hog"),
    )
}

/// A test's kubelet tree (its `--cgroup-root`, under the tests' `reamer` subtree), thawed and
/// removed when the test ends however it ends: a process left frozen would not even die of
/// SIGKILL on v1. Declared before the processes, so that it is dropped after them.
pub struct KubeletTree(pub &'static str);

impl Drop for KubeletTree {
    fn drop(&mut self) {
        for group in walk(&dir("freezer", self.0)) {
            thaw(&group);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        for controller in hierarchies() {
            remove_tree(&dir(controller, self.0));
        }
    }
}

/// `root` and every group under it.
fn walk(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut groups = vec![root.to_owned()];
    let mut i = 0;
    while i < groups.len() {
        if let Ok(entries) = std::fs::read_dir(&groups[i]) {
            groups.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        i += 1;
    }
    groups
}

/// The config of a node whose kubelet tree is `kubelet_root`: offline pool `batch`, paused
/// while training is short of cores, beside online pool `serve` with one guaranteed core (so
/// that training on every CPU is short), and a policy that moves within a few ticks of 50 ms.
pub fn pausing_node_config(kubelet_root: &str) -> String {
    format!(
        "[kubernetes]\nenabled = true\nnode_name = \"node-1\"\ncgroup_root = \"/{kubelet_root}\"\n\n\
         [policy]\npause_offline_when_training_short = true\ngive_back_after_ms = 200\n\
         demand_window_ms = 200\ntick_ms = 50\n\n\
         [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
         [[pool]]\nname = \"serve\"\nkind = \"online\"\nmin_cores = 1\n"
    )
}
