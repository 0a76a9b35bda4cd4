//! Running the inference worker for a test: the real binary, on loopback, talked to with a
//! real HTTP client.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::harness::target_dir;

/// The inference-worker binary built beside the tests.
pub fn worker_bin() -> PathBuf {
    let bin = target_dir().join("inference-worker");
    assert!(
        bin.exists(),
        "{} is not built: run the tests with `cargo xtask test`",
        bin.display()
    );
    bin
}

/// A scratch directory for one test, empty at start.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reamer-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A scratch directory for `test` holding the tiny model of version 1: (directory, model).
pub fn scratch_with_tiny_model(test: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(test);
    let model = dir.join("tiny.onnx");
    write_tiny_model(&model, 1);
    (dir, model)
}

/// Writes the tiny model of `version` to `path` (see inference-worker's tiny_model).
pub fn write_tiny_model(path: &Path, version: u32) {
    let status = Command::new(worker_bin())
        .args(["tiny-model", "--out"])
        .arg(path)
        .args(["--version", &version.to_string()])
        .status()
        .expect("run inference-worker tiny-model");
    assert!(status.success(), "tiny-model failed");
}

/// How `inference-worker online` serves the PP-OCR text-direction classifier: under the name
/// "cls", its open input dimensions fixed to one 48×192 RGB crop, at most 2 items a batch.
pub const CLASSIFIER_SERVE_ARGS: [&str; 6] = [
    "--name",
    "cls",
    "--input-shape",
    "3,48,192",
    "--max-batch",
    "2",
];

/// Writes a synthetic MLP of 8 layers of 1024 (16 inputs) to DIR/mlp.onnx: a CPU-bound model,
/// about half a millisecond an item here, for tests that need a worker to use its CPU.
pub fn write_cpu_bound_model(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("mlp.onnx");
    let status = Command::new(worker_bin())
        .args(["mlp-model", "--width", "1024", "--layers", "8", "--out"])
        .arg(&path)
        .status()
        .expect("run inference-worker mlp-model");
    assert!(status.success(), "mlp-model failed");
    path
}

/// The tiny model's answer for one item, computed here from its documented formula:
/// y = relu(x · W + b), W[i][j] = version · (3i + j + 1) / 10, b[j] = −j / 2.
pub fn tiny_expected(version: u32, x: &[f32; 4]) -> [f32; 3] {
    std::array::from_fn(|j| {
        let sum: f32 = (0..4)
            .map(|i| x[i] * version as f32 * (3 * i + j + 1) as f32 / 10.0)
            .sum();
        (sum - j as f32 / 2.0).max(0.0)
    })
}

/// An online worker started for one test; killed when dropped.
pub struct OnlineWorker {
    pub child: Child,
    pub base: String,
    pub log: PathBuf,
}

impl OnlineWorker {
    /// `inference-worker online --listen 127.0.0.1:0 ARGS…`, waiting for its address.
    pub fn start(args: &[&str], log: PathBuf) -> Self {
        Self::start_with(Command::new(worker_bin()), args, log)
    }

    /// Serves `model` with ARGS, logging to DIR/worker.log.
    pub fn serve(dir: &Path, model: &Path, args: &[&str]) -> Self {
        let mut all = vec!["--model", model.to_str().expect("utf-8 path")];
        all.extend_from_slice(args);
        Self::start(&all, dir.join("worker.log"))
    }

    /// As `start`, with a prepared command (an `enforcer launch … --` prefix, say).
    pub fn start_with(mut command: Command, args: &[&str], log: PathBuf) -> Self {
        let mut child = command
            .args(["online", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("worker log"))
            .spawn()
            .expect("spawn inference-worker online");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the worker's address");
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "worker did not start: {line:?}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .to_owned();
        Self { child, base, log }
    }

    /// `enforcer launch --pool POOL --instance INSTANCE -- inference-worker online ARGS…`:
    /// the launcher tells the worker its pool, control socket and SLO.
    pub fn launch_into(instance: &str, pool: &str, args: &[&str], log: PathBuf) -> Self {
        let mut launch = Command::new(crate::harness::enforcer_bin());
        launch
            .args(["launch", "--pool", pool, "--instance", instance, "--"])
            .arg(worker_bin());
        Self::start_with(launch, args, log)
    }

    /// `launch_into` with the CPU-bound MLP (`write_cpu_bound_model`, written into `dir`) served
    /// as model "mlp", logging to DIR/worker.log.
    pub fn launch_cpu_bound_into(instance: &str, pool: &str, dir: &Path) -> Self {
        let model = write_cpu_bound_model(dir);
        let model = model.to_str().expect("utf-8 path");
        Self::launch_into(
            instance,
            pool,
            &["--model", model, "--name", "mlp"],
            dir.join("worker.log"),
        )
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().expect("wait for the worker")
    }
}

impl Drop for OnlineWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking HTTP client that returns every status as a value, bounded in time.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// GET `url`: the status and the body.
pub fn get(agent: &ureq::Agent, url: &str) -> (u16, String) {
    let mut response = agent.get(url).call().expect("GET");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

/// POST `body` to `url`: the status and the body.
pub fn post(agent: &ureq::Agent, url: &str, body: &str) -> (u16, String) {
    let mut response = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .expect("POST");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

/// An infer request body for the tiny model.
pub fn tiny_request(id: &str, items: &[[f32; 4]]) -> String {
    let data: Vec<f32> = items.iter().flatten().copied().collect();
    serde_json::json!({"id": id, "inputs": [{"name": "x", "shape": [items.len(), 4],
        "datatype": "FP32", "data": data}]})
    .to_string()
}

/// A body in KServe's binary tensor data extension: the `header` JSON, then `values` as
/// little-endian FP32. The JSON's length goes in the Inference-Header-Content-Length header.
pub fn binary_body(header: &str, values: &[f32]) -> Vec<u8> {
    let mut body = header.as_bytes().to_vec();
    values
        .iter()
        .for_each(|v| body.extend_from_slice(&v.to_le_bytes()));
    body
}

/// Checks an infer answer for `items` against the tiny model of the version it reports;
/// returns that version.
pub fn check_tiny_answer(body: &str, items: &[[f32; 4]]) -> u32 {
    let answer: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let version: u32 = answer["model_version"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no model_version: {body}"));
    let output = &answer["outputs"][0];
    assert_eq!(
        output["shape"],
        serde_json::json!([items.len(), 3]),
        "{body}"
    );
    let data: Vec<f64> = output["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v.as_f64().expect("number"))
        .collect();
    for (k, item) in items.iter().enumerate() {
        for (j, want) in tiny_expected(version, item).iter().enumerate() {
            let got = data[k * 3 + j];
            assert!(
                (got - f64::from(*want)).abs() < 1e-3,
                "item {k} output {j}: {got} != {want} (version {version}): {body}"
            );
        }
    }
    version
}

/// A metric's value from a Prometheus text page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{page}"))
}
