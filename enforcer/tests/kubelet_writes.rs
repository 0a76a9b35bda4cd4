//! The kubelet's and runc's own writes into the groups of pods that reamer enforces, end to
//! end: `enforcer run` on the API server stand-in (`support`), a kubelet-shaped tree under the
//! tests' `reamer` subtree with real processes in its pods, and the writes the kubelet and runc
//! make there (`reamer_tests::harness::kubelet_writer` says which, when, and from where):
//!
//! - at the pods' creation, while the daemon may already be taking them;
//! - at an in-place resize of a Burstable offline pod, growing and shrinking;
//! - after a kubelet restart: the QoS tiers written again, each container updated by the CPU
//!   manager's first reconcile;
//! - with the offline pool running, and paused (its containers frozen), where runc's systemd
//!   driver on v1 also freezes around its update, and thaws a container whose freezer it read
//!   before the pause;
//! - the orphan cleanup's write on a deleted pod's group.
//!
//! Every write succeeds (runc's read-back of `cpu.shares` included), and reamer's enforcement
//! (each container on its pool's CPUs and in step with its pause, the threads SCHED_IDLE, the
//! offline pod's group at the least weight) holds or comes back within `BACK_WITHIN`. On a
//! clean stop, the Burstable pod's group has the weight of its last resize.
//!
//! Privileged: skips with a reason elsewhere (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use enforcer_common::protocol::{PodInfo, Snapshot};
use reamer_tests::harness::{
    Daemon, eventually,
    kubelet_writer::{
        Cpu, MIN_SHARES, make_container, make_pod_group, reduce_cpu_limits, resize,
        update_container, update_container_after_a_stale_read, weight_for, weight_of,
        write_qos_tiers, write_weight,
    },
    online_cpu_count, online_cpus, privileged, remove_test_cgroups, threads_idle_class,
};
use serde_json::{Value, json};

mod support;
use support::{
    ApiServer, KubeletTree, dir, frozen, hog, kubelet_mkdir, kubelet_move, read, v2_host,
};

const INSTANCE: &str = "it-kubelet-writes";
const KUBELET_ROOT: &str = "reamer/it-kubelet-writes-node";
const TRAINING_UID: &str = "10000000-0000-4000-8000-0000000000d1";
const BATCH_A_UID: &str = "a0000000-0000-4000-8000-0000000000d2";
const BATCH_B_UID: &str = "b0000000-0000-4000-8000-0000000000d3";
const BATCH_C_UID: &str = "c0000000-0000-4000-8000-0000000000d4";
/// A reconcile reads every file back each second; a weight someone else wrote is acted on
/// when two reconciles in a row have read it.
const BACK_WITHIN: Duration = Duration::from_secs(4);

const TRAINING_CPU: Cpu = Cpu {
    request_milli: 1000,
    limit_milli: None,
};
/// Batch B: a Burstable offline pod, before and after its resize.
const B_CPU: Cpu = Cpu {
    request_milli: 500,
    limit_milli: Some(1000),
};
const B_GROWN: Cpu = Cpu {
    request_milli: 750,
    limit_milli: Some(2000),
};

fn pod_of(snapshot: &Snapshot, key: &str) -> Option<PodInfo> {
    snapshot.pods.iter().find(|pod| pod.pod == key).cloned()
}

/// One offline pod of the test: its groups and its process.
struct Offline {
    key: &'static str,
    group: String,
    container: String,
    pid: u32,
}

/// What is not as reamer enforces it now, if anything: both offline pods enforced, their
/// containers on the pool's CPUs and frozen exactly while it is paused, their threads
/// SCHED_IDLE, their groups at the least weight.
fn off_enforcement(daemon: &Daemon, pods: &[&Offline]) -> Option<String> {
    let snapshot = daemon.snapshot();
    let Some(pool) = snapshot.pool_status("batch") else {
        return Some("pool batch is not in status".to_owned());
    };
    for pod in pods {
        let Some(info) = pod_of(&snapshot, pod.key) else {
            return Some(format!("pod {} is not in status", pod.key));
        };
        let cpus = read(dir("cpuset", &pod.container).join("cpuset.cpus"));
        let least = weight_for(MIN_SHARES).1;
        let problem = if info.state != "enforced" {
            format!("is {}: {}", info.state, info.detail)
        } else if cpus != pool.cpus {
            format!("runs on [{cpus}], its pool on [{}]", pool.cpus)
        } else if frozen(&pod.container) != pool.paused {
            format!(
                "is frozen: {} while its pool is paused: {}",
                frozen(&pod.container),
                pool.paused
            )
        } else if !threads_idle_class(pod.pid) {
            "has threads that are not SCHED_IDLE".to_owned()
        } else if weight_of(&pod.group) != least {
            format!("has weight {}, not {least}", weight_of(&pod.group))
        } else {
            continue;
        };
        return Some(format!("pod {} {problem}", pod.key));
    }
    None
}

fn back_within(daemon: &Daemon, pods: &[&Offline], after: &str) {
    eventually(
        &format!("reamer's enforcement back after {after}"),
        BACK_WITHIN,
        || off_enforcement(daemon, pods).is_none(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_writes_succeed_on_pods_reamer_enforces_and_enforcement_comes_back() {
    if !privileged("the_kubelets_writes_succeed_on_pods_reamer_enforces_and_enforcement_comes_back")
    {
        return;
    }
    assert!(
        online_cpu_count() >= 2,
        "needs 2 CPUs: training wants both, the online pool keeps one"
    );
    let all_cpus = online_cpus();
    let training_id = "d1".repeat(32);
    let training_container =
        format!("{KUBELET_ROOT}/kubepods/burstable/pod{TRAINING_UID}/{training_id}");
    let group = |qos: &str, uid: &str| format!("{KUBELET_ROOT}/kubepods/{qos}/pod{uid}");
    let batch_a_group = group("besteffort", BATCH_A_UID);
    let batch_b_group = group("burstable", BATCH_B_UID);
    let batch_c_group = group("besteffort", BATCH_C_UID);
    let a_container = format!("{batch_a_group}/{}", "d2".repeat(32));
    let b_container = format!("{batch_b_group}/{}", "d3".repeat(32));
    let _tree = KubeletTree(KUBELET_ROOT);
    let ledger = PathBuf::from(format!("/run/reamer/{INSTANCE}.pod-groups.json"));
    let _ = std::fs::remove_file(&ledger);
    // With the CPU manager's static policy the runtime is given each shared container's CPUs,
    // the shared pool: here every CPU.
    let shared_pool = all_cpus.as_str();

    // The kubelet starts, with the API's pods: its QoS tiers, then each pod's group and
    // container, made with their processes in them.
    let burstable = Cpu {
        request_milli: TRAINING_CPU.request_milli + B_CPU.request_milli,
        limit_milli: None,
    };
    write_qos_tiers(KUBELET_ROOT, burstable).expect("the kubelet's QoS tiers at its start");
    let made = [
        (
            group("burstable", TRAINING_UID),
            training_container.clone(),
            TRAINING_CPU,
        ),
        (batch_a_group.clone(), a_container.clone(), Cpu::BEST_EFFORT),
        (batch_b_group.clone(), b_container.clone(), B_CPU),
    ];
    let offline = json!({"reamer.io/role": "offline"});
    let server = Arc::new(Mutex::new(ApiServer {
        pods: vec![
            support::api_pod(
                TRAINING_UID,
                "resnet-0",
                json!({"reamer.io/role": "training"}),
                "Burstable",
                Some(&format!("containerd://{training_id}")),
            ),
            support::api_pod(BATCH_A_UID, "batch-a", offline.clone(), "BestEffort", None),
            support::api_pod(BATCH_B_UID, "batch-b", offline.clone(), "Burstable", None),
            support::api_pod(BATCH_C_UID, "batch-c", offline.clone(), "BestEffort", None),
        ],
        resource_version: 5,
        ..ApiServer::default()
    }));
    let url = support::start(server.clone()).await;
    let scratch = support::scratch_with_kubeconfig(INSTANCE, &url);
    let config = support::pausing_node_config(KUBELET_ROOT);
    // The daemon first: it takes the pods while the kubelet makes their groups.
    let daemon = support::start_daemon(&scratch, INSTANCE, &config);
    for (pod_group, container, cpu) in &made {
        make_pod_group(pod_group, *cpu).expect("the kubelet's new pod group");
        make_container(container, *cpu, shared_pool).expect("runc's new container");
    }
    let (a_process, b_process) = (hog(1), hog(1));
    kubelet_move(a_process.0.id(), &a_container);
    kubelet_move(b_process.0.id(), &b_container);
    let batch_a = Offline {
        key: "ml/batch-a",
        group: batch_a_group.clone(),
        container: a_container.clone(),
        pid: a_process.0.id(),
    };
    let batch_b = Offline {
        key: "ml/batch-b",
        group: batch_b_group.clone(),
        container: b_container.clone(),
        pid: b_process.0.id(),
    };
    let pods = [&batch_a, &batch_b];
    back_within(&daemon, &pods, "the pods' creation");

    // Batch C's group is read before the kubelet wrote its weight: the kernel's 1024 shares of
    // a new group are not taken for the kubelet's at once, and the kubelet's BestEffort weight,
    // written a check later, is the one kept (nothing to write, nothing to give back).
    kubelet_mkdir(&batch_c_group);
    eventually(
        "batch C's new group's weight seen once",
        Duration::from_secs(3),
        || {
            pod_of(&daemon.snapshot(), "ml/batch-c")
                .is_some_and(|pod| pod.detail.contains("reads as a new group's"))
        },
    );
    write_weight(&batch_c_group, MIN_SHARES).expect("the kubelet's weight, late");
    eventually("batch C enforced", BACK_WITHIN, || {
        pod_of(&daemon.snapshot(), "ml/batch-c").is_some_and(|pod| pod.state == "enforced")
    });
    let kept: Value = serde_json::from_str(&read(ledger.clone())).unwrap();
    assert!(kept["pods"].get(&batch_c_group).is_none(), "{kept}");
    let (weight_file, _) = weight_for(MIN_SHARES);
    let kept_weight = || -> Value {
        let kept: Value = serde_json::from_str(&read(ledger.clone())).unwrap();
        kept["pods"][&batch_b_group].clone()
    };
    assert_eq!(
        kept_weight(),
        json!({"file": weight_file, "value": weight_for(B_CPU.shares()).1}),
        "batch B's weight from the kubelet, kept for when reamer lets go"
    );
    assert_eq!(
        read(dir("cpu", &batch_a_group).join("cpu.idle")),
        "0",
        "no pod group is made idle: the kubelet's weight writes would fail"
    );

    // The pool running: batch B grows in place, then the kubelet restarts.
    resize(
        &batch_b_group,
        B_CPU,
        B_GROWN,
        &[(&b_container, B_GROWN)],
        shared_pool,
    )
    .expect("the kubelet's resize of an enforced pod, growing");
    back_within(&daemon, &pods, "a resize");
    eventually(
        "batch B's grown weight kept as the kubelet's",
        BACK_WITHIN,
        || kept_weight()["value"] == json!(weight_for(B_GROWN.shares()).1),
    );
    let burstable_grown = Cpu {
        request_milli: TRAINING_CPU.request_milli + B_GROWN.request_milli,
        limit_milli: None,
    };
    write_qos_tiers(KUBELET_ROOT, burstable_grown).expect("the QoS tiers at the kubelet's restart");
    for (container, cpu) in [(&a_container, Cpu::BEST_EFFORT), (&b_container, B_GROWN)] {
        update_container(container, cpu, shared_pool, false)
            .expect("the CPU manager's reconcile after a restart");
    }
    back_within(&daemon, &pods, "a kubelet restart");

    // Training takes every CPU: the pool is paused, its containers frozen. The same writes,
    // and runc's systemd driver on v1.
    let training = hog(online_cpu_count());
    kubelet_move(training.0.id(), &training_container);
    eventually(
        "the offline pool paused, its containers frozen",
        Duration::from_secs(20),
        || {
            daemon
                .snapshot()
                .pool_status("batch")
                .is_some_and(|pool| pool.paused)
                && frozen(&a_container)
                && frozen(&b_container)
        },
    );
    resize(
        &batch_b_group,
        B_GROWN,
        B_CPU,
        &[(&b_container, B_CPU)],
        shared_pool,
    )
    .expect("the kubelet's resize of a paused pod, shrinking");
    write_qos_tiers(KUBELET_ROOT, burstable).expect("the QoS tiers at the kubelet's restart");
    for (container, cpu) in [(&a_container, Cpu::BEST_EFFORT), (&b_container, B_CPU)] {
        update_container(container, cpu, shared_pool, true)
            .expect("runc's update (systemd driver)");
    }
    assert!(
        frozen(&a_container) && frozen(&b_container),
        "runc leaves a frozen container frozen"
    );
    if !v2_host() {
        update_container_after_a_stale_read(&a_container, Cpu::BEST_EFFORT, shared_pool)
            .expect("runc's update after reading the freezer before the pause");
    }
    back_within(&daemon, &pods, "the writes on a paused pool");
    eventually(
        "batch B's shrunk weight kept as the kubelet's",
        BACK_WITHIN,
        || kept_weight()["value"] == json!(weight_for(B_CPU.shares()).1),
    );
    let snapshot = daemon.snapshot();
    for pod in pods {
        let info = pod_of(&snapshot, pod.key).unwrap();
        println!("{}: {} foreign writes", pod.key, info.foreign_writes);
        assert!(
            info.foreign_writes > 0,
            "the kubelet's writes were seen: {info:?}"
        );
    }
    drop(training);

    // Batch A is deleted: let go at once. The kubelet's orphan cleanup then lowers its
    // group's weight, the volumes still mounted.
    server
        .lock()
        .unwrap()
        .pods
        .retain(|pod| pod["metadata"]["uid"] != BATCH_A_UID);
    let mut deleted = support::api_pod(BATCH_A_UID, "batch-a", offline, "BestEffort", None);
    deleted["metadata"]["resourceVersion"] = json!("6");
    support::send_event(&server, json!({"type": "DELETED", "object": deleted})).await;
    eventually("batch A let go", Duration::from_secs(5), || {
        pod_of(&daemon.snapshot(), "ml/batch-a").is_none() && !frozen(&a_container)
    });
    reduce_cpu_limits(&batch_a_group).expect("the orphan cleanup's write");

    // A clean stop gives batch B the kubelet's weight of its last resize, and leaves no ledger.
    let log = daemon.stop();
    assert_eq!(weight_of(&batch_c_group), weight_for(MIN_SHARES).1, "{log}");
    assert_eq!(
        weight_of(&batch_b_group),
        weight_for(B_CPU.shares()).1,
        "{log}"
    );
    assert!(!frozen(&b_container));
    assert!(!ledger.exists(), "a clean stop leaves nothing to undo");
    assert!(log.contains("the kubelet's weight from now on"), "{log}");

    drop((a_process, b_process));
    remove_test_cgroups(INSTANCE, "batch");
    remove_test_cgroups(INSTANCE, "serve");
    let _ = std::fs::remove_dir_all(&scratch);
}
