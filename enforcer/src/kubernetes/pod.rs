//! What the enforcer needs of a pod, taken from the Kubernetes API's Pod object (the JSON of
//! `GET /api/v1/pods`, field for field): who it is, its labels and annotations, its owner,
//! its node, its QoS class and its running containers.
//!
//! Only that is kept (`trimmed`): a tenant can give each pod up to 256 KiB of annotations and
//! more of labels, and a daemon that kept 1,100 such pods whole, none of them managed, went
//! from 47 to 278 MiB, past the chart's limit. What it keeps of a pod is bounded by what it
//! reads: reamer's own marks, the labels the config's selectors match, the controlling owner.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::pod_cgroup::{ContainerId, QosClass};

/// The parts of a Pod object the enforcer reads; everything else is ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct Pod {
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: Spec,
    #[serde(default)]
    pub status: Status,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    pub uid: String,
    #[serde(default)]
    pub resource_version: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
}

fn default_namespace() -> String {
    "default".to_owned()
}

#[derive(Debug, Clone, Deserialize)]
pub struct OwnerReference {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default)]
    pub node_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub qos_class: Option<QosClass>,
    #[serde(default)]
    pub container_statuses: Vec<ContainerStatus>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    /// Empty until the runtime created the container.
    #[serde(default, rename = "containerID")]
    pub container_id: Option<String>,
}

/// The prefix of reamer's own marks (`classify::ROLE_KEY` and the others).
const MARK_PREFIX: &str = "reamer.io/";

impl Pod {
    /// The pod with only what the enforcer reads of it: labels and annotations of reamer's
    /// own keys, the labels in `labels_read` (the selectors'), and the controlling owner.
    pub fn trimmed(mut self, labels_read: &BTreeSet<String>) -> Self {
        let metadata = &mut self.metadata;
        metadata
            .labels
            .retain(|key, _| key.starts_with(MARK_PREFIX) || labels_read.contains(key));
        metadata
            .annotations
            .retain(|key, _| key.starts_with(MARK_PREFIX));
        metadata
            .owner_references
            .retain(|owner| owner.controller == Some(true));
        metadata.owner_references.truncate(1);
        self
    }

    /// `namespace/name`, how status and metrics name it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// A label, or where there is none an annotation of the same key.
    pub fn marked(&self, key: &str) -> Option<&str> {
        self.metadata
            .labels
            .get(key)
            .or_else(|| self.metadata.annotations.get(key))
            .map(String::as_str)
    }

    /// The object that controls it (a Job, a ReplicaSet, a training operator's job), if any.
    pub fn controller(&self) -> Option<&OwnerReference> {
        self.metadata
            .owner_references
            .iter()
            .find(|owner| owner.controller == Some(true))
    }

    /// The containers the runtime has created, with their IDs; a malformed ID is returned as
    /// the error that names it, for the caller to log.
    pub fn containers(
        &self,
    ) -> Vec<(
        String,
        Result<ContainerId, super::pod_cgroup::ContainerIdError>,
    )> {
        self.status
            .container_statuses
            .iter()
            .filter_map(|status| {
                let id = status.container_id.as_deref().filter(|id| !id.is_empty())?;
                Some((status.name.clone(), ContainerId::parse(id)))
            })
            .collect()
    }

    /// Whether the pod is gone or going: deleted, or its containers all ended.
    pub fn is_finished(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
            || matches!(
                self.status.phase.as_deref(),
                Some("Succeeded") | Some("Failed")
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod as `kubectl get pod -o json` prints one (trimmed of fields nobody reads here).
    pub(super) const TRAINING_POD: &str = r#"{
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": {
        "name": "resnet-worker-0",
        "namespace": "ml",
        "uid": "5f0c7a3e-12ab-4cde-9f00-0123456789ab",
        "resourceVersion": "48213",
        "labels": {"reamer.io/role": "training", "training.kubeflow.org/job-name": "resnet"},
        "ownerReferences": [
          {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "resnet",
           "uid": "0a1b2c3d-0000-4000-8000-000000000001", "controller": true,
           "blockOwnerDeletion": true}
        ]
      },
      "spec": {"nodeName": "gpu-node-3", "containers": [{"name": "pytorch", "image": "pytorch"}]},
      "status": {
        "phase": "Running",
        "qosClass": "Burstable",
        "containerStatuses": [
          {"name": "pytorch", "ready": true, "restartCount": 0,
           "containerID": "containerd://3b1f9e0c2d4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344",
           "image": "pytorch", "imageID": "sha256:00", "state": {"running": {"startedAt": "2026-11-25T10:00:00Z"}}},
          {"name": "sidecar", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
           "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]
      }
    }"#;

    #[test]
    fn a_pod_object_of_the_real_schema_gives_what_the_enforcer_reads() {
        let pod: Pod = serde_json::from_str(TRAINING_POD).unwrap();
        assert_eq!(pod.key(), "ml/resnet-worker-0");
        assert_eq!(pod.marked("reamer.io/role"), Some("training"));
        assert_eq!(pod.controller().unwrap().name, "resnet");
        assert_eq!(pod.status.qos_class, Some(QosClass::Burstable));
        assert_eq!(pod.spec.node_name.as_deref(), Some("gpu-node-3"));
        let containers = pod.containers();
        assert_eq!(containers.len(), 1, "a container not yet created has no ID");
        assert_eq!(containers[0].0, "pytorch");
        assert!(containers[0].1.is_ok());
        assert!(!pod.is_finished());
    }

    #[test]
    fn a_pod_keeps_only_what_is_read_of_it() {
        let mut value: serde_json::Value = serde_json::from_str(TRAINING_POD).unwrap();
        let metadata = &mut value["metadata"];
        metadata["annotations"] = serde_json::json!({
            "reamer.io/job": "resnet",
            "tenant.example/blob": "x".repeat(256 * 1024),
        });
        metadata["labels"]["koordinator.sh/qosClass"] = "BE".into();
        metadata["labels"]["app"] = "web".into();
        let pod: Pod = serde_json::from_value(value).unwrap();
        let read = BTreeSet::from(["koordinator.sh/qosClass".to_owned()]);
        let pod = pod.trimmed(&read);
        assert_eq!(
            pod.metadata.labels.keys().collect::<Vec<_>>(),
            ["koordinator.sh/qosClass", "reamer.io/role"]
        );
        assert_eq!(
            pod.metadata.annotations.keys().collect::<Vec<_>>(),
            ["reamer.io/job"]
        );
        assert_eq!(pod.marked("reamer.io/job"), Some("resnet"));
        assert_eq!(pod.controller().unwrap().name, "resnet");
    }
}
