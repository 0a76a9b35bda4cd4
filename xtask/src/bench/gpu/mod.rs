//! The GPU benchmark: a PyTorch training loop and a PyTorch inference loop on one GPU, under a
//! real MPS control daemon, with and without the enforcer's clamp. Training is one of two jobs
//! (`TrainingJob`), each run through every scenario: a GPU-bound MLP, where the clamp is what
//! gives training its pace back, and a loader-bound ResNet-50, where the GPU has room to spare
//! and the clamp should leave inference alone (`[gpu] clamp_on_need`, docs/gpu.md).
//!
//! Each window starts both processes (`scripts/gpu_load.py`), waits until both have built and
//! warmed up their models, then starts them together: inference runs alone for `LEAD`, while
//! training holds its CUDA context without issuing kernels (the state of a training job
//! between steps, data loading or a checkpoint), then training runs for `train`. Every step's
//! end is timed by the process itself on CLOCK_MONOTONIC, the clock of the enforcer's decision
//! log, so the clamp's decisions and the throughput they restore line up.
//!
//! Scenarios, interleaved per round:
//! - training alone: its throughput is the reference;
//! - shared: both under MPS with nothing between them;
//! - a static MPS limit: inference always started at `STATIC_PERCENTAGE`% of the SMs (the
//!   lasting form of a limit, paid whether training runs or not);
//! - reamer: the enforcer daemon, training launched as a training job, inference into a
//!   `gpu = true` pool, gated by the freezer duty cycle when training's demand rises.
//!
//! The figures come from `report`.

pub mod report;
pub mod scenario;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use reamer_tests::harness::{Daemon, decision_log_of, gpu::Mps};
use serde::{Deserialize, Serialize};

pub use self::scenario::{Scenario, TrainingJob};
use crate::{
    bench::saved::{About, Saved, Windows},
    cargo::{release_bin, workspace_root},
};

const INSTANCE: &str = "bench-gpu";
const GPU_POOL: &str = "gpu-serve";
/// Inference runs alone this long before training starts; training idles meanwhile. Longer
/// than the policy's `idle_after_ms` (2 s), so that a clamp caused by training's own start-up
/// (its warm-up steps) is undone before training starts for real.
pub const LEAD: Duration = Duration::from_secs(5);
/// The static MPS limit's share of the SMs for inference: the enforcer's clamp fraction.
pub const STATIC_PERCENTAGE: u32 = 10;

/// One process's timed steps.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Trace {
    pub t0_ns: u64,
    /// When its loop started: t0 for inference, t0 + LEAD for training.
    pub started_ns: u64,
    pub done_ns: Vec<u64>,
}

/// A gate decision from the enforcer's decision log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateChange {
    pub at_ns: u64,
    pub run_fraction: f64,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    pub scenario: Scenario,
    pub round: usize,
    pub training: Trace,
    pub inference: Option<Trace>,
    pub gate_changes: Vec<GateChange>,
}

/// A load process's model, from its ready line.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Workload {
    /// The MLP's (0 for ResNet-50).
    pub layers: usize,
    pub width: usize,
    pub batch: usize,
    /// `TrainingJob::arg`; "mlp" for inference.
    #[serde(default)]
    pub job: Option<String>,
    /// ResNet-50's DataLoader worker processes.
    #[serde(default)]
    pub loader_workers: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuRun {
    pub job: TrainingJob,
    /// The need signal's cost on this machine: one read of a thread's schedstat, µs
    /// (`launcher_read_cost_us`).
    pub launcher_read_us: f64,
    /// nvidia-smi's name, memory and driver of the GPU.
    pub gpu: String,
    /// "MPS control daemon ..." or why the run is without MPS.
    pub mps: String,
    pub lead_s: f64,
    pub train_s: f64,
    pub windows: Vec<Window>,
    pub training_workload: Workload,
    pub inference_workload: Option<Workload>,
    /// `enforcer status` in the middle of the first reamer window's training.
    pub status_sample: Option<String>,
}

/// Why this machine cannot run the GPU benchmark, if it cannot.
pub fn unavailable() -> Option<String> {
    match gpu_description() {
        Ok(_) => None,
        Err(err) => Some(format!("{err:#}")),
    }
}

fn gpu_description() -> anyhow::Result<String> {
    let output = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,memory.total,driver_version",
            "--format=csv,noheader",
        ])
        .output()
        .context("no NVIDIA GPU: nvidia-smi cannot be run")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let first = text.lines().next().unwrap_or_default().trim();
    if !output.status.success() || first.is_empty() {
        bail!(
            "no NVIDIA GPU: nvidia-smi answered {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let fields: Vec<&str> = first.split(',').map(str::trim).collect();
    Ok(match fields.as_slice() {
        [name, memory, driver] => format!("{name}, {memory}, driver {driver}"),
        _ => first.to_owned(),
    })
}

fn python() -> String {
    std::env::var("REAMER_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn check_torch() -> anyhow::Result<()> {
    let output = Command::new(python())
        .args([
            "-c",
            "import torch; assert torch.cuda.is_available(), 'no CUDA device'",
        ])
        .output()
        .with_context(|| format!("cannot run {}", python()))?;
    if !output.status.success() {
        bail!(
            "the GPU benchmark needs PyTorch with CUDA in {} (REAMER_PYTHON picks another): {}",
            python(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Reads of the launcher signal's file timed for its cost.
pub const COST_READS: u32 = 2000;

/// What the enforcer's need signal (`enforcer::gpu::launcher`) costs a read here: the mean
/// time of `COST_READS` reads of this thread's schedstat (the file the enforcer reads for a
/// training process's main thread), µs.
fn launcher_read_cost_us() -> f64 {
    let file = "/proc/thread-self/schedstat";
    let started = std::time::Instant::now();
    for _ in 0..COST_READS {
        let _ = std::hint::black_box(std::fs::read_to_string(file));
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(COST_READS)
}

/// Runs each of `jobs` through every scenario `rounds` times, and saves the run after each
/// window (`bench::saved`, `saved_path`), so that one cut short can still be reported.
pub fn run_jobs(
    jobs: &[TrainingJob],
    rounds: usize,
    train: Duration,
    loader_workers: usize,
    about: &About,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Vec<GpuRun>> {
    let path = saved_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    progress(&format!(
        "the run is saved after each window to {}; one cut short is reported from it with \
         --gpu-from",
        path.display()
    ));
    let mut runs: Vec<GpuRun> = Vec::new();
    for (k, &job) in jobs.iter().enumerate() {
        let done = runs.windows_measured();
        // Each job left is planned as this one: its rounds of its scenarios.
        let jobs_left = jobs.len() - k;
        let mut save = |run: &GpuRun, planned: usize| {
            let mut so_far = runs.clone();
            so_far.push(run.clone());
            Saved {
                about: about.clone(),
                planned_windows: done + planned * jobs_left,
                run: so_far,
            }
            .write(&path)
        };
        let finished = run(rounds, train, job, loader_workers, progress, &mut save)?;
        runs.push(finished);
    }
    Ok(runs)
}

/// Runs every scenario `rounds` times with training's `job` (`loader_workers` for
/// ResNet-50's DataLoader), training `train` long in each window. After each window,
/// `after_window` gets the run so far and the windows the job is to run (`bench::saved`).
pub fn run(
    rounds: usize,
    train: Duration,
    job: TrainingJob,
    loader_workers: usize,
    progress: &dyn Fn(&str),
    after_window: &mut dyn FnMut(&GpuRun, usize) -> anyhow::Result<()>,
) -> anyhow::Result<GpuRun> {
    let gpu = gpu_description()?;
    check_torch()?;
    progress(&format!("gpu: {gpu}; training: {}", job.label()));
    let (mps, mps_state) = match Mps::start_in(&std::env::temp_dir().join("reamer-bench-mps")) {
        Ok(mps) => {
            if let Ok(answer) = mps.ask("get_default_active_thread_percentage") {
                eprintln!(
                    "[bench] MPS control daemon up (default active thread percentage {answer})"
                );
            }
            let state = format!(
                "MPS control daemon started by the benchmark ({})",
                mps.control.display()
            );
            (Some(mps), state)
        }
        Err(err) => {
            let state = format!("without MPS: {err:#}");
            eprintln!("[bench] gpu: {state}; the GPU is time-sliced between the processes");
            (None, state)
        }
    };
    let mut bench = Bench {
        mps: mps.as_ref(),
        job,
        loader_workers,
        train,
        status_sample: None,
        training_workload: None,
        inference_workload: None,
    };
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|&s| s != Scenario::StaticMpsLimit || mps.is_some())
        .collect();
    let planned_windows = rounds * scenarios.len();
    let launcher_read_us = launcher_read_cost_us();
    // The run as far as it went: none before a window has run training.
    let so_far = |bench: &Bench, windows: &[Window]| {
        Some(GpuRun {
            job,
            launcher_read_us,
            gpu: gpu.clone(),
            mps: mps_state.clone(),
            lead_s: LEAD.as_secs_f64(),
            train_s: train.as_secs_f64(),
            windows: windows.to_vec(),
            training_workload: bench.training_workload.clone()?,
            inference_workload: bench.inference_workload.clone(),
            status_sample: bench.status_sample.clone(),
        })
    };
    let mut windows = Vec::new();
    for round in 0..rounds {
        for &scenario in &scenarios {
            progress(&format!(
                "gpu {} round {}/{rounds}: {}",
                job.arg(),
                round + 1,
                scenario.label()
            ));
            windows.push(bench.window(scenario, round)?);
            if let Some(run) = so_far(&bench, &windows) {
                after_window(&run, planned_windows)?;
            }
        }
    }
    let run = so_far(&bench, &windows).context("no window ran training")?;
    drop(mps);
    Ok(run)
}

struct Bench<'a> {
    mps: Option<&'a Mps>,
    job: TrainingJob,
    loader_workers: usize,
    train: Duration,
    status_sample: Option<String>,
    training_workload: Option<Workload>,
    inference_workload: Option<Workload>,
}

/// A load process waiting for its start line.
struct Load {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    role: &'static str,
    report: PathBuf,
}

impl Load {
    fn spawn(mut command: Command, role: &'static str) -> anyhow::Result<Self> {
        let report = report_path(role);
        let _ = std::fs::remove_file(&report);
        let mut child = command
            .arg("--report")
            .arg(&report)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the {role} process"))?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
            role,
            report,
        })
    }

    fn line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.is_empty() {
            let status = self.child.wait()?;
            bail!(
                "the {} process exited ({status}); its errors are above",
                self.role
            );
        }
        Ok(line)
    }

    /// Waits for the ready line, which describes the process's model.
    fn ready(&mut self) -> anyhow::Result<Workload> {
        let line = self.line()?;
        serde_json::from_str(&line)
            .with_context(|| format!("reading the {} process's ready line {line:?}", self.role))
    }

    fn go(&mut self) -> anyhow::Result<()> {
        self.stdin.write_all(b"go\n")?;
        Ok(self.stdin.flush()?)
    }

    fn finish(mut self) -> anyhow::Result<Trace> {
        let status = self.child.wait()?;
        if !status.success() {
            bail!(
                "the {} process failed ({status}); its errors are above",
                self.role
            );
        }
        let text = std::fs::read_to_string(&self.report)
            .with_context(|| format!("reading {}", self.report.display()))?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "reading the {} process's report {} ({} bytes)",
                self.role,
                self.report.display(),
                text.len()
            )
        })
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Bench<'_> {
    fn daemon_config(&self) -> String {
        let mps = match self.mps {
            Some(mps) => format!(
                "mps = \"attach\"\nmps_control = \"{}\"\nmps_pipe_dir = \"{}\"\n",
                mps.control.display(),
                mps.pipe_dir().display()
            ),
            None => "mps = \"off\"\n".to_owned(),
        };
        format!("[gpu]\n{mps}\n[[pool]]\nname = \"{GPU_POOL}\"\nkind = \"online\"\ngpu = true\n")
    }

    /// `python3 gpu_load.py --role ROLE ...`, through `enforcer launch` under a daemon.
    fn command(
        &self,
        role: &'static str,
        daemon: Option<&Daemon>,
        static_limit: bool,
    ) -> anyhow::Result<Command> {
        let script = workspace_root().join("xtask/scripts/gpu_load.py");
        let lead = LEAD.as_secs_f64().to_string();
        let train = self.train.as_secs_f64().to_string();
        let total = (LEAD + self.train).as_secs_f64().to_string();
        let loader_workers = self.loader_workers.to_string();
        let script_args = [
            script.to_str().context("utf-8 path")?,
            "--role",
            role,
            "--lead-s",
            &lead,
            "--train-s",
            &train,
            "--total-s",
            &total,
            "--job",
            self.job.arg(),
            "--loader-workers",
            &loader_workers,
        ];
        let mut command = match daemon {
            Some(daemon) => {
                let (flag, group) = if role == "training" {
                    ("--training", "train")
                } else {
                    ("--pool", GPU_POOL)
                };
                let mut command = Command::new(release_bin("enforcer"));
                command
                    .args(["launch", flag, group, "--instance", &daemon.instance, "--"])
                    .arg(python());
                command
            }
            None => Command::new(python()),
        };
        command.args(script_args);
        if let Some(mps) = self.mps {
            command.envs(mps.env());
        }
        if static_limit {
            command.env(
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                STATIC_PERCENTAGE.to_string(),
            );
        }
        Ok(command)
    }

    fn window(&mut self, scenario: Scenario, round: usize) -> anyhow::Result<Window> {
        let log = decision_log_of(INSTANCE);
        let daemon = (scenario == Scenario::Reamer).then(|| {
            Daemon::start_bin_with_fresh_log(
                &release_bin("enforcer"),
                INSTANCE,
                &self.daemon_config(),
            )
        });
        let mut training = Load::spawn(
            self.command("training", daemon.as_ref(), false)?,
            "training",
        )?;
        let mut inference = if scenario == Scenario::TrainingAlone {
            None
        } else {
            let static_limit = scenario == Scenario::StaticMpsLimit;
            Some(Load::spawn(
                self.command("inference", daemon.as_ref(), static_limit)?,
                "inference",
            )?)
        };
        self.training_workload = Some(training.ready()?);
        if let Some(inference) = &mut inference {
            self.inference_workload = Some(inference.ready()?);
            inference.go()?;
        }
        training.go()?;
        if let Some(daemon) = &daemon
            && self.status_sample.is_none()
        {
            std::thread::sleep(LEAD + self.train / 2);
            self.status_sample = Some(status_text(daemon));
        }
        let training = training.finish()?;
        let inference = inference.map(Load::finish).transpose()?;
        let gate_changes = match daemon {
            Some(daemon) => {
                daemon.stop();
                gate_changes(&log)?
            }
            None => Vec::new(),
        };
        if scenario == Scenario::Reamer {
            // The daemon leaves its pool's groups for the next start; the run is over.
            reamer_tests::harness::cgroups::remove_groups(INSTANCE, &[GPU_POOL]);
        }
        Ok(Window {
            scenario,
            round,
            training,
            inference,
            gate_changes,
        })
    }
}

/// A run of several jobs counts the windows of each.
impl Windows for Vec<GpuRun> {
    fn windows_measured(&self) -> usize {
        self.iter().map(|run| run.windows.len()).sum()
    }
}

/// Where the run is saved after each window (`bench::saved`), for `--gpu-from`.
pub fn saved_path() -> PathBuf {
    workspace_root().join("target/bench/gpu/run.json")
}

fn report_path(role: &str) -> PathBuf {
    std::env::temp_dir().join(format!("reamer-bench-gpu-{role}.json"))
}

fn status_text(daemon: &Daemon) -> String {
    Command::new(release_bin("enforcer"))
        .args(["status", "--instance", &daemon.instance])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|err| format!("enforcer status failed: {err}"))
}

/// The gate decisions in the daemon's decision log, in order.
fn gate_changes(log: &Path) -> anyhow::Result<Vec<GateChange>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| {
            let record = &line["gpu"];
            let decision = &record["decision"];
            (decision["action"] == "gate").then(|| GateChange {
                at_ns: record["at_ns"].as_u64().unwrap_or(0),
                run_fraction: decision["run_fraction"].as_f64().unwrap_or(f64::NAN),
                reason: decision["why"]["reason"].as_str().unwrap_or("?").to_owned(),
            })
        })
        .collect())
}
