//! Where the kubelet puts a pod's cgroup and its containers' cgroups, from the pod's UID, its
//! QoS class and each container's ID, for either cgroup driver and any container runtime.
//!
//! The layouts, relative to the kubelet's cgroup root (`--cgroup-root`, `/` by default), the
//! same in cgroup v2's one tree and in each v1 hierarchy (`cpu`, `cpuset`, `freezer`):
//!
//! | driver   | Guaranteed                      | Burstable / BestEffort                                                        |
//! |----------|---------------------------------|-------------------------------------------------------------------------------|
//! | systemd  | `kubepods.slice/kubepods-pod<U>.slice` | `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<U>.slice` |
//! | cgroupfs | `kubepods/pod<uid>`             | `kubepods/burstable/pod<uid>`                                                 |
//!
//! where `<U>` is the UID with `_` for each `-` (systemd reads `-` in a unit name as a step
//! down the slice tree). A container's group is a child of its pod's: under systemd a scope
//! named by the runtime (`cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`),
//! under cgroupfs the bare ID. The container's ID comes from the pod's status
//! (`containerd://<id>`, `cri-o://<id>`, `docker://<id>`).

use std::{
    fmt,
    path::{Path, PathBuf},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Systemd,
    Cgroupfs,
}

impl CgroupDriver {
    /// The driver whose top group exists under `root` (a cgroup hierarchy joined with the
    /// kubelet's cgroup root): `kubepods.slice` for systemd, `kubepods` for cgroupfs.
    pub fn detect(root: &Path) -> Option<Self> {
        if root.join("kubepods.slice").is_dir() {
            Some(Self::Systemd)
        } else if root.join("kubepods").is_dir() {
            Some(Self::Cgroupfs)
        } else {
            None
        }
    }
}

/// Where the kubelet lays out pods' groups: its `--cgroup-root`, and its cgroup driver (None:
/// the one whose top group is there, `CgroupDriver::detect`). `[kubernetes]` in the config
/// gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletLayout {
    /// Absolute, without `..` (the config checks it).
    pub cgroup_root: PathBuf,
    pub driver: Option<CgroupDriver>,
}

impl Default for KubeletLayout {
    fn default() -> Self {
        Self {
            cgroup_root: PathBuf::from("/"),
            driver: None,
        }
    }
}

impl KubeletLayout {
    /// The kubelet's root inside the cgroup hierarchy `hierarchy`.
    pub fn kubelet_root(&self, hierarchy: &Path) -> PathBuf {
        hierarchy.join(
            self.cgroup_root
                .strip_prefix("/")
                .unwrap_or(&self.cgroup_root),
        )
    }

    /// The kubelet's root in `hierarchy` and the driver its groups are laid out by; the error
    /// says where the kubelet's groups were looked for.
    pub fn resolve(&self, hierarchy: &Path) -> Result<(PathBuf, CgroupDriver), String> {
        let root = self.kubelet_root(hierarchy);
        match self.driver.or_else(|| CgroupDriver::detect(&root)) {
            Some(driver) => Ok((root, driver)),
            None => Err(format!(
                "no kubepods.slice or kubepods under {}: is [kubernetes] cgroup_root the \
                 kubelet's --cgroup-root?",
                root.display()
            )),
        }
    }

    /// A pod's group `relative` to the kubelet's root, made relative to the hierarchies' root.
    pub fn under_root(&self, relative: &Path) -> PathBuf {
        let root = &self.cgroup_root;
        root.strip_prefix("/").unwrap_or(root).join(relative)
    }
}

/// A pod's QoS class (`status.qosClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The class's group under `kubepods`, where it has one (Guaranteed pods sit directly
    /// under `kubepods`).
    fn tier(self) -> Option<&'static str> {
        match self {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        }
    }
}

/// The container runtimes the kubelet names container groups after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Containerd,
    CriO,
    Docker,
}

/// A container's ID as the pod's status gives it: `<runtime>://<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerId {
    pub runtime: Runtime,
    pub id: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContainerIdError {
    #[error("container ID {0:?} has no `<runtime>://` prefix")]
    NoRuntime(String),
    #[error("container ID {0:?}: runtime {1:?} is not containerd, cri-o or docker")]
    UnknownRuntime(String, String),
    #[error("container ID {0:?}: the ID must be hex digits")]
    BadId(String),
}

impl ContainerId {
    pub fn parse(text: &str) -> Result<Self, ContainerIdError> {
        let (runtime, id) = text
            .split_once("://")
            .ok_or_else(|| ContainerIdError::NoRuntime(text.to_owned()))?;
        let runtime = match runtime {
            "containerd" => Runtime::Containerd,
            "cri-o" => Runtime::CriO,
            "docker" => Runtime::Docker,
            other => {
                return Err(ContainerIdError::UnknownRuntime(
                    text.to_owned(),
                    other.to_owned(),
                ));
            }
        };
        // The ID becomes a path component: nothing but what runtimes use (64 hex digits).
        if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ContainerIdError::BadId(text.to_owned()));
        }
        Ok(Self {
            runtime,
            id: id.to_owned(),
        })
    }

    /// The container's group under its pod's, for `driver`.
    pub fn group_name(&self, driver: CgroupDriver) -> String {
        match driver {
            CgroupDriver::Cgroupfs => self.id.clone(),
            CgroupDriver::Systemd => {
                let prefix = match self.runtime {
                    Runtime::Containerd => "cri-containerd",
                    Runtime::CriO => "crio",
                    Runtime::Docker => "docker",
                };
                format!("{prefix}-{}.scope", self.id)
            }
        }
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime = match self.runtime {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
        };
        write!(f, "{runtime}://{}", self.id)
    }
}

/// The hierarchy the kubelet's groups are looked for in: cgroup v2's tree where the host has
/// only v2, else v1's `cpu` hierarchy (the layout is the same in each v1 hierarchy).
pub fn kubelet_hierarchy() -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        root.to_owned()
    } else {
        root.join("cpu")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("pod UID {0:?} is not a UID (hex digits and dashes)")]
pub struct BadUid(pub String);

/// A pod's group, relative to the kubelet's cgroup root in any hierarchy.
pub fn pod_group(driver: CgroupDriver, qos: QosClass, uid: &str) -> Result<PathBuf, BadUid> {
    // The UID becomes a path component.
    if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(BadUid(uid.to_owned()));
    }
    Ok(match driver {
        CgroupDriver::Cgroupfs => {
            let mut path = PathBuf::from("kubepods");
            if let Some(tier) = qos.tier() {
                path.push(tier);
            }
            path.join(format!("pod{uid}"))
        }
        CgroupDriver::Systemd => {
            let unit_uid = uid.replace('-', "_");
            let mut path = PathBuf::from("kubepods.slice");
            match qos.tier() {
                Some(tier) => {
                    path.push(format!("kubepods-{tier}.slice"));
                    path.push(format!("kubepods-{tier}-pod{unit_uid}.slice"));
                }
                None => path.push(format!("kubepods-pod{unit_uid}.slice")),
            }
            path
        }
    })
}

/// A container's group, relative to the kubelet's cgroup root in any hierarchy.
pub fn container_group(
    driver: CgroupDriver,
    qos: QosClass,
    uid: &str,
    container: &ContainerId,
) -> Result<PathBuf, BadUid> {
    Ok(pod_group(driver, qos, uid)?.join(container.group_name(driver)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "5f0c7a3e-12ab-4cde-9f00-0123456789ab";
    const ID: &str = "3b1f9e0c2d4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344";

    #[test]
    fn systemd_groups_take_the_uid_with_underscores_and_the_runtimes_scope() {
        let containerd = ContainerId::parse(&format!("containerd://{ID}")).unwrap();
        assert_eq!(
            container_group(CgroupDriver::Systemd, QosClass::Burstable, UID, &containerd).unwrap(),
            PathBuf::from(format!(
                "kubepods.slice/kubepods-burstable.slice/\
                 kubepods-burstable-pod5f0c7a3e_12ab_4cde_9f00_0123456789ab.slice/\
                 cri-containerd-{ID}.scope"
            ))
        );
        let crio = ContainerId::parse(&format!("cri-o://{ID}")).unwrap();
        assert_eq!(
            container_group(CgroupDriver::Systemd, QosClass::Guaranteed, UID, &crio).unwrap(),
            PathBuf::from(format!(
                "kubepods.slice/kubepods-pod5f0c7a3e_12ab_4cde_9f00_0123456789ab.slice/\
                 crio-{ID}.scope"
            ))
        );
        assert_eq!(
            pod_group(CgroupDriver::Systemd, QosClass::BestEffort, UID).unwrap(),
            PathBuf::from(
                "kubepods.slice/kubepods-besteffort.slice/\
                 kubepods-besteffort-pod5f0c7a3e_12ab_4cde_9f00_0123456789ab.slice"
            )
        );
    }

    #[test]
    fn cgroupfs_groups_keep_the_uid_and_name_containers_by_id() {
        let docker = ContainerId::parse(&format!("docker://{ID}")).unwrap();
        assert_eq!(
            container_group(CgroupDriver::Cgroupfs, QosClass::BestEffort, UID, &docker).unwrap(),
            PathBuf::from(format!("kubepods/besteffort/pod{UID}/{ID}"))
        );
        assert_eq!(
            pod_group(CgroupDriver::Cgroupfs, QosClass::Guaranteed, UID).unwrap(),
            PathBuf::from(format!("kubepods/pod{UID}"))
        );
    }

    #[test]
    fn ids_and_uids_that_could_leave_the_tree_are_refused_by_name() {
        for bad in [
            "../../etc",
            "containerd://../x",
            "containerd://",
            "podman://abc",
        ] {
            assert!(ContainerId::parse(bad).is_err(), "{bad}");
        }
        let err = ContainerId::parse("podman://abc").unwrap_err().to_string();
        assert!(err.contains("podman"), "{err}");
        assert!(pod_group(CgroupDriver::Cgroupfs, QosClass::Burstable, "../x").is_err());
        assert_eq!(
            ContainerId::parse(&format!("cri-o://{ID}"))
                .unwrap()
                .to_string(),
            format!("cri-o://{ID}")
        );
    }
}
