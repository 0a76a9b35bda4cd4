//! `enforcer replay-pace`: the pace controller (`[policy] harvest_by_pace`) run over a job's
//! recorded step times (`policy::harvest::replay`), without a daemon, root or the job.

use std::{io::Write as _, path::Path};

use anyhow::{Context as _, bail};

use crate::{
    config::{HarvestSettings, policy::PACE_EPSILON_RANGE},
    policy::harvest::{
        Level,
        replay::{
            Beside, PaceReplay, Reporter, StepTrace, replay,
            spread::{MEASURES_S, cycle_spreads},
        },
    },
};

/// What a replay plays: its length, the controller's ε, the cost added to the recording beside
/// offline (and levels' own, as `LEVEL=COST`), and what the job's reports carry, or the GPU
/// work that ends each step where its pace is read from its GPUs (`reporter`).
pub(crate) struct Replayed {
    pub cost: f64,
    pub level_costs: Vec<String>,
    pub seconds: u64,
    pub epsilon: f64,
    pub reporter: Reporter,
}

/// A recording of a job's steps: a JSON array of each step's time, ms, in order (what the
/// benchmarks save as `step_ms`).
fn read_steps(path: &Path) -> anyhow::Result<StepTrace> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let step_ms: Vec<f64> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a JSON array of step times in ms, such as [31.2, 30.8, 512.0]",
            path.display()
        )
    })?;
    StepTrace::from_step_ms(&step_ms).map_err(|why| anyhow::anyhow!("{}: {why}", path.display()))
}

/// `--spread`: how far the cycles of `recording` spread with nothing changing, by the length
/// of their halves, and what a comparison at `epsilon` would need.
pub(crate) fn spread(recording: &Path, epsilon: f64, json: bool) -> anyhow::Result<()> {
    if !(epsilon.is_finite() && PACE_EPSILON_RANGE.contains(&epsilon)) {
        bail!("--epsilon must be from 0.001 to 0.5 (0.01: 1%), not {epsilon}");
    }
    let steps = read_steps(recording)?;
    let spreads = cycle_spreads(&steps, &MEASURES_S);
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(&spreads)?)?;
        return Ok(());
    }
    if spreads.is_empty() {
        bail!(
            "{}: {:.0} s of steps hold fewer than three cycles of the shortest halves",
            recording.display(),
            steps.length_ns() as f64 / 1e9
        );
    }
    writeln!(
        out,
        "{} ({:.0} s of steps), as the pace controller's cycles read it with nothing changing: \
         each half settles 1 s, then measures; a cycle's ratio is one half's pace over the \
         next one's",
        recording.display(),
        steps.length_ns() as f64 / 1e9,
    )?;
    writeln!(
        out,
        "measured  cycles  spread: from means  from counts  to ±ε ({:.1}%): cycles  minutes",
        epsilon * 100.0
    )?;
    for row in &spreads {
        writeln!(
            out,
            "{:>6.1} s  {:>6}  {:>17.2}%  {:>10.2}%  {:>20.0}  {:>7.1}",
            row.measure_s,
            row.cycles,
            row.from_means * 100.0,
            row.from_counts * 100.0,
            row.cycles_for(epsilon),
            row.minutes_for(epsilon),
        )?;
    }
    Ok(())
}

/// A cost as `--cost` takes it: the share of the job's pace it slows, below 0.9.
fn checked_cost(cost: f64, flag: &str) -> anyhow::Result<f64> {
    if !(cost.is_finite() && (0.0..=0.9).contains(&cost)) {
        bail!("{flag} must be from 0 to 0.9 (0.03: the job 3% slower), not {cost}");
    }
    Ok(cost)
}

/// What the replayed job's reports carry (`--counts-only`), or the GPU work that ends each of
/// its steps where its pace is read from its GPUs (`--gpu-busy MS`).
pub(crate) fn reporter(counts_only: bool, gpu_busy_ms: Option<f64>) -> anyhow::Result<Reporter> {
    Ok(match (gpu_busy_ms, counts_only) {
        (Some(ms), _) => {
            if !(ms.is_finite() && ms > 0.0 && ms <= 10_000.0) {
                bail!(
                    "--gpu-busy must be a step's GPU work in ms, above 0 and at most 10000, \
                     not {ms}"
                );
            }
            Reporter::GpuBusy {
                gpu_ns: (ms * 1e6).round().max(1.0) as u64,
            }
        }
        (None, true) => Reporter::CountsOnly,
        (None, false) => Reporter::WithMeans,
    })
}

/// `--level-cost`'s `LEVEL=COST`s, each level named once and above `held`.
fn level_costs(given: &[String]) -> anyhow::Result<Vec<(Level, f64)>> {
    let mut costs: Vec<(Level, f64)> = Vec::new();
    for entry in given {
        let Some((name, cost)) = entry.split_once('=') else {
            bail!("--level-cost {entry:?}: expected LEVEL=COST, such as training_cores=0.004");
        };
        let level = Level::from_name(name.trim())
            .filter(|&level| level != Level::Held)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--level-cost {entry:?}: no level {name:?}; one of quarter, half, \
                     three_quarters, policy, unpaused, training_cores"
                )
            })?;
        let cost: f64 = cost
            .trim()
            .parse()
            .with_context(|| format!("--level-cost {entry:?}: {cost:?} is not a number"))?;
        let cost = checked_cost(cost, &format!("--level-cost {entry:?}: the cost"))?;
        if costs.iter().any(|&(named, _)| named == level) {
            bail!("--level-cost names {} twice", level.name());
        }
        costs.push((level, cost));
    }
    Ok(costs)
}

/// `held` while offline is held back, `beside` (slowed by `cost`) at every other level.
pub(crate) fn run(
    held: &Path,
    beside: &Path,
    replayed: Replayed,
    json: bool,
) -> anyhow::Result<()> {
    let Replayed {
        cost,
        level_costs: given_level_costs,
        seconds,
        epsilon,
        reporter,
    } = replayed;
    if !(epsilon.is_finite() && PACE_EPSILON_RANGE.contains(&epsilon)) {
        bail!("--epsilon must be from 0.001 to 0.5 (0.01: 1%), not {epsilon}");
    }
    let cost = checked_cost(cost, "--cost")?;
    let level_costs = level_costs(&given_level_costs)?;
    if !(60..=86_400).contains(&seconds) {
        bail!("--seconds must be from 60 (a search needs one) to 86400, not {seconds}");
    }
    let held_steps = read_steps(held)?;
    let beside_recorded = read_steps(beside)?;
    let beside_length_s = beside_recorded.length_ns() as f64 / 1e9;
    let beside_steps = level_costs.iter().fold(
        Beside::slowed(beside_recorded, cost),
        |steps, &(level, cost)| steps.with_level_cost(level, cost),
    );
    let replayed = replay(
        &held_steps,
        &beside_steps,
        seconds,
        HarvestSettings { epsilon },
        reporter,
    );
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(&replayed)?)?;
        return Ok(());
    }
    let length_s = |trace: &StepTrace| trace.length_ns() as f64 / 1e9;
    let mut slowed = match cost > 0.0 {
        true => format!(", slowed by {:.1}%", cost * 100.0),
        false => String::new(),
    };
    for (level, cost) in &level_costs {
        slowed.push_str(&format!(", at {} by {:.2}%", level.name(), cost * 100.0));
    }
    let read = match reporter {
        Reporter::GpuBusy { gpu_ns } => format!(
            "; its pace read from its GPUs' busy share, {} ms of GPU work a step",
            gpu_ns as f64 / 1e6
        ),
        Reporter::WithMeans | Reporter::CountsOnly => String::new(),
    };
    writeln!(
        out,
        "replaying {seconds} s of the pace controller (ε = {:.1}%): offline held back from {} \
         ({:.0} s of steps), beside offline from {}{slowed} ({:.0} s), each repeated as \
         needed{read}",
        epsilon * 100.0,
        held.display(),
        length_s(&held_steps),
        beside.display(),
        beside_length_s,
    )?;
    write!(out, "{}", summary(&replayed))?;
    Ok(())
}

/// The replay in words: where it settled and when, its time at each level, and each change.
fn summary(replayed: &PaceReplay) -> String {
    let mut text = match (replayed.first_settled_s, replayed.settled_at) {
        (Some(first), Some(level)) => format!(
            "first settled after {first:.0} s; last settled at `{}`\n",
            level.name()
        ),
        _ => "never settled\n".to_owned(),
    };
    let shares: Vec<String> = replayed
        .time_at_level
        .iter()
        .map(|(level, share)| format!("{level} {:.1}%", share * 100.0))
        .collect();
    text.push_str(&format!("time at each level: {}\n", shares.join(", ")));
    for replayed_change in &replayed.changes {
        let change = serde_json::to_value(&replayed_change.change).unwrap_or_default();
        let mut line = format!(
            "{:>7.1} s  {:<15} {}",
            replayed_change.at_s,
            replayed_change.change.level.name(),
            change["reason"].as_str().unwrap_or("?"),
        );
        if let Some(tried) = change["tried"].as_str() {
            line.push_str(&format!(" {tried}"));
        }
        if let Some(ratio) = change["ratio"].as_object() {
            let field = |name: &str| ratio.get(name).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
            line.push_str(&format!(
                " {:.3} [{:.3}, {:.3}]",
                field("ratio"),
                field("low"),
                field("high")
            ));
            if let Some(cycles) = ratio.get("cycles").and_then(|v| v.as_u64()) {
                line.push_str(&format!(" over {cycles} cycles"));
            }
        }
        if replayed_change.change.settles {
            line.push_str(" (settles)");
        }
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_that_is_no_array_of_step_times_is_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("reamer-steps-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let object = dir.join("object.json");
        std::fs::write(&object, "{\"step_ms\": [1, 2]}").unwrap();
        let err = format!("{:#}", read_steps(&object).unwrap_err());
        assert!(err.contains("object.json: not a JSON array"), "{err}");
        let negative = dir.join("negative.json");
        std::fs::write(&negative, "[30.0, 0]").unwrap();
        let err = format!("{:#}", read_steps(&negative).unwrap_err());
        assert!(err.contains("negative.json: step 2 took 0 ms"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn level_costs_are_read_and_a_bad_one_is_refused_naming_it() {
        let given = |entries: &[&str]| {
            level_costs(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            given(&["training_cores=0.004", " unpaused = 0.001"]).unwrap(),
            vec![(Level::TrainingCores, 0.004), (Level::Unpaused, 0.001)]
        );
        let refused = |entries: &[&str]| format!("{:#}", given(entries).unwrap_err());
        assert!(refused(&["training_cores"]).contains("expected LEVEL=COST"));
        assert!(refused(&["held=0.1"]).contains("no level \"held\""));
        assert!(refused(&["top=0.1"]).contains("no level \"top\""));
        assert!(refused(&["policy=x"]).contains("\"x\" is not a number"));
        assert!(refused(&["policy=0.95"]).contains("must be from 0 to 0.9"));
        assert!(refused(&["policy=0.1", "policy=0.2"]).contains("names policy twice"));
    }

    #[test]
    fn the_summary_gives_where_it_settled_each_levels_time_and_each_change() {
        let steps: Vec<f64> = (0..2400)
            .map(|i| if i == 0 { 25.0 } else { 50.0 })
            .collect();
        let job = StepTrace::from_step_ms(&steps).unwrap();
        let text = summary(&replay(
            &job,
            &Beside::everywhere(job.clone()),
            120,
            HarvestSettings { epsilon: 0.01 },
            Reporter::WithMeans,
        ));
        assert!(text.starts_with("first settled after "), "{text}");
        assert!(text.contains("last settled at `training_cores`"), "{text}");
        assert!(text.contains("time at each level: held "), "{text}");
        assert!(
            text.contains("training_cores  kept training_cores 1.000"),
            "{text}"
        );
        assert!(text.contains("] over 3 cycles (settles)"), "{text}");
    }
}
