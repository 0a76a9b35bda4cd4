//! The sensor's cost, in one run:
//! - nanoseconds per program run, from the kernel's own accounting (`kernel.bpf_stats_enabled`
//!   run_time_ns / run_cnt), next to this machine's floor for any program on sched_switch
//!   (`enforcer calibrate`, run alongside);
//! - the throughput two context-switch-heavy workloads lose with the programs attached:
//!   a pinned pipe ping-pong (nothing but switches: the worst case) and hackbench
//!   (`perf bench sched messaging`: 80 tasks over sockets). Each runs as a registered training
//!   job, so every event takes the sensor's full path. Every round runs three arms in an order
//!   rotated from round to round: without programs, with the sensor, and with a no-op program
//!   on each of the sensor's tracepoints (`enforcer calibrate --floor`), which splits the loss
//!   into what any program there costs and what the sensor's work adds;
//! - the sensor's time as a share of the CPU while each workload runs, from the same
//!   accounting: what the throughput loss would be if the programs' own run time were all it
//!   cost, without the throughput measurement's noise;
//! - the full path's cost again with `clock = "monotonic"`, the configuration that reads
//!   `bpf_ktime_get_ns` instead of the run queue's clock: what the default saves.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Output, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};
use enforcer_common::protocol::Snapshot;
use reamer_tests::{
    harness::{Daemon, online_cpu_count},
    measure::proc_stats::node_jiffies,
};
use serde::Serialize;

use super::stats::{bootstrap_median_ci, median, min_max};
use crate::cargo::release_bin;

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
const INSTANCE: &str = "bench-sensor";

/// A workload: its name, its command, and how to read "operations per second" from it.
struct Workload {
    name: &'static str,
    program: String,
    args: Vec<String>,
    parse: fn(&str) -> anyhow::Result<f64>,
}

fn parse_switch_bench(stdout: &str) -> anyhow::Result<f64> {
    let report: serde_json::Value =
        serde_json::from_str(stdout.trim()).context("switch-bench output")?;
    report["round_trips_per_s"]
        .as_f64()
        .context("round_trips_per_s")
}

/// `perf bench sched messaging` prints "Total time: 1.234 [sec]" for a fixed amount of work.
fn parse_hackbench(stdout: &str) -> anyhow::Result<f64> {
    let seconds: f64 = stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Total time:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .context("no `Total time:` in perf bench output")?;
    Ok(1.0 / seconds)
}

/// Indexes into `workloads()`.
const PING_PONG: usize = 0;
const HACKBENCH: usize = 1;

fn workloads(seconds: f64, hackbench_loops: u32) -> Vec<Workload> {
    vec![
        Workload {
            name: "pipe ping-pong, 2 threads pinned to one CPU (round trips/s)",
            program: release_bin("switch-bench").display().to_string(),
            args: vec!["--seconds".into(), seconds.to_string()],
            parse: parse_switch_bench,
        },
        Workload {
            name: "hackbench: perf bench sched messaging -g 2 (runs/s)",
            program: "perf".into(),
            args: [
                "bench",
                "sched",
                "messaging",
                "-g",
                "2",
                "-l",
                &hackbench_loops.to_string(),
            ]
            .map(String::from)
            .to_vec(),
            parse: parse_hackbench,
        },
    ]
}

fn checked(output: Output, what: &str) -> anyhow::Result<String> {
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn run_alone(workload: &Workload) -> anyhow::Result<f64> {
    let output = Command::new(&workload.program)
        .args(&workload.args)
        .output()
        .with_context(|| format!("running {}", workload.program))?;
    (workload.parse)(&checked(output, workload.name)?)
}

fn run_as_training(daemon: &Daemon, workload: &Workload) -> anyhow::Result<f64> {
    let args: Vec<&str> = workload.args.iter().map(String::as_str).collect();
    let child = daemon.launch("--training", "bench", &workload.program, &args);
    let output = child
        .wait_with_output()
        .context("workload under enforcer launch")?;
    (workload.parse)(&checked(output, workload.name)?)
}

/// A loss over the rounds: per round `1 − arm ÷ reference` (%), its median, the median's 95%
/// bootstrap interval, and the range.
#[derive(Debug, Serialize)]
pub struct Loss {
    pub median_pct: f64,
    pub ci_pct: (f64, f64),
    pub range_pct: (f64, f64),
}

impl Loss {
    fn paired(arm: &[f64], reference: &[f64]) -> Self {
        let losses: Vec<f64> = arm
            .iter()
            .zip(reference)
            .map(|(a, r)| (1.0 - a / r) * 100.0)
            .collect();
        Self {
            median_pct: median(&losses),
            ci_pct: bootstrap_median_ci(&losses, 42),
            range_pct: min_max(&losses),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct WorkloadResult {
    pub name: String,
    /// Operations per second in each kept round, per arm.
    pub without: Vec<f64>,
    pub floor: Vec<f64>,
    pub with: Vec<f64>,
    /// With the sensor against without programs: the figure the target is about.
    pub loss: Loss,
    /// With a no-op on each of the sensor's tracepoints against without programs: what any
    /// program there costs this workload.
    pub floor_loss: Loss,
    /// With the sensor against the no-op floor: what the sensor's work adds to the floor.
    pub above_floor: Loss,
    /// Rounds run again because the host stole more than `max_steal_pct` during an arm.
    pub rounds_run_again: usize,
}

#[derive(Debug, Serialize)]
pub struct ProgramCost {
    pub name: String,
    pub runs: u64,
    pub ns_per_run: f64,
}

/// A cost figure over the cost rounds: its median and range.
#[derive(Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub range: (f64, f64),
}

impl Spread {
    fn of(values: &[f64]) -> Self {
        Self {
            median: median(values),
            range: min_max(values),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct SensorBench {
    pub rounds: usize,
    /// A pair (or a cost round) is kept only if the host stole at most this share of the CPU
    /// during it.
    pub max_steal_pct: f64,
    pub workloads: Vec<WorkloadResult>,
    /// Cost rounds kept, and run again for steal.
    pub cost_rounds: usize,
    pub cost_rounds_run_again: usize,
    /// Sensor programs' average over all their runs while the ping-pong runs as training.
    pub sensor_ns_per_run: Spread,
    /// Per program: runs summed over the cost rounds, ns/run their median.
    pub sensor_programs: Vec<ProgramCost>,
    /// The same with the ping-pong unregistered: the cost every other thread pays.
    pub unclassified_ns_per_run: Spread,
    pub unclassified_programs: Vec<ProgramCost>,
    /// The full path again under `[sensor] clock = "monotonic"`.
    pub monotonic_ns_per_run: Spread,
    pub monotonic_programs: Vec<ProgramCost>,
    /// The full path less the no-op floor of the same round: the sensor's own work, free of
    /// the accounting's clock reads and of how fast this VM runs in that round.
    pub full_path_above_floor_ns: Spread,
    /// Sensor time as a share of the ping-pong CPU's time (runs/s × ns/run): the loss the
    /// throughput measurement should find, without its noise.
    pub cpu_share_pct: Spread,
    /// Sensor time as a share of the machine's CPU time while hackbench ran as training:
    /// all programs' run time over (wall time × CPUs).
    pub hackbench_cpu_share_pct: Spread,
    /// The floor measured beside it: a no-op and a clock-read program on sched_switch
    /// (ns/run: median over the rounds).
    pub floor: Vec<ProgramCost>,
    pub floor_ns_per_run: Vec<Spread>,
}

/// Restores the sysctl however the measurement ends.
struct BpfStatsGuard(String);

impl BpfStatsGuard {
    fn enable() -> anyhow::Result<Self> {
        let before = std::fs::read_to_string(BPF_STATS_SYSCTL)
            .context("reading kernel.bpf_stats_enabled")?;
        std::fs::write(BPF_STATS_SYSCTL, "1").context("enabling kernel.bpf_stats_enabled")?;
        Ok(Self(before.trim().to_owned()))
    }
}

impl Drop for BpfStatsGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS_SYSCTL, &self.0);
    }
}

/// (program, run count, run time ns) from a daemon snapshot.
fn program_totals(snapshot: &Snapshot) -> Vec<(String, u64, u64)> {
    snapshot
        .programs
        .iter()
        .map(|p| (p.name.clone(), p.run_count, p.run_time_ns))
        .collect()
}

/// Average cost per run, and per program, between two readings of the program totals.
fn cost_between(
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
) -> (f64, Vec<ProgramCost>) {
    let mut programs = Vec::new();
    let (mut runs, mut time) = (0, 0);
    for (name, count, ns) in after {
        let (_, count_before, ns_before) = before
            .iter()
            .find(|(n, ..)| n == name)
            .cloned()
            .unwrap_or_default();
        let (d_runs, d_ns) = (count - count_before, ns - ns_before);
        runs += d_runs;
        time += d_ns;
        let ns_per_run = if d_runs > 0 {
            d_ns as f64 / d_runs as f64
        } else {
            0.0
        };
        programs.push(ProgramCost {
            name: name.clone(),
            runs: d_runs,
            ns_per_run,
        });
    }
    programs.sort_by(|a, b| a.name.cmp(&b.name));
    (
        if runs > 0 {
            time as f64 / runs as f64
        } else {
            0.0
        },
        programs,
    )
}

struct CostRound {
    classified: (f64, Vec<ProgramCost>),
    unclassified: (f64, Vec<ProgramCost>),
    monotonic: (f64, Vec<ProgramCost>),
    floor: Vec<ProgramCost>,
    /// Sensor runs per second during the classified ping-pong.
    runs_per_s: f64,
    /// Sensor time over the machine's CPU time while hackbench ran as training, %.
    hackbench_share_pct: f64,
}

/// Sensor cost while the ping-pong runs as a training job (the full path), then unregistered
/// (the path every other thread of the node takes), with the floor measured alongside; the
/// sensor's share of the CPU while hackbench runs as training; then the full path under a
/// daemon configured for the monotonic clock.
fn cost_round(
    workload: &Workload,
    hackbench: &Workload,
    seconds: f64,
) -> anyhow::Result<CostRound> {
    let enforcer = release_bin("enforcer");
    let _guard = BpfStatsGuard::enable()?;
    let daemon = Daemon::start_bin(&enforcer, INSTANCE, "");
    let start = program_totals(&daemon.snapshot());
    let calibrate = Command::new(&enforcer)
        .args(["calibrate", "--seconds", &(seconds * 0.8).to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting enforcer calibrate")?;
    run_as_training(&daemon, workload)?;
    let calibration = checked(calibrate.wait_with_output()?, "enforcer calibrate")?;
    let middle = program_totals(&daemon.snapshot());
    run_alone(workload)?;
    let end = program_totals(&daemon.snapshot());
    let started = Instant::now();
    run_as_training(&daemon, hackbench)?;
    let hackbench_cpu_ns = started.elapsed().as_nanos() as f64 * online_cpu_count() as f64;
    let hackbench_end = program_totals(&daemon.snapshot());
    daemon.stop();

    let monotonic = Daemon::start_bin(&enforcer, INSTANCE, "[sensor]\nclock = \"monotonic\"\n");
    let monotonic_start = program_totals(&monotonic.snapshot());
    run_as_training(&monotonic, workload)?;
    let monotonic_end = program_totals(&monotonic.snapshot());
    monotonic.stop();

    let classified = cost_between(&start, &middle);
    let runs: u64 = classified.1.iter().map(|p| p.runs).sum();
    if runs == 0 {
        bail!("bpf_stats recorded no sensor runs: is kernel.bpf_stats_enabled writable here?");
    }
    let calibration: serde_json::Value =
        serde_json::from_str(calibration.trim()).context("calibrate output")?;
    let floor = calibration["programs"]
        .as_array()
        .context("calibrate programs")?
        .iter()
        .map(|p| ProgramCost {
            name: p["name"].as_str().unwrap_or("?").to_owned(),
            runs: p["run_count"].as_u64().unwrap_or(0),
            ns_per_run: p["ns_per_run"].as_f64().unwrap_or(0.0),
        })
        .collect();
    let (hackbench_ns_per_run, hackbench_programs) = cost_between(&end, &hackbench_end);
    let hackbench_runs: u64 = hackbench_programs.iter().map(|p| p.runs).sum();
    Ok(CostRound {
        hackbench_share_pct: hackbench_ns_per_run * hackbench_runs as f64 / hackbench_cpu_ns
            * 100.0,
        classified,
        unclassified: cost_between(&middle, &end),
        monotonic: cost_between(&monotonic_start, &monotonic_end),
        floor,
        runs_per_s: runs as f64 / seconds,
    })
}

/// `f`'s result and the share of the machine's CPU time the hypervisor stole meanwhile, %.
fn with_steal<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, f64)> {
    let before = node_jiffies()?;
    let value = f()?;
    Ok((value, node_jiffies()?.steal_pct_since(&before)))
}

/// Attempts per round asked for, at most: a host that stays busy ends the run with fewer.
const ATTEMPTS_PER_ROUND: usize = 3;

/// What a throughput arm runs its workloads beside; its value is its index in a round's
/// results and in each workload's samples.
#[derive(Clone, Copy, Debug)]
enum Arm {
    /// No program attached.
    Without = 0,
    /// A no-op program on each of the sensor's tracepoints.
    Floor = 1,
    /// The sensor, the workload registered as training.
    Sensor = 2,
}

/// The arms in the order of a round's first rotation.
const ARMS: [Arm; 3] = [Arm::Without, Arm::Floor, Arm::Sensor];

/// `enforcer calibrate --floor`, attached while this lives; killing it detaches the no-ops.
struct NoOpFloor(Child);

impl NoOpFloor {
    fn attach(enforcer: &std::path::Path) -> anyhow::Result<Self> {
        let mut child = Command::new(enforcer)
            .args(["calibrate", "--floor", "--seconds", "3600"])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting enforcer calibrate --floor")?;
        let stdout = child.stdout.take().context("calibrate --floor stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("reading calibrate --floor")?;
        let floor = Self(child);
        if !line.contains("\"attached\"") {
            bail!(
                "enforcer calibrate --floor ended before it attached its no-ops (its error is above)"
            );
        }
        Ok(floor)
    }
}

impl Drop for NoOpFloor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Each workload once beside `arm`: (operations/s, % of the CPU the host stole meanwhile).
fn run_arm(
    arm: Arm,
    enforcer: &std::path::Path,
    workloads: &[Workload],
) -> anyhow::Result<Vec<(f64, f64)>> {
    match arm {
        Arm::Without => workloads
            .iter()
            .map(|w| with_steal(|| run_alone(w)))
            .collect(),
        Arm::Floor => {
            let _floor = NoOpFloor::attach(enforcer)?;
            workloads
                .iter()
                .map(|w| with_steal(|| run_alone(w)))
                .collect()
        }
        Arm::Sensor => {
            let daemon = Daemon::start_bin(enforcer, INSTANCE, "");
            let results = workloads
                .iter()
                .map(|w| with_steal(|| run_as_training(&daemon, w)))
                .collect();
            daemon.stop();
            results
        }
    }
}

/// `rounds` rounds per workload, each running the three arms in an order rotated from one
/// round to the next. A round is kept only if the host stole at most `max_steal_pct` of the
/// CPU during each of its arms: a one-second arm that loses a tenth of its CPU to another
/// guest moves the round's loss by as much, ten times the target.
pub fn run(
    rounds: usize,
    seconds: f64,
    hackbench_loops: u32,
    max_steal_pct: f64,
    progress: &dyn Fn(&str),
) -> anyhow::Result<SensorBench> {
    let enforcer = release_bin("enforcer");
    let workloads = workloads(seconds, hackbench_loops);
    // Per workload, per arm (indexed by `Arm as usize`): operations/s of the rounds kept.
    let mut samples: Vec<[Vec<f64>; 3]> = workloads.iter().map(|_| Default::default()).collect();
    let mut run_again = vec![0; workloads.len()];
    for attempt in 0..rounds * ATTEMPTS_PER_ROUND {
        let kept = samples
            .iter()
            .map(|arms| arms[Arm::Without as usize].len())
            .min();
        if kept >= Some(rounds) {
            break;
        }
        progress(&format!(
            "round {}/{rounds}: without programs, with the sensor, with no-ops (order rotates; \
             {} run again for steal)",
            kept.unwrap_or(0) + 1,
            run_again.iter().sum::<usize>()
        ));
        let mut results: [Vec<(f64, f64)>; 3] = Default::default();
        for step in 0..ARMS.len() {
            let arm = ARMS[(attempt + step) % ARMS.len()];
            results[arm as usize] = run_arm(arm, &enforcer, &workloads)?;
        }
        for (w, (arms, again)) in samples.iter_mut().zip(run_again.iter_mut()).enumerate() {
            if arms[Arm::Without as usize].len() == rounds {
                continue;
            }
            if results.iter().any(|arm| arm[w].1 > max_steal_pct) {
                *again += 1;
                continue;
            }
            for (kept, arm) in arms.iter_mut().zip(&results) {
                kept.push(arm[w].0);
            }
        }
    }
    if let Some(((workload, _), again)) = workloads
        .iter()
        .zip(&samples)
        .zip(&run_again)
        .find(|((_, arms), _)| arms[Arm::Without as usize].is_empty())
    {
        bail!(
            "{}: the host stole more than {max_steal_pct}% of the CPU during every one of {again} \
             rounds: the losses would measure the other guests. Run again when the host is \
             quieter, or allow more with --max-steal",
            workload.name
        );
    }
    let (costs, cost_rounds_run_again) = cost_rounds(
        &workloads[PING_PONG],
        &workloads[HACKBENCH],
        seconds,
        max_steal_pct,
        progress,
    )?;

    let results = workloads
        .iter()
        .zip(samples)
        .zip(run_again)
        .map(
            |((workload, [without, floor, with]), rounds_run_again)| WorkloadResult {
                name: workload.name.to_owned(),
                loss: Loss::paired(&with, &without),
                floor_loss: Loss::paired(&floor, &without),
                above_floor: Loss::paired(&with, &floor),
                rounds_run_again,
                without,
                floor,
                with,
            },
        )
        .collect();
    let spread = |figure: &dyn Fn(&CostRound) -> f64| {
        Spread::of(&costs.iter().map(figure).collect::<Vec<_>>())
    };
    let programs = |arm: &dyn Fn(&CostRound) -> &[ProgramCost]| {
        merge_programs(&costs.iter().map(arm).collect::<Vec<_>>())
    };
    let floor = programs(&|c| &c.floor);
    let floor_ns_per_run = floor
        .iter()
        .map(|f| spread(&|c| program_ns(&c.floor, &f.name)))
        .collect();
    Ok(SensorBench {
        rounds,
        max_steal_pct,
        workloads: results,
        cost_rounds: costs.len(),
        cost_rounds_run_again,
        sensor_ns_per_run: spread(&|c| c.classified.0),
        sensor_programs: programs(&|c| &c.classified.1),
        unclassified_ns_per_run: spread(&|c| c.unclassified.0),
        unclassified_programs: programs(&|c| &c.unclassified.1),
        monotonic_ns_per_run: spread(&|c| c.monotonic.0),
        monotonic_programs: programs(&|c| &c.monotonic.1),
        full_path_above_floor_ns: spread(&|c| {
            c.classified.0 - program_ns(&c.floor, CALIBRATION_NOOP)
        }),
        cpu_share_pct: spread(&|c| c.runs_per_s * c.classified.0 / 1e9 * 100.0),
        hackbench_cpu_share_pct: spread(&|c| c.hackbench_share_pct),
        floor,
        floor_ns_per_run,
    })
}

/// The calibration program that does nothing: the floor the sensor's own work sits on.
const CALIBRATION_NOOP: &str = "reamer_cal_noop";

/// Cost rounds kept, at most this many attempts each.
const COST_ROUNDS: usize = 7;

/// `COST_ROUNDS` cost rounds, each kept only if the host stole at most `max_steal_pct`
/// during it. One round is not enough here: from one daemon start to the next the same
/// program's ns/run moved by a third or more in development runs, floor included, so the
/// figures are medians over the rounds, with their ranges.
fn cost_rounds(
    workload: &Workload,
    hackbench: &Workload,
    seconds: f64,
    max_steal_pct: f64,
    progress: &dyn Fn(&str),
) -> anyhow::Result<(Vec<CostRound>, usize)> {
    let mut kept = Vec::new();
    let mut run_again = 0;
    for _ in 0..COST_ROUNDS * ATTEMPTS_PER_ROUND {
        if kept.len() == COST_ROUNDS {
            break;
        }
        progress(&format!(
            "cost round {}/{COST_ROUNDS}: bpf_stats on, with the calibration floor alongside \
             ({run_again} run again for steal)",
            kept.len() + 1
        ));
        let (round, steal) = with_steal(|| cost_round(workload, hackbench, seconds))?;
        if steal > max_steal_pct {
            run_again += 1;
            continue;
        }
        kept.push(round);
    }
    if kept.is_empty() {
        bail!(
            "the host stole more than {max_steal_pct}% of the CPU during every one of \
             {run_again} cost rounds. Run again when the host is quieter, or allow more with \
             --max-steal"
        );
    }
    Ok((kept, run_again))
}

/// ns/run of `name` in `programs`, 0 if it did not run.
fn program_ns(programs: &[ProgramCost], name: &str) -> f64 {
    programs
        .iter()
        .find(|p| p.name == name)
        .map_or(0.0, |p| p.ns_per_run)
}

/// One row per program over the rounds: runs summed, ns/run the median of the rounds where
/// it ran.
fn merge_programs(rounds: &[&[ProgramCost]]) -> Vec<ProgramCost> {
    let mut names: Vec<&str> = rounds
        .iter()
        .flat_map(|r| r.iter().map(|p| p.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let mine: Vec<&ProgramCost> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|p| p.name == name))
                .collect();
            let ns: Vec<f64> = mine
                .iter()
                .filter(|p| p.runs > 0)
                .map(|p| p.ns_per_run)
                .collect();
            ProgramCost {
                name: name.to_owned(),
                runs: mine.iter().map(|p| p.runs).sum(),
                ns_per_run: if ns.is_empty() { 0.0 } else { median(&ns) },
            }
        })
        .collect()
}

/// The report section for docs/benchmarks.md.
pub fn markdown(bench: &SensorBench, command: &str, machine: &str) -> String {
    let mut out = format!("Command: `{command}`\n\nMachine: {machine}\n\n");
    out.push_str("| figure | value | target |\n|---|---|---|\n");
    let rounds = bench.cost_rounds;
    let cost = |figure: &str, spread: &Spread, unit: &str, target: &str| {
        format!(
            "| {figure} (median of {rounds} cost rounds; range) | {:.1}{unit} ({:.1} to {:.1}) | {target} |\n",
            spread.median, spread.range.0, spread.range.1
        )
    };
    out.push_str(&cost(
        "sensor cost per program run, ping-pong registered as training: every event on the full path (bpf_stats run_time_ns / run_cnt)",
        &bench.sensor_ns_per_run,
        " ns",
        "≤ 100 ns",
    ));
    out.push_str(&cost(
        "sensor cost per program run, ping-pong unregistered: the path of every other thread",
        &bench.unclassified_ns_per_run,
        " ns",
        "≤ 100 ns",
    ));
    out.push_str(&cost(
        "the full path less the no-op floor of the same round: the sensor's own work",
        &bench.full_path_above_floor_ns,
        " ns",
        "",
    ));
    out.push_str(&cost(
        "the full path again with `[sensor] clock = \"monotonic\"` (a clock read instead of the run queue's clock)",
        &bench.monotonic_ns_per_run,
        " ns",
        "",
    ));
    for (floor, spread) in bench.floor.iter().zip(&bench.floor_ns_per_run) {
        out.push_str(&cost(
            &format!(
                "floor on this machine, measured alongside: `{}` on sched_switch",
                floor.name
            ),
            spread,
            " ns",
            "",
        ));
    }
    out.push_str(&cost(
        "sensor time as a share of the ping-pong's CPU (runs/s × ns/run, from bpf_stats)",
        &bench.cpu_share_pct,
        "%",
        "",
    ));
    out.push_str(&cost(
        "sensor time as a share of the machine's CPU while hackbench ran as training (all programs' run_time_ns ÷ (wall time × CPUs), from bpf_stats)",
        &bench.hackbench_cpu_share_pct,
        "%",
        "",
    ));
    for w in &bench.workloads {
        let rounds = w.without.len();
        let loss = |figure: &str, loss: &Loss, target: &str| {
            format!(
                "| {figure}: {} (median of {rounds} rounds; 95% CI; range) | {:.2}% ({:.2}% to {:.2}%; {:.2}% to {:.2}%) | {target} |\n",
                w.name,
                loss.median_pct,
                loss.ci_pct.0,
                loss.ci_pct.1,
                loss.range_pct.0,
                loss.range_pct.1
            )
        };
        out.push_str(&loss("throughput lost to the sensor", &w.loss, "≤ 1%"));
        out.push_str(&loss(
            "of which the floor: lost to a no-op program on each of the sensor's tracepoints",
            &w.floor_loss,
            "",
        ));
        out.push_str(&loss(
            "the sensor against that floor (1 − with the sensor ÷ with the no-ops)",
            &w.above_floor,
            "",
        ));
    }
    let run_again: Vec<String> = bench
        .workloads
        .iter()
        .map(|w| format!("{} for {}", w.rounds_run_again, w.name))
        .collect();
    out.push_str(&format!(
        "\nRounds where the host stole more than {}% of the CPU during any of their three arms \
         were run again: {}. Cost rounds run again for the same reason: {}.\n",
        bench.max_steal_pct,
        run_again.join(", "),
        bench.cost_rounds_run_again
    ));
    out.push_str(
        "\n| workload | without programs (median) | no-op floor (median) | with the sensor (median) |\n|---|---|---|---|\n",
    );
    for w in &bench.workloads {
        out.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} |\n",
            w.name,
            median(&w.without),
            median(&w.floor),
            median(&w.with)
        ));
    }
    out.push_str(
        "\nPer program, runs summed over the cost rounds and ns/run their median:\n\n| sensor program | runs, ping-pong as training | ns/run | runs, unregistered | ns/run | runs, as training, monotonic clock | ns/run |\n|---|---|---|---|---|---|---|\n",
    );
    let find = |programs: &[ProgramCost], name: &str| {
        let found = programs.iter().find(|p| p.name == name);
        (
            found.map_or(0, |p| p.runs),
            found.map_or(0.0, |p| p.ns_per_run),
        )
    };
    for p in &bench.sensor_programs {
        let (other_runs, other_ns) = find(&bench.unclassified_programs, &p.name);
        let (monotonic_runs, monotonic_ns) = find(&bench.monotonic_programs, &p.name);
        out.push_str(&format!(
            "| {} | {} | {:.0} | {other_runs} | {other_ns:.0} | {monotonic_runs} | {monotonic_ns:.0} |\n",
            p.name, p.runs, p.ns_per_run,
        ));
    }
    out.push_str(&targets(bench));
    out
}

/// The per-event cost target, at most this many ns per program run on the full path.
const COST_TARGET_NS: f64 = 100.0;
/// The throughput target: at most this loss, %.
const LOSS_TARGET_PCT: f64 = 1.0;

/// The sensor against its two targets (docs/benchmarks.md, "Sensor cost"), one row per figure.
fn targets(bench: &SensorBench) -> String {
    let cost = bench.sensor_ns_per_run.median;
    let mut out = format!(
        "\nThe sensor against its targets:\n\n| target | figure | |\n|---|---|---|\n\
         | ≤ {COST_TARGET_NS:.0} ns per event, full path (median of the cost rounds) | {cost:.1} ns | {} |\n",
        if cost <= COST_TARGET_NS {
            "met"
        } else {
            "**missed**"
        }
    );
    for w in &bench.workloads {
        out.push_str(&format!(
            "| ≤ {LOSS_TARGET_PCT:.0}% throughput lost: {} | {:.2}% [{:.2}, {:.2}] | {} |\n",
            w.name,
            w.loss.median_pct,
            w.loss.ci_pct.0,
            w.loss.ci_pct.1,
            throughput_verdict(&w.loss, &w.floor_loss)
        ));
    }
    out
}

/// Met only when the whole interval of the loss is within the target, missed when all of it
/// is past; where a no-op on the same tracepoints is past the target by itself, no sensor
/// there can meet it on this machine, and the verdict says so.
fn throughput_verdict(loss: &Loss, floor: &Loss) -> String {
    if loss.ci_pct.1 <= LOSS_TARGET_PCT {
        "met".to_owned()
    } else if floor.ci_pct.0 > LOSS_TARGET_PCT {
        format!(
            "**out of reach** of any program on these tracepoints here: a no-op on each loses \
             {:.2}% [{:.2}, {:.2}] by itself",
            floor.median_pct, floor.ci_pct.0, floor.ci_pct.1
        )
    } else if loss.ci_pct.0 > LOSS_TARGET_PCT {
        "**missed**".to_owned()
    } else {
        "**not resolved**: the interval spans 1%".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(median_pct: f64, low: f64, high: f64) -> Loss {
        Loss {
            median_pct,
            ci_pct: (low, high),
            range_pct: (low - 1.0, high + 1.0),
        }
    }

    #[test]
    fn a_loss_is_met_only_when_its_whole_interval_is_within_the_target() {
        let floor = loss(0.2, -0.5, 0.9);
        assert_eq!(throughput_verdict(&loss(0.4, -0.3, 0.9), &floor), "met");
        assert!(throughput_verdict(&loss(0.4, -0.3, 1.2), &floor).contains("not resolved"));
        assert_eq!(
            throughput_verdict(&loss(2.0, 1.5, 2.5), &floor),
            "**missed**"
        );
    }

    #[test]
    fn a_loss_whose_no_op_floor_is_past_the_target_is_out_of_reach_whatever_its_interval() {
        let floor = loss(4.9, 4.3, 5.1);
        let verdict = throughput_verdict(&loss(8.5, 8.1, 9.0), &floor);
        assert!(verdict.contains("out of reach"), "{verdict}");
        assert!(verdict.contains("4.90% [4.30, 5.10]"), "{verdict}");
        // A floor whose interval reaches the target does not excuse a miss.
        assert_eq!(
            throughput_verdict(&loss(8.5, 8.1, 9.0), &loss(1.5, 0.8, 2.0)),
            "**missed**"
        );
    }
}
