//! What a daemon that dies leaves in pods' groups, and groups the runtime makes late, end to
//! end: `enforcer run` on the API server stand-in (`support`) and a kubelet-shaped tree under
//! the tests' `reamer` subtree, with real processes in the pods' groups.
//!
//! - A daemon killed (SIGKILL) while its offline pool is paused leaves a pod's container
//!   frozen. The pod is deleted before the next daemon starts, so no pod event will ever name
//!   it again. The next daemon still thaws it and gives it the kubelet's CPUs. Its pod group,
//!   which an earlier version of reamer made idle and named in the same ledger (an upgrade
//!   after a crash), gets back the weight the kubelet wrote (the kernel resets it to 1024
//!   shares when `cpu.idle` goes back to 0).
//! - A pod whose groups the runtime makes after the API reported it, and whose container's
//!   freezer group comes after its cpu group (runc's order on cgroup v1), is `failing` until
//!   every part is enforced, is then frozen with its paused pool, and none of reamer's own
//!   late writes counts as someone else's rewrite.
//!
//! Privileged: skips with a reason elsewhere (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use enforcer_common::protocol::{PodInfo, Snapshot};
use reamer_tests::harness::{
    eventually, online_cpu_count, online_cpus, privileged, remove_test_cgroups, threads_idle_class,
};
use serde_json::{Value, json};

mod support;
use support::{
    ApiServer, KubeletTree, besteffort_weight, dir, frozen, hierarchies, hog, kubelet_mkdir,
    kubelet_move, read, remove_tree, v2_host,
};

const INSTANCE: &str = "it-kube-crash";
const KUBELET_ROOT: &str = "reamer/it-kube-crash-node";
const TRAINING_UID: &str = "10000000-0000-4000-8000-0000000000c1";
const BATCH_UID: &str = "a0000000-0000-4000-8000-0000000000c2";
const LATE_UID: &str = "b0000000-0000-4000-8000-0000000000c3";

fn pod_of(snapshot: &Snapshot, key: &str) -> Option<PodInfo> {
    snapshot.pods.iter().find(|pod| pod.pod == key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_daemons_frozen_pod_is_given_back_and_late_groups_are_enforced_whole() {
    if !privileged("a_dead_daemons_frozen_pod_is_given_back_and_late_groups_are_enforced_whole") {
        return;
    }
    assert!(
        online_cpu_count() >= 2,
        "needs 2 CPUs: training wants both, the online pool keeps one"
    );
    let all_cpus = online_cpus();
    let training_id = "c1".repeat(32);
    let training_container =
        format!("{KUBELET_ROOT}/kubepods/burstable/pod{TRAINING_UID}/{training_id}");
    let batch_pod = format!("{KUBELET_ROOT}/kubepods/besteffort/pod{BATCH_UID}");
    let batch_container = format!("{batch_pod}/{}", "c2".repeat(32));
    let late_pod = format!("{KUBELET_ROOT}/kubepods/besteffort/pod{LATE_UID}");
    let late_container = format!("{late_pod}/{}", "c3".repeat(32));
    for controller in hierarchies() {
        remove_tree(&dir(controller, KUBELET_ROOT));
    }
    let _tree = KubeletTree(KUBELET_ROOT);
    let ledger = PathBuf::from(format!("/run/reamer/{INSTANCE}.pod-groups.json"));
    let _ = std::fs::remove_file(&ledger);

    // The node as the kubelet left it: a training pod and an offline pod, each with its
    // container running; the offline pod's group at the kubelet's BestEffort weight.
    kubelet_mkdir(&training_container);
    kubelet_mkdir(&batch_container);
    let (weight_file, weight) = besteffort_weight();
    std::fs::write(dir("cpu", &batch_pod).join(weight_file), weight).unwrap();
    let batch = hog(1);
    kubelet_move(batch.0.id(), &batch_container);

    let offline = json!({"reamer.io/role": "offline"});
    let training_pod = support::api_pod(
        TRAINING_UID,
        "resnet-0",
        json!({"reamer.io/role": "training"}),
        "Burstable",
        Some(&format!("containerd://{training_id}")),
    );
    let server = Arc::new(Mutex::new(ApiServer {
        pods: vec![
            training_pod.clone(),
            support::api_pod(BATCH_UID, "batch-a", offline.clone(), "BestEffort", None),
        ],
        resource_version: 5,
        ..ApiServer::default()
    }));
    let url = support::start(server.clone()).await;
    let scratch = support::scratch_with_kubeconfig(INSTANCE, &url);
    // Training on every CPU wants more than the online pool's guaranteed core leaves it: the
    // offline pool is paused while it runs.
    let config = support::pausing_node_config(KUBELET_ROOT);
    let start_daemon = || support::start_daemon(&scratch, INSTANCE, &config);
    let daemon = start_daemon();
    eventually("the offline pod enforced", Duration::from_secs(10), || {
        pod_of(&daemon.snapshot(), "ml/batch-a")
            .is_some_and(|pod| pod.state == "enforced" && pod.containers == 1)
    });
    // Idle-class by its threads' policy; its group's cpu files stay the kubelet's.
    eventually(
        "the offline pod's threads SCHED_IDLE",
        Duration::from_secs(3),
        || threads_idle_class(batch.0.id()),
    );
    assert_eq!(read(dir("cpu", &batch_pod).join("cpu.idle")), "0");
    assert_eq!(read(dir("cpu", &batch_pod).join(weight_file)), weight);

    let training = hog(online_cpu_count());
    kubelet_move(training.0.id(), &training_container);
    eventually(
        "the offline pod's container frozen with its paused pool",
        Duration::from_secs(20),
        || frozen(&batch_container),
    );

    // The daemon dies, and the offline pod is deleted before another starts: no event will
    // name it again. Only the ledger does.
    daemon.crash();
    assert!(frozen(&batch_container), "nothing thaws after SIGKILL");
    let kept: Value = serde_json::from_str(&read(ledger.clone())).unwrap();
    assert_eq!(
        kept["containers"][&batch_container],
        json!(all_cpus),
        "{kept}"
    );
    assert_eq!(
        kept["pods"],
        json!({}),
        "a BestEffort pod's group has the least weight from the kubelet: not written: {kept}"
    );
    // The earlier version that made offline pods' groups idle left its ledger so.
    let mut earlier = kept.clone();
    earlier["pods"] =
        json!({&batch_pod: {"file": weight_file, "value": weight.parse::<u64>().unwrap()}});
    std::fs::write(&ledger, earlier.to_string()).unwrap();
    std::fs::write(dir("cpu", &batch_pod).join("cpu.idle"), "1").unwrap();
    server.lock().unwrap().pods = vec![training_pod];

    // The pod whose groups come late is in the API from the next daemon's first list.
    server.lock().unwrap().pods.push(support::api_pod(
        LATE_UID,
        "late-b",
        offline,
        "BestEffort",
        None,
    ));
    let daemon = start_daemon();
    eventually(
        "the dead daemon's pod thawed, its CPUs and weight the kubelet's",
        Duration::from_secs(10),
        || {
            !frozen(&batch_container)
                && read(dir("cpuset", &batch_container).join("cpuset.cpus")) == all_cpus
                && read(dir("cpu", &batch_pod).join("cpu.idle")) == "0"
                && read(dir("cpu", &batch_pod).join(weight_file)) == weight
        },
    );
    assert!(pod_of(&daemon.snapshot(), "ml/batch-a").is_none());
    eventually("the pool paused again", Duration::from_secs(20), || {
        daemon
            .snapshot()
            .pool_status("batch")
            .is_some_and(|pool| pool.paused)
    });
    assert!(
        pod_of(&daemon.snapshot(), "ml/late-b").is_some_and(|pod| pod.state == "failing"),
        "a pod whose group is not there is not enforced: {:?}",
        pod_of(&daemon.snapshot(), "ml/late-b")
    );

    // Its groups appear, in runc's order: cpuset and cpu with the process in them first, the
    // freezer group after (one hierarchy on v2: there, all at once). The kubelet writes the
    // pod group's BestEffort weight right after its mkdir, while the daemon may already be
    // taking the pod: reamer writes no cpu file of a pod's groups, so the write cannot fail.
    let late = hog(1);
    let early: &[&str] = if v2_host() {
        &["unified"]
    } else {
        &["cpuset", "cpu"]
    };
    for group in [&late_pod, &late_container] {
        for controller in early {
            let here = dir(controller, group);
            std::fs::create_dir_all(&here).unwrap();
            if *controller == "cpuset" {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let parent = read(here.parent().unwrap().join(file));
                    std::fs::write(here.join(file), parent).unwrap();
                }
            }
        }
    }
    if v2_host() {
        kubelet_mkdir(&late_container);
    }
    std::fs::write(dir("cpu", &late_pod).join(weight_file), weight)
        .expect("the kubelet's weight for a new BestEffort pod group");
    // An earlier version made it idle, and its ledger entry is lost: the group is made not
    // idle (the kubelet's weight writes would fail), and held at the least weight.
    std::fs::write(dir("cpu", &late_pod).join("cpu.idle"), "1").unwrap();
    for controller in early {
        let procs = dir(controller, &late_container).join("cgroup.procs");
        std::fs::write(procs, late.0.id().to_string()).unwrap();
    }
    if !v2_host() {
        eventually(
            "the late pod failing while its container's freezer group is missing",
            Duration::from_secs(5),
            || {
                pod_of(&daemon.snapshot(), "ml/late-b").is_some_and(|pod| {
                    pod.containers == 1 && pod.state == "failing" && pod.detail.contains("freez")
                })
            },
        );
        kubelet_mkdir(&late_container);
        kubelet_move(late.0.id(), &late_container);
    }
    eventually(
        "the late pod enforced whole: narrowed, frozen with its pool",
        Duration::from_secs(10),
        || {
            pod_of(&daemon.snapshot(), "ml/late-b").is_some_and(|pod| pod.state == "enforced")
                && frozen(&late_container)
        },
    );
    assert_eq!(read(dir("cpu", &late_pod).join("cpu.idle")), "0");
    assert_eq!(read(dir("cpu", &late_pod).join(weight_file)), weight);
    let late_pod_info = pod_of(&daemon.snapshot(), "ml/late-b").unwrap();
    assert_eq!(
        late_pod_info.foreign_writes, 0,
        "reamer's own late writes are not someone else's: {late_pod_info:?}"
    );

    // A clean stop gives it back whole, and leaves no ledger.
    let log = daemon.stop();
    assert!(!frozen(&late_container));
    assert_eq!(read(dir("cpu", &late_pod).join("cpu.idle")), "0");
    assert_eq!(read(dir("cpu", &late_pod).join(weight_file)), weight);
    assert!(!ledger.exists(), "a clean stop leaves nothing to undo");

    drop((training, batch, late));
    remove_test_cgroups(INSTANCE, "batch");
    remove_test_cgroups(INSTANCE, "serve");
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(log.contains("were given back"), "{log}");
}
