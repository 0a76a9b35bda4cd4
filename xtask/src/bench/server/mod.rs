//! The server benchmark: a real PyTorch training job on the GPU machine, with online and
//! offline inference on the cores it leaves idle, scenario by scenario, in rounds.
//!
//! - Training: `scripts/train_resnet50.py` (ResNet-50 on the GPU, fed by DataLoader workers
//!   that augment images on the CPU), or a stand-in given with `--training-cmd`. One process
//!   trains through the whole run, and each window asks it for a timed part of `--server-seconds`
//!   (the protocol in `training.rs`, which `training-sim` follows too): every figure of a
//!   window is taken over that timed part, and what runs beside training changes between
//!   windows while it keeps training.
//! - Online: `inference-worker online` serving the PP-OCR classifier under an open-loop
//!   Poisson load from `load-gen`, with an SLO, from before the timed part to its end.
//! - Offline: `inference-worker offline` over a job of a 2048×8 MLP, large enough not to end
//!   within a window, started afresh in each window.
//!
//! - Watched: one scenario runs training alone again under a daemon that observes without
//!   enforcing, with `enforcer observe --json --interval 0.1` from before the timed part: what
//!   watching costs training, what the sensor sees against the job's own CPU time, and the CPU
//!   policy replayed over the trace. Another runs it under the same daemon, not observed: the
//!   sensor's part of that cost. A daemon knows the running job from its config (`[[training]]
//!   pids`), which covers the job's whole process tree, its loader workers included.
//!
//! Every round runs every scenario once (or those `--server-scenarios` names), in an order
//! rotated by the round, training alone among them, so that a slowdown is a ratio to training
//! alone in the same round.

pub mod cores;
mod harvest;
mod level_cost;
mod pace_noise;
pub mod plot;
pub mod report;
pub mod scenario;

use std::{
    path::{Path, PathBuf},
    process::Child,
    time::{Duration, Instant},
};

use anyhow::bail;
use enforcer_common::cpu_list;
use reamer_tests::{
    harness::{Daemon, Reaped, decision_log_of, socket_of},
    measure::proc_stats::{JIFFIES_PER_S, node_jiffies, process_jiffies, resident_kib},
};
use serde::{Deserialize, Serialize};

use self::report::{Confined, Window};
pub use self::scenario::Scenario;
pub use crate::bench::common::training::TrainingCommand;
use crate::{
    bench::common::{
        cpus::{machine_cpus, upper_half_cpus},
        harvest as common_harvest,
        inference::{
            Inputs, LoadReport, Mlp, read_load_report, reset_job, results_lines,
            spawn_observer_into,
        },
        stage::{RequestBody, Stage},
        training::ServingTraining,
    },
    bench::{
        replay,
        saved::{About, Saved, Windows},
    },
    cargo::{release_bin, workspace_root},
};

const INSTANCE: &str = "bench-server";
/// The online SLO, and the online pool's guaranteed cores under reamer: those of reamer's
/// first measurements on the GPU server, kept so that runs compare.
pub const SLO_MS: f64 = 50.0;
pub const ONLINE_MIN_CORES: usize = 2;

/// The online pool's guaranteed cores on a machine of `cpus`: `ONLINE_MIN_CORES`, or half
/// the machine where that is less (the enforcer refuses minimums that leave training
/// nothing: on a 2-CPU VM, one).
pub fn online_min_cores(cpus: usize) -> usize {
    ONLINE_MIN_CORES.min((cpus / 2).max(1))
}
/// The offline job's model: an MLP of 8 layers of 2048, 16 inputs.
const MLP_WIDTH: u32 = 2048;
const MLP_LAYERS: u32 = 8;
/// Inference serves this long before training's timed part starts, as it does on a node
/// that serves all day; reamer's online pool weight settles in it (three latency reports,
/// one a second).
const INFERENCE_LEAD: Duration = Duration::from_millis(3500);
/// The lead's load runs until the timed part starts; this bounds it (and with it
/// `--server-pace-settle`).
const LEAD_LOAD_MAX: Duration = Duration::from_secs(600);
/// Items per CPU-second the offline job is sized for: twice what one thread of the offline
/// worker ran a 2048×8 MLP at on the 2-CPU EPYC VM (about 1,000); the job running out
/// mid-window stops the run, saying so.
const JOB_ITEMS_PER_CPU_S: f64 = 2_000.0;
/// Seconds of offline work the job holds beyond the lead and the timed part: the wait for the
/// timed part to start, in the first window the training command's start (Python's imports,
/// CUDA) and its 8 s warm-up.
const JOB_SLACK_S: f64 = 60.0;

/// How a run is made.
pub struct Options {
    pub rounds: usize,
    /// The scenarios each round runs, training alone among them.
    pub scenarios: Vec<Scenario>,
    /// The training job's timed part, seconds.
    pub seconds: f64,
    /// How much later the pace controller's windows (`reamer_by_pace`) are timed: the daemon
    /// starts with each window, and the controller searches first. Training, one process for
    /// the whole run, is past its warm-up already: only the daemon settles.
    pub pace_settle: Duration,
    pub training: TrainingCommand,
    /// Online requests a second.
    pub online_rate: f64,
    /// The command and machine of the run, saved with its windows (`bench::saved`).
    pub about: About,
}

fn bench_dir() -> PathBuf {
    workspace_root().join("target/bench/server")
}

/// Lines enough that the offline job outlasts a window with every CPU on it.
fn job_lines(cpus: usize, seconds: f64, pace_settle: Duration) -> u64 {
    let window_s = (INFERENCE_LEAD + pace_settle).as_secs_f64() + seconds + JOB_SLACK_S;
    (cpus as f64 * JOB_ITEMS_PER_CPU_S * window_s).ceil() as u64
}

fn prepare_inputs(seconds: f64, pace_settle: Duration) -> anyhow::Result<Inputs> {
    Inputs::prepare(
        &bench_dir(),
        Mlp {
            width: MLP_WIDTH,
            layers: MLP_LAYERS,
        },
        job_lines(machine_cpus(), seconds, pace_settle),
    )
}

/// The persistent parts of a run.
struct Bench {
    stage: Stage,
    options: Options,
    cpus: usize,
    /// The training job, running from the first window to the last.
    training: ServingTraining,
}

/// Counters read at the start of a window's timed part.
struct Before {
    at: Instant,
    /// CLOCK_MONOTONIC at `at`: the decision log's clock.
    monotonic_ns: u64,
    offline_items: u64,
    node: reamer_tests::measure::proc_stats::NodeJiffies,
    daemon_jiffies: Option<u64>,
}

impl Bench {
    fn start(options: Options, progress: &dyn Fn(&str)) -> anyhow::Result<Self> {
        progress("preparing the classifier's requests and the offline job");
        let inputs = prepare_inputs(options.seconds, options.pace_settle)?;
        progress("starting the online worker (PP-OCR cls; it profiles itself first)");
        let stage = Stage::start(INSTANCE, &bench_dir(), inputs, SLO_MS)?;
        progress("starting the training job (it warms up before the first window's timed part)");
        // Its progress goes to each window's daemon: the pace controller follows the job's
        // own count of steps, not its GPU's busy share.
        let training = options
            .training
            .clone()
            .reporting_progress_to(&socket_of(INSTANCE));
        let training = ServingTraining::start(&training)?;
        Ok(Self {
            stage,
            options,
            cpus: machine_cpus(),
            training,
        })
    }

    /// The enforcer's config: its defaults, the running training job, the two pools, and the
    /// option a scenario compares.
    fn daemon_config(scenario: Scenario, cpus: usize, training_pid: u32) -> String {
        let policy = match scenario {
            Scenario::ReamerOfflineNotPaused => {
                "[policy]\npause_offline_when_training_short = false\n\n"
            }
            // The job reports its steps to the daemon (`TrainingCommand::reporting_progress_to`):
            // the controller follows them, and its GPU's busy share only where they stop.
            Scenario::ReamerByPace => "[policy]\nharvest_by_pace = true\n\n",
            // The shipped trace's recording: the sensor and the policy run, nothing is moved.
            Scenario::AloneObserved | Scenario::AloneSensed => "[policy]\nenforce = false\n\n",
            _ => "",
        };
        format!(
            "{policy}[[training]]\nname = \"train\"\npids = [{training_pid}]\n\n\
             [[pool]]\nname = \"online\"\nkind = \"online\"\nmin_cores = {}\n\
             slo_ms = {}\n\n[[pool]]\nname = \"offline\"\nkind = \"offline\"\n",
            online_min_cores(cpus),
            SLO_MS as u64
        )
    }

    fn load(&self, base: &str, seconds: f64, seed: &str) -> anyhow::Result<Child> {
        let rate = self.options.online_rate;
        self.stage
            .load(RequestBody::Binary, base, rate, seconds, seed)
    }

    fn before(&self, daemon_pid: Option<u32>) -> anyhow::Result<Before> {
        Ok(Before {
            at: Instant::now(),
            monotonic_ns: common_harvest::monotonic_ns(),
            offline_items: results_lines(&self.stage.inputs.job),
            node: node_jiffies()?,
            daemon_jiffies: daemon_pid.map(process_jiffies),
        })
    }

    /// One window of `scenario` in `round`.
    fn window(&mut self, scenario: Scenario, round: usize) -> anyhow::Result<Window> {
        self.stage.reset_groups()?;
        reset_job(&self.stage.inputs.job);
        let inference = scenario.inference();
        let mut confined = None;
        match scenario {
            Scenario::OfflineCpuIdle => self.stage.offline_group.set_idle(true)?,
            Scenario::StaticPartition => {
                let cpus = upper_half_cpus(self.cpus);
                self.stage.online_group.set_cpus(&cpus)?;
                self.stage.offline_group.set_cpus(&cpus)?;
                confined = Some(Confined { cpus, smt: None });
            }
            _ => {}
        }
        if let Some(fraction) = scenario.confined_to() {
            let cores = cores::cores(Path::new("/sys/devices/system/cpu"), self.cpus);
            let cpus = cpu_list::format(&cores::upper_cores(&cores, fraction));
            self.stage.online_group.set_cpus(&cpus)?;
            self.stage.offline_group.set_cpus(&cpus)?;
            self.stage.offline_group.set_idle(true)?;
            confined = Some(Confined {
                cpus,
                smt: Some(cores::has_smt(&cores)),
            });
        }
        if scenario.daemon() && !inference {
            // The run's idle online worker waits outside the daemon's pools, so that the sensor
            // sees nothing of inference's when training is alone (its wake-ups reported
            // training queued behind inference).
            self.stage.stand_by()?;
        }
        let daemon = scenario.daemon().then(|| {
            Daemon::start_bin_with_fresh_log(
                &release_bin("enforcer"),
                INSTANCE,
                &Self::daemon_config(scenario, self.cpus, self.training.pid()),
            )
        });
        let daemon_pid = daemon.as_ref().map(Daemon::pid);
        let launched_online = inference
            .then_some(daemon.as_ref())
            .flatten()
            .map(|_| self.stage.launch_online(self.stage.inputs.engine))
            .transpose()?;
        let online_base = launched_online
            .as_ref()
            .unwrap_or(&self.stage.online)
            .base
            .clone();
        let offline = inference
            .then(|| {
                self.stage
                    .spawn_offline(daemon.as_ref(), self.stage.inputs.engine)
            })
            .transpose()?;
        let seed = (round + 1).to_string();
        // Online traffic from the lead until training's timed part starts.
        let lead_load = inference
            .then(|| {
                self.load(
                    &online_base,
                    LEAD_LOAD_MAX.as_secs_f64(),
                    &(1_000_000 + round).to_string(),
                )
                .map(Reaped)
            })
            .transpose()?;
        let settle = match scenario {
            Scenario::ReamerByPace => self.options.pace_settle,
            _ => Duration::ZERO,
        };
        std::thread::sleep(INFERENCE_LEAD + settle);
        // Observed from before the timed part starts: the replay sees the daemon's start as
        // well as the timed part.
        let whole_run_observer = (scenario == Scenario::AloneObserved)
            .then(|| spawn_observer(round, scenario, WHOLE_RUN_INTERVAL))
            .transpose()?
            .map(Reaped);
        self.training.begin(self.options.seconds)?;
        drop(lead_load);
        let before = self.before(daemon_pid)?;
        let trace = observer_trace(round, scenario);
        let observer = match whole_run_observer {
            Some(observer) => Some(observer),
            None => scenario
                .reamer()
                .then(|| spawn_observer(round, scenario, TIMED_PART_INTERVAL))
                .transpose()?
                .map(Reaped),
        };
        // The trace's intervals from here on are the timed part's.
        let timed_first_line = trace_lines(&trace);
        let load = inference
            .then(|| self.load(&online_base, (self.options.seconds - 0.3).max(0.5), &seed))
            .transpose()?;
        let report = self.training.report(self.options.seconds)?;
        let elapsed = before.at.elapsed().as_secs_f64();
        let timed_last_line = trace_lines(&trace);
        let node_after = node_jiffies()?;
        let offline_done = results_lines(&self.stage.inputs.job);
        let enforcer_cpu_pct = daemon_pid.zip(before.daemon_jiffies).map(|(pid, jiffies)| {
            process_jiffies(pid).saturating_sub(jiffies) as f64 / JIFFIES_PER_S / elapsed * 100.0
        });
        let enforcer_rss_mib = daemon_pid
            .and_then(resident_kib)
            .map(|kib| kib as f64 / 1024.0);
        if inference && offline_done >= self.stage.inputs.job_lines {
            bail!(
                "the offline job ({} lines) ran out during a window, so its throughput would be \
                 undercounted: job_lines in xtask/src/bench/server/mod.rs sizes it for {} items \
                 per CPU-second",
                self.stage.inputs.job_lines,
                JOB_ITEMS_PER_CPU_S
            );
        }
        let online: Option<LoadReport> = load.map(read_load_report).transpose()?;
        let observed = observer.map(|observer| {
            drop(observer);
            report::Observed::from_trace(&trace, timed_first_line..timed_last_line)
        });
        let replay = (scenario == Scenario::AloneObserved)
            .then(|| match replay::replay_trace(&trace, None) {
                Ok(summary) => Some(summary),
                Err(err) => {
                    eprintln!(
                        "[bench] server: the replay of {} failed: {err:#}",
                        trace.display()
                    );
                    None
                }
            })
            .flatten();
        drop(offline);
        if let Some(worker) = launched_online {
            worker.stop();
        }
        let harvest = (scenario == Scenario::ReamerByPace).then(|| {
            common_harvest::read(
                &release_bin("enforcer"),
                INSTANCE,
                &decision_log_of(INSTANCE),
                before.monotonic_ns,
            )
        });
        if let Some(daemon) = daemon {
            daemon.stop();
        }
        Ok(Window {
            scenario,
            round,
            throughput: report.throughput(),
            counts_images: report.images_per_s.is_some(),
            step_ms_p50: report.step_ms_p50,
            step_ms_p99: report.step_ms_p99,
            training_cpus: report.cpu_s / report.seconds.max(1e-9),
            online,
            offline_items_per_s: inference
                .then(|| offline_done.saturating_sub(before.offline_items) as f64 / elapsed),
            cpus_left_idle: node_after.idle_cpus_since(&before.node, elapsed),
            steal_pct: node_after.steal_pct_since(&before.node),
            reserved_cores_p50: observed.as_ref().and_then(|o| o.reserved_cores_p50),
            offline_paused_pct: observed.as_ref().and_then(|o| o.offline_paused_pct),
            sensor_running_cpus: observed.as_ref().and_then(|o| o.running_cpus_mean),
            replay,
            enforcer_cpu_pct,
            enforcer_rss_mib,
            confined,
            harvest,
            step_ms: report.step_ms,
        })
    }

    fn finish(self) {
        self.training.stop();
        self.stage.stop(&[]);
    }
}

/// The trace of `scenario`'s observer in `round`: this, then `-round-N.jsonl`.
fn observer_trace_stem(scenario: Scenario) -> String {
    format!("observed-{}", scenario.name())
}

fn observer_trace(round: usize, scenario: Scenario) -> PathBuf {
    bench_dir().join(format!(
        "{}-round-{round}.jsonl",
        observer_trace_stem(scenario)
    ))
}

/// The observer's interval under reamer, over the timed part: the cores reserved for training
/// and the offline pause, interval by interval.
const TIMED_PART_INTERVAL: &str = "0.2";
/// The observer's interval in the observed scenario, over the whole run: the interval the
/// shipped trace was recorded at, and whose cost to training that scenario measures.
const WHOLE_RUN_INTERVAL: &str = "0.1";

/// `enforcer observe --json --interval INTERVAL` on the window's daemon.
fn spawn_observer(round: usize, scenario: Scenario, interval: &str) -> anyhow::Result<Child> {
    spawn_observer_into(INSTANCE, interval, &observer_trace(round, scenario))
}

/// The intervals a trace holds so far: its complete lines (observe writes one per interval as
/// the interval ends; a line being written is not counted).
fn trace_lines(path: &Path) -> usize {
    std::fs::read(path).map_or(0, |bytes| bytes.iter().filter(|&&b| b == b'\n').count())
}

/// Everything one run measured.
#[derive(Serialize, Deserialize)]
pub struct Measured {
    pub training: String,
    pub stand_in: bool,
    pub rounds: usize,
    pub seconds: f64,
    pub online_rate: f64,
    pub cpus: usize,
    /// The engine the workers ran (`--engine`); runs saved before the choice ran tract.
    #[serde(default = "crate::bench::common::inference::tract")]
    pub engine: String,
    /// Whether one training process served every window (false: runs saved before it did,
    /// which started the job afresh in each window).
    #[serde(default)]
    pub one_training_process: bool,
    /// Seconds the pace controller's daemon ran before its windows' timed parts, the 3.5 s
    /// lead included (`--server-pace-settle` and the lead; runs saved before the option: 48.5).
    #[serde(default = "lead_before_the_option")]
    pub pace_lead_s: f64,
    pub windows: Vec<Window>,
}

/// Runs `options.rounds` rounds of every scenario.
pub fn run(options: Options, progress: &dyn Fn(&str)) -> anyhow::Result<Measured> {
    if !crate::cargo::is_root() {
        bail!("the server benchmark writes cgroups under /sys/fs/cgroup: run it as root");
    }
    let rounds = options.rounds;
    let (training, stand_in, seconds, online_rate) = (
        options.training.description.clone(),
        options.training.stand_in,
        options.seconds,
        options.online_rate,
    );
    let pace_lead_s = (INFERENCE_LEAD + options.pace_settle).as_secs_f64();
    let scenarios = options.scenarios.clone();
    if !scenarios.contains(&Scenario::Alone) {
        bail!("the server benchmark's scenarios must include training alone: every ratio is to it");
    }
    let about = options.about.clone();
    let mut bench = Bench::start(options, progress)?;
    let cpus = bench.cpus;
    let engine = bench.stage.inputs.engine;
    let measured = |windows: &[Window]| Measured {
        training: training.clone(),
        stand_in,
        // The rounds begun, where the run is cut short.
        rounds: windows.last().map_or(0, |w| w.round + 1),
        seconds,
        online_rate,
        cpus,
        engine: engine.to_owned(),
        one_training_process: true,
        pace_lead_s,
        windows: windows.to_vec(),
    };
    progress(&format!(
        "the run is saved after each window to {}; one cut short is reported from it with \
         --server-from",
        saved_path().display()
    ));
    let started = Instant::now();
    let total = rounds * scenarios.len();
    let mut windows = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for round in 0..rounds {
            for k in 0..scenarios.len() {
                // Rotated every round: drift over the run hits every scenario alike.
                let scenario = scenarios[(k + round) % scenarios.len()];
                crate::bench::common::progress_bar::draw(
                    windows.len(),
                    total,
                    started.elapsed(),
                    &format!("round {}/{rounds}: {}", round + 1, scenario.name()),
                );
                windows.push(bench.window(scenario, round)?);
                Saved {
                    about: about.clone(),
                    planned_windows: total,
                    run: measured(&windows),
                }
                .write(&saved_path())?;
            }
        }
        crate::bench::common::progress_bar::finish(windows.len(), started.elapsed());
        Ok(())
    })();
    bench.finish();
    result?;
    Ok(measured(&windows))
}

/// The pace controller's lead in runs saved before `--server-pace-settle`: 45 s and the 3.5 s
/// every window's inference leads by.
fn lead_before_the_option() -> f64 {
    48.5
}

impl Windows for Measured {
    fn windows_measured(&self) -> usize {
        self.windows.len()
    }
}

/// Where the run is saved after each window (`bench::saved`).
pub fn saved_path() -> PathBuf {
    bench_dir().join("run.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offline_job_outlasts_a_window_at_the_rate_it_is_sized_for() {
        for cpus in [2, 16] {
            let settle = Duration::from_secs(120);
            let lines = job_lines(cpus, 25.0, settle) as f64;
            assert!(lines >= cpus as f64 * JOB_ITEMS_PER_CPU_S * (25.0 + 3.5 + 120.0));
        }
    }
}
