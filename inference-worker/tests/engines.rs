//! The two engines against each other, in the worker's own code paths: the same outputs on the
//! generated and the shipped models, and ONNX Runtime's work on the granted CPUs only.
//!
//! ONNX Runtime's library is the one `cargo xtask test` takes out of the onnxruntime wheel into
//! target/onnxruntime/; the shipped models are the PP-OCR ones it fetches into
//! target/models/pp-ocr/. Where either is missing these tests say so and pass, unless
//! REAMER_REQUIRE_PRIVILEGED=1 (as CI sets it), which makes that a failure.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use inference_worker::{
    affinity,
    engine::{self, Engine, EngineChoice},
    executor::{Config, Executor},
    metrics::Metrics,
    mlp_model::{self, MlpShape},
    model::Model,
    queue::{Job, JobQueue},
    session::Session,
    tiny_model,
};

fn target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// Passes over what is missing, or fails where CI requires everything.
fn missing(what: &Path) -> bool {
    if what.exists() {
        return false;
    }
    let reason = format!("{} is not fetched (run `cargo xtask test`)", what.display());
    if std::env::var("REAMER_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1") {
        panic!("{reason}");
    }
    eprintln!("SKIPPED: {reason}");
    true
}

/// Loads ONNX Runtime from target/onnxruntime/, or says why not.
fn onnxruntime() -> bool {
    let library = target().join("onnxruntime/libonnxruntime.so");
    if missing(&library) {
        return false;
    }
    let engine = engine::resolve(EngineChoice::OnnxRuntime, Some(&library)).unwrap();
    assert_eq!(engine, Engine::OnnxRuntime);
    true
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reamer-engines-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Inputs in the range the models are fed: normalized pixels for the CNNs, a few units for
/// the generated models.
fn inputs(items: usize, item_len: usize, seed: usize) -> Vec<f32> {
    (0..items * item_len)
        .map(|i| ((i * 7 + seed * 13) % 251) as f32 / 125.5 - 1.0)
        .collect()
}

/// The two engines' outputs on `items` items may differ by at most this, relative to the
/// larger of 1 and the value: both compute in FP32 and differ in the order of their sums
/// (measured: at most 1.1e-5, on the PP-OCR recognizer).
const TOLERANCE: f32 = 1e-4;

/// Runs `items` items through `path` on both engines, batched and one at a time, and checks
/// that every output value agrees within the tolerance. Returns the largest difference seen.
fn both_engines_agree(path: &Path, item_shape: Option<&[usize]>, items: usize) -> f32 {
    let load = |engine| Arc::new(Model::load("m", 1, path, item_shape, 8, engine).unwrap());
    let (tract, ort) = (load(Engine::Tract), load(Engine::OnnxRuntime));
    assert_eq!(tract.signature, ort.signature, "{}", path.display());
    assert_eq!(ort.engine(), Engine::OnnxRuntime);
    let input = inputs(items, tract.signature.input_item_len(), items);
    let (mut on_tract, mut on_ort) = (Session::new(tract), Session::new(ort));
    let batched = (
        on_tract.run(&input, items).unwrap(),
        on_ort.run(&input, items).unwrap(),
    );
    let mut worst = 0.0f32;
    for (item, (t, o)) in batched.0.iter().zip(&batched.1).enumerate() {
        for (output, (t, o)) in t.iter().zip(o).enumerate() {
            assert_eq!(t.len(), o.len());
            for (a, b) in t.iter().zip(o) {
                let difference = (a - b).abs() / b.abs().max(1.0);
                assert!(
                    a.is_finite() && difference <= TOLERANCE,
                    "{}: item {item}, output {output}: tract {a}, ONNX Runtime {b}",
                    path.display()
                );
                worst = worst.max(difference);
            }
        }
    }
    // An item's answer on ONNX Runtime does not depend on the batch it ran in.
    let item_len = on_ort.model().signature.input_item_len();
    let alone = on_ort.run(&input[..item_len], 1).unwrap();
    for (a, b) in alone[0].iter().flatten().zip(batched.1[0].iter().flatten()) {
        assert!((a - b).abs() / b.abs().max(1.0) <= TOLERANCE, "{a} vs {b}");
    }
    worst
}

#[test]
fn both_engines_give_the_same_outputs_on_the_generated_and_the_shipped_models() {
    if !onnxruntime() {
        return;
    }
    let dir = scratch("agree");
    let tiny = dir.join("tiny.onnx");
    std::fs::write(&tiny, tiny_model::encode(3)).unwrap();
    let mlp = dir.join("mlp.onnx");
    let shape = MlpShape {
        inputs: 16,
        width: 256,
        layers: 3,
        outputs: 10,
    };
    std::fs::write(&mlp, mlp_model::encode(shape)).unwrap();
    println!(
        "tiny: largest difference {}",
        both_engines_agree(&tiny, None, 5)
    );
    println!(
        "mlp: largest difference {}",
        both_engines_agree(&mlp, None, 5)
    );
    let shipped = target().join("models/pp-ocr");
    for (file, shape) in [
        ("ch_ppocr_mobile_v2.0_cls_infer.onnx", [3, 48, 192]),
        ("ch_PP-OCRv4_rec_infer.onnx", [3, 48, 320]),
    ] {
        let path = shipped.join(file);
        if missing(&path) {
            continue;
        }
        let worst = both_engines_agree(&path, Some(&shape), 3);
        println!("{file}: largest difference {worst}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Per thread of this process: its id, the CPUs it may run on, and its CPU time in ticks.
fn threads() -> Vec<(i32, Vec<u32>, u64)> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|task| {
            let tid: i32 = task.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            let cpus = affinity::parse_cpu_list(allowed.trim()).ok()?;
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // After the command name's closing parenthesis: utime and stime are fields 14
            // and 15 of the line, the 12th and 13th after it.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some((tid, cpus, ticks))
        })
        .collect()
}

/// Keeps `executor` busy with `requests` batches of the MLP and waits for all of them.
fn load(executor: &Executor, item_len: usize, requests: usize) {
    let answers: Vec<_> = (0..requests)
        .map(|k| {
            let (reply, answer) = tokio::sync::oneshot::channel();
            executor
                .queue()
                .push(Job {
                    input: inputs(4, item_len, k),
                    items: 4,
                    enqueued: Instant::now(),
                    reply,
                })
                .unwrap();
            answer
        })
        .collect();
    for answer in answers {
        answer.blocking_recv().unwrap().unwrap();
    }
}

#[test]
fn onnxruntime_runs_on_the_granted_cpus_only_and_follows_a_shrink() {
    if !onnxruntime() {
        return;
    }
    let allowed = affinity::allowed_cpus().unwrap();
    if allowed.len() < 2 {
        eprintln!("SKIPPED: this test needs two CPUs, the process may use {allowed:?}");
        return;
    }
    let dir = scratch("shrink");
    let path = dir.join("mlp.onnx");
    let shape = MlpShape {
        inputs: 64,
        width: 512,
        layers: 4,
        outputs: 10,
    };
    std::fs::write(&path, mlp_model::encode(shape)).unwrap();
    let model = Arc::new(Model::load("mlp", 1, &path, None, 4, Engine::OnnxRuntime).unwrap());
    let item_len = model.signature.input_item_len();
    let before = threads();
    let (first, second) = (allowed[0], allowed[1]);
    let config = |cpus: Vec<u32>| Config {
        threads: cpus.len(),
        cpus,
        max_batch: 4,
        batch_delay: Duration::ZERO,
    };
    let executor = Executor::start(
        model,
        Arc::new(JobQueue::new(10_000)),
        config(vec![first, second]),
        Arc::new(Metrics::new(Duration::from_secs(1))),
    );
    load(&executor, item_len, 200);
    // Two granted CPUs: two inference threads, and no thread of ONNX Runtime's own beside them
    // (one intra-op thread per session means the caller does the work).
    let during = threads();
    let new: Vec<_> = during
        .iter()
        .filter(|(tid, ..)| !before.iter().any(|(old, ..)| old == tid))
        .collect();
    assert_eq!(new.len(), 2, "two granted CPUs, threads started: {new:?}");
    // The grant shrinks to the second CPU: one thread stays, pinned there, and does the work.
    executor.reconfigure(config(vec![second]));
    load(&executor, item_len, 20);
    let shrunk = threads();
    // CPU time is counted in clock ticks (10 ms at 100 Hz): on a fast host 200 items can take
    // less than one, so the load goes on, a bounded number of times, until a thread shows it.
    let mut after = Vec::new();
    let mut worked = Vec::new();
    for _ in 0..20 {
        load(&executor, item_len, 200);
        after = threads();
        worked = after
            .iter()
            .filter(|(tid, _, ticks)| {
                !before.iter().any(|(old, ..)| old == tid)
                    && shrunk
                        .iter()
                        .any(|(t, _, earlier)| t == tid && ticks > earlier)
            })
            .cloned()
            .collect();
        if !worked.is_empty() {
            break;
        }
    }
    assert!(!worked.is_empty(), "no new thread did the work: {after:?}");
    for (tid, cpus, _) in &worked {
        assert_eq!(
            cpus,
            &vec![second],
            "thread {tid} worked after the shrink to CPU {second} but may run on {cpus:?}"
        );
    }
    assert_eq!(executor.threads(), 1);
    executor.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_model_exported_with_a_batch_of_one_runs_a_batch_item_by_item_on_onnxruntime() {
    use prost::Message as _;
    if !onnxruntime() {
        return;
    }
    let dir = scratch("batch-one");
    // The tiny model with its batch dimension fixed at 1, as some exporters write it.
    let mut proto = tract_onnx::pb::ModelProto::decode(&tiny_model::encode(2)[..]).unwrap();
    let graph = proto.graph.as_mut().unwrap();
    for value in graph.input.iter_mut().chain(graph.output.iter_mut()) {
        let Some(tract_onnx::pb::type_proto::Value::TensorType(tensor)) =
            value.r#type.as_mut().and_then(|t| t.value.as_mut())
        else {
            panic!("the tiny model's values are tensors");
        };
        tensor.shape.as_mut().unwrap().dim[0] = inference_worker::onnx_build::dim(1);
    }
    let path = dir.join("tiny-batch-1.onnx");
    std::fs::write(&path, proto.encode_to_vec()).unwrap();
    let model = Arc::new(Model::load("tiny", 1, &path, None, 4, Engine::OnnxRuntime).unwrap());
    let items: Vec<[f32; 4]> = (0..3)
        .map(|k| std::array::from_fn(|i| k as f32 - i as f32 * 0.5))
        .collect();
    let flat: Vec<f32> = items.iter().flatten().copied().collect();
    let outputs = Session::new(model).run(&flat, items.len()).unwrap();
    assert_eq!(outputs.len(), 3);
    for (item, output) in items.iter().zip(&outputs) {
        for (got, want) in output[0].iter().zip(tiny_model::expected(2, item)) {
            assert!((got - want).abs() < 1e-4, "{output:?} for {item:?}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
