//! The kubelet's CPU manager: which pods it gave CPUs of their own. With the `static` policy
//! it pins each integer-CPU container of a Guaranteed pod to exclusive CPUs and writes their
//! cpusets itself; reamer leaves those pods' groups alone rather than fight it. Its checkpoint
//! file is the one place that says which pods they are:
//!
//! ```json
//! {"policyName":"static","defaultCpuSet":"0,5-15",
//!  "entries":{"<pod uid>":{"<container>":"1-4"}},"checksum":1234}
//! ```
//!
//! With the `none` policy, or no file, no pod has exclusive CPUs.

use std::{collections::BTreeMap, path::Path};

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Checkpoint {
    #[serde(default)]
    policy_name: String,
    #[serde(default)]
    entries: BTreeMap<String, BTreeMap<String, String>>,
}

/// The pods the CPU manager gave exclusive CPUs, read from its checkpoint at `path`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ExclusivePods {
    /// Pod UID → its containers' exclusive CPUs ("container: cpus", for status).
    pods: BTreeMap<String, String>,
}

impl ExclusivePods {
    /// Reads the checkpoint. A missing file means no static policy; an unreadable one is an
    /// error the caller reports (and then treats as no exclusive pods).
    pub(crate) fn read(path: &Path) -> Result<Self, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(err) => return Err(format!("reading {}: {err}", path.display())),
        };
        Self::parse(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let checkpoint: Checkpoint = serde_json::from_str(text)
            .map_err(|err| format!("not a CPU manager checkpoint: {err}"))?;
        if checkpoint.policy_name != "static" {
            return Ok(Self::default());
        }
        let pods = checkpoint
            .entries
            .into_iter()
            .filter(|(_, containers)| !containers.is_empty())
            .map(|(uid, containers)| {
                let described = containers
                    .iter()
                    .map(|(name, cpus)| format!("{name}: {cpus}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                (uid, described)
            })
            .collect();
        Ok(Self { pods })
    }

    /// The exclusive CPUs of pod `uid`, described, where it has any.
    pub(crate) fn of(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_static_policys_entries_are_exclusive() {
        let pods = ExclusivePods::parse(
            r#"{"policyName":"static","defaultCpuSet":"0,5-15",
                "entries":{"aa-1":{"trainer":"1-4"},"bb-2":{}},"checksum":3}"#,
        )
        .unwrap();
        assert_eq!(pods.of("aa-1"), Some("trainer: 1-4"));
        assert_eq!(
            pods.of("bb-2"),
            None,
            "a pod with no entry has no CPUs of its own"
        );
        let none = ExclusivePods::parse(r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#)
            .unwrap();
        assert_eq!(none, ExclusivePods::default());
        let err = ExclusivePods::parse("[1]").unwrap_err();
        assert!(err.contains("not a CPU manager checkpoint"), "{err}");
        assert_eq!(
            ExclusivePods::read(Path::new("/nonexistent/cpu_manager_state")).unwrap(),
            ExclusivePods::default()
        );
    }
}
