//! The sensor benchmark's figures, its targets, and its section of docs/benchmarks.md.

use serde::Serialize;

use crate::bench::common::{
    stats::{bootstrap_median_ci, median, min_max},
    verdict,
};

/// A loss over the rounds: per round `1 − arm ÷ reference` (%), its median, the median's 95%
/// bootstrap interval, and the range.
#[derive(Debug, Serialize)]
pub struct Loss {
    pub median_pct: f64,
    pub ci_pct: (f64, f64),
    pub range_pct: (f64, f64),
}

impl Loss {
    pub(super) fn paired(arm: &[f64], reference: &[f64]) -> Self {
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
    pub(super) fn of(values: &[f64]) -> Self {
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
        verdict::met(cost <= COST_TARGET_NS)
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
    if loss.ci_pct.1 > LOSS_TARGET_PCT && floor.ci_pct.0 > LOSS_TARGET_PCT {
        format!(
            "**out of reach** of any program on these tracepoints here: a no-op on each loses \
             {:.2}% [{:.2}, {:.2}] by itself",
            floor.median_pct, floor.ci_pct.0, floor.ci_pct.1
        )
    } else {
        verdict::interval_at_most(loss.ci_pct.0, loss.ci_pct.1, LOSS_TARGET_PCT)
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
