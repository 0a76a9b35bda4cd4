//! The co-location benchmark: the training simulator beside online and offline inference,
//! under eleven scenarios, in short windows interleaved round by round.
//!
//! - Training: `training-sim`, one window's length, its seed fixed per round.
//! - Online: `inference-worker online` serving the PP-OCR text-direction classifier (a real
//!   model, ~6 ms per item here) under an open-loop Poisson load from `load-gen`, with an SLO.
//!   One worker, started with the run, serves every scenario but reamer's. Under reamer the
//!   worker is started through the enforcer (`enforcer launch --pool online`), as a user would
//!   start it, so that it follows the pool's core grants and tells the enforcer its SLO need;
//!   the run's worker waits in a group of its own meanwhile.
//! - Offline: `inference-worker offline` over a job of a synthetic MLP (small inputs, ~0.5 ms
//!   per item), started afresh in each window on a reset job.
//!
//! Every round runs each scenario once, in an order rotated by the round, so that the VM's
//! drift spreads over all of them, and first measures offline inference alone (its
//! inferences per CPU-second, the yardstick of "what the idle CPU allows"). Slowdowns are
//! paired within a round: the same seed, minutes apart at most.

pub mod plot;
pub mod report;

use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use enforcer_common::cpu_list;
use reamer_tests::{
    baselines::{self, Controller},
    harness::{
        Daemon, Reaped,
        cgroups::{self, Group},
        worker::OnlineWorker,
    },
    measure::proc_stats::{JIFFIES_PER_S, node_jiffies, process_jiffies, resident_kib},
};
use serde::{Deserialize, Serialize};

use self::report::{Scenario, SloNeeds, Window};
use crate::{
    cargo::{release_bin, workspace_root},
    wake_probe::WakeLatency,
};

const INSTANCE: &str = "bench-colo";
/// The group the run's online worker waits in during reamer's windows.
const STANDBY: &str = "online-standby";
/// The online SLO and load: a seventh to a quarter of one CPU of classifier work at this
/// rate, depending on the host's CPU.
pub const SLO_MS: f64 = 50.0;
pub const ONLINE_RATE: f64 = 40.0;
/// The heavy online load of the two heavy-online scenarios, as the CPUs its classifier work
/// takes: half of the online pool's one guaranteed core, which is also what the static
/// partition's core gives online inference where offline inference wants it too (two groups
/// at the same weight). The rate is derived from the worker's CPU per request, measured at
/// the start of the run.
pub const HEAVY_ONLINE_CPUS: f64 = 0.5;
/// How long the online worker's CPU per request is measured at the start, alone.
const ONLINE_CALIBRATION: Duration = Duration::from_secs(3);
/// Koordinator's default CPU suppress threshold.
const SUPPRESS_THRESHOLD: f64 = 0.65;
/// Offline inference runs this long alone before its rate is measured: its start (model,
/// plan) is over by then.
const OFFLINE_LEAD: Duration = Duration::from_millis(600);
/// In every window, inference runs this long before training starts, offline work and online
/// traffic both, so that training arrives at a node already serving, as it does in
/// production: online traffic does not start with training. reamer's pool weight settles in
/// this time: the worker reports its latency once a second, and the weight needs three
/// reports to come down from `cpu_weight` (50) to `min_cpu_weight` (10). With the 0.6 s lead
/// and the traffic starting with training that this replaced, each 4 s window measured about
/// three seconds of a daemon just started, its weight above the floor, where a node serving
/// for hours sits at the floor while the tail has room.
const INFERENCE_LEAD: Duration = Duration::from_millis(3500);
/// The lead's traffic is seeded from here on, by round: apart from the windows' seeds.
const LEAD_SEED_BASE: u64 = 1_000_000;
/// How long the offline worker may take to finish its first items when alone.
const OFFLINE_START_LIMIT: Duration = Duration::from_secs(20);
/// The offline job's length on the smallest machine: 2 CPUs at ~3,600 items per CPU-second
/// (the fastest seen here) for a 4 s window, with room to spare.
const MIN_JOB_LINES: u64 = 60_000;
/// Items per CPU-second the job is sized for: above the fastest seen (on tract ~3,600 here,
/// ~3,300 on a 16-CPU Xeon; on ONNX Runtime ~4,000 here, up to 5,600 over a second).
const JOB_ITEMS_PER_CPU_S: f64 = 8_000.0;

/// Lines enough that the offline job outlasts a window with every CPU working on it. A job
/// that ran out mid-window counted only what it had done: 60,000 lines lasted about a second
/// of a 4 s window on a 16-CPU host, which then showed offline inference using 3 of the 12
/// CPUs it left idle.
fn job_lines(cpus: usize, window: Duration) -> u64 {
    let lines = (window + INFERENCE_LEAD).as_secs_f64() * cpus as f64 * JOB_ITEMS_PER_CPU_S;
    (lines.ceil() as u64).max(MIN_JOB_LINES)
}

/// The training simulator's report (the fields the benchmark uses).
#[derive(Deserialize)]
struct TrainingReport {
    steps_per_s: f64,
    step_ms_p50: f64,
    step_ms_p99: f64,
    cpu_s: f64,
    seconds: f64,
    runqueue_wait_s: f64,
}

/// `load-gen`'s report.
#[derive(Deserialize, Serialize, Debug, Clone)]
pub struct LoadReport {
    pub sent: u64,
    pub within_slo: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// How the online requests carry their image.
#[derive(Debug, Clone, Copy)]
enum RequestBody {
    /// KServe's binary tensor data: what the scenarios send.
    Binary,
    /// JSON numbers: measured at the start, for what binary saves.
    Json,
}

/// Files the benchmark generates once: the offline model and job, the online request.
struct Inputs {
    classifier: PathBuf,
    /// The online request body: a JSON header of `request_header_length` bytes, then the
    /// image as binary FP32 (KServe's binary tensor data extension).
    request: PathBuf,
    request_header_length: usize,
    /// The same request as plain JSON, its image as numbers: only measured, at the start.
    request_json: PathBuf,
    mlp: PathBuf,
    job: PathBuf,
    /// Lines in the job (`job_lines`).
    job_lines: u64,
    /// The workers' engine (`worker_engine`).
    engine: &'static str,
}

pub(crate) fn worker_bin() -> PathBuf {
    release_bin("inference-worker")
}

pub(crate) fn run_ok(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The online requests to the PP-OCR classifier, written into `dir`: one 3×48×192 "image" as
/// binary tensor data (returned with the length of its JSON header), and the same as JSON
/// numbers.
pub(crate) fn write_classifier_requests(dir: &Path) -> anyhow::Result<(PathBuf, usize, PathBuf)> {
    // One 3×48×192 "image" (a horizontal gradient, normalized the way PP-OCR feeds it), sent
    // as binary tensor data the way Triton's clients send it: as JSON numbers it is 544 KB,
    // and parsing them cost the worker more CPU than the model did.
    let request = dir.join("cls-request.bin");
    let item = 3 * 48 * 192;
    let image: Vec<f32> = (0..item)
        .map(|i| ((i % 192) as f32 / 191.0 - 0.5) / 0.5)
        .collect();
    let header = serde_json::json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192],
        "datatype": "FP32", "parameters": {"binary_data_size": item * 4}}]})
    .to_string();
    std::fs::write(
        &request,
        reamer_tests::harness::worker::binary_body(&header, &image),
    )?;
    let request_json = dir.join("cls-request.json");
    std::fs::write(
        &request_json,
        serde_json::json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192],
            "datatype": "FP32", "data": image}]})
        .to_string(),
    )?;
    Ok((request, header.len(), request_json))
}

/// `inference-worker` arguments that write the offline job's model: a synthetic MLP of 16
/// inputs, 8 layers of 1024 and 10 outputs (docs/inference-worker.md, "Models").
pub(crate) const OFFLINE_MLP: [&str; 5] = ["mlp-model", "--width", "1024", "--layers", "8"];

fn prepare_inputs(window: Duration) -> anyhow::Result<Inputs> {
    let root = workspace_root();
    let dir = root.join("target/bench/colocation");
    std::fs::create_dir_all(&dir)?;
    let classifier = root.join("target/models/pp-ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    if !classifier.exists() {
        bail!(
            "{} is missing: the bench fetches it first",
            classifier.display()
        );
    }
    let (request, request_header_length, request_json) = write_classifier_requests(&dir)?;
    let mlp = dir.join("mlp-1024x8.onnx");
    run_ok(
        Command::new(worker_bin())
            .args(OFFLINE_MLP)
            .arg("--out")
            .arg(&mlp),
        "inference-worker mlp-model",
    )?;
    let job = dir.join("job");
    let job_lines = job_lines(cpu_count(), window);
    ensure_offline_job(&mlp, &job, job_lines)?;
    Ok(Inputs {
        classifier,
        request,
        request_header_length,
        request_json,
        mlp,
        job,
        job_lines,
        engine: worker_engine(),
    })
}

pub(crate) fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The upper half of the CPUs (at least one): where the static partition pins inference.
pub(crate) fn upper_half_cpus(cpus: usize) -> String {
    let first = cpus / 2;
    if first + 1 >= cpus {
        format!("{}", cpus - 1)
    } else {
        format!("{first}-{}", cpus - 1)
    }
}

/// An offline job of `lines` random inputs for `model` in `job`, made unless one of that
/// length is there already (it is reused from run to run: making it takes a while).
pub(crate) fn ensure_offline_job(model: &Path, job: &Path, lines: u64) -> anyhow::Result<()> {
    let present = std::fs::read(job.join("inputs.jsonl"))
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0);
    if present != lines {
        let _ = std::fs::remove_dir_all(job);
        run_ok(
            Command::new(worker_bin())
                .args(["make-job", "--model"])
                .arg(model)
                .arg("--dir")
                .arg(job)
                .args(["--lines", &lines.to_string(), "--seed", "1"]),
            "inference-worker make-job",
        )?;
    }
    Ok(())
}

/// Lines in the job's results so far: items the offline worker finished.
pub(crate) fn results_lines(job: &Path) -> u64 {
    std::fs::read(job.join("results.jsonl"))
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0)
}

pub(crate) fn reset_job(job: &Path) {
    let _ = std::fs::remove_file(job.join("results.jsonl"));
    let _ = std::fs::remove_file(job.join("checkpoint.json"));
}

/// `inference-worker online`'s arguments after `--listen`: the classifier under the SLO, on
/// `engine`.
fn online_args(inputs: &Inputs, engine: &str) -> anyhow::Result<Vec<String>> {
    classifier_serve_args(&inputs.classifier, SLO_MS, engine)
}

/// The engine the benchmarks' workers run, named to each with `--engine` so that no window
/// depends on `auto`'s timing at start: ONNX Runtime where `cargo xtask` put its library
/// (target/onnxruntime/, where the release worker finds it), tract otherwise.
pub(crate) fn worker_engine() -> &'static str {
    if crate::models::onnxruntime_library().is_file() {
        "onnxruntime"
    } else {
        "tract"
    }
}

/// `inference-worker online`'s arguments after `--listen` that serve the PP-OCR classifier
/// at `classifier` under an SLO of `slo_ms`, on `engine`.
pub(crate) fn classifier_serve_args(
    classifier: &Path,
    slo_ms: f64,
    engine: &str,
) -> anyhow::Result<Vec<String>> {
    let model = classifier.to_str().context("utf-8 path")?;
    let slo_ms = slo_ms.to_string();
    Ok(["--model", model]
        .into_iter()
        .chain(reamer_tests::harness::worker::CLASSIFIER_SERVE_ARGS)
        .chain(["--slo-ms", &slo_ms, "--engine", engine])
        .map(str::to_owned)
        .collect())
}

/// The stderr of the online worker the enforcer started, the last one.
fn launched_online_log() -> PathBuf {
    workspace_root().join("target/bench/colocation/online-worker-launched.log")
}

fn offline_args(inputs: &Inputs, engine: &str) -> Vec<String> {
    vec![
        "offline".into(),
        "--model".into(),
        inputs.mlp.display().to_string(),
        "--job".into(),
        inputs.job.display().to_string(),
        "--batch".into(),
        "8".into(),
        "--engine".into(),
        engine.into(),
    ]
}

/// `load-gen` against the classifier served at `base`: an open-loop Poisson load of `rate`
/// requests a second for `seconds`, seeded by `seed`, each request the file `body.0` (binary
/// tensor data behind a JSON header of `body.1` bytes, or plain JSON where that is None).
/// Its report comes on stdout (`read_load_report`).
pub(crate) fn spawn_classifier_load(
    base: &str,
    body: (&Path, Option<usize>),
    rate: f64,
    slo_ms: f64,
    seconds: f64,
    seed: &str,
) -> anyhow::Result<Child> {
    let mut load = Command::new(release_bin("load-gen"));
    load.args(["--url", &format!("{base}/v2/models/cls/infer")])
        .arg("--body")
        .arg(body.0);
    if let Some(header_length) = body.1 {
        load.args(["--inference-header-length", &header_length.to_string()]);
    }
    load.args([
        "--rate",
        &format!("{rate:.1}"),
        "--slo-ms",
        &slo_ms.to_string(),
        "--seed",
        seed,
        "--seconds",
        &format!("{seconds:.3}"),
    ])
    .stdout(Stdio::piped())
    .spawn()
    .context("spawning load-gen")
}

/// The inference groups `reamer/<instance>/{online,offline}`, made again where an enforcer
/// that found them empty at shutdown removed them, and brought back to no control, with the
/// run's online worker (`online_pid`) back in the online one: every window starts so.
pub(crate) fn reset_inference_groups(
    instance: &str,
    online_pid: u32,
) -> anyhow::Result<(Group, Group)> {
    let online = Group::ensure(instance, "online")?;
    let offline = Group::ensure(instance, "offline")?;
    online.reset()?;
    offline.reset()?;
    // The enforcer takes an online worker out of the idle `reamer` tree of the cpu
    // hierarchy; every scenario starts with it back in its own group.
    online.add_process(online_pid)?;
    Ok((online, offline))
}

/// The offline worker with `args`: through the daemon's launcher into its offline pool, or
/// started directly into `group`, its stderr in `log`.
pub(crate) fn spawn_offline_worker(
    args: &[String],
    daemon: Option<&Daemon>,
    group: &Group,
    log: &Path,
) -> anyhow::Result<Reaped> {
    let worker = worker_bin();
    let worker = worker.to_str().context("utf-8 path")?;
    match daemon {
        Some(daemon) => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Ok(Reaped(daemon.launch("--pool", "offline", worker, &args)))
        }
        None => {
            let log_file = std::fs::File::create(log)
                .with_context(|| format!("creating {}", log.display()))?;
            let child = Reaped(
                Command::new(worker)
                    .args(args)
                    .stdout(Stdio::null())
                    .stderr(log_file)
                    .spawn()
                    .context("spawning the offline worker")?,
            );
            group.add_process(child.id())?;
            Ok(child)
        }
    }
}

/// The online worker of a reamer window, serving with `serve_args`: started by the daemon of
/// `instance` into its online pool, after the run's own worker (`run_worker_pid`) has left
/// the pool's group for `standby` (the enforcer would otherwise adopt it too).
pub(crate) fn launch_online_worker(
    instance: &str,
    standby: &Group,
    run_worker_pid: u32,
    serve_args: &[String],
    log: PathBuf,
) -> anyhow::Result<OnlineWorker> {
    standby.add_process(run_worker_pid)?;
    let mut launch = Command::new(release_bin("enforcer"));
    launch
        .args(["launch", "--pool", "online", "--instance", instance, "--"])
        .arg(worker_bin());
    let args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
    Ok(OnlineWorker::start_with(launch, &args, log))
}

/// `enforcer observe --json --interval INTERVAL` on the daemon of `instance`, as a user
/// watching it runs it, its trace in `path` (a trace `enforcer replay` reads).
pub(crate) fn spawn_observer_into(
    instance: &str,
    interval: &str,
    path: &Path,
) -> anyhow::Result<Child> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let trace =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Command::new(release_bin("enforcer"))
        .args([
            "observe",
            "--json",
            "--interval",
            interval,
            "--instance",
            instance,
        ])
        .stdout(trace)
        .stderr(Stdio::null())
        .spawn()
        .context("spawning enforcer observe")
}

/// The stderr of the offline worker started without the enforcer, the last one.
fn offline_log() -> PathBuf {
    workspace_root().join("target/bench/colocation/offline-worker.log")
}

fn decision_log() -> PathBuf {
    reamer_tests::harness::decision_log_of(INSTANCE)
}

/// Event-to-cgroup-write latencies (µs) of the fast-path decisions in the daemon's log.
fn fast_path_reactions_us() -> Vec<f64> {
    std::fs::read_to_string(decision_log())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|d| d["trigger"] == "contended")
        .filter_map(|d| d["event_to_write_ns"].as_u64())
        .map(|ns| ns as f64 / 1e3)
        .collect()
}

/// The persistent parts of a run: the online worker and the groups.
struct Bench {
    inputs: Inputs,
    cpus: usize,
    window: Duration,
    online: OnlineWorker,
    online_group: Group,
    offline_group: Group,
    /// Where the run's online worker waits while the enforcer's own serves (reamer).
    standby_group: Group,
    /// training's cgroup2 group, for PSI; None where no cgroup2 tree is mounted.
    training_group: Option<PathBuf>,
    /// The online worker's CPU time per request, alone, ms.
    online_cpu_ms_per_request: f64,
    /// The same with the request as plain JSON: what the binary body saves.
    online_cpu_ms_per_json_request: f64,
    /// How the baselines ran where that varies by host (the PSI controller's source).
    notes: Vec<&'static str>,
}

/// How a window's scenario is held in place while it runs.
enum Control {
    None,
    Daemon(Daemon),
    Controller(Controller),
}

impl Bench {
    fn start(window: Duration, progress: &dyn Fn(&str)) -> anyhow::Result<Self> {
        let inputs = prepare_inputs(window)?;
        progress("starting the online worker (PP-OCR cls; it profiles itself first)");
        let log = workspace_root().join("target/bench/colocation/online-worker.log");
        let args = online_args(&inputs, inputs.engine)?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let online = OnlineWorker::start_with(Command::new(worker_bin()), &args, log);
        let online_group = Group::ensure(INSTANCE, "online")?;
        online_group.reset()?;
        online_group.add_process(online.child.id())?;
        let offline_group = Group::ensure(INSTANCE, "offline")?;
        offline_group.reset()?;
        let standby_group = Group::ensure(INSTANCE, STANDBY)?;
        standby_group.reset()?;
        let training_group = cgroups::unified_group(INSTANCE, "training").ok();
        let mut bench = Self {
            inputs,
            cpus: cpu_count(),
            window,
            online,
            online_group,
            offline_group,
            standby_group,
            training_group,
            online_cpu_ms_per_request: 0.0,
            online_cpu_ms_per_json_request: 0.0,
            notes: Vec::new(),
        };
        progress("measuring the online worker's CPU per request, alone, binary body and JSON");
        bench.online_cpu_ms_per_request = bench.calibrate_online(RequestBody::Binary)?;
        bench.online_cpu_ms_per_json_request = bench.calibrate_online(RequestBody::Json)?;
        Ok(bench)
    }

    /// The heavy-online scenarios' request rate: `HEAVY_ONLINE_CPUS` of the worker's work.
    fn heavy_online_rate(&self) -> f64 {
        HEAVY_ONLINE_CPUS * 1e3 / self.online_cpu_ms_per_request
    }

    /// `load-gen` against the online worker at `base` at `rate` for `seconds`, seeded by
    /// `seed`, with the binary request body.
    fn spawn_load(&self, base: &str, rate: f64, seconds: f64, seed: &str) -> anyhow::Result<Child> {
        self.spawn_load_with(RequestBody::Binary, base, rate, seconds, seed)
    }

    /// `spawn_load` with the request body `body`.
    fn spawn_load_with(
        &self,
        body: RequestBody,
        base: &str,
        rate: f64,
        seconds: f64,
        seed: &str,
    ) -> anyhow::Result<Child> {
        let body: (&Path, Option<usize>) = match body {
            RequestBody::Binary => (
                &self.inputs.request,
                Some(self.inputs.request_header_length),
            ),
            RequestBody::Json => (&self.inputs.request_json, None),
        };
        spawn_classifier_load(base, body, rate, SLO_MS, seconds, seed)
    }

    /// The online worker alone under the base load, sent `body`: its CPU time per request
    /// answered, ms.
    fn calibrate_online(&mut self, body: RequestBody) -> anyhow::Result<f64> {
        self.reset_groups()?;
        let jiffies = process_jiffies(self.online.child.id());
        let load = self.spawn_load_with(
            body,
            &self.online.base,
            ONLINE_RATE,
            ONLINE_CALIBRATION.as_secs_f64(),
            "1",
        )?;
        let report = read_load_report(load)?;
        let cpu_ms =
            (process_jiffies(self.online.child.id()) - jiffies) as f64 / JIFFIES_PER_S * 1e3;
        if report.sent == 0 || cpu_ms <= 0.0 {
            bail!(
                "the online worker answered no load alone ({} requests sent, {cpu_ms:.0} ms of \
                 CPU): see its log, {}",
                report.sent,
                self.online.log.display()
            );
        }
        Ok(cpu_ms / report.sent as f64)
    }

    /// Offline inference alone on the machine for one window: its inferences per CPU-second.
    fn calibrate_offline(&mut self) -> anyhow::Result<f64> {
        self.reset_groups()?;
        reset_job(&self.inputs.job);
        let offline = self.spawn_offline(None, self.inputs.engine)?;
        std::thread::sleep(OFFLINE_LEAD);
        // Under heavy steal the worker's start (model, plan) can outlast the lead: measure
        // from its first results on.
        let first_results_by = Instant::now() + OFFLINE_START_LIMIT;
        while results_lines(&self.inputs.job) == 0 && Instant::now() < first_results_by {
            std::thread::sleep(Duration::from_millis(50));
        }
        let (items, jiffies) = (
            results_lines(&self.inputs.job),
            process_jiffies(offline.id()),
        );
        std::thread::sleep(self.window.min(Duration::from_secs(2)));
        let items = results_lines(&self.inputs.job) - items;
        let cpu_s = (process_jiffies(offline.id()) - jiffies) as f64 / JIFFIES_PER_S;
        drop(offline);
        if cpu_s <= 0.0 || items == 0 {
            bail!(
                "offline inference made no progress alone ({items} items, {cpu_s:.2} CPU-s in \
                 {:.1} s): see the worker's log, {}",
                self.window.min(Duration::from_secs(2)).as_secs_f64(),
                offline_log().display()
            );
        }
        Ok(items as f64 / cpu_s)
    }

    /// Starts the offline worker on `engine` in its group, directly or through the daemon's
    /// launcher.
    fn spawn_offline(&self, daemon: Option<&Daemon>, engine: &str) -> anyhow::Result<Reaped> {
        spawn_offline_worker(
            &offline_args(&self.inputs, engine),
            daemon,
            &self.offline_group,
            &offline_log(),
        )
    }

    fn reset_groups(&mut self) -> anyhow::Result<()> {
        (self.online_group, self.offline_group) =
            reset_inference_groups(INSTANCE, self.online.child.id())?;
        Ok(())
    }

    /// The enforcer's config in `scenario`: the enforcer's own defaults, so that "reamer"
    /// measures what an operator gets, but for the options a scenario compares.
    fn daemon_config(&self, scenario: Scenario) -> String {
        let policy = match scenario {
            Scenario::ReamerOfflineNotPaused => {
                "[policy]\npause_offline_when_training_short = false\n\n"
            }
            // The enforcer's defaults before either option: offline inference neither paused
            // nor kept off training's cores.
            Scenario::ReamerOfflineOnTrainingCores => {
                "[policy]\npause_offline_when_training_short = false\n\
                 offline_on_training_cores = true\n\n"
            }
            Scenario::ReamerByPace => "[policy]\nharvest_by_pace = true\n\n",
            _ => "",
        };
        format!(
            "{policy}[[pool]]\nname = \"online\"\nkind = \"online\"\nmin_cores = {}\nslo_ms = {}\n\n\
             [[pool]]\nname = \"offline\"\nkind = \"offline\"\n",
            // The static partition's share, so that the heavy-online pair compares how each
            // keeps the same cores for online inference (one on a 2-CPU machine; with one on
            // 16 CPUs, online inference met its SLO less often than with the partition's 8).
            cpu_list::count(&upper_half_cpus(self.cpus)),
            SLO_MS as u64,
        )
    }

    /// The online worker of a reamer window: started by the enforcer into the online pool,
    /// after the run's worker has left the pool's group for the standby one (the enforcer
    /// would otherwise adopt it too).
    fn launch_online(&self, engine: &str) -> anyhow::Result<OnlineWorker> {
        launch_online_worker(
            INSTANCE,
            &self.standby_group,
            self.online.child.id(),
            &online_args(&self.inputs, engine)?,
            launched_online_log(),
        )
    }

    /// One window of `scenario`, with the seed of `round`.
    fn window(&mut self, scenario: Scenario, round: usize) -> anyhow::Result<Window> {
        self.reset_groups()?;
        reset_job(&self.inputs.job);
        let inference = scenario != Scenario::Alone;
        let setup = scenario.setup();
        match setup {
            Scenario::StaticPartition => {
                let cpus = upper_half_cpus(self.cpus);
                self.online_group.set_cpus(&cpus)?;
                self.offline_group.set_cpus(&cpus)?;
            }
            Scenario::LowShares => {
                // The smallest weight cgroup v1 takes (what Kubernetes gives best-effort pods).
                self.online_group.set_shares(2)?;
                self.offline_group.set_shares(2)?;
            }
            _ => {}
        }
        let daemon = (setup == Scenario::Reamer).then(|| {
            Daemon::start_bin_with_fresh_log(
                &release_bin("enforcer"),
                INSTANCE,
                &self.daemon_config(scenario),
            )
        });
        // Started before offline inference and training, as the run's worker was: its
        // start-up profile meets a quiet machine.
        let engine = scenario.engine(self.inputs.engine);
        let launched_online = daemon
            .as_ref()
            .map(|_| self.launch_online(engine))
            .transpose()?;
        let online_worker = launched_online.as_ref().unwrap_or(&self.online);
        let offline = if inference {
            Some(self.spawn_offline(daemon.as_ref(), engine)?)
        } else {
            None
        };
        let mut control = match (daemon, &offline, setup) {
            (Some(daemon), _, _) => Control::Daemon(daemon),
            (None, Some(offline), Scenario::UtilizationPoller) => {
                Control::Controller(baselines::utilization_poller(
                    self.offline_group.clone(),
                    offline.id(),
                    self.cpus,
                    SUPPRESS_THRESHOLD,
                    Duration::from_secs(1),
                ))
            }
            (None, Some(_), Scenario::PsiTrigger) => {
                let group = self
                    .training_group
                    .as_ref()
                    .context("the PSI scenario needs a cgroup2 tree for training's pressure")?;
                Control::Controller(baselines::psi_trigger(
                    group.join("cpu.pressure"),
                    self.offline_group.clone(),
                    Duration::from_millis(50),
                    Duration::from_millis(500),
                    Duration::from_secs(1),
                ))
            }
            _ => Control::None,
        };
        let rate = if scenario.heavy_online() {
            self.heavy_online_rate()
        } else {
            ONLINE_RATE
        };
        if inference {
            // The lead's traffic, at the window's rate, from a seed of its own; its report is
            // left out: the window's figures are training's time.
            let lead = self.spawn_load(
                &online_worker.base,
                rate,
                INFERENCE_LEAD.as_secs_f64(),
                &(LEAD_SEED_BASE + round as u64).to_string(),
            )?;
            read_load_report(lead)?;
        }

        let seed = (round + 1).to_string();
        let seconds = format!("{:.3}", self.window.as_secs_f64());
        let sim = release_bin("training-sim");
        let sim_args = ["--seconds", &seconds, "--json", "--seed", &seed];
        let offline_items_before = results_lines(&self.inputs.job);
        let online_pid = online_worker.child.id();
        let online_jiffies = process_jiffies(online_pid);
        let offline_jiffies = offline.as_ref().map(|o| process_jiffies(o.id()));
        let daemon_pid = match &control {
            Control::Daemon(daemon) => Some(daemon.pid()),
            _ => None,
        };
        let daemon_jiffies = daemon_pid.map(process_jiffies);
        let node_before = node_jiffies()?;
        let started = Instant::now();
        let training = match &control {
            Control::Daemon(daemon) => daemon.launch(
                "--training",
                "train",
                sim.to_str().context("utf-8 path")?,
                &sim_args,
            ),
            _ => Command::new(&sim)
                .args(sim_args)
                .stdout(Stdio::piped())
                .spawn()
                .context("spawning training-sim")?,
        };
        if let Some(group) = &self.training_group {
            // Membership only: no controller, so scheduling is unchanged; PSI reads it.
            let _ = std::fs::write(group.join("cgroup.procs"), training.id().to_string());
        }
        let observer = (scenario == Scenario::ReamerObserved)
            .then(|| spawn_observer(round))
            .transpose()?;
        let load = inference
            .then(|| {
                self.spawn_load(
                    &online_worker.base,
                    rate,
                    (self.window.as_secs_f64() - 0.3).max(0.5),
                    &seed,
                )
            })
            .transpose()?;
        let output = training.wait_with_output()?;
        let elapsed = started.elapsed().as_secs_f64();
        if let Some(mut observer) = observer {
            let _ = observer.kill();
            let _ = observer.wait();
        }
        // The share of the machine's CPU time the hypervisor gave to other guests.
        let node_after = node_jiffies()?;
        let steal_pct = node_after.steal_pct_since(&node_before);
        let cpus_left_idle = node_after.idle_cpus_since(&node_before, elapsed);
        let offline_done = results_lines(&self.inputs.job);
        if offline_done >= self.inputs.job_lines {
            bail!(
                "the offline job ({} lines) ran out during a window, so its throughput would be \
                 undercounted: job_lines in xtask/src/bench/colocation/mod.rs sizes it for {} items \
                 per CPU-second",
                self.inputs.job_lines,
                JOB_ITEMS_PER_CPU_S
            );
        }
        let offline_items = offline_done - offline_items_before;
        let online_cpu_s = (process_jiffies(online_pid) - online_jiffies) as f64 / JIFFIES_PER_S;
        let offline_cpu_s = offline.as_ref().zip(offline_jiffies).map(|(o, before)| {
            process_jiffies(o.id()).saturating_sub(before) as f64 / JIFFIES_PER_S
        });
        let enforcer_cpu_pct = daemon_pid.zip(daemon_jiffies).map(|(pid, before)| {
            (process_jiffies(pid) - before) as f64 / JIFFIES_PER_S / elapsed * 100.0
        });
        let enforcer_rss_mib = daemon_pid
            .and_then(resident_kib)
            .map(|kib| kib as f64 / 1024.0);
        if !output.status.success() {
            bail!(
                "training-sim failed in scenario {} ({})",
                scenario.name(),
                output.status
            );
        }
        let report: TrainingReport =
            serde_json::from_slice(&output.stdout).context("reading training-sim's report")?;
        let online = load.map(read_load_report).transpose()?;
        drop(offline);
        if let Some(worker) = launched_online {
            worker.stop();
        }
        let (mut reaction_us, mut controller_cpu_pct, mut slo_needs) = (Vec::new(), None, None);
        match std::mem::replace(&mut control, Control::None) {
            Control::Daemon(daemon) => {
                slo_needs = Some(SloNeeds::from_daemon_log(&daemon.stop()));
                reaction_us = fast_path_reactions_us();
            }
            Control::Controller(controller) => {
                let report = controller.stop(&self.offline_group)?;
                // How long after training started the controller first tightened the quota.
                reaction_us.extend(
                    report
                        .tightened_at
                        .iter()
                        .find(|t| **t >= started)
                        .map(|t| t.duration_since(started).as_secs_f64() * 1e6),
                );
                controller_cpu_pct = Some(report.cpu_s / elapsed * 100.0);
                if let Some(note) = report.note
                    && !self.notes.contains(&note)
                {
                    self.notes.push(note);
                }
            }
            Control::None => {}
        }
        Ok(Window {
            scenario,
            round,
            steps_per_s: report.steps_per_s,
            step_ms_p50: report.step_ms_p50,
            step_ms_p99: report.step_ms_p99,
            training_cpus: report.cpu_s / report.seconds,
            training_runqueue_wait_ms_per_s: report.runqueue_wait_s * 1e3 / report.seconds,
            online,
            online_cpus: online_cpu_s / elapsed,
            offline_items_per_s: inference.then(|| offline_items as f64 / elapsed),
            offline_cpus: offline_cpu_s.map(|cpu_s| cpu_s / elapsed),
            reaction_us,
            enforcer_cpu_pct: enforcer_cpu_pct.or(controller_cpu_pct),
            enforcer_rss_mib,
            steal_pct,
            cpus_left_idle,
            slo_needs,
        })
    }

    fn finish(self) {
        let _ = self.online.stop();
        cgroups::remove_groups(INSTANCE, &["online", "offline", STANDBY, "training"]);
    }
}

/// Waits for `load-gen` and reads its report.
pub(crate) fn read_load_report(mut load: Child) -> anyhow::Result<LoadReport> {
    let mut text = String::new();
    load.stdout
        .take()
        .context("load-gen stdout")?
        .read_to_string(&mut text)?;
    load.wait()?;
    serde_json::from_str::<LoadReport>(&text)
        .with_context(|| format!("reading load-gen's report {text:?}"))
}

/// Everything one run measured.
#[derive(Serialize, Deserialize)]
pub struct Measured {
    /// The windows of the kept rounds, numbered 0.. in the order they were kept.
    pub windows: Vec<Window>,
    /// The scenarios run, training alone first.
    pub scenarios: Vec<Scenario>,
    /// Per kept round: offline inferences per CPU-second, alone.
    pub offline_per_cpu_s: Vec<f64>,
    pub cpus: usize,
    /// Rounds kept: at most the rounds asked for, fewer where the attempts ran out.
    pub rounds: usize,
    pub rounds_asked: usize,
    pub window_s: f64,
    /// Inference's lead before training in each window, s (`INFERENCE_LEAD`).
    pub lead_s: f64,
    /// The online worker's CPU time per request alone, ms, and the heavy-online scenarios'
    /// rate derived from it.
    pub online_cpu_ms_per_request: f64,
    /// The same with the image sent as JSON numbers rather than binary tensor data.
    pub online_cpu_ms_per_json_request: f64,
    pub heavy_online_rate: f64,
    /// A round with a window where the host stole more than this share of the CPU is run
    /// again.
    pub max_steal_pct: f64,
    /// The rounds run again, with the worst steal of a window of theirs.
    pub discarded: Vec<DiscardedRound>,
    pub notes: Vec<String>,
    /// The engine the workers ran (`--engine`), but in the scenarios that name another.
    /// Runs saved before the engine choice ran tract.
    #[serde(default = "tract")]
    pub engine: String,
    /// How slowly the host woke an idle vCPU just before the rounds and just after them: what
    /// training alone, which leaves a vCPU idle, paid in this run's regime. None where
    /// `wake-probe` could not run (one CPU).
    pub wake_before: Option<WakeLatency>,
    pub wake_after: Option<WakeLatency>,
}

impl crate::bench::saved::Windows for Measured {
    fn windows_measured(&self) -> usize {
        self.windows.len()
    }
}

/// A round set aside because the host stole too much CPU during one of its windows.
#[derive(Serialize, Deserialize)]
pub struct DiscardedRound {
    /// The kept round it would have been (its seed and scenario order).
    pub round: usize,
    pub worst_steal_pct: f64,
    pub worst_scenario: Scenario,
}

/// Attempts per round asked for, at most: a host that stays busy ends the run with fewer
/// rounds, said in the report, rather than keeping it going for ever.
const ATTEMPTS_PER_ROUND: usize = 3;

/// Runs `rounds` rounds on a quiet host. A round is kept only if the hypervisor stole at
/// most `max_steal_pct` of the CPU in each of its windows: on this VM steal comes and goes
/// within minutes (up to 65% of a window measured here), and a training window that loses a
/// quarter of its CPU to another guest runs a third slower, which no pairing can undo. A
/// round over the bound is run again with the same seed and order.
pub fn run(
    rounds: usize,
    window_s: f64,
    max_steal_pct: f64,
    scenarios: &[Scenario],
    progress: &dyn Fn(&str),
) -> anyhow::Result<Measured> {
    // Training alone is every slowdown's pair.
    let scenarios: Vec<Scenario> = std::iter::once(Scenario::Alone)
        .chain(scenarios.iter().copied().filter(|&s| s != Scenario::Alone))
        .collect();
    let window = Duration::from_secs_f64(window_s);
    let mut bench = Bench::start(window, progress)?;
    progress("timing how slowly an idle vCPU wakes (wake-probe)");
    let wake_before = probe_wake_latency();
    let per_round = scenarios.len() + 1;
    let started = Instant::now();
    let mut done = 0;
    let mut windows = Vec::new();
    let mut offline_per_cpu_s = Vec::new();
    let mut discarded = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        let mut kept = 0;
        for _attempt in 0..rounds * ATTEMPTS_PER_ROUND {
            if kept == rounds {
                break;
            }
            let round = kept;
            let total = (rounds + discarded.len()) * per_round;
            let retry = match discarded.len() {
                0 => String::new(),
                n => format!(" ({n} run again for steal)"),
            };
            let bar = |done: usize, what: &str| {
                crate::bench::progress_bar::draw(
                    done,
                    total,
                    started.elapsed(),
                    &format!("round {}/{rounds}{retry}: {what}", round + 1),
                );
            };
            bar(done, "offline alone");
            let offline_rate = bench.calibrate_offline()?;
            done += 1;
            // Rotate the order every round: drift over the run hits every scenario alike.
            let mut round_windows = Vec::new();
            for k in 0..scenarios.len() {
                let scenario = scenarios[(k + round) % scenarios.len()];
                bar(done, scenario.name());
                round_windows.push(bench.window(scenario, round)?);
                done += 1;
            }
            let worst = round_windows
                .iter()
                .max_by(|a, b| a.steal_pct.total_cmp(&b.steal_pct))
                .expect("a round has windows");
            if worst.steal_pct > max_steal_pct {
                discarded.push(DiscardedRound {
                    round,
                    worst_steal_pct: worst.steal_pct,
                    worst_scenario: worst.scenario,
                });
                continue;
            }
            windows.extend(round_windows);
            offline_per_cpu_s.push(offline_rate);
            kept += 1;
        }
        crate::bench::progress_bar::finish(done, started.elapsed());
        if kept == 0 {
            bail!(
                "the host stole more than {max_steal_pct}% of the CPU in a window of every one \
                 of {} rounds: the figures would measure the other guests. Run again when the \
                 host is quieter, or allow more with --max-steal",
                discarded.len()
            );
        }
        Ok(())
    })();
    let cpus = bench.cpus;
    let engine = bench.inputs.engine;
    let notes: Vec<String> = bench.notes.iter().map(|n| n.to_string()).collect();
    let (online_cpu_ms_per_request, online_cpu_ms_per_json_request, heavy_online_rate) = (
        bench.online_cpu_ms_per_request,
        bench.online_cpu_ms_per_json_request,
        bench.heavy_online_rate(),
    );
    bench.finish();
    result?;
    progress("timing how slowly an idle vCPU wakes, again (wake-probe)");
    let wake_after = probe_wake_latency();
    Ok(Measured {
        rounds: offline_per_cpu_s.len(),
        windows,
        scenarios,
        offline_per_cpu_s,
        cpus,
        rounds_asked: rounds,
        window_s,
        lead_s: INFERENCE_LEAD.as_secs_f64(),
        online_cpu_ms_per_request,
        online_cpu_ms_per_json_request,
        heavy_online_rate,
        max_steal_pct,
        discarded,
        notes,
        engine: engine.to_owned(),
        wake_before,
        wake_after,
    })
}

/// The engine of a run saved before the engine choice.
pub(crate) fn tract() -> String {
    "tract".to_owned()
}

/// `enforcer observe --json --interval 0.1` on the benchmark's daemon, its trace kept in
/// target/bench/colocation/.
fn spawn_observer(round: usize) -> anyhow::Result<Child> {
    let path = workspace_root().join(format!(
        "target/bench/colocation/observed-round-{round}.jsonl"
    ));
    spawn_observer_into(INSTANCE, "0.1", &path)
}

/// About four seconds of `wake-probe`; a probe that cannot run leaves the figure out of the
/// report, not the run.
fn probe_wake_latency() -> Option<WakeLatency> {
    WakeLatency::probe(4, 500)
        .inspect_err(|err| eprintln!("[bench] wake-probe: {err:#}"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offline_job_outlasts_a_window_on_every_cpu_at_the_fastest_rate_seen() {
        let fastest_per_cpu_s = 3_600.0;
        for (cpus, window_s) in [(2, 4.0), (16, 4.0), (64, 10.0)] {
            let window = Duration::from_secs_f64(window_s);
            let needed = (window + INFERENCE_LEAD).as_secs_f64() * cpus as f64 * fastest_per_cpu_s;
            assert!(
                job_lines(cpus, window) as f64 > needed,
                "{cpus} CPUs, {window_s} s: {} lines",
                job_lines(cpus, window)
            );
        }
        // A short window on one CPU still gets the smallest job.
        assert_eq!(job_lines(1, Duration::from_secs(1)), MIN_JOB_LINES);
    }
}
