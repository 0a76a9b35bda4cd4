//! The enforcer's reaction time: from the sensor event's kernel timestamp to the completed
//! cgroup write, on every fast-path decision.
//!
//! An offline pool runs two spinning threads; a training job arrives in short bursts. The
//! policy's hold and demand window are short here, so that cores go back between bursts and every
//! burst meets inference on its cores again: each burst is a fresh fast-path reaction. The
//! latencies come from the daemon's decision log, one per decision.
//!
//! The bursts run twice, in one run of the bench: once alone, once while a client reads the
//! full status as fast as the daemon answers (anyone may; a status reads every pool's files).
//! The ratio of the two says whether a reader delays the fast path.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use enforcer_common::protocol::{self, Request};
use reamer_tests::harness::{Daemon, decision_log_of};
use serde::Serialize;

use super::common::stats::{median, quantile, sorted};
use crate::cargo::release_bin;

const INSTANCE: &str = "bench-reaction";
const CONFIG: &str = "[[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n[policy]\n\
                      give_back_after_ms = 100\ndemand_window_ms = 100\ntick_ms = 50\n";

#[derive(Debug, Serialize)]
pub struct ReactionBench {
    pub bursts: usize,
    pub reactions: usize,
    pub event_to_write_us: Vec<f64>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Its two parts, per decision: until the event thread read the event (the ring buffer's
    /// wakeup), and from reading it to the cgroup write done (policy, grants, the write).
    pub event_to_read_p50_us: f64,
    pub event_to_read_p99_us: f64,
    pub read_to_write_p50_us: f64,
    pub read_to_write_p99_us: f64,
    /// From a report behind inference to the training thread's next switch-in, over every
    /// report userspace received (upper bounds of the sensor's histogram buckets).
    pub ran_samples: usize,
    pub ran_p50_us: f64,
    pub ran_p99_us: f64,
    /// Full snapshots a client read per second meanwhile (0: none was reading).
    pub status_reads_per_s: f64,
}

/// The bursts alone, and the same bursts while a client loops on the full status.
#[derive(Debug, Serialize)]
pub struct ReactionRuns {
    pub alone: ReactionBench,
    pub status_read_in_a_loop: ReactionBench,
}

pub fn run(bursts: usize, progress: &dyn Fn(&str)) -> anyhow::Result<ReactionRuns> {
    let alone = run_once(bursts, false, progress)?;
    progress("reaction: again, with a client reading the status in a loop");
    let status_read_in_a_loop = run_once(bursts, true, progress)?;
    Ok(ReactionRuns {
        alone,
        status_read_in_a_loop,
    })
}

/// Reads the full status over one connection until `stop`; counts the answers.
fn read_status_until(socket: &std::path::Path, stop: &AtomicBool, reads: &AtomicU64) {
    let Ok(stream) = UnixStream::connect(socket) else {
        return;
    };
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let request = protocol::to_line(&Request::Snapshot);
    let mut answer = String::new();
    while !stop.load(Ordering::Relaxed) {
        answer.clear();
        if writer.write_all(&request).is_err()
            || !matches!(reader.read_line(&mut answer), Ok(n) if n > 0)
        {
            return;
        }
        reads.fetch_add(1, Ordering::Relaxed);
    }
}

fn run_once(
    bursts: usize,
    status_loop: bool,
    progress: &dyn Fn(&str),
) -> anyhow::Result<ReactionBench> {
    let log = decision_log_of(INSTANCE);
    let daemon = Daemon::start_bin_with_fresh_log(&release_bin("enforcer"), INSTANCE, CONFIG);
    let (stop_reading, reads) = (AtomicBool::new(false), AtomicU64::new(0));
    let reading_since = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        if status_loop {
            let socket = daemon.socket();
            let (stop_reading, reads) = (&stop_reading, &reads);
            scope.spawn(move || read_status_until(&socket, stop_reading, reads));
        }
        let bursts_done = run_bursts(&daemon, bursts, progress);
        stop_reading.store(true, Ordering::Relaxed);
        bursts_done
    })?;
    let status_reads_per_s =
        reads.load(Ordering::Relaxed) as f64 / reading_since.elapsed().as_secs_f64();
    finish(daemon, &log, bursts, status_reads_per_s)
}

/// The bursts beside the pool's hog.
#[expect(
    clippy::zombie_processes,
    reason = "on an early error the hog is left to finish on its own: it runs for a fixed time"
)]
fn run_bursts(daemon: &Daemon, bursts: usize, progress: &dyn Fn(&str)) -> anyhow::Result<()> {
    let hog_seconds = (bursts as f64 * 0.6 + 2.0).to_string();
    let hog_bin = release_bin("cpu-hog");
    let mut hog = daemon.launch(
        "--pool",
        "batch",
        hog_bin.to_str().context("path")?,
        &["--threads", "2", "--seconds", &hog_seconds],
    );
    let sim = release_bin("training-sim");
    for burst in 0..bursts {
        if burst % 10 == 0 {
            progress(&format!("reaction burst {}/{bursts}", burst + 1));
        }
        let status = daemon
            .launch(
                "--training",
                "bursty",
                sim.to_str().context("path")?,
                &["--seconds", "0.2"],
            )
            .wait()?;
        if !status.success() {
            bail!("training-sim burst failed ({status})");
        }
        // Long enough for the hold (100 ms) to give the cores back.
        std::thread::sleep(Duration::from_millis(400));
    }
    let _ = hog.kill();
    let _ = hog.wait();
    Ok(())
}

/// The reactions of a run, from the daemon's status and decision log; stops the daemon.
fn finish(
    daemon: Daemon,
    log: &std::path::Path,
    bursts: usize,
    status_reads_per_s: f64,
) -> anyhow::Result<ReactionBench> {
    // "Report to training ran" is aggregated by the sensor itself (no event per report).
    let snapshot = daemon.snapshot();
    let enforcement = snapshot.enforcement.unwrap_or_default();
    let ran_samples: u64 = snapshot.jobs.iter().map(|j| j.reports_ran).sum();
    let ran_us = |ns: Option<u64>| ns.map_or(f64::NAN, |ns| ns as f64 / 1e3);
    let (ran_p50_us, ran_p99_us) = (
        ran_us(enforcement.event_to_ran_p50_ns),
        ran_us(enforcement.event_to_ran_p99_ns),
    );
    daemon.stop();

    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    // (event to write, event to read) of each fast-path decision, in µs.
    let reactions: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|d| d["trigger"] == "contended")
        .filter_map(|d| {
            Some((
                d["event_to_write_ns"].as_u64()?,
                d["event_to_read_ns"].as_u64()?,
            ))
        })
        .map(|(write, read)| (write as f64 / 1e3, read as f64 / 1e3))
        .collect();
    if reactions.is_empty() {
        bail!(
            "no fast-path decision in {}: the bursts never met inference",
            log.display()
        );
    }
    let mut latencies: Vec<f64> = reactions.iter().map(|(write, _)| *write).collect();
    let to_write = sorted(latencies.iter().copied());
    let to_read = sorted(reactions.iter().map(|(_, read)| *read));
    let read_to_write = sorted(reactions.iter().map(|(write, read)| write - read));
    latencies.truncate(10_000);
    Ok(ReactionBench {
        bursts,
        reactions: to_write.len(),
        p50_us: median(&to_write),
        p99_us: quantile(&to_write, 0.99),
        max_us: *to_write.last().expect("non-empty"),
        event_to_read_p50_us: median(&to_read),
        event_to_read_p99_us: quantile(&to_read, 0.99),
        read_to_write_p50_us: median(&read_to_write),
        read_to_write_p99_us: quantile(&read_to_write, 0.99),
        ran_samples: ran_samples as usize,
        ran_p50_us,
        ran_p99_us,
        event_to_write_us: latencies,
        status_reads_per_s,
    })
}

pub fn markdown(runs: &ReactionRuns, command: &str, machine: &str) -> String {
    let (bench, loaded) = (&runs.alone, &runs.status_read_in_a_loop);
    format!(
        "Command: `{command}`\n\nMachine: {machine}\n\n\
         | figure | value | target |\n|---|---|---|\n\
         | fast-path reactions measured ({} training bursts beside an offline pool) | {} | |\n\
         | event to cgroup write, p50 | {:.0} µs | ≤ 100 µs |\n\
         | event to cgroup write, p99 | {:.0} µs | ≤ 500 µs |\n\
         | event to cgroup write, max | {:.0} µs | |\n\
         | of which: event to the event thread reading it (the ring buffer's wakeup), p50 / p99 | {:.0} / {:.0} µs | |\n\
         | of which: read to cgroup write done (policy, grants, the write), p50 / p99 | {:.0} / {:.0} µs | |\n\
         | report to the waiting training thread running, p50 ({} reports; bucket upper bound) | {:.0} µs | |\n\
         | report to the waiting training thread running, p99 | {:.0} µs | |\n\
         | the same bursts while a client reads the full status in a loop ({:.0} reads/s): reactions, p50 / p99 | {} reactions, {:.0} / {:.0} µs | |\n\
         | p99 with the status read in a loop, over p99 alone | {:.2} | ≤ 2 |\n",
        bench.bursts,
        bench.reactions,
        bench.p50_us,
        bench.p99_us,
        bench.max_us,
        bench.event_to_read_p50_us,
        bench.event_to_read_p99_us,
        bench.read_to_write_p50_us,
        bench.read_to_write_p99_us,
        bench.ran_samples,
        bench.ran_p50_us,
        bench.ran_p99_us,
        loaded.status_reads_per_s,
        loaded.reactions,
        loaded.p50_us,
        loaded.p99_us,
        loaded.p99_us / bench.p99_us,
    )
}
