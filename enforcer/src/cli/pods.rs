//! `enforcer pods`: this node's pods as reamer reads them from the API server: which are
//! training, which join a pool, and whether their containers' cgroups are where the kubelet
//! puts them. Read-only: it changes nothing, and needs no daemon.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::{Api, ListParams};
use serde::Serialize;

mod follow;

use crate::{
    config::{Config, Machine, PoolKindField},
    kubernetes::{
        api_watch::from_api,
        classify::{Classifier, Role, RoleName},
        cpu_manager::ExclusivePods,
        node_groups::managed_pod,
        pod::Pod,
        pod_cgroup::{container_group, kubelet_hierarchy},
    },
};

/// One pod's line.
#[derive(Debug, Serialize)]
pub(crate) struct PodLine {
    pub pod: String,
    /// "training", "online", "offline", "-" (not managed) or "error".
    pub role: String,
    /// The job or the pool; the error where classifying failed.
    pub group: String,
    pub qos: String,
    pub containers: Vec<ContainerLine>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ContainerLine {
    pub name: String,
    /// Its cgroup where it could be resolved, in the first hierarchy looked in.
    pub cgroup: Option<PathBuf>,
    pub found: bool,
    /// Why it could not be resolved.
    pub problem: Option<String>,
}

/// What `config` makes of `pod`: decided as the daemon decides (`managed_pod`), so that a pod
/// shown as an error here is one the daemon refuses, and the other way round.
pub(crate) fn pod_line(
    pod: &Pod,
    config: &Config,
    classifier: &Classifier,
    hierarchy: &Path,
) -> PodLine {
    let decided = managed_pod(
        pod,
        classifier,
        &config.kubernetes.layout(),
        hierarchy,
        &ExclusivePods::default(),
    );
    let (role, group) = match decided {
        Ok(None) if pod.is_finished() => ("-".to_owned(), "finished: let go".to_owned()),
        Ok(None) => ("-".to_owned(), "-".to_owned()),
        Ok(Some(managed)) => match managed.role {
            Role::Training { job } => ("training".to_owned(), job),
            Role::Pool { pool, kind } => (
                if kind == RoleName::Online {
                    "online"
                } else {
                    "offline"
                }
                .to_owned(),
                pool,
            ),
        },
        Err(reason) => ("error".to_owned(), reason),
    };
    let layout = config.kubernetes.layout().resolve(hierarchy);
    let qos = pod.status.qos_class;
    let containers = pod
        .containers()
        .into_iter()
        .map(|(name, id)| {
            let resolved = match (id, qos, &layout) {
                (Err(err), _, _) => Err(err.to_string()),
                (_, None, _) => Err("the pod's status has no qosClass yet".to_owned()),
                (_, _, Err(err)) => Err(err.clone()),
                (Ok(id), Some(qos), Ok((kubelet_root, driver))) => {
                    container_group(*driver, qos, &pod.metadata.uid, &id)
                        .map(|relative| kubelet_root.join(relative))
                        .map_err(|err| err.to_string())
                }
            };
            match resolved {
                Ok(cgroup) => ContainerLine {
                    name,
                    found: cgroup.is_dir(),
                    cgroup: Some(cgroup),
                    problem: None,
                },
                Err(problem) => ContainerLine {
                    name,
                    cgroup: None,
                    found: false,
                    problem: Some(problem),
                },
            }
        })
        .collect();
    PodLine {
        pod: pod.key(),
        role,
        group,
        qos: qos.map_or("-".to_owned(), |q| format!("{q:?}")),
        containers,
    }
}

/// The classifier of `config`: its pools' kinds and its selectors.
pub(crate) fn classifier(config: &Config) -> Classifier {
    let pools = config.pool.iter().map(|p| {
        let online = matches!(p.pool_kind(), PoolKindField::Online);
        (p.name.get_ref().clone(), online)
    });
    Classifier::of_pools(pools, config.kubernetes.selector.clone())
        .with_claims(config.kubernetes.claims.clone())
}

pub(crate) fn render(line: &PodLine) -> String {
    let mut text = format!(
        "{:<40} {:<8} {:<24} {}\n",
        line.pod, line.role, line.group, line.qos
    );
    for container in &line.containers {
        let place = match (&container.cgroup, &container.problem) {
            (Some(cgroup), _) => format!(
                "{} ({})",
                cgroup.display(),
                if container.found {
                    "found"
                } else {
                    "not found"
                }
            ),
            (None, Some(problem)) => problem.clone(),
            (None, None) => "-".to_owned(),
        };
        text.push_str(&format!("    {}: {place}\n", container.name));
    }
    text
}

/// Lists the pods of `node` (default: the config's, $NODE_NAME, the host name) and prints
/// how reamer reads each. Exits 1 where a pod marked for reamer cannot be classified. With
/// `watch`, follows the pods and their containers' groups instead, until interrupted.
pub(crate) async fn run(
    config: Option<PathBuf>,
    node: Option<String>,
    json: bool,
    watch: bool,
) -> anyhow::Result<()> {
    let config = match config {
        Some(path) => Config::load(&path, Machine::This)?,
        None => {
            let default = Path::new(crate::host::paths::DEFAULT_CONFIG);
            if default.exists() {
                Config::load(default, Machine::This)?
            } else {
                Config::default()
            }
        }
    };
    let node = node
        .or_else(|| config.kubernetes.node_name())
        .context("no node name: pass --node, set NODE_NAME, or [kubernetes] node_name")?;
    // kube's error repeats each cause in its own text: its Display alone says it all.
    let client = kube::Client::try_default().await.map_err(|err| {
        anyhow::anyhow!(
            "cannot reach the API server (in a pod: its service account; elsewhere: \
             $KUBECONFIG or ~/.kube/config): {err}"
        )
    })?;
    let classifier = classifier(&config);
    let hierarchy = kubelet_hierarchy();
    if watch {
        if !json {
            println!("{:<40} {:<8} {:<24} QOS", "POD", "ROLE", "JOB OR POOL");
        }
        return follow::follow(client, &node, &config, &classifier, &hierarchy, json).await;
    }
    let pods: Api<ApiPod> = Api::all(client);
    let listed = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .with_context(|| format!("listing the pods of node {node}"))?;
    let mut failed = 0;
    if !json {
        println!("{:<40} {:<8} {:<24} QOS", "POD", "ROLE", "JOB OR POOL");
    }
    for api_pod in &listed.items {
        let line = match from_api(api_pod, &classifier.labels_read()) {
            Ok(pod) => pod_line(&pod, &config, &classifier, &hierarchy),
            Err(err) => PodLine {
                pod: format!(
                    "{}/{}",
                    api_pod.metadata.namespace.as_deref().unwrap_or("default"),
                    api_pod.metadata.name.as_deref().unwrap_or("?")
                ),
                role: "error".to_owned(),
                group: err.to_string(),
                qos: "-".to_owned(),
                containers: Vec::new(),
            },
        };
        failed += usize::from(line.role == "error");
        if json {
            println!("{}", serde_json::to_string(&line)?);
        } else {
            print!("{}", render(&line));
        }
    }
    if failed > 0 {
        anyhow::bail!(
            "{failed} pod(s) marked for reamer cannot be taken: see the lines marked error"
        );
    }
    Ok(())
}
