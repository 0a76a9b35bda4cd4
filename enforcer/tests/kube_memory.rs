//! What the daemon keeps of pods it does not manage, end to end: `enforcer run` on the API
//! server stand-in (`support`), which tenants' pods reach with 234 KiB of annotations each.
//! Before, the daemon kept each pod whole (1,100 such pods took it from 47 to 278 MiB, past
//! the chart's 256 MiB limit, and each OOM kill left its pods as a crash leaves them). Now it
//! keeps only what it reads, and lists in pages. Privileged: skips with a reason elsewhere
//! (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use reamer_tests::harness::{eventually, privileged};
use serde_json::json;

mod support;
use support::ApiServer;

const INSTANCE: &str = "it-kube-memory";
/// Tenants' pods, each with an annotation of `ANNOTATION_KIB`: 91 MiB in all.
const PODS: usize = 400;
const ANNOTATION_KIB: usize = 234;
/// What the daemon may grow by while it takes them in: a fraction of what they hold.
const GROWTH_MIB: u64 = 30;

/// The daemon's resident memory now, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn tenant_pod(n: usize, resource_version: u64) -> serde_json::Value {
    let mut pod = support::api_pod(
        &format!("e{n:07x}-0000-4000-8000-000000000000"),
        &format!("tenant-{n}"),
        json!({"app": "web", "tier": format!("t{n}")}),
        "BestEffort",
        None,
    );
    pod["metadata"]["namespace"] = json!("tenant");
    pod["metadata"]["resourceVersion"] = json!(resource_version.to_string());
    pod["metadata"]["annotations"] = json!({
        "tenant.example/blob": format!("{n}").repeat(ANNOTATION_KIB * 1024),
    });
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_the_daemon_does_not_manage_cost_it_only_what_it_reads() {
    if !privileged("pods_the_daemon_does_not_manage_cost_it_only_what_it_reads") {
        return;
    }
    // The first list has a page's worth of them, plus one pod the daemon manages (marked
    // offline; its group never appears, so it stays `failing`).
    let marked = support::api_pod(
        "f0000000-0000-4000-8000-00000000000f",
        "batch-0",
        json!({"reamer.io/role": "offline"}),
        "BestEffort",
        None,
    );
    let server = Arc::new(Mutex::new(ApiServer {
        pods: (0..60).map(|n| tenant_pod(n, 1)).chain([marked]).collect(),
        resource_version: 2,
        ..ApiServer::default()
    }));
    let url = support::start(server.clone()).await;
    let scratch = support::scratch_with_kubeconfig(INSTANCE, &url);
    let daemon = support::start_daemon(
        &scratch,
        INSTANCE,
        "[kubernetes]\nenabled = true\nnode_name = \"node-1\"\n\n\
         [[pool]]\nname = \"batch\"\nkind = \"offline\"\n",
    );
    eventually("the marked pod in status", Duration::from_secs(20), || {
        daemon.snapshot().pods.iter().any(|p| p.pod == "ml/batch-0")
    });
    let lists = server.lock().unwrap().lists.clone();
    assert!(
        lists.len() >= 2 && lists[0].contains("limit=50") && lists[1].contains("continue=50"),
        "the list comes in pages of 50: {lists:?}"
    );
    // Settled: the first list's pages are taken in.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(daemon.pid());

    // The rest arrive through the watch, the last one marked: once it is in status, every
    // one before it was taken in.
    for n in 60..PODS {
        support::send_event(
            &server,
            json!({"type": "ADDED", "object": tenant_pod(n, 3)}),
        )
        .await;
    }
    let mut last = support::api_pod(
        "f1000000-0000-4000-8000-00000000000f",
        "batch-1",
        json!({"reamer.io/role": "offline"}),
        "BestEffort",
        None,
    );
    last["metadata"]["resourceVersion"] = json!("4");
    support::send_event(&server, json!({"type": "ADDED", "object": last})).await;
    eventually("the last pod in status", Duration::from_secs(60), || {
        daemon.snapshot().pods.iter().any(|p| p.pod == "ml/batch-1")
    });
    let after = rss_kib(daemon.pid());
    let grew_mib = after.saturating_sub(before) / 1024;
    let held_mib = ((PODS - 60) * ANNOTATION_KIB / 1024) as u64;
    println!(
        "daemon RSS {} MiB before, {} MiB after {} pods holding {held_mib} MiB",
        before / 1024,
        after / 1024,
        PODS - 60
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&scratch);
    reamer_tests::harness::remove_test_cgroups(INSTANCE, "batch");
    assert!(
        grew_mib < GROWTH_MIB,
        "the daemon grew by {grew_mib} MiB taking in pods that hold {held_mib} MiB"
    );
}
