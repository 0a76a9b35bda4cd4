//! `enforcer status`: training jobs, pools, the CPUs each holds now, and recent decisions.

mod decisions;

use std::path::Path;

use enforcer_common::protocol::{BesideJob, HarvestStatus, Snapshot};

use super::client::Client;

/// The snapshot as a human-readable report.
pub(crate) fn render(snapshot: &Snapshot) -> String {
    let mut out = format!("instance {}\n", snapshot.instance);
    let Some(enforcement) = &snapshot.enforcement else {
        return out + "(no enforcement state)\n";
    };
    out.push_str(&format!(
        "enforcing: {} | training demand estimate {:.2} CPUs | training holds CPUs [{}]\n",
        if enforcement.enforcing {
            "yes"
        } else {
            "no (policy.enforce = false)"
        },
        enforcement.demand_estimate_cpus,
        enforcement.training_cpus
    ));
    if let Some(harvest) = &enforcement.harvest {
        out.push_str(&format!(
            "offline's share by training's pace: {}\n",
            harvest_in_words(harvest)
        ));
    }
    out.push_str("\ntraining jobs:\n");
    if snapshot.jobs.is_empty() {
        out.push_str("  (none)\n");
    }
    for job in &snapshot.jobs {
        out.push_str(&format!(
            "  {:<20} {} threads{}{}\n",
            job.name,
            job.threads,
            job.gpu_busy.map_or(String::new(), |busy| format!(
                "  GPU busy {:.0}% (NVML)",
                busy * 100.0
            )),
            job.progress.map_or(String::new(), |progress| format!(
                "  progress {} steps, {} ({:.1} s ago)",
                progress.steps,
                progress
                    .steps_per_s
                    .map_or("no pace yet".to_owned(), |pace| format!(
                        "{pace:.2} steps/s"
                    )),
                progress.age_s
            ))
        ));
    }
    out.push_str("\npools:\n");
    if enforcement.pools.is_empty() {
        out.push_str("  (none: add [[pool]] entries to the config)\n");
    }
    for pool in &enforcement.pools {
        let need = if pool.need_cpus > 0 {
            format!("  SLO needs {} CPUs", pool.need_cpus)
        } else {
            String::new()
        };
        let weight = match (pool.cpu_weight, pool.min_cpu_weight) {
            (Some(weight), Some(floor)) => format!("  weight {weight} (steered, min {floor})"),
            (Some(weight), None) => format!("  weight {weight}"),
            (None, _) => String::new(),
        };
        let relaunching = snapshot
            .pools
            .iter()
            .find(|p| p.name == pool.name && !p.relaunching_launchers.is_empty())
            .map_or(String::new(), |p| {
                format!(
                    "  relaunching launchers {:?} (generation {})",
                    p.relaunching_launchers, p.relaunch_generation
                )
            });
        let paused = if pool.paused {
            "  PAUSED (frozen: training wants more cores than it may reserve)"
        } else {
            ""
        };
        out.push_str(&format!(
            "  {:<20} {:<8} CPUs [{}]  processes {:?}{weight}{need}{paused}{relaunching}\n",
            pool.name, pool.kind, pool.cpus, pool.processes
        ));
    }
    if !snapshot.pods.is_empty() {
        out.push_str("\nKubernetes pods:\n");
        for pod in &snapshot.pods {
            out.push_str(&format!(
                "  {:<40} {:<8} {:<24} {} containers, {} threads  {}{}\n",
                pod.pod,
                pod.role,
                pod.group,
                pod.containers,
                pod.threads,
                pod.detail,
                if pod.foreign_writes > 0 {
                    format!("  ({} writes by someone else)", pod.foreign_writes)
                } else {
                    String::new()
                }
            ));
        }
    }
    let micros =
        |ns: Option<u64>| ns.map_or("-".to_owned(), |ns| format!("{:.0} µs", ns as f64 / 1e3));
    out.push_str(&format!(
        "\nreactions: {} | event to cgroup write p50 {} p99 {} | event to training ran p50 {} \
         p99 {}{}\n",
        enforcement.reactions,
        micros(enforcement.event_to_write_p50_ns),
        micros(enforcement.event_to_write_p99_ns),
        micros(enforcement.event_to_ran_p50_ns),
        micros(enforcement.event_to_ran_p99_ns),
        snapshot
            .event_thread
            .as_ref()
            .map_or(String::new(), |how| format!(" | event thread {how}"))
    ));
    out.push_str("recent decisions (oldest first; the records: `--json`, the decision log):\n");
    if enforcement.recent_decisions.is_empty() {
        out.push_str("  (none yet)\n");
    }
    let decisions = decisions::render(
        &enforcement.recent_decisions,
        snapshot.monotonic_ns,
        enforcement.enforcing,
    );
    for line in decisions {
        out.push_str(&format!("  {line}\n"));
    }
    if let Some(gpu) = &snapshot.gpu {
        out.push('\n');
        out.push_str(&crate::gpu::report::render(gpu, snapshot.monotonic_ns));
    }
    out
}

pub(crate) async fn run(socket: &Path, json: bool) -> anyhow::Result<()> {
    let snapshot = Client::connect(socket).await?.snapshot().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
    } else {
        print!("{}", render(&snapshot));
    }
    Ok(())
}

/// The pace controller as `status` and `observe` show it: the level, the job followed's pace
/// with offline held back, the last move, what it has cost offline, how long its halves
/// measure and the jobs beside: `policy | resnet's pace with offline held back 181.57 steps/s
/// | last move: trial, now policy | offline held back 6 s of 23 s (26%) | halves of 2.0 s`.
pub(super) fn harvest_in_words(harvest: &HarvestStatus) -> String {
    let job = harvest.job.as_deref().or(harvest.paused_job.as_deref());
    format!(
        "{}{}{}{}{}{}{}",
        harvest.level,
        paused_job_in_words(harvest),
        harvest
            .reference_steps_per_s
            .map_or(String::new(), |pace| format!(
                " | {}'s pace with offline held back {}",
                job.unwrap_or("training"),
                pace_in_words(harvest.signal.as_deref(), pace)
            )),
        harvest
            .last_change
            .as_ref()
            .map_or(String::new(), |change| format!(
                " | last move: {}",
                harvest_move(change)
            )),
        held_back_in_words(harvest.held_back_s, harvest.running_s),
        harvest
            .half_measure_s
            .map_or(String::new(), |half| format!(" | halves of {half:.1} s")),
        beside_in_words(&harvest.beside),
    )
}

/// The job followed, paused: ` | waiting for resnet, silent 12 s (a pause: its level is
/// compared again once it goes on)`: by its reports or its GPUs. Empty where none is.
fn paused_job_in_words(harvest: &HarvestStatus) -> String {
    let Some(job) = harvest.paused_job.as_deref() else {
        return String::new();
    };
    format!(
        " | waiting for {job}, silent {:.0} s (a pause: its level is compared again once it \
         goes on)",
        harvest.paused_s.unwrap_or(0.0)
    )
}

/// A pace the controller measured, in its signal's units: steps a second from the job's
/// reports, or its GPUs' busy share (busy microseconds a second, shown as % of one GPU).
fn pace_in_words(signal: Option<&str>, pace: f64) -> String {
    match signal {
        Some("gpu_busy") => format!("{:.1}% GPU busy (from NVML)", pace / 1e4),
        _ => format!("{pace:.2} steps/s"),
    }
}

/// What the level compared cost each job beside the one followed, over the comparison's
/// cycles: ` | beside it: bert lost 3.0% [1.0, 5.0] over 4 cycles`.
fn beside_in_words(beside: &[BesideJob]) -> String {
    let each = beside.iter().map(|b| {
        let cost = cost_in_words(b.ratio, b.low, b.high);
        format!("{} lost {cost} over {} cycles", b.job, b.cycles)
    });
    match beside.is_empty() {
        true => String::new(),
        false => format!(" | beside it: {}", each.collect::<Vec<_>>().join(", ")),
    }
}

/// A pace ratio with its interval as what it cost the job, in %: `3.0% [1.0, 5.0]` for 0.97
/// in [0.95, 0.99].
fn cost_in_words(ratio: f64, low: f64, high: f64) -> String {
    let cost = |r: f64| (1.0 - r) * 100.0;
    format!("{:.1}% [{:.1}, {:.1}]", cost(ratio), cost(high), cost(low))
}

/// What the pace controller has cost offline so far, where it has run: ` | offline held back
/// 36 s of 300 s (12%)`.
fn held_back_in_words(held_s: f64, running_s: f64) -> String {
    match running_s > 0.0 {
        true => format!(
            " | offline held back {held_s:.0} s of {running_s:.0} s ({:.0}%)",
            100.0 * held_s / running_s
        ),
        false => String::new(),
    }
}

/// The pace controller's last change in words: why, where a level was judged what it cost
/// training (1 − its pace over the reference, with the interval), and the level it went to
/// (settled there until the next recheck, or for now).
fn harvest_move(change: &serde_json::Value) -> String {
    let reason = change["reason"].as_str().unwrap_or("?").replace('_', " ");
    let level = change["level"].as_str().unwrap_or("?");
    let to = match change["settles"].as_bool() {
        Some(true) => format!("settled at {level}"),
        _ => format!("now {level}"),
    };
    let judged = change["tried"]
        .as_str()
        .zip(change["ratio"]["ratio"].as_f64());
    // A level left for a job other than the one followed (`too_costly_for`) names it.
    let (reason, paid_by) = match change["job"].as_str() {
        Some(job) => (format!("{reason} {job}"), job),
        None => (reason, "training"),
    };
    match judged {
        Some((tried, ratio)) => {
            let cycles = change["ratio"]["cycles"]
                .as_u64()
                .map_or(String::new(), |n| format!(" over {n} cycles"));
            let bound = |name: &str| change["ratio"][name].as_f64().unwrap_or(ratio);
            let cost = cost_in_words(ratio, bound("low"), bound("high"));
            format!("{reason} ({tried} cost {paid_by} {cost}{cycles}), {to}")
        }
        None => format!(
            "{reason}{}{}{}{}, {to}",
            moved_in_words(change),
            jobs_in_words(change),
            paused_in_words(change),
            stops_in_words(change)
        ),
    }
}

/// How many training jobs ran where that held the loop to the policy's level
/// (`several_jobs`), and the one whose pace it waited for: ` (2 training jobs, waiting for
/// bert's pace)`. Empty for any other change.
fn jobs_in_words(change: &serde_json::Value) -> String {
    let Some(jobs) = change["jobs"].as_u64() else {
        return String::new();
    };
    match change["waiting_for"].as_str().filter(|job| !job.is_empty()) {
        Some(job) => format!(" ({jobs} training jobs, waiting for {job}'s pace)"),
        None => format!(" ({jobs} training jobs)"),
    }
}

/// How long the job followed was silent before its level was compared again (`resumed`):
/// ` (after 31 s without a signal)`. Empty for any other change.
fn paused_in_words(change: &serde_json::Value) -> String {
    change["paused_s"].as_f64().map_or(String::new(), |s| {
        format!(" (after {s:.0} s without a signal)")
    })
}

/// The share of a level's time training lost to stops (with the levels under it counted),
/// against its share with offline held back (`stops`): ` (training stopped 2.6% of the time at
/// policy to training_cores, 0.1% held back)`. Empty for any other change.
fn stops_in_words(change: &serde_json::Value) -> String {
    let shares = change["at_levels"].as_f64().zip(change["held"].as_f64());
    let levels = change["lowest"].as_str().zip(change["tried"].as_str());
    match (levels, shares) {
        (Some((lowest, tried)), Some((at_levels, held))) => format!(
            " (training stopped {:.1}% of the time at {}, {:.1}% held back)",
            100.0 * at_levels,
            match lowest == tried {
                true => tried.to_owned(),
                false => format!("{lowest} to {tried}"),
            },
            100.0 * held
        ),
        _ => String::new(),
    }
}

/// How far a pace moved (`phase_change`: the held pace, `pace_moved` and `pace_moved_for`: the
/// settled level's, `set_aside`: a half's from the last held ones' median), as a share of where
/// it was, or what a signal or the job followed changed from and to: ` (the settled pace 5.0%
/// down)`, ` (gpu_busy to progress)`, ` (resnet to bert)`. Empty for a change without either.
fn moved_in_words(change: &serde_json::Value) -> String {
    let (from, to) = (&change["from"], &change["to"]);
    if let (Some(from), Some(to)) = (from.as_f64(), to.as_f64()) {
        let pace = match change["reason"].as_str() {
            Some("phase_change") => "the held pace",
            Some("pace_moved" | "pace_moved_for") => "the settled pace",
            Some("set_aside") if change["half"] == "level" => "a level half",
            Some("set_aside") => "a held half",
            _ => "the pace",
        };
        let way = if to < from { "down" } else { "up" };
        return match from > 0.0 {
            true => format!(" ({pace} {:.1}% {way})", 100.0 * (to - from).abs() / from),
            false => String::new(),
        };
    }
    match (from.as_str(), to.as_str()) {
        (Some(from), Some(to)) => format!(" ({from} to {to})"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_judged_move_says_what_the_level_cost_training_and_others_say_why() {
        let judged = serde_json::json!({
            "level": "half", "reason": "too_costly", "tried": "three_quarters",
            "ratio": {"ratio": 0.97, "low": 0.95, "high": 0.99}
        });
        assert_eq!(
            harvest_move(&judged),
            "too costly (three_quarters cost training 3.0% [1.0, 5.0]), now half"
        );
        let probe = serde_json::json!({"level": "held", "reason": "probe"});
        assert_eq!(harvest_move(&probe), "probe, now held");
        // Left for a job beside the one followed: that job paid the cost.
        let other_job = serde_json::json!({
            "level": "quarter", "reason": "too_costly_for", "tried": "half", "job": "bert",
            "ratio": {"ratio": 0.9, "low": 0.85, "high": 0.95, "cycles": 3}
        });
        assert_eq!(
            harvest_move(&other_job),
            "too costly for bert (half cost bert 10.0% [5.0, 15.0] over 3 cycles), now quarter"
        );
        let settled = serde_json::json!({
            "level": "policy", "settles": true, "reason": "not_shown_free", "tried": "unpaused",
            "ratio": {"ratio": 0.995, "low": 0.97, "high": 1.02, "cycles": 6}
        });
        assert_eq!(
            harvest_move(&settled),
            "not shown free (unpaused cost training 0.5% [-2.0, 3.0] over 6 cycles), settled at \
             policy"
        );
        // Not shown free by a job beside the one followed, with two cycles or more, and with
        // fewer.
        let beside = serde_json::json!({
            "level": "unpaused", "reason": "not_shown_free_for", "tried": "training_cores",
            "job": "bert", "ratio": {"ratio": 0.99, "low": 0.97, "high": 1.01, "cycles": 9}
        });
        assert_eq!(
            harvest_move(&beside),
            "not shown free for bert (training_cores cost bert 1.0% [-1.0, 3.0] over 9 cycles), \
             now unpaused"
        );
        let uncounted = serde_json::json!({
            "level": "unpaused", "reason": "not_shown_free_for", "tried": "training_cores",
            "job": "bert", "ratio": null
        });
        assert_eq!(
            harvest_move(&uncounted),
            "not shown free for bert, now unpaused"
        );
    }

    #[test]
    fn a_move_says_how_far_the_pace_went_what_changed_how_many_jobs_ran_or_how_long_it_paused() {
        let moved = serde_json::json!({
            "level": "policy", "reason": "pace_moved", "from": 180.0, "to": 171.0
        });
        assert_eq!(
            harvest_move(&moved),
            "pace moved (the settled pace 5.0% down), now policy"
        );
        // A job beside the one followed, whose own settled pace moved.
        let moved_for = serde_json::json!({
            "level": "policy", "reason": "pace_moved_for", "job": "bert", "from": 50.0,
            "to": 45.0
        });
        assert_eq!(
            harvest_move(&moved_for),
            "pace moved for bert (the settled pace 10.0% down), now policy"
        );
        let phase = serde_json::json!({
            "level": "training_cores", "reason": "phase_change", "from": 100.0, "to": 140.0
        });
        assert_eq!(
            harvest_move(&phase),
            "phase change (the held pace 40.0% up), now training_cores"
        );
        let stops = serde_json::json!({
            "level": "unpaused", "reason": "stops", "tried": "training_cores",
            "lowest": "training_cores", "at_levels": 0.026, "held": 0.001
        });
        assert_eq!(
            harvest_move(&stops),
            "stops (training stopped 2.6% of the time at training_cores, 0.1% held back), now \
             unpaused"
        );
        let pooled = serde_json::json!({
            "level": "three_quarters", "reason": "stops", "tried": "policy",
            "lowest": "quarter", "at_levels": 0.021, "held": 0.0
        });
        assert_eq!(
            harvest_move(&pooled),
            "stops (training stopped 2.1% of the time at quarter to policy, 0.0% held back), now \
             three_quarters"
        );
        // A held half, and a level's, a stop of the job's own slowed, set aside.
        let set_aside = serde_json::json!({
            "level": "policy", "reason": "set_aside", "tried": "policy", "half": "held",
            "from": 180.0, "to": 117.0
        });
        assert_eq!(
            harvest_move(&set_aside),
            "set aside (a held half 35.0% down), now policy"
        );
        let level_half = serde_json::json!({
            "level": "held", "reason": "set_aside", "tried": "policy", "half": "level",
            "from": 180.0, "to": 117.0
        });
        assert_eq!(
            harvest_move(&level_half),
            "set aside (a level half 35.0% down), now held"
        );
        let signal = serde_json::json!({
            "level": "training_cores", "reason": "signal_changed", "from": "gpu_busy",
            "to": "progress"
        });
        assert_eq!(
            harvest_move(&signal),
            "signal changed (gpu_busy to progress), now training_cores"
        );
        let job = serde_json::json!({
            "level": "policy", "reason": "job_changed", "from": "resnet", "to": "bert"
        });
        assert_eq!(
            harvest_move(&job),
            "job changed (resnet to bert), now policy"
        );
        let resumed = serde_json::json!({
            "level": "unpaused", "reason": "resumed", "paused_s": 31.2
        });
        assert_eq!(
            harvest_move(&resumed),
            "resumed (after 31 s without a signal), now unpaused"
        );
        let jobs = serde_json::json!({
            "level": "policy", "reason": "several_jobs", "jobs": 2, "waiting_for": "bert"
        });
        assert_eq!(
            harvest_move(&jobs),
            "several jobs (2 training jobs, waiting for bert's pace), now policy"
        );
    }

    #[test]
    fn what_the_controller_cost_offline_reads_as_a_share_of_its_time() {
        assert_eq!(
            held_back_in_words(36.2, 300.0),
            " | offline held back 36 s of 300 s (12%)"
        );
        assert_eq!(held_back_in_words(0.0, 0.0), "");
    }

    #[test]
    fn the_controllers_halves_read_as_how_long_each_measures() {
        let harvest = HarvestStatus {
            level: "policy".into(),
            held_back_s: 30.0,
            running_s: 300.0,
            half_measure_s: Some(10.0),
            ..Default::default()
        };
        assert_eq!(
            harvest_in_words(&harvest),
            "policy | offline held back 30 s of 300 s (10%) | halves of 10.0 s"
        );
    }

    #[test]
    fn a_paused_job_reads_as_waited_for_with_its_pace_before() {
        let harvest = HarvestStatus {
            level: "policy".into(),
            paused_job: Some("resnet".into()),
            paused_s: Some(12.4),
            reference_steps_per_s: Some(8.5),
            ..Default::default()
        };
        assert_eq!(
            harvest_in_words(&harvest),
            "policy | waiting for resnet, silent 12 s (a pause: its level is compared again \
             once it goes on) | resnet's pace with offline held back 8.50 steps/s"
        );
    }

    #[test]
    fn what_the_level_cost_the_jobs_beside_reads_job_by_job() {
        let bert = BesideJob {
            job: "bert".into(),
            ratio: 0.97,
            low: 0.95,
            high: 0.99,
            cycles: 4,
        };
        let gpt = BesideJob {
            job: "gpt".into(),
            ratio: 1.0,
            low: 0.98,
            high: 1.02,
            cycles: 3,
        };
        assert_eq!(
            beside_in_words(&[bert, gpt]),
            " | beside it: bert lost 3.0% [1.0, 5.0] over 4 cycles, gpt lost 0.0% [-2.0, 2.0] \
             over 3 cycles"
        );
        assert_eq!(beside_in_words(&[]), "");
    }

    #[test]
    fn a_gpu_busy_pace_reads_as_a_share_of_a_gpu() {
        assert_eq!(
            pace_in_words(Some("gpu_busy"), 870_000.0),
            "87.0% GPU busy (from NVML)"
        );
        assert_eq!(pace_in_words(Some("progress"), 11.5), "11.50 steps/s");
    }
}
