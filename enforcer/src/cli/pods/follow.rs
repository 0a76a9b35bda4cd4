//! `enforcer pods --watch`: the node's pods followed through the API server's watch, and the
//! container groups of the managed ones through inotify, a line per change.

use std::{collections::HashMap, path::PathBuf};

use futures::StreamExt as _;
use serde::Serialize;

use super::{PodLine, pod_line, render};
use crate::{
    config::Config,
    kubernetes::{
        api_watch::{PodChange, pod_changes},
        classify::Classifier,
        container_watch::{self, GroupEvent, WatchCommand},
        pod::Pod,
        pod_cgroup::pod_group,
    },
};

/// One printed change, as `--json` writes it.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Change<'a> {
    Pod(&'a PodLine),
    Removed { pod: String },
    ContainerCreated { pod: String, cgroup: PathBuf },
    ContainerRemoved { pod: String, cgroup: PathBuf },
    Error { message: String },
}

fn print(change: &Change, json: bool) {
    if json {
        if let Ok(line) = serde_json::to_string(change) {
            println!("{line}");
        }
        return;
    }
    match change {
        Change::Pod(line) => print!("{}", render(line)),
        Change::Removed { pod } => println!("{pod}: gone"),
        Change::ContainerCreated { pod, cgroup } => {
            println!("{pod}: container group appeared: {}", cgroup.display());
        }
        Change::ContainerRemoved { pod, cgroup } => {
            println!("{pod}: container group removed: {}", cgroup.display());
        }
        Change::Error { message } => eprintln!("{message}"),
    }
}

/// The group of `pod` under the kubelet's root, where it can be resolved.
fn pod_dir(pod: &Pod, config: &Config, hierarchy: &std::path::Path) -> Option<PathBuf> {
    let (kubelet_root, driver) = config.kubernetes.layout().resolve(hierarchy).ok()?;
    let qos = pod.status.qos_class?;
    let relative = pod_group(driver, qos, &pod.metadata.uid).ok()?;
    Some(kubelet_root.join(relative))
}

pub(super) async fn follow(
    client: kube::Client,
    node: &str,
    config: &Config,
    classifier: &Classifier,
    hierarchy: &std::path::Path,
    json: bool,
) -> anyhow::Result<()> {
    // Its pod's line already says which containers it has: only new ones are reported.
    let (commands, mut groups) = container_watch::spawn(false)?;
    let mut changes = Box::pin(pod_changes(client, node, classifier.labels_read()));
    // The pods shown, by UID: their key and, where managed, their group being watched.
    let mut shown: HashMap<String, (String, Option<PathBuf>)> = HashMap::new();
    let mut by_dir: HashMap<PathBuf, String> = HashMap::new();
    loop {
        tokio::select! {
            change = changes.next() => match change {
                None => return Ok(()),
                Some(Err(err)) => print(&Change::Error { message: err.to_string() }, json),
                Some(Ok(PodChange::Upsert(pod))) => {
                    let line = pod_line(&pod, config, classifier, hierarchy);
                    print(&Change::Pod(&line), json);
                    let managed = !matches!(line.role.as_str(), "-" | "error");
                    let dir = managed.then(|| pod_dir(&pod, config, hierarchy)).flatten();
                    if let Some(dir) = &dir {
                        let _ = commands.send(WatchCommand::Watch(dir.clone()));
                        by_dir.insert(dir.clone(), line.pod.clone());
                    }
                    shown.insert(pod.metadata.uid.clone(), (line.pod, dir));
                }
                Some(Ok(PodChange::Removed { uid, key })) => {
                    if let Some((_, Some(dir))) = shown.remove(&uid) {
                        let _ = commands.send(WatchCommand::Unwatch(dir.clone()));
                        by_dir.remove(&dir);
                    }
                    print(&Change::Removed { pod: key }, json);
                }
            },
            Some(event) = groups.recv() => {
                let change = match event {
                    GroupEvent::Created { pod_dir, child } => by_dir
                        .get(&pod_dir)
                        .map(|pod| Change::ContainerCreated { pod: pod.clone(), cgroup: pod_dir.join(child) }),
                    GroupEvent::Removed { pod_dir, child } => by_dir
                        .get(&pod_dir)
                        .map(|pod| Change::ContainerRemoved { pod: pod.clone(), cgroup: pod_dir.join(child) }),
                    GroupEvent::PodGone { .. } => None,
                };
                if let Some(change) = change {
                    print(&change, json);
                }
            }
        }
    }
}
