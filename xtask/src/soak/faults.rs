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

use super::{INSTANCE, offline::OfflineJobs, start_daemon, start_online};
use crate::cargo::release_bin;

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
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Fault::WorkersKilled,
        Fault::DaemonRestarted,
        Fault::PoolCgroupRemoved,
        Fault::ForkChurn,
        Fault::SlowClients,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Fault::WorkersKilled => "online and offline workers killed (SIGKILL)",
            Fault::DaemonRestarted => "daemon killed (SIGKILL) and started again",
            Fault::PoolCgroupRemoved => "a pool's cgroup removed from under the daemon",
            Fault::ForkChurn => "a training job forking and exiting in a loop",
            Fault::SlowClients => {
                "40 idle control connections of another user, a never-ending HTTP body"
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
}

impl Undo {
    pub fn finish(self) {
        match self {
            Undo::Nothing => {}
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
    }
}

pub fn inject(
    fault: Fault,
    daemon: &mut Option<Daemon>,
    online: &mut OnlineWorker,
    jobs: &mut OfflineJobs,
    model: &Path,
    dir: &Path,
) -> anyhow::Result<Undo> {
    Ok(match fault {
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
            *daemon = Some(start_daemon());
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
