//! `enforcer observe`: live per-job figures from a running daemon.

use std::{collections::HashMap, io::Write as _, path::Path, time::Duration};

use enforcer_common::{cpu_list, protocol::Snapshot};

use super::client::{Client, ClientError};
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
    /// Where the pace controller holds offline at the interval's end, and why it last moved
    /// (`harvest_by_pace`): `held`, `quarter`, ... `training_cores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harvest: Option<HarvestAt>,
    /// Sensor counters that changed in the interval (events sent, dropped, ...).
    pub counters: HashMap<String, u64>,
    /// Average cost of one sensor program run in the interval, when bpf_stats is enabled.
    pub sensor_ns_per_run: Option<f64>,
}

/// The pace controller at an interval's end.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct HarvestAt {
    pub level: String,
    /// Its signal: `progress` or `gpu_busy`; None without one.
    #[serde(default)]
    pub signal: Option<String>,
    /// The training job whose pace it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The reason of its last move (`probe`, `trial`, `kept`, `too_costly`, ...).
    #[serde(default)]
    pub reason: Option<String>,
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
    let harvest = enforced
        .and_then(|e| e.harvest.as_ref())
        .map(|h| HarvestAt {
            level: h.level.clone(),
            signal: h.signal.clone(),
            job: h.job.clone(),
            reason: h
                .last_change
                .as_ref()
                .and_then(|c| c["reason"].as_str())
                .map(str::to_owned),
        });
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
            "offline's share by training's pace: {} (signal: {}{}; last move: {})\n",
            harvest.level,
            harvest.signal.as_deref().unwrap_or("none"),
            harvest
                .job
                .as_ref()
                .map_or(String::new(), |job| format!(" from {job}")),
            harvest
                .reason
                .as_deref()
                .unwrap_or("none yet")
                .replace('_', " "),
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
    use enforcer_common::protocol::{EnforcementStatus, HarvestStatus};

    use super::*;

    #[test]
    fn the_pace_controllers_level_and_last_move_are_in_the_interval() {
        let prev = Snapshot::default();
        let cur = Snapshot {
            monotonic_ns: 100_000_000,
            enforcement: Some(EnforcementStatus {
                enforcing: true,
                harvest: Some(HarvestStatus {
                    level: "unpaused".into(),
                    signal: Some("gpu_busy".into()),
                    job: Some("resnet".into()),
                    reference_steps_per_s: Some(870_000.0),
                    last_change: Some(serde_json::json!({"level": "unpaused", "reason": "kept"})),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let observed = interval(&prev, &cur);
        assert_eq!(
            observed.harvest,
            Some(HarvestAt {
                level: "unpaused".into(),
                signal: Some("gpu_busy".into()),
                job: Some("resnet".into()),
                reason: Some("kept".into()),
            })
        );
        assert!(
            render(&observed).contains(
                "offline's share by training's pace: unpaused (signal: gpu_busy from resnet; last \
                 move: kept)"
            ),
            "{}",
            render(&observed)
        );
        // A trace line says it, and one recorded before it was there still reads.
        let line = serde_json::to_string(&observed).unwrap();
        assert!(
            line.contains("\"harvest\":{\"level\":\"unpaused\""),
            "{line}"
        );
        let old: ObservedInterval = serde_json::from_str(
            r#"{"seconds":0.1,"jobs":[],"counters":{},"sensor_ns_per_run":null}"#,
        )
        .unwrap();
        assert_eq!(old.harvest, None);
    }
}
