//! The daemon on Kubernetes pods, end to end: `enforcer run` follows the API server stand-in
//! (`support`) through a kubeconfig, finds the pods' groups in a real hierarchy laid out as
//! the kubelet lays it out (cgroupfs driver, each v1 hierarchy or the v2 tree) under the
//! tests' `reamer` subtree, with real processes in them, and:
//!
//! - makes a training pod's threads a training job named by its owner;
//! - writes an offline pod's container groups in place, within 100 ms of the group appearing;
//! - moves them with its pool when training contends (the fast path, as for launched
//!   processes);
//! - re-applies a rewrite by someone else, and lets go of a pod whose files another agent keeps
//!   writing;
//! - leaves alone a pod the CPU manager gave exclusive CPUs;
//! - releases a pod that goes away, and drops a training job whose last pod went.
//!
//! Privileged: skips with a reason elsewhere (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    path::PathBuf,
    process::{Child, Command},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use enforcer_common::protocol::{PodInfo, Snapshot};
use reamer_tests::harness::{
    eventually, online_cpu_count, online_cpus, privileged, remove_test_cgroups, target_dir,
    thread_policies,
};
use serde_json::{Value, json};

mod support;
use support::{
    ApiServer, besteffort_weight, dir, hierarchies, kubelet_mkdir, kubelet_move, read, remove_tree,
};

const INSTANCE: &str = "it-kube";
/// The kubelet's `--cgroup-root` of the test: its tree under the tests' `reamer` subtree.
const KUBELET_ROOT: &str = "reamer/it-kube-node";
const TRAINING_UID: &str = "10000000-0000-4000-8000-000000000001";
const BATCH_A_UID: &str = "a0000000-0000-4000-8000-00000000000a";
const BATCH_B_UID: &str = "b0000000-0000-4000-8000-00000000000b";
const PINNED_UID: &str = "c0000000-0000-4000-8000-00000000000c";

fn container_cpus(relative: &str) -> String {
    read(dir("cpuset", relative).join("cpuset.cpus"))
}

fn pool_cpus() -> String {
    read(dir("cpuset", &format!("reamer/{INSTANCE}/batch")).join("cpuset.cpus"))
}

/// A pod whose container (where it has one) is containerd's `id`.
fn api_pod(uid: &str, name: &str, labels: Value, qos: &str, id: Option<&str>) -> Value {
    let container_id = id.map(|id| format!("containerd://{id}"));
    support::api_pod(uid, name, labels, qos, container_id.as_deref())
}

fn pod_of<'a>(snapshot: &'a Snapshot, key: &str) -> Option<&'a PodInfo> {
    snapshot.pods.iter().find(|pod| pod.pod == key)
}

/// A process the test started, killed when the test ends however it ends.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(program: &str, args: &[&str]) -> Started {
    Started(
        Command::new(target_dir().join(program))
            .args(args)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program}: {e}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_enforces_on_pods_found_by_label_and_lets_them_go() {
    if !privileged("the_daemon_enforces_on_pods_found_by_label_and_lets_them_go") {
        return;
    }
    assert!(
        online_cpu_count() >= 2,
        "needs 2 CPUs: one for training, one for the pool"
    );
    let all_cpus = online_cpus();
    let pod_group = |qos: &str, uid: &str| match qos {
        "" => format!("{KUBELET_ROOT}/kubepods/pod{uid}"),
        tier => format!("{KUBELET_ROOT}/kubepods/{tier}/pod{uid}"),
    };
    let training_id = "11".repeat(32);
    let pinned_id = "33".repeat(32);
    let training_container = format!("{}/{training_id}", pod_group("burstable", TRAINING_UID));
    let pinned_container = format!("{}/{pinned_id}", pod_group("", PINNED_UID));
    let batch_a = pod_group("besteffort", BATCH_A_UID);
    let batch_b = pod_group("besteffort", BATCH_B_UID);
    let (a_container, b_container) = (
        format!("{batch_a}/{}", "aa".repeat(32)),
        format!("{batch_b}/{}", "bb".repeat(32)),
    );
    for controller in hierarchies() {
        remove_tree(&dir(controller, KUBELET_ROOT));
    }

    // The node as the kubelet left it: a training pod running, two offline pods whose
    // containers are not made yet, and a Guaranteed pod pinned by the CPU manager to CPU 1.
    for group in [&training_container, &pinned_container, &batch_a, &batch_b] {
        kubelet_mkdir(group);
    }
    std::fs::write(dir("cpuset", &pinned_container).join("cpuset.cpus"), "1").unwrap();
    let (weight_file, weight) = besteffort_weight();
    for group in [&batch_a, &batch_b] {
        std::fs::write(dir("cpu", group).join(weight_file), weight).unwrap();
    }

    let offline = json!({"reamer.io/role": "offline"});
    // A pod of a namespace the config does not trust with training, that says it is.
    let mut untrusted = api_pod(
        "d0000000-0000-4000-8000-00000000000d",
        "fake-train",
        json!({"reamer.io/role": "training"}),
        "BestEffort",
        None,
    );
    untrusted["metadata"]["namespace"] = json!("tenant");
    let server = Arc::new(Mutex::new(ApiServer {
        pods: vec![
            api_pod(
                TRAINING_UID,
                "resnet-0",
                json!({"reamer.io/role": "training"}),
                "Burstable",
                Some(&training_id),
            ),
            api_pod(BATCH_A_UID, "batch-a", offline.clone(), "BestEffort", None),
            api_pod(BATCH_B_UID, "batch-b", offline.clone(), "BestEffort", None),
            api_pod(
                PINNED_UID,
                "pinned-0",
                offline.clone(),
                "Guaranteed",
                Some(&pinned_id),
            ),
            untrusted,
        ],
        resource_version: 5,
        ..ApiServer::default()
    }));
    let url = support::start(server.clone()).await;
    let scratch = support::scratch_with_kubeconfig(INSTANCE, &url);
    std::fs::write(
        scratch.join("cpu_manager_state"),
        format!(r#"{{"policyName":"static","defaultCpuSet":"0","entries":{{"{PINNED_UID}":{{"main":"1"}}}},"checksum":1}}"#),
    )
    .unwrap();
    let config = format!(
        "[kubernetes]\nenabled = true\nnode_name = \"node-1\"\ncgroup_root = \"/{KUBELET_ROOT}\"\n\
         cpu_manager_state = \"{}\"\n\n\
         [kubernetes.claims]\ntraining = [\"ml\"]\n\n\
         [policy]\n# Training keeps the core it reserves for the whole test.\ngive_back_after_ms = 600000\n\
         # A slow tick: the fast path reacts to training's first contention, not the demand\n\
         # estimate (as in the enforcement tests).\ntick_ms = 1000\n\n\
         [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
         # Its guaranteed core keeps training to one of two: the offline pool then has a CPU\n\
         # of its own to be moved to.\n\
         [[pool]]\nname = \"serve\"\nkind = \"online\"\nmin_cores = 1\n",
        scratch.join("cpu_manager_state").display()
    );
    let start_daemon = || support::start_daemon(&scratch, INSTANCE, &config);
    let mut daemon = start_daemon();

    // Every pod found and classified.
    eventually(
        "the four pods and the refused one in status",
        Duration::from_secs(10),
        || daemon.snapshot().pods.len() == 5,
    );
    let snapshot = daemon.snapshot();
    println!("{:#?}", snapshot.pods);
    let refused = pod_of(&snapshot, "tenant/fake-train").unwrap();
    assert_eq!(refused.state, "refused", "{refused:?}");
    assert!(
        refused
            .detail
            .contains("namespace \"tenant\" may not claim training"),
        "{refused:?}"
    );
    assert!(snapshot.job("tenant/fake-train-job").is_none());
    let resnet = pod_of(&snapshot, "ml/resnet-0").unwrap();
    assert_eq!(
        (resnet.role.as_str(), resnet.group.as_str()),
        ("training", "ml/resnet-0-job")
    );
    let pinned = pod_of(&snapshot, "ml/pinned-0").unwrap();
    assert_eq!(pinned.state, "exclusive", "{pinned:?}");
    assert!(pinned.detail.contains("main: 1"), "{pinned:?}");
    assert_eq!(pod_of(&snapshot, "ml/batch-a").unwrap().state, "enforced");
    assert_eq!(
        read(dir("cpu", &batch_a).join("cpu.idle")),
        "0",
        "an offline pod's group is not made idle: the kubelet's weight writes would fail there"
    );
    assert_eq!(
        read(dir("cpu", &batch_a).join(weight_file)),
        weight,
        "a BestEffort pod's group has the least weight from the kubelet already"
    );

    // Batch A's container: made by the runtime, a process in it.
    kubelet_mkdir(&a_container);
    let hog_a = start("cpu-hog", &["--threads", "2", "--seconds", "120"]);
    kubelet_move(hog_a.0.id(), &a_container);
    eventually(
        "batch A's threads in its pool, SCHED_IDLE",
        Duration::from_secs(3),
        || {
            let policies = thread_policies(hog_a.0.id());
            policies.len() >= 3 && policies.iter().all(|&p| p == libc::SCHED_IDLE)
        },
    );
    // Training starts in its pod, and queues behind batch A: a fast-path decision reserves it
    // a core, and the pool's pods follow the pool.
    let training = start("training-sim", &["--seconds", "120", "--loaders", "1"]);
    kubelet_move(training.0.id(), &training_container);
    eventually(
        "the training pod's threads a training job",
        Duration::from_secs(5),
        || {
            daemon
                .snapshot()
                .job("ml/resnet-0-job")
                .is_some_and(|job| job.threads >= 2)
        },
    );
    eventually("a contended decision", Duration::from_secs(20), || {
        let status = daemon.snapshot().enforcement.unwrap();
        status
            .recent_decisions
            .iter()
            .any(|d| d["trigger"] == "contended")
    });
    // The fast path's reaction on pods: from the sensor's event to the pods' cpusets written.
    let reactions: Vec<String> = daemon
        .snapshot()
        .enforcement
        .unwrap()
        .recent_decisions
        .iter()
        .filter(|d| d["trigger"] == "contended")
        .filter_map(|d| Some(format!("{:.0} µs", d["event_to_write_ns"].as_f64()? / 1e3)))
        .collect();
    println!("fast-path reactions (event to pods' cpusets written): {reactions:?}");
    eventually(
        "batch A's container on the pool's CPUs, not all",
        Duration::from_secs(3),
        || {
            let pool = pool_cpus();
            pool != all_cpus && container_cpus(&a_container) == pool
        },
    );
    // The daemon dies with batch A written: its successor finds the kubelet's CPUs for A in
    // the file the first kept, not the pool's CPUs left in A's group, and takes A over.
    daemon.crash();
    let kept = read(PathBuf::from(format!(
        "/run/reamer/{INSTANCE}.pod-groups.json"
    )));
    let kept: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept["containers"][&a_container], json!(all_cpus), "{kept}");
    daemon = start_daemon();
    eventually(
        "batch A taken over by the next daemon",
        Duration::from_secs(10),
        || {
            pod_of(&daemon.snapshot(), "ml/batch-a").is_some_and(|p| p.containers == 1)
                && container_cpus(&a_container) == pool_cpus()
        },
    );
    eventually(
        "batch A's threads in its pool, SCHED_IDLE",
        Duration::from_secs(3),
        || {
            let policies = thread_policies(hog_a.0.id());
            policies.len() >= 3 && policies.iter().all(|&p| p == libc::SCHED_IDLE)
        },
    );
    assert_eq!(
        container_cpus(&pinned_container),
        "1",
        "the CPU manager's pod left alone"
    );
    assert_eq!(
        read(dir("cpu", &pod_group("", PINNED_UID)).join("cpu.idle")),
        "0"
    );

    // Batch B's container appears while the pool is off training's core: under enforcement
    // (the pool's CPUs in its group) within 100 ms of the runtime's mkdir.
    let made = Instant::now();
    kubelet_mkdir(&b_container);
    let enforced_after = loop {
        let pool = pool_cpus();
        if pool != all_cpus && container_cpus(&b_container) == pool {
            break made.elapsed();
        }
        assert!(
            made.elapsed() < Duration::from_secs(5),
            "batch B's container never enforced"
        );
        std::thread::sleep(Duration::from_micros(200));
    };
    println!("batch B's container group under enforcement {enforced_after:?} after its mkdir");
    assert!(
        enforced_after < Duration::from_millis(100),
        "{enforced_after:?}"
    );

    // Someone else writes batch A's cpuset (the kubelet, say): taken as its new CPUs, and
    // the pool's applied within them again.
    std::fs::write(dir("cpuset", &a_container).join("cpuset.cpus"), &all_cpus).unwrap();
    eventually(
        "batch A's rewrite re-applied",
        Duration::from_secs(5),
        || {
            container_cpus(&a_container) == pool_cpus()
                && pod_of(&daemon.snapshot(), "ml/batch-a").is_some_and(|p| p.foreign_writes >= 1)
        },
    );

    // Another agent keeps restoring batch B's CPUs to the kubelet's: after ten such rewrites
    // within a minute reamer lets go of it (a restatement by the runtime is not a contest,
    // a stream of them is).
    let mut rewrites = 0;
    while pod_of(&daemon.snapshot(), "ml/batch-b").unwrap().state != "contested" {
        assert!(
            rewrites < 16,
            "batch B not contested after {rewrites} rewrites"
        );
        std::fs::write(dir("cpuset", &b_container).join("cpuset.cpus"), &all_cpus).unwrap();
        rewrites += 1;
        eventually(
            "batch B rewritten or contested",
            Duration::from_secs(5),
            || {
                container_cpus(&b_container) != all_cpus
                    || pod_of(&daemon.snapshot(), "ml/batch-b").unwrap().state == "contested"
            },
        );
    }
    let contested = pod_of(&daemon.snapshot(), "ml/batch-b").unwrap().clone();
    println!("contested after {rewrites} rewrites: {}", contested.detail);
    assert!(
        contested.detail.contains("another agent keeps writing"),
        "{contested:?}"
    );
    assert!(daemon.log().contains("reamer no longer writes them"));

    // Batch A is deleted: thawed, its CPUs the kubelet's again, its threads no longer
    // inference's.
    let mut deleted = api_pod(BATCH_A_UID, "batch-a", offline, "BestEffort", None);
    deleted["metadata"]["resourceVersion"] = json!("6");
    support::send_event(&server, json!({"type": "DELETED", "object": deleted})).await;
    eventually("batch A gone from status", Duration::from_secs(5), || {
        pod_of(&daemon.snapshot(), "ml/batch-a").is_none()
    });
    assert_eq!(
        container_cpus(&a_container),
        all_cpus,
        "batch A's CPUs the kubelet's again"
    );
    let policies = thread_policies(hog_a.0.id());
    assert!(
        !policies.is_empty() && policies.iter().all(|&p| p == libc::SCHED_OTHER),
        "{policies:?}"
    );

    // The training pod finishes: its job goes with it.
    let mut done = api_pod(
        TRAINING_UID,
        "resnet-0",
        json!({"reamer.io/role": "training"}),
        "Burstable",
        Some(&training_id),
    );
    done["status"]["phase"] = json!("Succeeded");
    done["metadata"]["resourceVersion"] = json!("7");
    support::send_event(&server, json!({"type": "MODIFIED", "object": done})).await;
    eventually(
        "the training job gone with its pod",
        Duration::from_secs(5),
        || daemon.snapshot().job("ml/resnet-0-job").is_none(),
    );
    let status = Command::new(reamer_tests::harness::enforcer_bin())
        .args(["status", "--instance", INSTANCE])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    println!("enforcer status:\n{text}");
    assert!(
        text.contains("Kubernetes pods:") && text.contains("ml/batch-b"),
        "{text}"
    );

    let log = daemon.stop();
    drop((training, hog_a));
    std::thread::sleep(Duration::from_millis(200));
    for controller in hierarchies() {
        remove_tree(&dir(controller, KUBELET_ROOT));
    }
    remove_test_cgroups(INSTANCE, "batch");
    remove_test_cgroups(INSTANCE, "serve");
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(log.contains("Kubernetes: pod joined"), "{log}");
}

#[test]
fn the_daemon_runs_on_without_the_api_server_and_says_so() {
    if !privileged("the_daemon_runs_on_without_the_api_server_and_says_so") {
        return;
    }
    let instance = "it-kube-down";
    // A port nothing listens on: the API server is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let scratch = support::scratch_with_kubeconfig(instance, &format!("http://127.0.0.1:{port}"));
    let daemon = support::start_daemon(
        &scratch,
        instance,
        "[kubernetes]\nenabled = true\nnode_name = \"node-1\"\n\n\
         [[pool]]\nname = \"batch\"\nkind = \"offline\"\n",
    );
    eventually("the failed watch logged", Duration::from_secs(10), || {
        daemon
            .log()
            .contains("Kubernetes: the API server's pod watch failed")
    });
    // It serves and enforces as without Kubernetes meanwhile.
    let snapshot = daemon.snapshot();
    assert!(snapshot.pods.is_empty());
    assert!(snapshot.pool("batch").is_some());
    let log = daemon.stop();
    remove_test_cgroups(instance, "batch");
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        log.contains("retrying; what is known stays enforced"),
        "{log}"
    );
}
