//! Pods' cgroups on the real kernel, laid out as the kubelet lays them out for each cgroup
//! driver, under the tests' `reamer` subtree, with a real process in a container's group: the
//! resolution from a pod's UID, QoS class and container ID finds the group the process is
//! in, and a container group made after its pod is seen within 100 ms. Privileged: skips
//! with a reason elsewhere (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use enforcer::kubernetes::{
    container_watch::{ContainerWatch, GroupEvent},
    pod::Pod,
    pod_cgroup::{CgroupDriver, container_group, pod_group},
};
use reamer_tests::harness::{Reaped, privileged};

mod support;
use support::remove_kubelet_tree;

const INSTANCE: &str = "it-kubelet";

/// A pod of the real schema: Burstable, one container created by containerd, one by CRI-O.
const POD: &str = r#"{
  "metadata": {"name": "batch-0", "namespace": "ml", "uid": "7d1e2f30-4a5b-4c6d-8e9f-a0b1c2d3e4f5",
               "labels": {"reamer.io/role": "offline"}},
  "spec": {"nodeName": "node-1"},
  "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
    {"name": "main", "containerID": "containerd://00aa11bb22cc33dd44ee55ff66778899aabbccddeeff00112233445566778899"},
    {"name": "side", "containerID": "cri-o://99887766554433221100ffeeddccbbaa99887766554433221100ffeeddccbbaa"}
  ]}
}"#;

/// The cgroup hierarchies of this host a kubelet would use: cgroup v2's tree, or v1's cpu
/// hierarchy (the same layout goes in each v1 hierarchy).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut found = Vec::new();
    if root.join("cgroup.controllers").exists() {
        found.push(root.to_owned());
    } else {
        found.push(root.join("cpu"));
        if root.join("unified/cgroup.procs").exists() {
            found.push(root.join("unified"));
        }
    }
    found
}

#[test]
fn a_pods_containers_are_found_where_the_kubelet_puts_them_and_new_ones_at_once() {
    if !privileged("a_pods_containers_are_found_where_the_kubelet_puts_them_and_new_ones_at_once") {
        return;
    }
    let pod: Pod = serde_json::from_str(POD).unwrap();
    let qos = pod.status.qos_class.unwrap();
    let containers: Vec<_> = pod
        .containers()
        .into_iter()
        .map(|(_, id)| id.unwrap())
        .collect();
    for hierarchy in hierarchies() {
        for driver in [CgroupDriver::Systemd, CgroupDriver::Cgroupfs] {
            // The kubelet's --cgroup-root, inside the tests' subtree.
            let kubelet_root = hierarchy.join(format!("reamer/{INSTANCE}/{driver:?}"));
            remove_kubelet_tree(&kubelet_root);
            let pod_dir = kubelet_root.join(pod_group(driver, qos, &pod.metadata.uid).unwrap());
            std::fs::create_dir_all(&pod_dir).unwrap();
            assert_eq!(CgroupDriver::detect(&kubelet_root), Some(driver));

            let mut watch = ContainerWatch::new().unwrap();
            assert!(watch.watch(&pod_dir).unwrap().is_empty());
            let mut worst = Duration::ZERO;
            let mut sleepers = Vec::new();
            for container in &containers {
                let relative = container_group(driver, qos, &pod.metadata.uid, container).unwrap();
                let dir = kubelet_root.join(&relative);
                // What the runtime does: make the group, then start the container in it.
                let made = Instant::now();
                std::fs::create_dir(&dir).unwrap();
                let events = watch.wait(Duration::from_secs(5)).unwrap();
                worst = worst.max(made.elapsed());
                assert_eq!(
                    events,
                    [GroupEvent::Created {
                        pod_dir: pod_dir.clone(),
                        child: container.group_name(driver),
                    }],
                    "{driver:?} in {}",
                    hierarchy.display()
                );
                let sleeper = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
                std::fs::write(dir.join("cgroup.procs"), sleeper.0.id().to_string()).unwrap();
                // The process is where the resolution says its container is.
                let own =
                    std::fs::read_to_string(format!("/proc/{}/cgroup", sleeper.0.id())).unwrap();
                let expected = dir.strip_prefix(&hierarchy).unwrap();
                assert!(
                    own.lines()
                        .any(|line| line.ends_with(&format!("/{}", expected.display()))),
                    "{} not in\n{own}",
                    expected.display()
                );
                sleepers.push((sleeper, dir));
            }
            println!(
                "{driver:?} in {}: container groups seen {:?} after they were made, at worst",
                hierarchy.display(),
                worst
            );
            assert!(worst < Duration::from_millis(100), "seen after {worst:?}");
            for (sleeper, dir) in sleepers {
                drop(sleeper);
                // A killed process leaves its group a moment after it is reaped.
                let deadline = Instant::now() + Duration::from_secs(5);
                while std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            remove_kubelet_tree(&kubelet_root);
        }
        let _ = std::fs::remove_dir(hierarchy.join("reamer").join(INSTANCE));
        let _ = std::fs::remove_dir(hierarchy.join("reamer"));
    }
}
