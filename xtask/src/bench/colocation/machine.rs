//! The co-location run's machine: what it starts once (the online worker, the groups, the
//! inputs), what it measures alone (offline inference's rate, online's CPU per request), and
//! one window of a scenario, set up, measured and torn down.

use std::{
    path::PathBuf,
    process::Child,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use enforcer_common::cpu_list;
use reamer_tests::{
    baselines::{self, Controller},
    harness::{Daemon, cgroups},
    measure::proc_stats::{JIFFIES_PER_S, node_jiffies, process_jiffies, resident_kib},
};
use serde::Deserialize;

use super::{
    HEAVY_ONLINE_CPUS, INFERENCE_LEAD, INSTANCE, JOB_ITEMS_PER_CPU_S, LEAD_SEED_BASE, OFFLINE_LEAD,
    OFFLINE_START_LIMIT, ONLINE_CALIBRATION, ONLINE_RATE, SETTLE_SEED_BASE, SLO_MS,
    SUPPRESS_THRESHOLD, job_lines,
    {
        report::{SloNeeds, Window},
        scenario::Scenario,
    },
};
use crate::{
    bench::common::{
        cpus::{machine_cpus, upper_half_cpus},
        harvest,
        inference::{
            Inputs, OFFLINE_MLP, read_load_report, reset_job, results_lines, spawn_observer_into,
        },
        stage::{RequestBody, Stage},
        training::{ServingTraining, TrainingCommand},
    },
    cargo::{release_bin, workspace_root},
};

/// The training simulator's report of a timed part (the fields the benchmark uses).
#[derive(Deserialize)]
struct TrainingReport {
    steps_per_s: f64,
    step_ms_p50: f64,
    step_ms_p99: f64,
    cpu_s: f64,
    seconds: f64,
    runqueue_wait_s: f64,
}

/// Where the run's inputs and its workers' logs go.
fn bench_dir() -> PathBuf {
    workspace_root().join("target/bench/colocation")
}

fn decision_log() -> PathBuf {
    reamer_tests::harness::decision_log_of(INSTANCE)
}

/// Event-to-cgroup-write latencies (µs) of the fast-path decisions in the daemon's log.
fn fast_path_reactions_us() -> Vec<f64> {
    std::fs::read_to_string(decision_log())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|d| d["trigger"] == "contended")
        .filter_map(|d| d["event_to_write_ns"].as_u64())
        .map(|ns| ns as f64 / 1e3)
        .collect()
}

/// The persistent parts of a run: the online worker and the groups.
pub(super) struct Bench {
    pub(super) stage: Stage,
    pub(super) cpus: usize,
    window: Duration,
    /// Training's untimed run before each window (`--settle`).
    settle: Duration,
    /// training's cgroup2 group, for PSI; None where no cgroup2 tree is mounted.
    training_group: Option<PathBuf>,
    /// The online worker's CPU time per request, alone, ms.
    pub(super) online_cpu_ms_per_request: f64,
    /// The same with the request as plain JSON: what the binary body saves.
    pub(super) online_cpu_ms_per_json_request: f64,
    /// How the baselines ran where that varies by host (the PSI controller's source).
    pub(super) notes: Vec<&'static str>,
}

/// How a window's scenario is held in place while it runs.
enum Control {
    None,
    Daemon(Daemon),
    Controller(Controller),
}

impl Bench {
    pub(super) fn start(
        window: Duration,
        settle: Duration,
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<Self> {
        // The offline job runs through the settling time too.
        let lines = job_lines(machine_cpus(), window + settle);
        let inputs = Inputs::prepare(&bench_dir(), OFFLINE_MLP, lines)?;
        progress("starting the online worker (PP-OCR cls; it profiles itself first)");
        let stage = Stage::start(INSTANCE, &bench_dir(), inputs, SLO_MS)?;
        let training_group = cgroups::unified_group(INSTANCE, "training").ok();
        let mut bench = Self {
            stage,
            cpus: machine_cpus(),
            window,
            settle,
            training_group,
            online_cpu_ms_per_request: 0.0,
            online_cpu_ms_per_json_request: 0.0,
            notes: Vec::new(),
        };
        progress("measuring the online worker's CPU per request, alone, binary body and JSON");
        bench.online_cpu_ms_per_request = bench.calibrate_online(RequestBody::Binary)?;
        bench.online_cpu_ms_per_json_request = bench.calibrate_online(RequestBody::Json)?;
        Ok(bench)
    }

    /// The heavy-online scenarios' request rate: `HEAVY_ONLINE_CPUS` of the worker's work.
    pub(super) fn heavy_online_rate(&self) -> f64 {
        HEAVY_ONLINE_CPUS * 1e3 / self.online_cpu_ms_per_request
    }

    /// `load-gen` against the online worker at `base` at `rate` for `seconds`, seeded by
    /// `seed`, with the binary request body.
    fn spawn_load(&self, base: &str, rate: f64, seconds: f64, seed: &str) -> anyhow::Result<Child> {
        self.stage
            .load(RequestBody::Binary, base, rate, seconds, seed)
    }

    /// The online worker alone under the base load, sent `body`: its CPU time per request
    /// answered, ms.
    fn calibrate_online(&mut self, body: RequestBody) -> anyhow::Result<f64> {
        self.stage.reset_groups()?;
        let online = &self.stage.online;
        let jiffies = process_jiffies(online.child.id());
        let load = self.stage.load(
            body,
            &online.base,
            ONLINE_RATE,
            ONLINE_CALIBRATION.as_secs_f64(),
            "1",
        )?;
        let report = read_load_report(load)?;
        let cpu_ms = (process_jiffies(online.child.id()) - jiffies) as f64 / JIFFIES_PER_S * 1e3;
        if report.sent == 0 || cpu_ms <= 0.0 {
            bail!(
                "the online worker answered no load alone ({} requests sent, {cpu_ms:.0} ms of \
                 CPU): see its log, {}",
                report.sent,
                online.log.display()
            );
        }
        Ok(cpu_ms / report.sent as f64)
    }

    /// Offline inference alone on the machine for one window: its inferences per CPU-second.
    pub(super) fn calibrate_offline(&mut self) -> anyhow::Result<f64> {
        self.stage.reset_groups()?;
        let inputs = &self.stage.inputs;
        reset_job(&inputs.job);
        let offline = self.stage.spawn_offline(None, inputs.engine)?;
        std::thread::sleep(OFFLINE_LEAD);
        // Under heavy steal the worker's start (model, plan) can outlast the lead: measure
        // from its first results on.
        let first_results_by = Instant::now() + OFFLINE_START_LIMIT;
        while results_lines(&inputs.job) == 0 && Instant::now() < first_results_by {
            std::thread::sleep(Duration::from_millis(50));
        }
        let (items, jiffies) = (results_lines(&inputs.job), process_jiffies(offline.id()));
        std::thread::sleep(self.window.min(Duration::from_secs(2)));
        let items = results_lines(&inputs.job) - items;
        let cpu_s = (process_jiffies(offline.id()) - jiffies) as f64 / JIFFIES_PER_S;
        drop(offline);
        if cpu_s <= 0.0 || items == 0 {
            bail!(
                "offline inference made no progress alone ({items} items, {cpu_s:.2} CPU-s in \
                 {:.1} s): see the worker's log, {}",
                self.window.min(Duration::from_secs(2)).as_secs_f64(),
                self.stage.offline_log().display()
            );
        }
        Ok(items as f64 / cpu_s)
    }

    /// The enforcer's config in `scenario`: the enforcer's own defaults, so that "reamer"
    /// measures what an operator gets, but for the options a scenario compares.
    fn daemon_config(&self, scenario: Scenario) -> String {
        let policy = match scenario {
            Scenario::ReamerOfflineNotPaused => {
                "[policy]\npause_offline_when_training_short = false\n\n"
            }
            // The enforcer's defaults before either option: offline inference neither paused
            // nor kept off training's cores.
            Scenario::ReamerOfflineOnTrainingCores => {
                "[policy]\npause_offline_when_training_short = false\n\
                 offline_on_training_cores = true\n\n"
            }
            Scenario::ReamerTrainingCoresQuarter => {
                "[policy]\npause_offline_when_training_short = false\n\
                 offline_on_training_cores = true\noffline_on_training_cores_share = 0.25\n\n"
            }
            Scenario::ReamerTrainingCoresHalf => {
                "[policy]\npause_offline_when_training_short = false\n\
                 offline_on_training_cores = true\noffline_on_training_cores_share = 0.5\n\n"
            }
            Scenario::ReamerByPace => "[policy]\nharvest_by_pace = true\n\n",
            _ => "",
        };
        format!(
            "{policy}[[pool]]\nname = \"online\"\nkind = \"online\"\nmin_cores = {}\nslo_ms = {}\n\n\
             [[pool]]\nname = \"offline\"\nkind = \"offline\"\n",
            // The static partition's share, so that the heavy-online pair compares how each
            // keeps the same cores for online inference (one on a 2-CPU machine; with one on
            // 16 CPUs, online inference met its SLO less often than with the partition's 8).
            cpu_list::count(&upper_half_cpus(self.cpus)),
            SLO_MS as u64,
        )
    }

    /// One window of `scenario`, with the seed of `round`.
    pub(super) fn window(&mut self, scenario: Scenario, round: usize) -> anyhow::Result<Window> {
        self.stage.reset_groups()?;
        reset_job(&self.stage.inputs.job);
        let inference = scenario != Scenario::Alone;
        let setup = scenario.setup();
        match setup {
            Scenario::StaticPartition => {
                let cpus = upper_half_cpus(self.cpus);
                self.stage.online_group.set_cpus(&cpus)?;
                self.stage.offline_group.set_cpus(&cpus)?;
            }
            Scenario::LowShares => {
                // The smallest weight cgroup v1 takes (what Kubernetes gives best-effort pods).
                self.stage.online_group.set_shares(2)?;
                self.stage.offline_group.set_shares(2)?;
            }
            _ => {}
        }
        let daemon = (setup == Scenario::Reamer).then(|| {
            Daemon::start_bin_with_fresh_log(
                &release_bin("enforcer"),
                INSTANCE,
                &self.daemon_config(scenario),
            )
        });
        // Started before offline inference and training, as the run's worker was: its
        // start-up profile meets a quiet machine.
        let engine = scenario.engine(self.stage.inputs.engine);
        let launched_online = daemon
            .as_ref()
            .map(|_| self.stage.launch_online(engine))
            .transpose()?;
        let online_worker = launched_online.as_ref().unwrap_or(&self.stage.online);
        let offline = if inference {
            Some(self.stage.spawn_offline(daemon.as_ref(), engine)?)
        } else {
            None
        };
        let mut control = match (daemon, &offline, setup) {
            (Some(daemon), _, _) => Control::Daemon(daemon),
            (None, Some(offline), Scenario::UtilizationPoller) => {
                Control::Controller(baselines::utilization_poller(
                    self.stage.offline_group.clone(),
                    offline.id(),
                    self.cpus,
                    SUPPRESS_THRESHOLD,
                    Duration::from_secs(1),
                ))
            }
            (None, Some(_), Scenario::PsiTrigger) => {
                let group = self
                    .training_group
                    .as_ref()
                    .context("the PSI scenario needs a cgroup2 tree for training's pressure")?;
                Control::Controller(baselines::psi_trigger(
                    group.join("cpu.pressure"),
                    self.stage.offline_group.clone(),
                    Duration::from_millis(50),
                    Duration::from_millis(500),
                    Duration::from_secs(1),
                ))
            }
            _ => Control::None,
        };
        let rate = if scenario.heavy_online() {
            self.heavy_online_rate()
        } else {
            ONLINE_RATE
        };
        if inference {
            // The lead's traffic, at the window's rate, from a seed of its own; its report is
            // left out: the window's figures are training's time.
            let lead = self.spawn_load(
                &online_worker.base,
                rate,
                INFERENCE_LEAD.as_secs_f64(),
                &(LEAD_SEED_BASE + round as u64).to_string(),
            )?;
            read_load_report(lead)?;
        }

        let seed = (round + 1).to_string();
        let window_s = self.window.as_secs_f64();
        // Timed on request (`--serve`): started now, timed after the settling time.
        let sim = TrainingCommand::training_sim(&["--seed", &seed])?;
        let command = match &control {
            Control::Daemon(_) => sim.launched_as_training("train", INSTANCE)?,
            _ => sim,
        };
        let training_started = Instant::now();
        let mut training: ServingTraining<TrainingReport> = ServingTraining::start(&command)?;
        if let Some(group) = &self.training_group {
            // Membership only: no controller, so scheduling is unchanged; PSI reads it.
            let _ = std::fs::write(group.join("cgroup.procs"), training.pid().to_string());
        }
        if inference && !self.settle.is_zero() {
            // Traffic while training settles, at the window's rate, from a seed of its own.
            let settling = self.spawn_load(
                &online_worker.base,
                rate,
                self.settle.as_secs_f64(),
                &(SETTLE_SEED_BASE + round as u64).to_string(),
            )?;
            read_load_report(settling)?;
        } else {
            std::thread::sleep(self.settle);
        }
        training.begin(window_s)?;
        let window_start_ns = harvest::monotonic_ns();
        let offline_items_before = results_lines(&self.stage.inputs.job);
        let online_pid = online_worker.child.id();
        let online_jiffies = process_jiffies(online_pid);
        let offline_jiffies = offline.as_ref().map(|o| process_jiffies(o.id()));
        let daemon_pid = match &control {
            Control::Daemon(daemon) => Some(daemon.pid()),
            _ => None,
        };
        let daemon_jiffies = daemon_pid.map(process_jiffies);
        let node_before = node_jiffies()?;
        let started = Instant::now();
        let observer = (scenario == Scenario::ReamerObserved)
            .then(|| spawn_observer(round))
            .transpose()?;
        let load = inference
            .then(|| self.spawn_load(&online_worker.base, rate, (window_s - 0.3).max(0.5), &seed))
            .transpose()?;
        let report = training.report(window_s);
        let elapsed = started.elapsed().as_secs_f64();
        training.stop();
        let report =
            report.with_context(|| format!("training-sim in scenario {}", scenario.name()))?;
        if let Some(mut observer) = observer {
            let _ = observer.kill();
            let _ = observer.wait();
        }
        // The share of the machine's CPU time the hypervisor gave to other guests.
        let node_after = node_jiffies()?;
        let steal_pct = node_after.steal_pct_since(&node_before);
        let cpus_left_idle = node_after.idle_cpus_since(&node_before, elapsed);
        let offline_done = results_lines(&self.stage.inputs.job);
        if offline_done >= self.stage.inputs.job_lines {
            bail!(
                "the offline job ({} lines) ran out during a window, so its throughput would be \
                 undercounted: job_lines in xtask/src/bench/colocation/mod.rs sizes it for {} items \
                 per CPU-second",
                self.stage.inputs.job_lines,
                JOB_ITEMS_PER_CPU_S
            );
        }
        let offline_items = offline_done - offline_items_before;
        let online_cpu_s = (process_jiffies(online_pid) - online_jiffies) as f64 / JIFFIES_PER_S;
        let offline_cpu_s = offline.as_ref().zip(offline_jiffies).map(|(o, before)| {
            process_jiffies(o.id()).saturating_sub(before) as f64 / JIFFIES_PER_S
        });
        let enforcer_cpu_pct = daemon_pid.zip(daemon_jiffies).map(|(pid, before)| {
            (process_jiffies(pid) - before) as f64 / JIFFIES_PER_S / elapsed * 100.0
        });
        let enforcer_rss_mib = daemon_pid
            .and_then(resident_kib)
            .map(|kib| kib as f64 / 1024.0);
        let online = load.map(read_load_report).transpose()?;
        drop(offline);
        if let Some(worker) = launched_online {
            worker.stop();
        }
        let harvest = (scenario == Scenario::ReamerByPace).then(|| {
            harvest::read(
                &release_bin("enforcer"),
                INSTANCE,
                &decision_log(),
                window_start_ns,
            )
        });
        let (mut reaction_us, mut controller_cpu_pct, mut slo_needs) = (Vec::new(), None, None);
        match std::mem::replace(&mut control, Control::None) {
            Control::Daemon(daemon) => {
                slo_needs = Some(SloNeeds::from_daemon_log(&daemon.stop()));
                reaction_us = fast_path_reactions_us();
            }
            Control::Controller(controller) => {
                let report = controller.stop(&self.stage.offline_group)?;
                // How long after training started the controller first tightened the quota.
                reaction_us.extend(
                    report
                        .tightened_at
                        .iter()
                        .find(|t| **t >= training_started)
                        .map(|t| t.duration_since(training_started).as_secs_f64() * 1e6),
                );
                controller_cpu_pct = Some(report.cpu_s / elapsed * 100.0);
                if let Some(note) = report.note
                    && !self.notes.contains(&note)
                {
                    self.notes.push(note);
                }
            }
            Control::None => {}
        }
        Ok(Window {
            scenario,
            round,
            steps_per_s: report.steps_per_s,
            step_ms_p50: report.step_ms_p50,
            step_ms_p99: report.step_ms_p99,
            training_cpus: report.cpu_s / report.seconds,
            training_runqueue_wait_ms_per_s: report.runqueue_wait_s * 1e3 / report.seconds,
            online,
            online_cpus: online_cpu_s / elapsed,
            offline_items_per_s: inference.then(|| offline_items as f64 / elapsed),
            offline_cpus: offline_cpu_s.map(|cpu_s| cpu_s / elapsed),
            reaction_us,
            enforcer_cpu_pct: enforcer_cpu_pct.or(controller_cpu_pct),
            enforcer_rss_mib,
            steal_pct,
            cpus_left_idle,
            slo_needs,
            harvest,
        })
    }

    pub(super) fn finish(self) {
        self.stage.stop(&["training"]);
    }
}

/// `enforcer observe --json --interval 0.1` on the benchmark's daemon, its trace kept in
/// target/bench/colocation/.
fn spawn_observer(round: usize) -> anyhow::Result<Child> {
    let path = workspace_root().join(format!(
        "target/bench/colocation/observed-round-{round}.jsonl"
    ));
    spawn_observer_into(INSTANCE, "0.1", &path)
}
