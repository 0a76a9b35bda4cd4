//! `cargo xtask demo`: the built-in default scenario. A CPU-hungry offline inference pool runs
//! under the enforcer on every core; then a simulated training job starts on the same cores.
//! Its first threads land behind inference, and the enforcer's fast path takes cores for
//! training within microseconds of the kernel's event; inference stops midway, and training
//! runs on alone. The live table shows what the sensor sees: training's run-queue waits and CPU
//! demand, and the events raised when training lands behind inference.

use std::{io::Read as _, process::Command, time::Duration};

use anyhow::{Context as _, bail};
use reamer_tests::harness::Daemon;

use enforcer_common::protocol::Snapshot;

use crate::{
    cargo::{build_release, is_root, release_bin},
    wake_probe::WakeLatency,
};

const CONFIG: &str = "# written by `cargo xtask demo`\n[sensor]\nwait_threshold_us = 2000\n\n\
                      [[pool]]\nname = \"inference\"\nkind = \"offline\"\n";
/// When training starts, after inference: long enough for the pool to hold every core.
const TRAINING_STARTS_AT: f64 = 2.0;
const TRAINING_SECONDS: f64 = 12.0;
const INFERENCE_SECONDS: f64 = 8.0;
/// A phase beside inference this much faster than training alone gets the summary's
/// explanation (the phases' rates move by a few percent from run to run).
const FASTER_BESIDE_INFERENCE: f64 = 1.1;

#[expect(
    clippy::zombie_processes,
    reason = "on an early error the workloads are left to finish on their own: each runs for a fixed few seconds"
)]
pub fn run() -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "the demo loads eBPF programs into the kernel: run it as root (sudo -E cargo xtask demo)"
        );
    }
    build_release()?;
    println!("== reamer demo: CPU inference on every core, then a training job that needs them ==");
    let wake = WakeLatency::probe(2, 300);
    match &wake {
        Ok(wake) => println!("this machine: {}", wake.describe()),
        Err(err) => println!("wake-probe: skipped ({err:#})"),
    }
    println!(
        "starting the enforcer (instance \"demo\"), with an offline inference pool \"inference\""
    );
    let daemon = Daemon::start_bin(&release_bin("enforcer"), "demo", CONFIG);

    println!(
        ">>> inference starts: `enforcer launch --pool inference -- cpu-hog --threads 2` for \
         {INFERENCE_SECONDS} s"
    );
    let hog = release_bin("cpu-hog");
    let mut inference = daemon.launch(
        "--pool",
        "inference",
        hog.to_str().context("path")?,
        &[
            "--threads",
            "2",
            "--seconds",
            &INFERENCE_SECONDS.to_string(),
        ],
    );
    std::thread::sleep(Duration::from_secs_f64(TRAINING_STARTS_AT));

    let sim = release_bin("training-sim");
    let mut training = daemon.launch(
        "--training",
        "demo-training",
        sim.to_str().context("path")?,
        &["--seconds", &TRAINING_SECONDS.to_string(), "--json"],
    );
    println!(
        ">>> training starts: `enforcer launch --training demo-training -- training-sim` for \
         {TRAINING_SECONDS} s; inference stops {} s into it\n",
        INFERENCE_SECONDS - TRAINING_STARTS_AT
    );
    let mut observe = Command::new(release_bin("enforcer"))
        .args([
            "observe",
            "--instance",
            "demo",
            "--interval",
            "1",
            "--count",
        ])
        .arg(((TRAINING_SECONDS - 1.0) as u64).to_string())
        .spawn()
        .context("starting enforcer observe")?;

    let mut report = String::new();
    training
        .stdout
        .take()
        .context("training stdout")?
        .read_to_string(&mut report)?;
    training.wait()?;
    inference.wait()?;
    observe.wait()?;
    let snapshot = daemon.snapshot();
    let status = Command::new(release_bin("enforcer"))
        .args(["status", "--instance", "demo"])
        .output()
        .context("running enforcer status")?;
    println!(
        "\n== enforcer status ==\n{}",
        String::from_utf8_lossy(&status.stdout)
    );
    daemon.stop();

    summarize(&report, &snapshot, wake.ok().as_ref())?;
    Ok(())
}

fn summarize(report: &str, snapshot: &Snapshot, wake: Option<&WakeLatency>) -> anyhow::Result<()> {
    let report: serde_json::Value =
        serde_json::from_str(report.trim()).context("training-sim report")?;
    let steps: Vec<f64> = report["step_ms"]
        .as_array()
        .context("step_ms")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    // Split the steps by when they ended: while inference ran, or after it.
    let inference_ends_at = INFERENCE_SECONDS - TRAINING_STARTS_AT;
    let (mut clock, mut phases) = (0.0, [(0usize, 0.0f64); 2]);
    for step in &steps {
        clock += step / 1e3;
        let phase = usize::from(clock >= inference_ends_at);
        phases[phase].0 += 1;
        phases[phase].1 += step / 1e3;
    }
    println!("\n== summary ==");
    let rates = phases.map(|(count, seconds)| (count > 0).then(|| count as f64 / seconds));
    for ((name, rate), (count, _)) in ["beside inference", "alone after it"]
        .iter()
        .zip(rates)
        .zip(phases)
    {
        if let Some(rate) = rate {
            println!("{name:>16}: {rate:6.1} steps/s ({count} steps)");
        }
    }
    if let (Some(beside), Some(alone), Some(wake)) = (rates[0], rates[1], wake)
        && beside > alone * FASTER_BESIDE_INFERENCE
    {
        println!(
            "Training ran faster beside inference than alone. The likely cause is this machine, \
             not the enforcer: training alone leaves a CPU idle between its bursts, and here \
             waking a thread on an idle CPU took p99 {:.1} ms against {:.1} ms on CPUs kept busy \
             (wake-probe, above). On a VM an idle vCPU is handed back to the hypervisor, and a \
             busy host is slow to run it again; the offline pool's idle-class work keeps the \
             vCPUs busy, and the kernel preempts it at once for training.",
            wake.idle_p99_us / 1e3,
            wake.busy_p99_us / 1e3
        );
    }
    let job = snapshot.jobs.first().context("demo job")?;
    println!(
        "sensor: {} run-queue waits, {} times training was enqueued behind inference, {} events delivered",
        job.waits, job.behind_inference, job.events_received
    );
    let enforcement = snapshot.enforcement.clone().unwrap_or_default();
    let micros =
        |ns: Option<u64>| ns.map_or("-".to_owned(), |ns| format!("{:.0} µs", ns as f64 / 1e3));
    println!(
        "fast path: {} reactions to those events, kernel event to cgroup write p50 {}, p99 {}",
        enforcement.reactions,
        micros(enforcement.event_to_write_p50_ns),
        micros(enforcement.event_to_write_p99_ns)
    );
    println!(
        "The enforcer placed the inference pool in an offline cgroup (cpu.idle, so the kernel \
         preempts it for training at every wakeup). When training's threads landed behind it, \
         the fast path reserved their cores for training (decisions with trigger `contended` \
         in `enforcer status` above); the slow path follows training's demand (`demand_rose`, \
         `demand_fell`) and gives cores back once it has stayed low."
    );
    Ok(())
}
