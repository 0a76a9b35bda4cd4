//! The inference side of the scenario benchmarks (co-location and server): the worker and its
//! engine, the PP-OCR classifier's requests and their load, the offline job, the groups the
//! workers start in, and the daemon's `observe` trace.

use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, bail};
use reamer_tests::harness::{Daemon, Reaped, cgroups::Group, worker::OnlineWorker};
use serde::{Deserialize, Serialize};

use super::process::run_ok;
use crate::cargo::release_bin;

/// `load-gen`'s report.
#[derive(Deserialize, Serialize, Debug, Clone)]
pub struct LoadReport {
    pub sent: u64,
    pub within_slo: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

pub(crate) fn worker_bin() -> PathBuf {
    release_bin("inference-worker")
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

/// A synthetic MLP of 16 inputs, `layers` layers of `width` and 10 outputs, written by
/// `inference-worker mlp-model` (docs/inference-worker.md, "Models"): an offline job's model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mlp {
    pub(crate) width: u32,
    pub(crate) layers: u32,
}

/// The co-location benchmark's and the demo's offline model.
pub(crate) const OFFLINE_MLP: Mlp = Mlp {
    width: 1024,
    layers: 8,
};

impl Mlp {
    /// Writes the model to `path`.
    pub(crate) fn make(self, path: &Path) -> anyhow::Result<()> {
        run_ok(
            Command::new(worker_bin())
                .args(["mlp-model", "--width", &self.width.to_string()])
                .args(["--layers", &self.layers.to_string(), "--out"])
                .arg(path),
            "inference-worker mlp-model",
        )
    }

    fn file_name(self) -> String {
        format!("mlp-{}x{}.onnx", self.width, self.layers)
    }
}

/// What the inference scenarios serve and run, made once into a folder of their own: the
/// PP-OCR classifier (fetched by `cargo xtask`), its online request, an MLP and an offline
/// job for it.
pub(crate) struct Inputs {
    pub(crate) classifier: PathBuf,
    /// The online request body: a JSON header of `request_header_length` bytes, then the
    /// image as binary FP32 (KServe's binary tensor data extension).
    pub(crate) request: PathBuf,
    pub(crate) request_header_length: usize,
    /// The same request as plain JSON, its image as numbers.
    pub(crate) request_json: PathBuf,
    pub(crate) mlp: PathBuf,
    pub(crate) job: PathBuf,
    /// Lines in the job.
    pub(crate) job_lines: u64,
    /// The workers' engine (`worker_engine`).
    pub(crate) engine: &'static str,
}

impl Inputs {
    /// Made into `dir`: the request, `mlp`, and an offline job of `job_lines` lines for it
    /// (reused where one of that length is there).
    pub(crate) fn prepare(dir: &Path, mlp: Mlp, job_lines: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let classifier = crate::cargo::workspace_root()
            .join("target/models/pp-ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx");
        if !classifier.exists() {
            bail!(
                "{} is missing: `cargo xtask bench` and `cargo xtask demo` fetch it; with \
                 --prebuilt, copy target/models along with target/release",
                classifier.display()
            );
        }
        let (request, request_header_length, request_json) = write_classifier_requests(dir)?;
        let model = dir.join(mlp.file_name());
        mlp.make(&model)?;
        let job = dir.join("job");
        ensure_offline_job(&model, &job, job_lines)?;
        Ok(Self {
            classifier,
            request,
            request_header_length,
            request_json,
            mlp: model,
            job,
            job_lines,
            engine: worker_engine(),
        })
    }

    /// `inference-worker offline`'s arguments: the MLP over the job, batch 8, on `engine`.
    pub(crate) fn offline_args(&self, engine: &str) -> Vec<String> {
        vec![
            "offline".into(),
            "--model".into(),
            self.mlp.display().to_string(),
            "--job".into(),
            self.job.display().to_string(),
            "--batch".into(),
            "8".into(),
            "--engine".into(),
            engine.into(),
        ]
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
    Ok(launch_into_online_pool(instance, serve_args, log))
}

/// `enforcer launch --pool online` of the daemon of `instance`: an online worker serving
/// with `serve_args`, its stderr in `log`.
pub(crate) fn launch_into_online_pool(
    instance: &str,
    serve_args: &[String],
    log: PathBuf,
) -> OnlineWorker {
    let mut launch = Command::new(release_bin("enforcer"));
    launch
        .args(["launch", "--pool", "online", "--instance", instance, "--"])
        .arg(worker_bin());
    let args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
    OnlineWorker::start_with(launch, &args, log)
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
/// The engine of a run saved before the engine choice.
pub(crate) fn tract() -> String {
    "tract".to_owned()
}
