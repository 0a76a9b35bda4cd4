//! The faults the soak injects, one per cycle, and what each leaves running through the
//! measured window.

use std::{
    io::Write as _,
    net::TcpStream,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use anyhow::Context as _;
use reamer_tests::harness::{Daemon, cgroup_dir, worker::OnlineWorker};

use super::{
    INSTANCE,
    node::{self, Node},
    offline::OfflineJobs,
    start_daemon, start_online,
};
use crate::cargo::release_bin;

/// How long the daemon may take to undo or redo what a pod fault changed: a reconcile or two,
/// a pause decision, a relist.
const POD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Fault {
    /// The online worker and the offline one, mid-job, killed with SIGKILL.
    WorkersKilled,
    /// The daemon killed with SIGKILL, and a new one started: it takes over.
    DaemonRestarted,
    /// The spare pool's cpuset group removed from under the daemon.
    PoolCgroupRemoved,
    /// A training job that forks a child with threads and exits, again and again.
    ForkChurn,
    /// Another user holding idle control connections, and an HTTP body that never ends.
    SlowClients,
    /// With the offline pool paused (training on every CPU), the daemon killed, and an
    /// offline pod deleted before the next daemon starts.
    PodDeletedWhilePaused,
    /// With the offline pool paused, the daemon killed and started again; the pods stay.
    DaemonKilledWhilePaused,
    /// The API server gone for the window, then back.
    ApiServerGone,
    /// An offline pod's label removed, then put back.
    PodRelabelled,
    /// 300 pods the daemon does not manage, each with 64 KiB of annotations, added and then
    /// deleted.
    PodFlood,
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Fault::WorkersKilled,
        Fault::DaemonRestarted,
        Fault::PoolCgroupRemoved,
        Fault::ForkChurn,
        Fault::SlowClients,
        Fault::PodDeletedWhilePaused,
        Fault::DaemonKilledWhilePaused,
        Fault::ApiServerGone,
        Fault::PodRelabelled,
        Fault::PodFlood,
    ];

    /// Whether the daemon is killed and a new one started.
    pub fn restarts_daemon(self) -> bool {
        matches!(
            self,
            Fault::DaemonRestarted | Fault::PodDeletedWhilePaused | Fault::DaemonKilledWhilePaused
        )
    }

    pub fn describe(self) -> &'static str {
        match self {
            Fault::WorkersKilled => "online and offline workers killed (SIGKILL)",
            Fault::DaemonRestarted => "daemon killed (SIGKILL) and started again",
            Fault::PoolCgroupRemoved => "a pool's cgroup removed from under the daemon",
            Fault::ForkChurn => "a training job forking and exiting in a loop",
            Fault::SlowClients => {
                "40 idle control connections of another user, a never-ending HTTP body"
            }
            Fault::PodDeletedWhilePaused => {
                "offline pool paused, daemon killed (SIGKILL), a frozen pod deleted meanwhile"
            }
            Fault::DaemonKilledWhilePaused => {
                "offline pool paused, daemon killed (SIGKILL) and started again"
            }
            Fault::ApiServerGone => "the API server gone for the window",
            Fault::PodRelabelled => "an offline pod unlabelled, then labelled again",
            Fault::PodFlood => {
                "300 unmanaged pods with 64 KiB of annotations each, added, then deleted"
            }
        }
    }
}

/// What a fault leaves running through the window; `finish` ends it.
pub enum Undo {
    Nothing,
    MakeAgain(PathBuf),
    StopChurn(Arc<AtomicBool>, JoinHandle<u32>),
    SlowClients(Child, TcpStream),
    /// The API server back, and the lists and watches it had served when it went away.
    ApiBack(
        Arc<std::sync::Mutex<reamer_tests::harness::kube_api::ApiServer>>,
        usize,
    ),
    /// The flood's pods deleted.
    Unflood(
        Arc<std::sync::Mutex<reamer_tests::harness::kube_api::ApiServer>>,
        Vec<String>,
    ),
}

impl Undo {
    /// Ends what the fault left running. The API server back, the daemon must watch (or list)
    /// again within `POD_DEADLINE`; what else is checked after, by the caller
    /// (`Node::check`).
    pub fn finish(self) -> anyhow::Result<()> {
        match self {
            Undo::Nothing => {}
            Undo::ApiBack(server, requests) => {
                server.lock().unwrap().set_down(false);
                let until = std::time::Instant::now() + POD_DEADLINE;
                let served = || {
                    let server = server.lock().unwrap();
                    server.lists.len() + server.watches.len()
                };
                while served() <= requests {
                    if std::time::Instant::now() >= until {
                        anyhow::bail!(
                            "no watch nor list within {} s of the API server's return",
                            POD_DEADLINE.as_secs()
                        );
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
            Undo::Unflood(server, uids) => {
                let mut server = server.lock().unwrap();
                for uid in &uids {
                    server.delete(uid);
                }
            }
            Undo::MakeAgain(dir) => {
                let _ = std::fs::create_dir(dir);
            }
            Undo::StopChurn(stop, churn) => {
                stop.store(true, Ordering::Relaxed);
                let _ = churn.join();
            }
            Undo::SlowClients(mut holder, stream) => {
                let _ = holder.kill();
                let _ = holder.wait();
                drop(stream);
            }
        }
        Ok(())
    }
}

/// Injects `fault`. A pod fault's own check (a deleted pod given back, a relabelled pod let
/// go and taken again) fails it with what was wrong.
pub fn inject(
    fault: Fault,
    daemon: &mut Option<Daemon>,
    online: &mut OnlineWorker,
    jobs: &mut OfflineJobs,
    node: &mut Node,
    model: &Path,
    dir: &Path,
) -> anyhow::Result<Undo> {
    Ok(match fault {
        Fault::PodDeletedWhilePaused | Fault::DaemonKilledWhilePaused => {
            let mut training = pause_offline(daemon.as_ref().context("no daemon runs")?, node)?;
            if let Some(old) = daemon.take() {
                old.crash();
            }
            let deleted = (fault == Fault::PodDeletedWhilePaused).then(|| node.delete_pod(0));
            let restarted = daemon.insert(start_daemon(&node.kubeconfig));
            // A deleted pod: nothing names it any more but the ledger the dead daemon left.
            // The pods still there: taken over, frozen again while the pool stays paused.
            let checked = match deleted {
                Some(pod) => {
                    let given_back = node::wait_left_alone(&pod, POD_DEADLINE)
                        .context("the pod a dead daemon froze, deleted meanwhile");
                    node::gone(pod);
                    given_back.and_then(|()| node.add_pod())
                }
                None => Ok(()),
            }
            .and_then(|()| {
                node.check(restarted, POD_DEADLINE)
                    .context("the pods taken over while the pool is paused")
            });
            // Training ends before the window: it measures the online worker's recovery, not
            // its share beside a job on every CPU; the pods thaw as the pool resumes.
            let _ = training.kill();
            let _ = training.wait();
            checked?;
            Undo::Nothing
        }
        Fault::ApiServerGone => {
            node.set_api_down(true);
            let requests = node.requests();
            let daemon = daemon.as_ref().context("no daemon runs")?;
            // What is known stays enforced while the API server is away.
            node.check(daemon, POD_DEADLINE)
                .context("the pods while the API server is gone")?;
            Undo::ApiBack(node.server.clone(), requests)
        }
        Fault::PodRelabelled => {
            node.relabel(0, false);
            let let_go = node::wait_left_alone(&node.pods[0], POD_DEADLINE)
                .context("an offline pod unlabelled");
            node.relabel(0, true);
            let_go?;
            Undo::Nothing
        }
        Fault::PodFlood => {
            let uids = node.flood(300, 64);
            Undo::Unflood(node.server.clone(), uids)
        }
        Fault::WorkersKilled => {
            let _ = online.child.kill();
            let _ = online.child.wait();
            *online = start_online(model, dir)?;
            jobs.kill();
            Undo::Nothing
        }
        Fault::DaemonRestarted => {
            if let Some(old) = daemon.take() {
                old.crash();
            }
            *daemon = Some(start_daemon(&node.kubeconfig));
            Undo::Nothing
        }
        Fault::PoolCgroupRemoved => {
            let group = cgroup_dir("cpuset", &format!("/reamer/{INSTANCE}/spare"));
            std::fs::remove_dir(&group)
                .with_context(|| format!("removing the spare pool's group {}", group.display()))?;
            Undo::MakeAgain(group)
        }
        Fault::ForkChurn => {
            let stop = Arc::new(AtomicBool::new(false));
            let churn = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut jobs = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let ran = Command::new(release_bin("enforcer"))
                            .args(["launch", "--training", "churn", "--instance", INSTANCE])
                            .arg("--")
                            .arg(release_bin("fork-tree"))
                            .args(["--threads", "3", "--child-threads", "2", "--seconds", "0.1"])
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status();
                        if ran.is_err() {
                            break;
                        }
                        jobs += 1;
                    }
                    jobs
                })
            };
            Undo::StopChurn(stop, churn)
        }
        Fault::SlowClients => {
            let socket = format!("/run/reamer/{INSTANCE}.sock");
            let holder = Command::new(release_bin("socket-holder"))
                .args([
                    "--socket",
                    &socket,
                    "--connections",
                    "40",
                    "--hold-seconds",
                    "600",
                ])
                .uid(65534)
                .gid(65534)
                .stdout(Stdio::null())
                .spawn()
                .context("starting socket-holder as nobody")?;
            let mut stream = TcpStream::connect(online.base.trim_start_matches("http://"))
                .context("connecting the slow HTTP client")?;
            write!(
                stream,
                "POST /v2/models/tiny/infer HTTP/1.1\r\nHost: soak\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
            )?;
            Undo::SlowClients(holder, stream)
        }
    })
}

/// A training job on every CPU, launched through the daemon: more than the online pool's
/// guaranteed core leaves it, so the offline pool pauses. Returns once it has, with the pods'
/// containers frozen.
fn pause_offline(daemon: &Daemon, node: &Node) -> anyhow::Result<Child> {
    let cpus = crate::bench::common::cpus::machine_cpus();
    let mut training = Command::new(release_bin("enforcer"))
        .args([
            "launch",
            "--training",
            "soak-pause",
            "--instance",
            INSTANCE,
            "--",
        ])
        .arg(release_bin("cpu-hog"))
        .args(["--threads", &cpus.to_string(), "--seconds", "600"])
        .stdout(Stdio::null())
        .spawn()
        .context("launching the training job that pauses the offline pool")?;
    let until = std::time::Instant::now() + POD_DEADLINE;
    let paused = || {
        daemon
            .snapshot()
            .pool_status("batch")
            .is_some_and(|pool| pool.paused)
    };
    while !paused() {
        if std::time::Instant::now() >= until {
            let _ = training.kill();
            let _ = training.wait();
            anyhow::bail!("the offline pool did not pause with training on every CPU");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if let Err(err) = node.check(daemon, POD_DEADLINE) {
        let _ = training.kill();
        let _ = training.wait();
        return Err(err.context("the pods of the paused pool"));
    }
    Ok(training)
}
