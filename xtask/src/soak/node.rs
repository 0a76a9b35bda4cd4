//! The soak's Kubernetes node: the API server stand-in (`kube_api`), a kubelet-shaped tree
//! under `reamer/soak-node`, and offline pods of pool `batch`, each a BestEffort pod whose
//! container runs a real process. The pod faults act on them, and `check` says whether
//! anything was left frozen, narrowed or written that should not be, or taken over wrongly.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use reamer_tests::harness::{
    Daemon,
    kube_api::{self, Shared, api_pod},
    kubelet::{
        besteffort_weight, dir, frozen, hierarchies, kubelet_mkdir, kubelet_move, remove_tree, thaw,
    },
    threads_idle_class,
};
use serde_json::{Value, json};

use crate::cargo::release_bin;

/// The kubelet's `--cgroup-root` of the soak, under the tests' `reamer` subtree.
pub const KUBELET_ROOT: &str = "reamer/soak-node";
/// Offline pods kept on the node.
const PODS: usize = 2;
/// One offline pod, with its process.
pub struct SoakPod {
    uid: String,
    name: String,
    group: String,
    container: String,
    process: Child,
}

impl SoakPod {
    fn api_object(&self, labelled: bool) -> Value {
        let labels = if labelled {
            json!({"reamer.io/role": "offline", "reamer.io/pool": "batch"})
        } else {
            json!({"app": "batch"})
        };
        api_pod(&self.uid, &self.name, labels, "BestEffort", None)
    }
}

pub struct Node {
    pub server: Shared,
    pub kubeconfig: PathBuf,
    pub pods: Vec<SoakPod>,
    /// Pods made so far, for new names and UIDs.
    made: usize,
}

impl Node {
    /// The stand-in serving, the tree made, and `PODS` offline pods running.
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        for controller in hierarchies() {
            remove_tree(&self::dir(controller, KUBELET_ROOT));
        }
        let server = Shared::default();
        let url = kube_api::start(server.clone());
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kube_api::kubeconfig(&url))?;
        let mut node = Self {
            server,
            kubeconfig,
            pods: Vec::new(),
            made: 0,
        };
        for _ in 0..PODS {
            node.add_pod()?;
        }
        Ok(node)
    }

    /// A new offline pod: its groups as the kubelet and runc make them, the BestEffort weight,
    /// a process in its container, then the API's object.
    pub fn add_pod(&mut self) -> anyhow::Result<()> {
        self.made += 1;
        let uid = format!("5a000000-0000-4000-8000-{:012x}", self.made);
        let group = format!("{KUBELET_ROOT}/kubepods/besteffort/pod{uid}");
        let container = format!("{group}/{:064x}", self.made);
        kubelet_mkdir(&container);
        let (weight_file, weight) = besteffort_weight();
        std::fs::write(dir("cpu", &group).join(weight_file), weight)?;
        let process = Command::new(release_bin("cpu-hog"))
            .args(["--threads", "1", "--seconds", "3600"])
            .stdout(Stdio::null())
            .spawn()
            .context("starting a pod's process")?;
        kubelet_move(process.id(), &container);
        let pod = SoakPod {
            uid,
            name: format!("batch-{}", self.made),
            group,
            container,
            process,
        };
        self.server.lock().unwrap().put(pod.api_object(true));
        self.pods.push(pod);
        Ok(())
    }

    /// Pod `index` deleted from the API; the kubelet then stops its process and removes its
    /// groups (on cgroup v1 a frozen process dies only once thawed: `gone` waits for that).
    pub fn delete_pod(&mut self, index: usize) -> SoakPod {
        let pod = self.pods.remove(index);
        self.server.lock().unwrap().delete(&pod.uid);
        pod
    }

    /// Pod `index` relabelled: no longer marked for reamer, or marked again.
    pub fn relabel(&mut self, index: usize, labelled: bool) {
        let object = self.pods[index].api_object(labelled);
        self.server.lock().unwrap().put(object);
    }

    /// The API server gone (watches end, connections dropped) or back.
    pub fn set_api_down(&self, down: bool) {
        self.server.lock().unwrap().set_down(down);
    }

    /// Lists and watches served so far.
    pub fn requests(&self) -> usize {
        let server = self.server.lock().unwrap();
        server.lists.len() + server.watches.len()
    }

    /// `count` pods the daemon does not manage, each with `annotation_kib` of annotations,
    /// added; returns their UIDs.
    pub fn flood(&self, count: usize, annotation_kib: usize) -> Vec<String> {
        let mut server = self.server.lock().unwrap();
        (0..count)
            .map(|n| {
                let uid = format!("f1000000-0000-4000-8000-{n:012x}");
                let mut pod = api_pod(
                    &uid,
                    &format!("web-{n}"),
                    json!({"app": "web"}),
                    "BestEffort",
                    None,
                );
                pod["metadata"]["annotations"] =
                    json!({"tenant.example/blob": "x".repeat(annotation_kib * 1024)});
                server.put(pod);
                uid
            })
            .collect()
    }

    /// Every offline pod enforced in the daemon's status, and its container's freezer in step
    /// with the pool's pause, within `within`; otherwise what is wrong.
    pub fn check(&self, daemon: &Daemon, within: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + within;
        loop {
            let problem = self.problem(daemon);
            match problem {
                None => return Ok(()),
                Some(problem) if Instant::now() >= until => {
                    bail!("after {} s: {problem}", within.as_secs())
                }
                Some(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn problem(&self, daemon: &Daemon) -> Option<String> {
        let snapshot = daemon.snapshot();
        let paused = snapshot
            .pool_status("batch")
            .is_some_and(|pool| pool.paused);
        for pod in &self.pods {
            let key = format!("ml/{}", pod.name);
            match snapshot.pods.iter().find(|p| p.pod == key) {
                Some(info) if info.state == "enforced" => {}
                Some(info) => return Some(format!("pod {key} is {}: {}", info.state, info.detail)),
                None => return Some(format!("pod {key} is not in status")),
            }
            if frozen(&pod.container) != paused {
                return Some(format!(
                    "pod {key}'s container is {} while its pool is {}",
                    if paused { "thawed" } else { "frozen" },
                    if paused { "paused" } else { "running" }
                ));
            }
            // Idle-class by its threads' policy; its group's cpu files stay the kubelet's.
            if !threads_idle_class(pod.process.id()) {
                return Some(format!("pod {key}'s threads are not all SCHED_IDLE"));
            }
            let (weight_file, weight) = besteffort_weight();
            if read(&dir("cpu", &pod.group).join(weight_file)) != weight
                || read(&dir("cpu", &pod.group).join("cpu.idle")) != "0"
            {
                return Some(format!("pod {key}'s group's cpu files were written"));
            }
        }
        None
    }

    /// Every group of the tree thawed, then the processes stopped and the tree removed.
    pub fn stop(mut self) {
        for pod in std::mem::take(&mut self.pods) {
            gone(pod);
        }
        for controller in hierarchies() {
            remove_tree(&dir(controller, KUBELET_ROOT));
        }
    }
}

/// A pod let go of by reamer, or never taken: thawed, the kubelet's CPUs, not idle, its
/// BestEffort weight. Otherwise what is left.
pub fn left_alone(pod: &SoakPod) -> Option<String> {
    let (weight_file, weight) = besteffort_weight();
    let cpus = read(&dir("cpuset", &pod.container).join("cpuset.cpus"));
    let parent = read(&dir("cpuset", &pod.group).join("cpuset.cpus"));
    let checks = [
        (!frozen(&pod.container), "frozen".to_owned()),
        (
            cpus == parent || cpus.is_empty(),
            format!("its CPUs are {cpus}, not {parent}"),
        ),
        (
            read(&dir("cpu", &pod.group).join("cpu.idle")) == "0",
            "idle".to_owned(),
        ),
        (
            read(&dir("cpu", &pod.group).join(weight_file)) == weight,
            format!("its {weight_file} is not {weight}"),
        ),
    ];
    checks
        .into_iter()
        .find(|(fine, _)| !fine)
        .map(|(_, what)| format!("pod {}: {what}", pod.name))
}

/// Waits up to `within` for `pod` to be left alone (`left_alone`).
pub fn wait_left_alone(pod: &SoakPod, within: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + within;
    loop {
        match left_alone(pod) {
            None => return Ok(()),
            Some(problem) if Instant::now() >= until => {
                bail!("after {} s: {problem}", within.as_secs())
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The kubelet ends a pod: its process killed, its groups removed. Its container is thawed
/// first: on cgroup v1 a frozen process does not die of SIGKILL, and the soak's own cleanup
/// must never hang (what reamer left frozen is checked before this).
pub fn gone(mut pod: SoakPod) {
    thaw(&dir("freezer", &pod.container));
    let _ = pod.process.kill();
    let _ = pod.process.wait();
    for controller in hierarchies() {
        remove_tree(&dir(controller, &pod.group));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_owned())
        .unwrap_or_default()
}
