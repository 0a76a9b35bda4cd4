//! `cargo xtask demo`: the built-in scenario, reamer's job in half a minute. A training job
//! (the simulator, reporting its steps to the daemon as a PyTorch job does with
//! `python/reamer_progress.py`) runs alone for a while, then real inference starts beside it:
//! the inference worker serving the PP-OCR classifier over KServe v2 under an open-loop load,
//! and an offline job on a second worker. The live view is `enforcer observe`; the demo ends
//! with `enforcer status` and a table of what the mission is about: training's pace beside
//! inference against its pace alone, the offline items a second, and the online requests
//! within their SLO.

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use enforcer_common::protocol::Snapshot;
use reamer_tests::harness::{Daemon, Reaped, worker::OnlineWorker};

use crate::{
    bench::common::{
        cpus::machine_cpus,
        inference::{
            Inputs, LoadReport, OFFLINE_MLP, classifier_serve_args, launch_into_online_pool,
            read_load_report, reset_job, results_lines, spawn_classifier_load, worker_bin,
        },
        training::{ServingTraining, TrainingCommand, TrainingReport},
    },
    cargo::{build_release, is_root, release_bin, workspace_root},
    wake_probe::WakeLatency,
};

const INSTANCE: &str = "demo";
const TRAINING_JOB: &str = "demo-training";
const SLO_MS: f64 = 50.0;
const CONFIG: &str = "# written by `cargo xtask demo`\n[sensor]\nwait_threshold_us = 2000\n\n\
                      [[pool]]\nname = \"online\"\nkind = \"online\"\nmin_cores = 1\nslo_ms = 50\n\n\
                      [[pool]]\nname = \"offline\"\nkind = \"offline\"\n";
/// Training's pace alone, measured first.
const ALONE_SECONDS: f64 = 6.0;
/// Inference runs this long before training's pace beside it is measured: the online pool's
/// weight settles on three latency reports, one a second.
const INFERENCE_LEAD: Duration = Duration::from_secs(3);
/// Training's pace beside inference, measured next.
const BESIDE_SECONDS: f64 = 10.0;
/// Online requests a second: the co-location benchmark's rate, a small share of a CPU
/// (1.73 ms of CPU a request on the 2-vCPU VM).
const ONLINE_RATE: f64 = 40.0;
/// Offline items the job holds per CPU-second of the demo: about twice what the offline
/// worker ran the 1024×8 MLP at in the demo on the 2-vCPU VM (736 to 902 items/s, on the one
/// CPU the enforcer left it), so that the job outlasts the demo.
const JOB_ITEMS_PER_CPU_S: f64 = 2_000.0;
/// Beside inference this much faster than alone gets the summary's explanation (the phases'
/// rates move by a few percent from run to run).
const FASTER_BESIDE_INFERENCE: f64 = 1.1;

/// What the demo serves and runs, made once into target/demo; the offline job from its start.
fn prepare_inputs() -> anyhow::Result<Inputs> {
    let seconds = INFERENCE_LEAD.as_secs_f64() + BESIDE_SECONDS;
    let lines = (machine_cpus() as f64 * JOB_ITEMS_PER_CPU_S * seconds).ceil() as u64;
    let inputs = Inputs::prepare(&workspace_root().join("target/demo"), OFFLINE_MLP, lines)?;
    reset_job(&inputs.job);
    Ok(inputs)
}

/// Inference beside training: both workers launched into the daemon's pools, and the load.
struct Inference {
    online: OnlineWorker,
    offline: Reaped,
}

impl Inference {
    fn start(inputs: &Inputs) -> anyhow::Result<Self> {
        let engine = inputs.engine;
        let online = launch_into_online_pool(
            INSTANCE,
            &classifier_serve_args(&inputs.classifier, SLO_MS, engine)?,
            workspace_root().join("target/demo/online-worker.log"),
        );
        // Its log in a file, as the online worker's: the live view stays readable.
        let log = workspace_root().join("target/demo/offline-worker.log");
        let log =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let offline = Reaped(
            Command::new(release_bin("enforcer"))
                .args(["launch", "--pool", "offline", "--instance", INSTANCE, "--"])
                .arg(worker_bin())
                .args(inputs.offline_args(engine))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("launching the offline worker")?,
        );
        Ok(Self { online, offline })
    }

    fn load(&self, inputs: &Inputs, seconds: f64, seed: &str) -> anyhow::Result<Child> {
        spawn_classifier_load(
            &self.online.base,
            (&inputs.request, Some(inputs.request_header_length)),
            ONLINE_RATE,
            SLO_MS,
            seconds,
            seed,
        )
    }

    fn stop(self) {
        drop(self.offline);
        self.online.stop();
    }
}

/// One phase of the demo, as the summary reads it.
struct Phase {
    training: TrainingReport,
    /// Training's pace as the daemon had it from the job's own reports, at the phase's end.
    reported_steps_per_s: Option<f64>,
    offline_items_per_s: Option<f64>,
    online: Option<LoadReport>,
}

pub fn run() -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "the demo loads eBPF programs into the kernel: run it as root (sudo -E cargo xtask demo)"
        );
    }
    build_release()?;
    println!("== reamer demo: a training job, and inference in what it leaves ==");
    let wake = WakeLatency::probe(2, 300);
    match &wake {
        Ok(wake) => println!("this machine: {}", wake.describe()),
        Err(err) => println!("wake-probe: skipped ({err:#})"),
    }
    println!("preparing the classifier's requests and the offline job (target/demo)");
    let inputs = prepare_inputs()?;
    println!(
        "starting the enforcer (instance \"{INSTANCE}\"): an online pool \"online\" (SLO \
         {SLO_MS} ms, at least 1 core) and an offline pool \"offline\""
    );
    let daemon = Daemon::start_bin(&release_bin("enforcer"), INSTANCE, CONFIG);

    // Training through the daemon's launcher, so that it is the daemon's training job and its
    // steps reach the daemon; timed on request (`--serve`).
    let enforcer = release_bin("enforcer");
    let mut training = ServingTraining::start(
        &TrainingCommand::training_sim(&[])?.launched_as_training(TRAINING_JOB, INSTANCE)?,
    )?;
    let live_seconds = ALONE_SECONDS + INFERENCE_LEAD.as_secs_f64() + BESIDE_SECONDS;
    println!(
        ">>> training starts: `enforcer launch --training {TRAINING_JOB} -- training-sim`; its \
         pace alone for {ALONE_SECONDS} s. Live, once a second (`enforcer observe`):\n"
    );
    let observe = Reaped(
        Command::new(&enforcer)
            .args(["observe", "--instance", INSTANCE, "--interval", "1"])
            .spawn()
            .context("starting enforcer observe")?,
    );
    let started = Instant::now();
    training.begin(ALONE_SECONDS)?;
    let alone = Phase {
        training: training.report(ALONE_SECONDS)?,
        reported_steps_per_s: reported_pace(&daemon.snapshot()),
        offline_items_per_s: None,
        online: None,
    };

    println!(
        "\n>>> inference starts: `enforcer launch --pool online -- inference-worker online` \
         (the PP-OCR classifier over KServe v2, {ONLINE_RATE} requests/s) and `enforcer launch \
         --pool offline -- inference-worker offline` (a 1024×8 MLP job); training's pace \
         beside them for {BESIDE_SECONDS} s\n"
    );
    let inference = Inference::start(&inputs)?;
    let lead_load = Reaped(inference.load(&inputs, 60.0, "1000")?);
    std::thread::sleep(INFERENCE_LEAD);
    training.begin(BESIDE_SECONDS)?;
    drop(lead_load);
    let load = inference.load(&inputs, BESIDE_SECONDS - 0.3, "1")?;
    let (items_before, at) = (results_lines(&inputs.job), Instant::now());
    let beside_training = training.report(BESIDE_SECONDS)?;
    let offline_items_per_s =
        results_lines(&inputs.job).saturating_sub(items_before) as f64 / at.elapsed().as_secs_f64();
    let beside = Phase {
        training: beside_training,
        reported_steps_per_s: reported_pace(&daemon.snapshot()),
        offline_items_per_s: Some(offline_items_per_s),
        online: Some(read_load_report(load)?),
    };
    // The live view has shown the whole of both phases.
    std::thread::sleep(
        Duration::from_secs_f64(live_seconds).saturating_sub(started.elapsed())
            + Duration::from_millis(200),
    );
    drop(observe);
    let snapshot = daemon.snapshot();
    let status = Command::new(&enforcer)
        .args(["status", "--instance", INSTANCE])
        .output()
        .context("running enforcer status")?;
    println!(
        "\n== enforcer status, inference still running ==\n{}",
        String::from_utf8_lossy(&status.stdout)
    );
    inference.stop();
    training.stop();
    daemon.stop();

    println!("== summary ==\n{}", summary_table(&alone, &beside));
    if let (Ok(wake), true) = (
        &wake,
        beside.training.steps_per_s > alone.training.steps_per_s * FASTER_BESIDE_INFERENCE,
    ) {
        println!(
            "Training ran faster beside inference than alone. The likely cause is this machine, \
             not the enforcer: training alone leaves a CPU idle between its bursts, and here \
             waking a thread on an idle CPU took p99 {:.1} ms against {:.1} ms on CPUs kept busy \
             (wake-probe, above). On a VM an idle vCPU is handed back to the hypervisor, and a \
             busy host is slow to run it again; the offline pool's idle-class work keeps the \
             vCPUs busy, and the kernel preempts it at once for training.\n",
            wake.idle_p99_us / 1e3,
            wake.busy_p99_us / 1e3
        );
    }
    explain(&snapshot);
    Ok(())
}

/// Training's pace as the daemon has it from the job's own progress reports.
fn reported_pace(snapshot: &Snapshot) -> Option<f64> {
    snapshot.job(TRAINING_JOB)?.progress?.steps_per_s
}

/// The mission in one table: training's pace against alone, offline items a second, online
/// requests within the SLO.
fn summary_table(alone: &Phase, beside: &Phase) -> String {
    let reference = alone.training.steps_per_s;
    let row = |name: &str, phase: &Phase| {
        let online = phase.online.as_ref().map_or("–".to_owned(), |load| {
            format!(
                "{:.1}% of {} ({})",
                load.within_slo as f64 * 100.0 / load.sent.max(1) as f64,
                load.sent,
                load.p99_ms
                    .map_or("no answers".to_owned(), |ms| format!("p99 {ms:.1} ms"))
            )
        });
        format!(
            "| {name} | {:.1} | {} | {:.1}% | {} | {} |\n",
            phase.training.steps_per_s,
            phase
                .reported_steps_per_s
                .map_or("–".to_owned(), |pace| format!("{pace:.1}")),
            phase.training.steps_per_s / reference * 100.0,
            phase
                .offline_items_per_s
                .map_or("–".to_owned(), |items| format!("{items:.0}")),
            online,
        )
    };
    format!(
        "| phase | training steps/s | as the daemon saw it (the job's reports) | % of alone | \
         offline items/s | online within {SLO_MS:.0} ms |\n|---|---|---|---|---|---|\n{}{}",
        row("training alone", alone),
        row("beside inference, under reamer", beside)
    )
}

/// What the enforcer did, from its snapshot.
fn explain(snapshot: &Snapshot) {
    if let Some(job) = snapshot.job(TRAINING_JOB) {
        println!(
            "sensor: {} run-queue waits, {} times training was enqueued behind inference, {} \
             events delivered",
            job.waits, job.behind_inference, job.events_received
        );
    }
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
        "The enforcer put the offline worker in an idle-class group (the kernel preempts it for \
         training at every wakeup) and kept it off the cores it reserved for training, pausing \
         it for part of each second while training was tight (\"offline duty cycle\" in \
         `enforcer status` above); the online worker kept at least its one core, its weight \
         following its latency tail (\"online weight\"). The slow path follows training's \
         demand (\"training's demand rose\", \"fell\"). {}",
        match enforcement.reactions {
            0 => "The fast path moved no core: none of the sensor's events called for one \
                  (docs/enforcer.md, \"The fast path\", says when one does; the online pool's \
                  guaranteed core is never taken)."
                .to_owned(),
            n => format!(
                "{n} times a training thread queued behind inference made the fast path give \
                 that CPU's core to training at once (\"a training thread queued behind \
                 inference\")."
            ),
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(steps_per_s: f64, inference: bool) -> Phase {
        Phase {
            training: serde_json::from_value(serde_json::json!({
                "steps_per_s": steps_per_s, "step_ms_p50": 5.0, "step_ms_p99": 7.0,
                "cpu_s": 1.0, "seconds": 6.0
            }))
            .unwrap(),
            reported_steps_per_s: Some(steps_per_s - 1.0),
            offline_items_per_s: inference.then_some(812.4),
            online: inference.then_some(LoadReport {
                sent: 400,
                within_slo: 398,
                p50_ms: Some(3.0),
                p99_ms: Some(21.3),
            }),
        }
    }

    #[test]
    fn the_summary_sets_training_against_alone_beside_what_inference_got() {
        let table = summary_table(&phase(180.0, false), &phase(171.0, true));
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 4, "{table}");
        assert_eq!(
            rows[2],
            "| training alone | 180.0 | 179.0 | 100.0% | – | – |"
        );
        assert_eq!(
            rows[3],
            "| beside inference, under reamer | 171.0 | 170.0 | 95.0% | 812 | 99.5% of 400 (p99 \
             21.3 ms) |"
        );
    }
}
