//! The co-location benchmark: the training simulator beside online and offline inference,
//! under eleven scenarios, in short windows interleaved round by round.
//!
//! - Training: `training-sim`, one window's length, its seed fixed per round.
//! - Online: `inference-worker online` serving the PP-OCR text-direction classifier (a real
//!   model, ~6 ms per item here) under an open-loop Poisson load from `load-gen`, with an SLO.
//!   One worker, started with the run, serves every scenario but reamer's. Under reamer the
//!   worker is started through the enforcer (`enforcer launch --pool online`), as a user would
//!   start it, so that it follows the pool's core grants and tells the enforcer its SLO need;
//!   the run's worker waits in a group of its own meanwhile.
//! - Offline: `inference-worker offline` over a job of a synthetic MLP (small inputs, ~0.5 ms
//!   per item), started afresh in each window on a reset job.
//!
//! Every round runs each scenario once, in an order rotated by the round, so that the VM's
//! drift spreads over all of them, and first measures offline inference alone (its
//! inferences per CPU-second, the yardstick of "what the idle CPU allows"). Slowdowns are
//! paired within a round: the same seed, minutes apart at most.

mod machine;
pub mod plot;
pub mod report;
pub mod scenario;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use self::{machine::Bench, report::Window, scenario::Scenario};
use crate::{
    bench::common::{
        progress_bar,
        rounds::{self, quiet_rounds},
    },
    wake_probe::WakeLatency,
};

const INSTANCE: &str = "bench-colo";
/// The online SLO and load: a seventh to a quarter of one CPU of classifier work at this
/// rate, depending on the host's CPU.
pub const SLO_MS: f64 = 50.0;
pub const ONLINE_RATE: f64 = 40.0;
/// The heavy online load of the two heavy-online scenarios, as the CPUs its classifier work
/// takes: half of the online pool's one guaranteed core, which is also what the static
/// partition's core gives online inference where offline inference wants it too (two groups
/// at the same weight). The rate is derived from the worker's CPU per request, measured at
/// the start of the run.
pub const HEAVY_ONLINE_CPUS: f64 = 0.5;
/// How long the online worker's CPU per request is measured at the start, alone.
const ONLINE_CALIBRATION: Duration = Duration::from_secs(3);
/// Koordinator's default CPU suppress threshold.
const SUPPRESS_THRESHOLD: f64 = 0.65;
/// Offline inference runs this long alone before its rate is measured: its start (model,
/// plan) is over by then.
const OFFLINE_LEAD: Duration = Duration::from_millis(600);
/// In every window, inference runs this long before training starts, offline work and online
/// traffic both, so that training arrives at a node already serving, as it does in
/// production: online traffic does not start with training. reamer's pool weight settles in
/// this time: the worker reports its latency once a second, and the weight needs three
/// reports to come down from `cpu_weight` (50) to `min_cpu_weight` (10). With the 0.6 s lead
/// and the traffic starting with training that this replaced, each 4 s window measured about
/// three seconds of a daemon just started, its weight above the floor, where a node serving
/// for hours sits at the floor while the tail has room.
const INFERENCE_LEAD: Duration = Duration::from_millis(3500);
/// The lead's traffic is seeded from here on, by round: apart from the windows' seeds.
const LEAD_SEED_BASE: u64 = 1_000_000;
/// The settling time's traffic (`--settle`), likewise.
const SETTLE_SEED_BASE: u64 = 2_000_000;
/// How long the offline worker may take to finish its first items when alone.
const OFFLINE_START_LIMIT: Duration = Duration::from_secs(20);
/// The offline job's length on the smallest machine: 2 CPUs at ~3,600 items per CPU-second
/// (the fastest seen here) for a 4 s window, with room to spare.
const MIN_JOB_LINES: u64 = 60_000;
/// Items per CPU-second the job is sized for: above the fastest seen (on tract ~3,600 here,
/// ~3,300 on a 16-CPU Xeon; on ONNX Runtime ~4,000 here, up to 5,600 over a second).
const JOB_ITEMS_PER_CPU_S: f64 = 8_000.0;

/// Lines enough that the offline job outlasts a window with every CPU working on it. A job
/// that ran out mid-window counted only what it had done: 60,000 lines lasted about a second
/// of a 4 s window on a 16-CPU host, which then showed offline inference using 3 of the 12
/// CPUs it left idle.
fn job_lines(cpus: usize, window: Duration) -> u64 {
    let lines = (window + INFERENCE_LEAD).as_secs_f64() * cpus as f64 * JOB_ITEMS_PER_CPU_S;
    (lines.ceil() as u64).max(MIN_JOB_LINES)
}

/// Everything one run measured.
#[derive(Serialize, Deserialize)]
pub struct Measured {
    /// The windows of the kept rounds, numbered 0.. in the order they were kept.
    pub windows: Vec<Window>,
    /// The scenarios run, training alone first.
    pub scenarios: Vec<Scenario>,
    /// Per kept round: offline inferences per CPU-second, alone.
    pub offline_per_cpu_s: Vec<f64>,
    pub cpus: usize,
    /// Rounds kept: at most the rounds asked for, fewer where the attempts ran out.
    pub rounds: usize,
    pub rounds_asked: usize,
    pub window_s: f64,
    /// Training's untimed run before each window, inference running (`--settle`); 0 in runs
    /// saved before.
    #[serde(default)]
    pub settle_s: f64,
    /// Inference's lead before training in each window, s (`INFERENCE_LEAD`).
    pub lead_s: f64,
    /// The online worker's CPU time per request alone, ms, and the heavy-online scenarios'
    /// rate derived from it.
    pub online_cpu_ms_per_request: f64,
    /// The same with the image sent as JSON numbers rather than binary tensor data.
    pub online_cpu_ms_per_json_request: f64,
    pub heavy_online_rate: f64,
    /// A round with a window where the host stole more than this share of the CPU is run
    /// again.
    pub max_steal_pct: f64,
    /// The rounds run again, with the worst steal of a window of theirs.
    pub discarded: Vec<DiscardedRound>,
    pub notes: Vec<String>,
    /// The engine the workers ran (`--engine`), but in the scenarios that name another.
    /// Runs saved before the engine choice ran tract.
    #[serde(default = "crate::bench::common::inference::tract")]
    pub engine: String,
    /// How slowly the host woke an idle vCPU just before the rounds and just after them: what
    /// training alone, which leaves a vCPU idle, paid in this run's regime. None where
    /// `wake-probe` could not run (one CPU).
    pub wake_before: Option<WakeLatency>,
    pub wake_after: Option<WakeLatency>,
}

impl crate::bench::saved::Windows for Measured {
    fn windows_measured(&self) -> usize {
        self.windows.len()
    }
}

/// A round set aside because the host stole too much CPU during one of its windows.
#[derive(Serialize, Deserialize)]
pub struct DiscardedRound {
    /// The kept round it would have been (its seed and scenario order).
    pub round: usize,
    pub worst_steal_pct: f64,
    pub worst_scenario: Scenario,
}

/// Runs `rounds` rounds on a quiet host (`common::rounds`): a training window that loses a
/// quarter of its CPU to another guest runs a third slower. A round with a window over
/// `max_steal_pct` is run again with the same seed and order.
pub fn run(
    rounds: usize,
    window_s: f64,
    settle_s: f64,
    max_steal_pct: f64,
    scenarios: &[Scenario],
    progress: &dyn Fn(&str),
) -> anyhow::Result<Measured> {
    // Training alone is every slowdown's pair.
    let scenarios: Vec<Scenario> = std::iter::once(Scenario::Alone)
        .chain(scenarios.iter().copied().filter(|&s| s != Scenario::Alone))
        .collect();
    let window = Duration::from_secs_f64(window_s);
    let mut bench = Bench::start(window, Duration::from_secs_f64(settle_s), progress)?;
    progress("timing how slowly an idle vCPU wakes (wake-probe)");
    let wake_before = probe_wake_latency();
    let per_round = scenarios.len() + 1;
    let started = Instant::now();
    let mut done = 0;
    let result = quiet_rounds("co-location", rounds, max_steal_pct, |attempt| {
        let round = attempt.round;
        let total = (rounds + attempt.set_aside) * per_round;
        let retry = match attempt.set_aside {
            0 => String::new(),
            n => format!(" ({n} run again for steal)"),
        };
        let bar = |done: usize, what: &str| {
            progress_bar::draw(
                done,
                total,
                started.elapsed(),
                &format!("round {}/{rounds}{retry}: {what}", round + 1),
            );
        };
        bar(done, "offline alone");
        let offline_rate = bench.calibrate_offline()?;
        done += 1;
        // Rotate the order every round: drift over the run hits every scenario alike.
        let mut windows = Vec::new();
        for k in 0..scenarios.len() {
            let scenario = scenarios[(k + round) % scenarios.len()];
            bar(done, scenario.name());
            windows.push(bench.window(scenario, round)?);
            done += 1;
        }
        let steal_pct = windows.iter().map(|w| w.steal_pct).fold(0.0, f64::max);
        Ok(rounds::Measured {
            result: (offline_rate, windows),
            steal_pct,
        })
    });
    progress_bar::finish(done, started.elapsed());
    let cpus = bench.cpus;
    let engine = bench.stage.inputs.engine;
    let notes: Vec<String> = bench.notes.iter().map(|n| n.to_string()).collect();
    let (online_cpu_ms_per_request, online_cpu_ms_per_json_request, heavy_online_rate) = (
        bench.online_cpu_ms_per_request,
        bench.online_cpu_ms_per_json_request,
        bench.heavy_online_rate(),
    );
    bench.finish();
    let rounds_run = result?;
    let discarded = rounds_run
        .set_aside
        .iter()
        .map(|set_aside| {
            let worst = set_aside
                .result
                .1
                .iter()
                .max_by(|a, b| a.steal_pct.total_cmp(&b.steal_pct))
                .expect("a round has windows");
            DiscardedRound {
                round: set_aside.round,
                worst_steal_pct: set_aside.steal_pct,
                worst_scenario: worst.scenario,
            }
        })
        .collect();
    let (offline_per_cpu_s, windows): (Vec<f64>, Vec<Vec<Window>>) =
        rounds_run.kept.into_iter().unzip();
    progress("timing how slowly an idle vCPU wakes, again (wake-probe)");
    let wake_after = probe_wake_latency();
    Ok(Measured {
        rounds: offline_per_cpu_s.len(),
        windows: windows.into_iter().flatten().collect(),
        scenarios,
        offline_per_cpu_s,
        cpus,
        rounds_asked: rounds,
        window_s,
        settle_s,
        lead_s: INFERENCE_LEAD.as_secs_f64(),
        online_cpu_ms_per_request,
        online_cpu_ms_per_json_request,
        heavy_online_rate,
        max_steal_pct,
        discarded,
        notes,
        engine: engine.to_owned(),
        wake_before,
        wake_after,
    })
}

/// About four seconds of `wake-probe`; a probe that cannot run leaves the figure out of the
/// report, not the run.
fn probe_wake_latency() -> Option<WakeLatency> {
    WakeLatency::probe(4, 500)
        .inspect_err(|err| eprintln!("[bench] wake-probe: {err:#}"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offline_job_outlasts_a_window_on_every_cpu_at_the_fastest_rate_seen() {
        let fastest_per_cpu_s = 3_600.0;
        for (cpus, window_s) in [(2, 4.0), (16, 4.0), (64, 10.0)] {
            let window = Duration::from_secs_f64(window_s);
            let needed = (window + INFERENCE_LEAD).as_secs_f64() * cpus as f64 * fastest_per_cpu_s;
            assert!(
                job_lines(cpus, window) as f64 > needed,
                "{cpus} CPUs, {window_s} s: {} lines",
                job_lines(cpus, window)
            );
        }
        // A short window on one CPU still gets the smallest job.
        assert_eq!(job_lines(1, Duration::from_secs(1)), MIN_JOB_LINES);
    }
}
