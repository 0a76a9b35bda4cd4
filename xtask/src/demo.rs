//! `cargo xtask demo`: the built-in default scenario. A simulated training job runs under the
//! enforcer; midway a CPU-hungry inference pool starts on the same cores. The live table shows
//! what the sensor sees: training's run-queue waits and CPU demand, and the events raised when
//! training lands behind inference.

use std::{io::Read as _, process::Command, time::Duration};

use anyhow::{Context as _, bail};
use reamer_tests::harness::Daemon;

use crate::cargo::{build_release, is_root, release_bin};

const CONFIG: &str = "# written by `cargo xtask demo`\n[sensor]\nwait_threshold_us = 2000\n\n\
                      [[pool]]\nname = \"inference\"\nkind = \"offline\"\n";
const TRAINING_SECONDS: f64 = 14.0;
const INFERENCE_STARTS_AT: f64 = 5.0;
const INFERENCE_SECONDS: f64 = 5.0;
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
    println!("== reamer demo: a training job, then CPU inference competing for its cores ==");
    let wake = WakeLatency::probe();
    match &wake {
        Ok(wake) => println!(
            "this machine: a thread woken on another CPU answers in p50 {:.0} µs, p99 {:.1} ms \
             when the CPUs were idle, and in p50 {:.0} µs, p99 {:.1} ms when idle-class work kept \
             them busy (wake-probe)",
            wake.idle_p50_us,
            wake.idle_p99_us / 1e3,
            wake.busy_p50_us,
            wake.busy_p99_us / 1e3
        ),
        Err(err) => println!("wake-probe: skipped ({err:#})"),
    }
    println!(
        "starting the enforcer (instance \"demo\"), with an offline inference pool \"inference\""
    );
    let daemon = Daemon::start_bin(&release_bin("enforcer"), "demo", CONFIG);

    let sim = release_bin("training-sim");
    let mut training = daemon.launch(
        "--training",
        "demo-training",
        sim.to_str().context("path")?,
        &["--seconds", &TRAINING_SECONDS.to_string(), "--json"],
    );
    println!(
        "training: `enforcer launch --training demo-training -- training-sim` for {TRAINING_SECONDS} s; \
         inference joins at {INFERENCE_STARTS_AT} s for {INFERENCE_SECONDS} s\n"
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

    std::thread::sleep(Duration::from_secs_f64(INFERENCE_STARTS_AT));
    println!(">>> inference starts: `enforcer launch --pool inference -- cpu-hog --threads 2`");
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

/// Round trips of `wake-probe`, µs: how long this machine takes to wake a thread on another
/// CPU, with the CPUs idle and kept busy.
struct WakeLatency {
    idle_p50_us: f64,
    idle_p99_us: f64,
    busy_p50_us: f64,
    busy_p99_us: f64,
}

impl WakeLatency {
    /// About one second of probing, before the demo's workloads start.
    fn probe() -> anyhow::Result<Self> {
        let output = Command::new(release_bin("wake-probe"))
            .args(["--rounds", "2", "--pings", "300"])
            .output()
            .context("running wake-probe")?;
        if !output.status.success() {
            bail!("{}", String::from_utf8_lossy(&output.stderr).trim());
        }
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).context("wake-probe's report")?;
        let field = |case: &str, name: &str| {
            report[case][name]
                .as_f64()
                .with_context(|| format!("wake-probe's report has no {case}.{name}"))
        };
        Ok(Self {
            idle_p50_us: field("idle", "p50_us")?,
            idle_p99_us: field("idle", "p99_us")?,
            busy_p50_us: field("kept_busy", "p50_us")?,
            busy_p99_us: field("kept_busy", "p99_us")?,
        })
    }
}

fn summarize(
    report: &str,
    snapshot: &serde_json::Value,
    wake: Option<&WakeLatency>,
) -> anyhow::Result<()> {
    let report: serde_json::Value =
        serde_json::from_str(report.trim()).context("training-sim report")?;
    let steps: Vec<f64> = report["step_ms"]
        .as_array()
        .context("step_ms")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    // Split the steps by when they ended: before inference, during it, after it.
    let (mut clock, mut phases) = (0.0, [(0usize, 0.0f64); 3]);
    for step in &steps {
        clock += step / 1e3;
        let phase = if clock < INFERENCE_STARTS_AT {
            0
        } else if clock < INFERENCE_STARTS_AT + INFERENCE_SECONDS {
            1
        } else {
            2
        };
        phases[phase].0 += 1;
        phases[phase].1 += step / 1e3;
    }
    println!("\n== summary ==");
    let rates = phases.map(|(count, seconds)| (count > 0).then(|| count as f64 / seconds));
    for ((name, rate), (count, _)) in ["training alone", "with inference", "after inference"]
        .iter()
        .zip(rates)
        .zip(phases)
    {
        if let Some(rate) = rate {
            println!("{name:>16}: {rate:6.1} steps/s ({count} steps)");
        }
    }
    if let (Some(alone), Some(beside), Some(wake)) = (rates[0], rates[1], wake)
        && beside > alone * FASTER_BESIDE_INFERENCE
    {
        println!(
            "Training ran faster beside inference than alone. The likely cause is this machine, not the \
             enforcer: training alone leaves a CPU idle between its bursts, and here waking a \
             thread on an idle CPU took p99 {:.1} ms against {:.1} ms on CPUs kept busy \
             (wake-probe, above). On a VM an idle vCPU is handed back to the hypervisor, and a \
             busy host is slow to run it again; the offline pool's idle-class work keeps the \
             vCPUs busy, and the kernel preempts it at once for training.",
            wake.idle_p99_us / 1e3,
            wake.busy_p99_us / 1e3
        );
    }
    let job = snapshot["jobs"]
        .as_array()
        .and_then(|j| j.first())
        .context("demo job")?;
    println!(
        "sensor: {} run-queue waits, {} times training was enqueued behind inference, {} events delivered",
        job["waits"], job["behind_inference"], job["events_received"]
    );
    println!(
        "The enforcer placed the inference pool in an offline cgroup (cpu.idle, so the kernel \
         preempts it for training at every wakeup) and kept it off the cores reserved for \
         training; `enforcer status` above lists each decision with its trigger (contended: the \
         fast path, with its event-to-cgroup-write latency; demand_rose/fell: the slow path)."
    );
    Ok(())
}
