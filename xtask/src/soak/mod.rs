//! `cargo xtask soak`: the daemon with an online and an offline worker under load for a
//! bounded time, with a fault injected every cycle, in turn:
//! - a worker killed with SIGKILL (the online one, and the offline one mid-job);
//! - the daemon killed with SIGKILL and started again (it takes over its pins and pools);
//! - a pool's cgroup removed from under it (a spare pool's, made again at the window's end);
//! - a training job that forks and exits in a loop;
//! - slow clients: idle control connections held by another user, and an HTTP body that never
//!   ends;
//! - on its Kubernetes node (`node`: an API server stand-in, a kubelet-shaped tree, offline
//!   pods with a process each): a frozen pod deleted while the daemon is dead, the daemon
//!   killed while its pool is paused, the API server gone, a pod relabelled, a flood of pods.
//!
//! After each fault the soak does what a service manager would (restarts what died) and
//! measures a window of online load. It checks that the online SLO recovered in every window,
//! that no offline line was lost or done twice (every job's results, line by line), that every
//! offline pod is enforced and frozen exactly while its pool is paused, and that the daemon's
//! file descriptors, memory and threads stayed flat over each of its lives.

mod faults;
mod node;
mod offline;
mod report;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use reamer_tests::harness::{
    Daemon, remove_test_cgroups,
    worker::{OnlineWorker, scratch, tiny_request, write_tiny_model},
};

use self::{faults::Fault, node::Node, offline::OfflineJobs};
use crate::{bench::docs, cargo::release_bin};

pub const INSTANCE: &str = "soak";
/// An online pool with one guaranteed core, the offline pool (paused while training is short
/// of cores), and a spare pool whose group the soak removes; the node's pods, from the API
/// server stand-in.
const CONFIG: &str = "[kubernetes]\nenabled = true\nnode_name = \"node-1\"\n\
                      cgroup_root = \"/reamer/soak-node\"\n\n\
                      [policy]\npause_offline_when_training_short = true\n\n\
                      [[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\nslo_ms = 50\n\n\
                      [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
                      [[pool]]\nname = \"spare\"\nkind = \"offline\"\n";
/// The online load: requests per second, and the SLO they are held to.
const RATE: &str = "40";
const SLO_MS: &str = "50";
/// The share of a window's requests within the SLO that counts as recovered.
pub const RECOVERED_PCT: f64 = 99.0;
/// Growth of the daemon's open files and threads over one of its lives that still counts as
/// flat (a metrics scrape or status read in flight holds a few).
pub const FLAT_FILES: i64 = 16;
pub const FLAT_THREADS: i64 = 4;
/// And of its resident memory, as a share of what it held after warm-up.
pub const FLAT_RSS_PCT: f64 = 25.0;

#[derive(clap::Args)]
pub struct Options {
    /// How long to run.
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Seconds of online load measured after each fault.
    #[arg(long, default_value_t = 20.0)]
    pub window_s: f64,
    /// Print the report without writing docs/benchmarks.md.
    #[arg(long)]
    pub no_docs: bool,
}

/// The daemon's resource use at one instant.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Resources {
    pub files: i64,
    pub threads: i64,
    pub rss_kib: i64,
}

/// One fault and what followed it.
#[derive(Debug, serde::Serialize)]
pub struct Cycle {
    pub fault: Fault,
    pub seconds_to_serve_again: f64,
    pub attainment_pct: f64,
    pub p99_ms: f64,
    pub daemon: Resources,
    /// What was wrong with the node's pods after the fault (its own check, or every pod
    /// enforced and in step with its pool's pause), if anything.
    pub pods: Option<String>,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    if !crate::cargo::is_root() {
        bail!("the soak runs the enforcer and moves processes into cgroups: run it as root");
    }
    let dir = scratch("soak");
    let model = dir.join("tiny.onnx");
    write_tiny_model(&model, 1);
    let body = dir.join("body.json");
    std::fs::write(&body, tiny_request("soak", &[[0.5, 1.0, 1.5, 2.0]; 4]))?;

    let mut node = Node::start(&dir)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(options.minutes * 60.0);
    let mut daemon = Some(start_daemon(&node.kubeconfig));
    let mut online = start_online(&model, &dir)?;
    let mut jobs = OfflineJobs::start(&dir, &model, INSTANCE)?;
    // Warm-up: the baseline the daemon's resources are held to.
    measure_window(&online, &body, 5.0)?;
    let mut baseline = resources(daemon_pid(&daemon)?)?;
    let mut lives = vec![(baseline, baseline)];
    let mut cycles = Vec::new();
    let mut turn = 0;
    while Instant::now() < deadline {
        let fault = Fault::ALL[turn % Fault::ALL.len()];
        turn += 1;
        eprintln!(
            "soak: {:.0} s in, fault {turn}: {fault:?}",
            started.elapsed().as_secs_f64()
        );
        let faulted = Instant::now();
        let injected = faults::inject(
            fault,
            &mut daemon,
            &mut online,
            &mut jobs,
            &mut node,
            &model,
            &dir,
        );
        let (undo, mut pods) = match injected {
            Ok(undo) => (undo, None),
            Err(err) => (faults::Undo::Nothing, Some(format!("{err:#}"))),
        };
        if fault.restarts_daemon() {
            baseline = resources(daemon_pid(&daemon)?)?;
            lives.push((baseline, baseline));
        }
        wait_serving(&online, &body)?;
        let seconds_to_serve_again = faulted.elapsed().as_secs_f64();
        jobs.keep_running()?;
        let measured = measure_window(&online, &body, options.window_s)?;
        let finished = undo.finish().and_then(|()| {
            node.check(
                daemon.as_ref().context("no daemon runs")?,
                Duration::from_secs(30),
            )
        });
        if let Err(err) = finished
            && pods.is_none()
        {
            pods = Some(format!("{err:#}"));
        }
        if let Some(problem) = &pods {
            eprintln!("soak: the node's pods after {fault:?}: {problem}");
        }
        jobs.keep_running()?;
        let now = resources(daemon_pid(&daemon)?)?;
        if let Some(life) = lives.last_mut() {
            life.1 = now;
        }
        cycles.push(Cycle {
            fault,
            seconds_to_serve_again,
            attainment_pct: measured["attainment_pct"].as_f64().unwrap_or(0.0),
            p99_ms: measured["p99_ms"].as_f64().unwrap_or(f64::NAN),
            daemon: now,
            pods,
        });
    }
    jobs.finish()?;
    drop(online);
    if let Some(daemon) = daemon.take() {
        daemon.stop();
    }
    node.stop();
    for pool in ["web", "batch", "spare"] {
        remove_test_cgroups(INSTANCE, pool);
    }
    let soak = report::Soak {
        minutes: started.elapsed().as_secs_f64() / 60.0,
        cycles,
        lives,
        jobs_completed: jobs.completed,
        lines_checked: jobs.lines_checked,
        offline_restarts: jobs.restarts,
    };
    let command = format!(
        "cargo xtask soak --minutes {} --window-s {}",
        options.minutes, options.window_s
    );
    let markdown = report::markdown(&soak, &command, &docs::machine_description());
    println!("{markdown}");
    if !options.no_docs {
        docs::replace_section("soak", &markdown)?;
        eprintln!("[soak] docs/benchmarks.md updated");
    }
    let _ = std::fs::remove_dir_all(&dir);
    soak.verdict()
}

/// The daemon, following the node's pods through `kubeconfig`.
pub(super) fn start_daemon(kubeconfig: &Path) -> Daemon {
    let mut command = Command::new(release_bin("enforcer"));
    command
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST");
    Daemon::start_command(command, INSTANCE, CONFIG)
}

fn daemon_pid(daemon: &Option<Daemon>) -> anyhow::Result<u32> {
    daemon.as_ref().map(Daemon::pid).context("no daemon runs")
}

/// `enforcer launch --pool web -- inference-worker online` serving the tiny model.
pub(super) fn start_online(model: &Path, dir: &Path) -> anyhow::Result<OnlineWorker> {
    let mut launch = Command::new(release_bin("enforcer"));
    launch
        .args(["launch", "--pool", "web", "--instance", INSTANCE, "--"])
        .arg(release_bin("inference-worker"));
    let model = model.to_str().context("a UTF-8 model path")?;
    Ok(OnlineWorker::start_with(
        launch,
        &["--model", model, "--name", "tiny"],
        dir.join("online.log"),
    ))
}

/// Runs `load-gen` against the worker for `seconds`; its report.
fn measure_window(
    online: &OnlineWorker,
    body: &Path,
    seconds: f64,
) -> anyhow::Result<serde_json::Value> {
    let output = Command::new(release_bin("load-gen"))
        .args(["--url", &format!("{}/v2/models/tiny/infer", online.base)])
        .arg("--body")
        .arg(body)
        .args(["--rate", RATE, "--slo-ms", SLO_MS])
        .args(["--seconds", &seconds.to_string()])
        .output()
        .context("running load-gen")?;
    if !output.status.success() {
        bail!(
            "load-gen failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let last = String::from_utf8_lossy(&output.stdout);
    let line = last.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("load-gen's report: {line:?}"))
}

/// Waits until the worker answers a request, for at most 60 s.
fn wait_serving(online: &OnlineWorker, body: &Path) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(60);
    let text = std::fs::read_to_string(body)?;
    let http = reamer_tests::harness::worker::agent();
    let url = format!("{}/v2/models/tiny/infer", online.base);
    while Instant::now() < until {
        if reamer_tests::harness::worker::post(&http, &url, &text).0 == 200 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the online worker did not serve again within 60 s")
}

/// Open files, threads and resident memory of process `pid`.
fn resources(pid: u32) -> anyhow::Result<Resources> {
    let files = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("listing the daemon's files (pid {pid})"))?
        .count() as i64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> i64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok(Resources {
        files,
        threads: field("Threads:"),
        rss_kib: field("VmRSS:"),
    })
}
