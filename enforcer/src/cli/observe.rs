//! `enforcer observe`: live per-job figures from a running daemon.

use std::{collections::HashMap, io::Write as _, path::Path, time::Duration};

use enforcer_common::{
    cpu_list,
    protocol::{HarvestStatus, Snapshot},
};

use super::client::{Client, ClientError};
use super::status::harvest_in_words;
use crate::sensor::interval::{JobInterval, job_interval};

/// One printed interval: a line of `observe --json`, and of the traces `enforcer replay`
/// reads (the fields added after the first traces were recorded default when missing).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ObservedInterval {
    pub seconds: f64,
    /// The machine's online CPUs.
    #[serde(default)]
    pub online_cpus: Option<usize>,
    pub jobs: Vec<JobInterval>,
    /// Per CPU, the reports of training queued behind inference there in the interval.
    #[serde(default)]
    pub contentions_by_cpu: Vec<u64>,
    /// CPUs reserved for training at the interval's end, where the daemon enforces.
    #[serde(default)]
    pub reserved_cpus: Option<usize>,
    /// Whether offline pools were paused at the interval's end, where the daemon enforces.
    #[serde(default)]
    pub offline_paused: Option<bool>,
    /// The pace controller at the interval's end (`harvest_by_pace`), as `status --json` has
    /// it: the level (`held`, `quarter`, ... `training_cores`), the job followed and its pace
    /// with offline held back, the last move with what the level cost training, what the
    /// controller has cost offline, and what the level cost each job beside. A trace recorded
    /// before these were there reads its level, signal and job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harvest: Option<HarvestStatus>,
    /// Sensor counters that changed in the interval (events sent, dropped, ...).
    pub counters: HashMap<String, u64>,
    /// Average cost of one sensor program run in the interval, when bpf_stats is enabled.
    pub sensor_ns_per_run: Option<f64>,
}

/// Figures between two snapshots.
pub(crate) fn interval(prev: &Snapshot, cur: &Snapshot) -> ObservedInterval {
    let dt = cur.monotonic_ns.saturating_sub(prev.monotonic_ns);
    let jobs = cur
        .jobs
        .iter()
        .map(|job| {
            let before = prev
                .jobs
                .iter()
                .find(|p| p.id == job.id)
                .cloned()
                .unwrap_or_default();
            job_interval(&before, job, dt, cur.online_cpus)
        })
        .collect();
    let contentions_by_cpu = cur
        .contentions_by_cpu
        .iter()
        .enumerate()
        .map(|(cpu, now)| {
            let then = prev.contentions_by_cpu.get(cpu).copied().unwrap_or(0);
            now.saturating_sub(then)
        })
        .collect();
    let enforced = cur.enforcement.as_ref().filter(|e| e.enforcing);
    let reserved_cpus =
        enforced.map(|e| cpu_list::parse(&e.training_cpus).map_or(0, |cpus| cpus.len()));
    let offline_paused = enforced.map(|e| e.pools.iter().any(|pool| pool.paused));
    let harvest = enforced.and_then(|e| e.harvest.clone());
    let counters = cur
        .counters
        .iter()
        .map(|(name, value)| {
            (
                name.clone(),
                value - prev.counters.get(name).copied().unwrap_or(0),
            )
        })
        .collect();
    let runs = |s: &Snapshot| {
        s.programs
            .iter()
            .map(|p| (p.run_count, p.run_time_ns))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let (runs_before, time_before) = runs(prev);
    let (runs_now, time_now) = runs(cur);
    let run_delta = runs_now.saturating_sub(runs_before);
    let sensor_ns_per_run = (run_delta > 0 && time_now > time_before)
        .then(|| (time_now - time_before) as f64 / run_delta as f64);
    ObservedInterval {
        seconds: dt as f64 / 1e9,
        online_cpus: (cur.online_cpus > 0).then_some(cur.online_cpus),
        jobs,
        contentions_by_cpu,
        reserved_cpus,
        offline_paused,
        harvest,
        counters,
        sensor_ns_per_run,
    }
}

fn duration(ns: Option<u64>) -> String {
    match ns {
        None => "-".to_owned(),
        Some(ns) if ns < 1_000 => format!("{ns}ns"),
        Some(ns) if ns < 1_000_000 => format!("{:.1}µs", ns as f64 / 1e3),
        Some(ns) if ns < 1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        Some(ns) => format!("{:.2}s", ns as f64 / 1e9),
    }
}

/// The interval as a table.
pub(crate) fn render(observed: &ObservedInterval) -> String {
    let mut out = format!(
        "{:<20} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>10} {:>12} {:>9} {:>8}\n",
        "job",
        "threads",
        "wait p50",
        "wait p99",
        "wait max",
        "demand",
        "running",
        "events/s",
        "behind/s",
        "offline wait",
        "steps/s",
        "GPU busy"
    );
    if observed.jobs.is_empty() {
        out.push_str("(no training jobs registered: add [[training]] to the config, or use `enforcer launch --training NAME -- CMD`)\n");
    }
    for job in &observed.jobs {
        out.push_str(&format!(
            "{:<20} {:>7} {:>9} {:>9} {:>9} {:>8.2} {:>8.2} {:>9.1} {:>10.1} {:>11.1}% {:>9} \
             {:>8}\n",
            job.name,
            job.threads,
            duration(job.wait_p50_ns),
            duration(job.wait_p99_ns),
            duration(job.wait_max_ns),
            job.demand_cpus,
            job.running_cpus,
            job.events_per_s,
            job.behind_inference_per_s,
            job.offline_wait_pct,
            // The job's own pace, where it reports its progress.
            job.pace_steps_per_s
                .map_or("-".to_owned(), |pace| format!("{pace:.2}")),
            // Its GPUs' busy share, where it is the job's own (NVML).
            job.gpu_busy
                .map_or("-".to_owned(), |busy| format!("{:.0}%", busy * 100.0)),
        ));
    }
    if let Some(harvest) = &observed.harvest {
        out.push_str(&format!(
            "offline's share by training's pace: {} | signal: {}{}\n",
            harvest_in_words(harvest),
            harvest.signal.as_deref().unwrap_or("none"),
            harvest
                .job
                .as_ref()
                .map_or(String::new(), |job| format!(" from {job}")),
        ));
    }
    let counter = |name: &str| observed.counters.get(name).copied().unwrap_or(0);
    // How to measure it is said once, before the first interval (`run`).
    let cost = observed
        .sensor_ns_per_run
        .map_or("sensor cost: n/a".to_owned(), |ns| {
            format!("sensor cost: {ns:.0} ns/run")
        });
    out.push_str(&format!(
        "events sent {} | rate-limited {} | ring full {} | clock skew {} | map full {} | {cost}\n",
        counter("events_sent"),
        counter("events_rate_limited"),
        counter("events_ringbuf_full"),
        counter("wait_clock_skew"),
        counter("thread_map_full"),
    ));
    out
}

/// The next snapshot, over a new connection where the daemon closed the last one: it closes
/// a connection idle past `[control] idle_timeout_ms`, which a long `--interval` exceeds.
async fn observe_again(client: &mut Client, socket: &Path) -> Result<Snapshot, ClientError> {
    match client.observe().await {
        Err(ClientError::Closed | ClientError::Io(_)) => {
            *client = Client::connect(socket).await?;
            client.observe().await
        }
        answered => answered,
    }
}

/// Prints an interval every `every` until `count` intervals (0: forever).
pub(crate) async fn run(
    socket: &Path,
    every: Duration,
    count: u64,
    json: bool,
) -> anyhow::Result<()> {
    let mut client = Client::connect(socket).await?;
    let mut prev = client.observe().await?;
    let mut printed = 0;
    while count == 0 || printed < count {
        tokio::time::sleep(every).await;
        let cur = observe_again(&mut client, socket).await?;
        let observed = interval(&prev, &cur);
        let mut stdout = std::io::stdout().lock();
        if json {
            writeln!(stdout, "{}", serde_json::to_string(&observed)?)?;
        } else {
            if printed == 0 && observed.sensor_ns_per_run.is_none() {
                writeln!(
                    stdout,
                    "(sensor cost n/a: the kernel keeps no run times of BPF programs; `sysctl \
                     kernel.bpf_stats_enabled=1` to measure it)"
                )?;
            }
            writeln!(
                stdout,
                "--- {} ({:.1}s)\n{}",
                cur.instance,
                observed.seconds,
                render(&observed)
            )?;
        }
        stdout.flush()?;
        prev = cur;
        printed += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use enforcer_common::protocol::{BesideJob, EnforcementStatus};

    use super::*;

    #[test]
    fn the_pace_controller_is_in_the_interval_as_status_has_it() {
        let prev = Snapshot::default();
        let harvest = HarvestStatus {
            level: "half".into(),
            signal: Some("progress".into()),
            job: Some("resnet".into()),
            reference_steps_per_s: Some(181.5),
            last_change: Some(serde_json::json!({
                "level": "half", "reason": "too_costly_for", "job": "bert",
                "tried": "three_quarters", "settles": true,
                "ratio": {"ratio": 0.9, "low": 0.85, "high": 0.95, "cycles": 3},
            })),
            held_back_s: 30.0,
            running_s: 300.0,
            beside: vec![BesideJob {
                job: "bert".into(),
                ratio: 0.9,
                low: 0.85,
                high: 0.95,
                cycles: 3,
            }],
            ..Default::default()
        };
        let cur = Snapshot {
            monotonic_ns: 100_000_000,
            enforcement: Some(EnforcementStatus {
                enforcing: true,
                harvest: Some(harvest.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let observed = interval(&prev, &cur);
        assert_eq!(observed.harvest.as_ref(), Some(&harvest));
        // Per job: the one followed, its pace with offline held back, what the level cost the
        // job it was left for, what the controller cost offline, and each job beside.
        assert!(
            render(&observed).contains(
                "offline's share by training's pace: half | resnet's pace with offline held back \
                 181.50 steps/s | last move: too costly for bert (three_quarters cost bert 10.0% \
                 [5.0, 15.0] over 3 cycles), settled at half | offline held back 30 s of 300 s \
                 (10%) | beside it: bert lost 10.0% [5.0, 15.0] over 3 cycles | signal: progress \
                 from resnet\n"
            ),
            "{}",
            render(&observed)
        );
        // A trace line carries it all, and reads back.
        let line = serde_json::to_string(&observed).unwrap();
        let read: ObservedInterval = serde_json::from_str(&line).unwrap();
        assert_eq!(read.harvest, Some(harvest));
        // A line recorded before any of it, and one from before the reference and the rest,
        // still read.
        let old: ObservedInterval = serde_json::from_str(
            r#"{"seconds":0.1,"jobs":[],"counters":{},"sensor_ns_per_run":null}"#,
        )
        .unwrap();
        assert_eq!(old.harvest, None);
        let older: ObservedInterval = serde_json::from_str(
            r#"{"seconds":0.1,"jobs":[],"counters":{},"sensor_ns_per_run":null,
                "harvest":{"level":"unpaused","signal":"gpu_busy","job":"resnet","reason":"kept"}}"#,
        )
        .unwrap();
        let older = older.harvest.unwrap();
        assert_eq!(
            (older.level.as_str(), older.job.as_deref()),
            ("unpaused", Some("resnet"))
        );
    }
}
