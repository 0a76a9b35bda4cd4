//! `enforcer pods` end to end: the binary lists the node's pods from the API server stand-in
//! (`support`), through a kubeconfig as a user's would point it, classifies them by label
//! with the config's pools and selectors, and finds their containers' cgroups in a real
//! hierarchy laid out as the kubelet lays it out (cgroupfs driver), under the tests' `reamer`
//! subtree. Privileged (cgroups): skips with a reason elsewhere (fails with
//! REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use enforcer::kubernetes::pod_cgroup::{
    CgroupDriver, ContainerId, QosClass, container_group, kubelet_hierarchy, pod_group,
};
use reamer_tests::harness::{enforcer_bin, privileged};
use serde_json::{Value, json};

mod support;
use support::{ApiServer, remove_kubelet_tree};

const INSTANCE: &str = "it-pods";

fn container_id(n: u8) -> String {
    format!("containerd://{}", format!("{n:02x}").repeat(32))
}

/// A pod whose container is `container_id(container)`.
fn api_pod(uid: &str, name: &str, labels: Value, qos: &str, container: u8) -> Value {
    support::api_pod(uid, name, labels, qos, Some(&container_id(container)))
}

/// A pod of namespace `tenant`, which the test's config does not trust with training, that
/// says it is training.
fn untrusted_training_pod() -> Value {
    let mut pod = api_pod(
        "99",
        "fake-train",
        json!({"reamer.io/role": "training"}),
        "BestEffort",
        5,
    );
    pod["metadata"]["namespace"] = json!("tenant");
    pod
}

#[tokio::test]
async fn enforcer_pods_classifies_the_nodes_pods_and_finds_their_containers() {
    if !privileged("enforcer_pods_classifies_the_nodes_pods_and_finds_their_containers") {
        return;
    }
    let training_uid = "11111111-2222-4333-8444-555555555555";
    let offline_uid = "66666666-7777-4888-8999-aaaaaaaaaaaa";
    let server = Arc::new(Mutex::new(ApiServer {
        pods: vec![
            api_pod(
                training_uid,
                "resnet-0",
                json!({"reamer.io/role": "training"}),
                "Burstable",
                1,
            ),
            api_pod(
                offline_uid,
                "batch-0",
                json!({"koordinator.sh/qosClass": "BE"}),
                "BestEffort",
                2,
            ),
            api_pod(
                "77",
                "serve-0",
                json!({"reamer.io/role": "online", "reamer.io/pool": "gone"}),
                "Burstable",
                3,
            ),
            api_pod("88", "web-0", json!({"app": "web"}), "Guaranteed", 4),
            untrusted_training_pod(),
        ],
        resource_version: 7,
        ..ApiServer::default()
    }));
    let url = support::start(server.clone()).await;

    // The kubelet's tree: the offline pod's container has its group, the training pod's
    // container not yet.
    let kubelet_root = kubelet_hierarchy().join(format!("reamer/{INSTANCE}"));
    remove_kubelet_tree(&kubelet_root);
    let driver = CgroupDriver::Cgroupfs;
    let offline_container = container_group(
        driver,
        QosClass::BestEffort,
        offline_uid,
        &ContainerId::parse(&container_id(2)).unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(kubelet_root.join(&offline_container)).unwrap();
    std::fs::create_dir_all(
        kubelet_root.join(pod_group(driver, QosClass::Burstable, training_uid).unwrap()),
    )
    .unwrap();

    let dir = std::env::temp_dir().join(format!("reamer-{INSTANCE}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), support::kubeconfig(&url)).unwrap();
    std::fs::write(
        dir.join("enforcer.toml"),
        format!(
            "[kubernetes]\nnode_name = \"node-1\"\ncgroup_root = \"/reamer/{INSTANCE}\"\n\n\
             [kubernetes.claims]\ntraining = [\"ml\"]\n\n\
             [[kubernetes.selector]]\nlabel = \"koordinator.sh/qosClass\"\nvalue = \"BE\"\n\
             role = \"offline\"\n\n\
             [[pool]]\nname = \"serve\"\nkind = \"online\"\n\n\
             [[pool]]\nname = \"batch\"\nkind = \"offline\"\n"
        ),
    )
    .unwrap();
    let output = tokio::process::Command::new(enforcer_bin())
        .args(["pods", "--json", "--config"])
        .arg(dir.join("enforcer.toml"))
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: BTreeMap<String, Value> = stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            (value["pod"].as_str().unwrap().to_owned(), value)
        })
        .collect();
    remove_kubelet_tree(&kubelet_root);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(lines.len(), 5, "{stdout}\n{stderr}");
    let resnet = &lines["ml/resnet-0"];
    assert_eq!(resnet["role"], "training");
    assert_eq!(
        resnet["group"], "ml/resnet-0-job",
        "the pod's controlling owner"
    );
    assert_eq!(resnet["containers"][0]["found"], false, "{resnet}");
    let batch = &lines["ml/batch-0"];
    assert_eq!(
        (&batch["role"], &batch["group"]),
        (&json!("offline"), &json!("batch"))
    );
    assert_eq!(batch["containers"][0]["found"], true, "{batch}");
    assert!(
        batch["containers"][0]["cgroup"]
            .as_str()
            .unwrap()
            .ends_with(&offline_container.display().to_string()),
        "{batch}"
    );
    let serve = &lines["ml/serve-0"];
    assert_eq!(serve["role"], "error");
    assert!(
        serve["group"].as_str().unwrap().contains("pool \"gone\""),
        "{serve}"
    );
    assert_eq!(lines["ml/web-0"]["role"], "-");
    let untrusted = &lines["tenant/fake-train"];
    assert_eq!(untrusted["role"], "error");
    assert!(
        untrusted["group"]
            .as_str()
            .unwrap()
            .contains("namespace \"tenant\" may not claim training"),
        "{untrusted}"
    );
    // A pod marked for reamer that cannot be taken fails the command, saying how many.
    assert!(!output.status.success());
    assert!(
        stderr.contains("2 pod(s) marked for reamer cannot be taken"),
        "{stderr}"
    );
    let list = server.lock().unwrap().lists[0].clone();
    assert!(
        list.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "{list}"
    );
}

#[tokio::test]
async fn enforcer_pods_watch_sees_a_container_group_within_100_ms_and_a_pod_go() {
    if !privileged("enforcer_pods_watch_sees_a_container_group_within_100_ms_and_a_pod_go") {
        return;
    }
    use tokio::io::AsyncBufReadExt as _;

    let uid = "abcdef01-2345-4678-89ab-cdef01234567";
    // The pod as the API shows it while its container is being created: no container ID yet.
    let mut creating = api_pod(
        uid,
        "batch-1",
        json!({"reamer.io/role": "offline"}),
        "BestEffort",
        9,
    );
    creating["status"]["containerStatuses"] = json!([]);
    let server = Arc::new(Mutex::new(ApiServer {
        pods: vec![creating.clone()],
        resource_version: 3,
        ..ApiServer::default()
    }));
    let url = support::start(server.clone()).await;
    let instance = format!("{INSTANCE}-watch");
    let kubelet_root = kubelet_hierarchy().join(format!("reamer/{instance}"));
    remove_kubelet_tree(&kubelet_root);
    let driver = CgroupDriver::Cgroupfs;
    let pod_dir = kubelet_root.join(pod_group(driver, QosClass::BestEffort, uid).unwrap());
    std::fs::create_dir_all(&pod_dir).unwrap();

    let dir = std::env::temp_dir().join(format!("reamer-{instance}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), support::kubeconfig(&url)).unwrap();
    std::fs::write(
        dir.join("enforcer.toml"),
        format!(
            "[kubernetes]\nnode_name = \"node-1\"\ncgroup_root = \"/reamer/{instance}\"\n\n\
             [[pool]]\nname = \"batch\"\nkind = \"offline\"\n"
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(enforcer_bin())
        .args(["pods", "--watch", "--json", "--config"])
        .arg(dir.join("enforcer.toml"))
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
            .await
            .expect("a line within 10 s")
            .unwrap()
            .expect("the watch goes on");
        serde_json::from_str(&line).unwrap()
    };

    let first = next().await;
    assert_eq!(
        (&first["event"], &first["pod"]),
        (&json!("pod"), &json!("ml/batch-1"))
    );
    assert_eq!(first["role"], "offline");
    // The runtime makes the container's group: seen before the API says a word of it.
    let id = ContainerId::parse(&container_id(9)).unwrap();
    let container_dir = pod_dir.join(id.group_name(driver));
    // Let the watch on the pod's group be in place (it follows the pod's line at once).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let made = std::time::Instant::now();
    std::fs::create_dir(&container_dir).unwrap();
    let appeared = next().await;
    let seen_after = made.elapsed();
    assert_eq!(appeared["event"], "container_created", "{appeared}");
    assert_eq!(appeared["cgroup"], json!(container_dir));
    println!("container group seen through `enforcer pods --watch` {seen_after:?} after mkdir");
    assert!(
        seen_after < std::time::Duration::from_millis(100),
        "{seen_after:?}"
    );

    // The pod is deleted.
    let mut deleted = creating;
    deleted["metadata"]["resourceVersion"] = json!("4");
    support::send_event(&server, json!({"type": "DELETED", "object": deleted})).await;
    let gone = next().await;
    assert_eq!(
        (&gone["event"], &gone["pod"]),
        (&json!("removed"), &json!("ml/batch-1")),
        "{gone}"
    );

    child.kill().await.unwrap();
    remove_kubelet_tree(&kubelet_root);
    let _ = std::fs::remove_dir_all(&dir);
}
