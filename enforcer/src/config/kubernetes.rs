//! The `[kubernetes]` section: how the node's pods are found and read (docs/kubernetes.md).
//!
//! ```toml
//! [kubernetes]
//! enabled = "auto"               # true, false, or "auto": on where the daemon runs in a pod
//! # node_name = "gpu-node-3"     # default: $NODE_NAME (the downward API), else the host name
//! cgroup_root = "/"              # the kubelet's --cgroup-root
//! cgroup_driver = "auto"         # "systemd", "cgroupfs", or "auto": whichever kubepods exists
//! cpu_manager_state = "/var/lib/kubelet/cpu_manager_state"
//!
//! [kubernetes.claims]            # the namespaces whose pods may claim each role
//! training = ["*"]               # "*": any (the default); on a shared cluster, list yours
//! online = ["*"]
//! offline = ["*"]
//!
//! [[kubernetes.selector]]        # pods other agents marked, taken without relabelling
//! label = "koordinator.sh/qosClass"
//! value = "BE"
//! role = "offline"
//! # pool = "batch"               # default: the one pool of that kind
//! ```

use std::path::{Component, PathBuf};

use serde::Deserialize;

use super::InvalidField;
use crate::kubernetes::{
    classify::{Claims, RoleName, Selector},
    pod_cgroup::{CgroupDriver, KubeletLayout},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverChoice {
    Auto,
    Systemd,
    Cgroupfs,
}

/// Whether the daemon follows the node's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Enabled {
    Always(bool),
    /// `"auto"`: where the daemon runs in a pod (`$KUBERNETES_SERVICE_HOST`, which the kubelet
    /// sets in every container), so that a node without Kubernetes sees no change.
    Auto(AutoWord),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoWord {
    Auto,
}

/// Where the kubelet's CPU manager keeps its assignments (`--root-dir`'s default).
pub(crate) const DEFAULT_CPU_MANAGER_STATE: &str = "/var/lib/kubelet/cpu_manager_state";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSection {
    pub enabled: Enabled,
    pub node_name: Option<String>,
    pub cgroup_root: PathBuf,
    pub cgroup_driver: DriverChoice,
    /// The CPU manager's state file: pods it gave exclusive CPUs are left alone.
    pub cpu_manager_state: PathBuf,
    pub selector: Vec<Selector>,
    /// Which namespaces' pods may claim each role.
    pub claims: Claims,
}

impl Default for KubernetesSection {
    fn default() -> Self {
        Self {
            enabled: Enabled::Auto(AutoWord::Auto),
            node_name: None,
            cgroup_root: PathBuf::from("/"),
            cgroup_driver: DriverChoice::Auto,
            cpu_manager_state: PathBuf::from(DEFAULT_CPU_MANAGER_STATE),
            selector: Vec::new(),
            claims: Claims::default(),
        }
    }
}

impl KubernetesSection {
    pub fn validate(&self) -> Result<(), InvalidField> {
        let invalid = |field: &'static str, message: String| Err(InvalidField { field, message });
        if !self.cgroup_root.is_absolute()
            || self
                .cgroup_root
                .components()
                .any(|c| matches!(c, Component::ParentDir))
        {
            return invalid(
                "cgroup_root",
                format!(
                    "{} must be an absolute path without `..`, like the kubelet's --cgroup-root",
                    self.cgroup_root.display()
                ),
            );
        }
        if let Some(node) = &self.node_name
            && (node.is_empty() || node.contains(['/', ',', '=']))
        {
            return invalid(
                "node_name",
                format!("{node:?} is not a node name (no '/', ',' or '='; not empty)"),
            );
        }
        if let Err(message) = self.claims.validate() {
            return invalid("claims", message);
        }
        for selector in &self.selector {
            if selector.label.is_empty() {
                return invalid("label", "a selector needs the label it matches".to_owned());
            }
            if selector.role == RoleName::Training && selector.pool.is_some() {
                return invalid(
                    "pool",
                    format!(
                        "the selector on {}={} takes pods as training: training has no pool",
                        selector.label, selector.value
                    ),
                );
            }
        }
        Ok(())
    }

    /// Whether the daemon follows the node's pods: `enabled`, where "auto" means in a pod.
    pub fn is_enabled(&self) -> bool {
        match self.enabled {
            Enabled::Always(on) => on,
            Enabled::Auto(AutoWord::Auto) => std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        }
    }

    /// This node's name: the config's, else $NODE_NAME (set from the downward API in the
    /// DaemonSet), else the host name (what the kubelet registers by default).
    pub fn node_name(&self) -> Option<String> {
        self.node_name
            .clone()
            .or_else(|| std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()))
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
    }

    /// Where the kubelet lays out pods' groups, as this section says.
    pub fn layout(&self) -> KubeletLayout {
        KubeletLayout {
            cgroup_root: self.cgroup_root.clone(),
            driver: match self.cgroup_driver {
                DriverChoice::Systemd => Some(CgroupDriver::Systemd),
                DriverChoice::Cgroupfs => Some(CgroupDriver::Cgroupfs),
                DriverChoice::Auto => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn bad_roots_names_and_selectors_are_refused_by_field() {
        let section = |toml_text: &str| -> KubernetesSection { toml::from_str(toml_text).unwrap() };
        assert!(section("").validate().is_ok());
        assert_eq!(section("enabled = true").enabled, Enabled::Always(true));
        assert_eq!(
            section("enabled = \"auto\"").enabled,
            Enabled::Auto(AutoWord::Auto)
        );
        assert!(toml::from_str::<KubernetesSection>("enabled = \"yes\"").is_err());
        let err = section("cgroup_root = \"kube\"").validate().unwrap_err();
        assert_eq!(err.field, "cgroup_root");
        let err = section("cgroup_root = \"/a/../b\"").validate().unwrap_err();
        assert_eq!(err.field, "cgroup_root");
        let err = section("node_name = \"a,b\"").validate().unwrap_err();
        assert_eq!(err.field, "node_name");
        let err = section(
            "[[selector]]\nlabel = \"x\"\nvalue = \"y\"\nrole = \"training\"\npool = \"p\"",
        )
        .validate()
        .unwrap_err();
        assert_eq!(err.field, "pool");
        assert!(
            toml::from_str::<KubernetesSection>(
                "[[selector]]\nlabel = \"x\"\nvalue = \"y\"\nrole = \"batch\""
            )
            .is_err()
        );
        let s = section("cgroup_root = \"/reamer/it\"");
        assert_eq!(
            s.layout().kubelet_root(Path::new("/sys/fs/cgroup/cpu")),
            PathBuf::from("/sys/fs/cgroup/cpu/reamer/it")
        );
        assert_eq!(
            section("node_name = \"gpu-3\"").node_name().as_deref(),
            Some("gpu-3")
        );
    }

    #[test]
    fn a_selectors_pool_must_be_a_pool_of_the_config_and_of_its_kind() {
        let parse = |text: &str| {
            crate::config::Config::parse_for(
                Path::new("k.toml"),
                text,
                crate::config::Machine::Elsewhere { cpus: 8 },
            )
        };
        let selector = |pool: &str| {
            format!(
                "[kubernetes]\n\n[[kubernetes.selector]]\nlabel = \"q\"\nvalue = \"BE\"\n\
                 role = \"offline\"\npool = \"{pool}\"\n\n\
                 [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
                 [[pool]]\nname = \"serve\"\nkind = \"online\"\n"
            )
        };
        assert!(parse(&selector("batch")).is_ok());
        let err = parse(&selector("gone")).unwrap_err().to_string();
        assert!(err.contains("no [[pool]] defines"), "{err}");
        let err = parse(&selector("serve")).unwrap_err().to_string();
        assert!(err.contains("pool \"serve\" is not"), "{err}");
    }
}
