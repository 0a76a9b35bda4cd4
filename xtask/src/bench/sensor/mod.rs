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

mod report;

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Output, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};
use enforcer_common::protocol::Snapshot;
use reamer_tests::{harness::Daemon, measure::proc_stats::node_jiffies};

pub use self::report::markdown;
use self::report::{Loss, ProgramCost, SensorBench, Spread, WorkloadResult};
use crate::{
    bench::common::{
        cpus::machine_cpus,
        rounds::{self, quiet_rounds},
        stats::median,
    },
    cargo::release_bin,
};

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
    let hackbench_cpu_ns = started.elapsed().as_nanos() as f64 * machine_cpus() as f64;
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

/// `workload` once beside `arm`: (operations/s, % of the CPU the host stole meanwhile).
fn run_arm(
    arm: Arm,
    enforcer: &std::path::Path,
    workload: &Workload,
) -> anyhow::Result<(f64, f64)> {
    match arm {
        Arm::Without => with_steal(|| run_alone(workload)),
        Arm::Floor => {
            let _floor = NoOpFloor::attach(enforcer)?;
            with_steal(|| run_alone(workload))
        }
        Arm::Sensor => {
            let daemon = Daemon::start_bin(enforcer, INSTANCE, "");
            let result = with_steal(|| run_as_training(&daemon, workload));
            daemon.stop();
            result
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
    // Per workload: per round kept, operations/s in each arm (indexed by `Arm as usize`),
    // and the rounds run again for steal.
    let mut samples = Vec::new();
    for workload in &workloads {
        let rounds = quiet_rounds(workload.name, rounds, max_steal_pct, |attempt| {
            progress(&format!(
                "{}, round {}/{rounds}: without programs, with the sensor, with no-ops (order \
                 rotates; {} run again for steal)",
                workload.name,
                attempt.round + 1,
                attempt.set_aside
            ));
            let mut arms = [0.0; 3];
            let mut steal_pct: f64 = 0.0;
            for step in 0..ARMS.len() {
                let arm = ARMS[(attempt.made + step) % ARMS.len()];
                let (ops, steal) = run_arm(arm, &enforcer, workload)?;
                arms[arm as usize] = ops;
                steal_pct = steal_pct.max(steal);
            }
            Ok(rounds::Measured {
                result: arms,
                steal_pct,
            })
        })?;
        samples.push((rounds.kept, rounds.set_aside.len()));
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
        .map(|(workload, (kept, rounds_run_again))| {
            let arm = |arm: Arm| {
                kept.iter()
                    .map(|arms| arms[arm as usize])
                    .collect::<Vec<_>>()
            };
            let (without, floor, with) = (arm(Arm::Without), arm(Arm::Floor), arm(Arm::Sensor));
            WorkloadResult {
                name: workload.name.to_owned(),
                loss: Loss::paired(&with, &without),
                floor_loss: Loss::paired(&floor, &without),
                above_floor: Loss::paired(&with, &floor),
                rounds_run_again,
                without,
                floor,
                with,
            }
        })
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
    let rounds = quiet_rounds("cost rounds", COST_ROUNDS, max_steal_pct, |attempt| {
        progress(&format!(
            "cost round {}/{COST_ROUNDS}: bpf_stats on, with the calibration floor alongside \
             ({} run again for steal)",
            attempt.round + 1,
            attempt.set_aside
        ));
        let (result, steal_pct) = with_steal(|| cost_round(workload, hackbench, seconds))?;
        Ok(rounds::Measured { result, steal_pct })
    })?;
    Ok((rounds.kept, rounds.set_aside.len()))
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
