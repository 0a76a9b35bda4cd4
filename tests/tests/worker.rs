//! The inference worker as a user meets it: the real binary, a real HTTP client on loopback,
//! real job files, real signals. The last test runs it under a real enforcer daemon and needs
//! privilege; the others do not.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use enforcer_common::protocol::PoolStatus;
use reamer_tests::{
    harness::{
        Daemon, cgroups,
        cgroups::FreezerGroup,
        eventually, privileged, remove_test_cgroups, wait_ok,
        worker::{
            CLASSIFIER_SERVE_ARGS, OnlineWorker, agent, binary_body, check_tiny_answer, get,
            metric, post, scratch, scratch_with_tiny_model, tiny_expected, tiny_request,
            worker_bin, write_tiny_model,
        },
    },
    measure::proc_stats::{peak_resident_kib, resident_kib},
};
use serde_json::Value;

const SIM: &str = env!("CARGO_BIN_EXE_training-sim");

fn items(n: usize, seed: f32) -> Vec<[f32; 4]> {
    (0..n)
        .map(|k| std::array::from_fn(|i| ((k * 4 + i) as f32 * 0.37 + seed).sin() * 2.0))
        .collect()
}

#[test]
fn online_on_tract_speaks_kserve_v2_and_names_what_is_wrong_with_bad_requests() {
    speaks_kserve_v2_and_names_what_is_wrong_with_bad_requests("tract");
}

#[test]
fn online_on_onnxruntime_speaks_kserve_v2_and_names_what_is_wrong_with_bad_requests() {
    if onnxruntime_fetched() {
        speaks_kserve_v2_and_names_what_is_wrong_with_bad_requests("onnxruntime");
    }
}

/// The KServe v2 platform each engine announces (Triton's names).
fn platform(engine: &str) -> &'static str {
    match engine {
        "tract" => "onnx_tract",
        _ => "onnxruntime_onnx",
    }
}

/// The same requests, good and bad, get the same answers on either engine.
fn speaks_kserve_v2_and_names_what_is_wrong_with_bad_requests(engine: &str) {
    let (dir, model) = scratch_with_tiny_model(&format!("kserve-{engine}"));
    let worker = OnlineWorker::serve(
        &dir,
        &model,
        &[
            "--max-body-bytes",
            "4096",
            "--cpus",
            "0",
            "--engine",
            engine,
        ],
    );
    let http = agent();
    let url = |path: &str| format!("{}{path}", worker.base);
    assert_eq!(get(&http, &url("/v2/health/live")).0, 200);
    assert_eq!(get(&http, &url("/v2/health/ready")).0, 200);
    assert_eq!(get(&http, &url("/v2/models/tiny/ready")).0, 200);
    let (status, server) = get(&http, &url("/v2"));
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&server).unwrap()["name"],
        "reamer-inference-worker"
    );
    let (status, meta) = get(&http, &url("/v2/models/tiny"));
    assert_eq!(status, 200);
    let meta: Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(meta["platform"], platform(engine));
    assert_eq!(meta["inputs"][0]["name"], "x");
    assert_eq!(meta["inputs"][0]["shape"], serde_json::json!([-1, 4]));
    assert_eq!(meta["outputs"][0]["shape"], serde_json::json!([-1, 3]));

    // Good requests, one item and seven (run as 4 + 2 + 1 by tract's batch plans, as one
    // batch by ONNX Runtime).
    for n in [1, 7] {
        let batch = items(n, n as f32);
        let (status, body) = post(
            &http,
            &url("/v2/models/tiny/infer"),
            &tiny_request("r", &batch),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(check_tiny_answer(&body, &batch), 1);
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["id"], "r");
    }
    let (status, body) = post(
        &http,
        &url("/v2/models/tiny/versions/1/infer"),
        r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[[1,2,3,4]]}]}"#,
    );
    assert_eq!(status, 200, "nested data: {body}");
    check_tiny_answer(&body, &[[1.0, 2.0, 3.0, 4.0]]);

    // Bad requests: each gets its status and a message that names the problem.
    let infer = url("/v2/models/tiny/infer");
    let oversized = tiny_request("big", &items(200, 0.0));
    let cases: [(&str, String, u16, &str); 7] = [
        (
            infer.as_str(),
            "{\"inputs\": [".into(),
            400,
            "malformed infer request",
        ),
        (
            infer.as_str(),
            r#"{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}"#.into(),
            400,
            "has shape [1, 3]",
        ),
        (
            infer.as_str(),
            r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"INT32","data":[1,2,3,4]}]}"#.into(),
            400,
            "datatype INT32",
        ),
        (
            infer.as_str(),
            r#"{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4]}]}"#.into(),
            400,
            "has 4 values",
        ),
        (infer.as_str(), oversized, 413, "4096 byte limit"),
        (
            &url("/v2/models/resnet/infer"),
            tiny_request("u", &items(1, 0.0)),
            404,
            "unknown model 'resnet'",
        ),
        (
            &url("/v2/models/tiny/versions/9/infer"),
            tiny_request("v", &items(1, 0.0)),
            404,
            "version '9' is not served",
        ),
    ];
    for (target, body, want_status, want_text) in cases {
        let (status, answer) = post(&http, target, &body);
        assert_eq!(status, want_status, "{answer}");
        assert!(
            answer.contains(want_text),
            "{answer:?} should say {want_text:?}"
        );
    }
    // Still serving, and counting.
    let batch = items(2, 9.0);
    let (status, body) = post(&http, &infer, &tiny_request("after", &batch));
    assert_eq!(status, 200);
    check_tiny_answer(&body, &batch);
    let (_, page) = get(&http, &url("/metrics"));
    assert_eq!(metric(&page, "reamer_worker_requests_ok_total"), 4.0);
    assert_eq!(metric(&page, "reamer_worker_requests_bad_total"), 7.0);
    assert_eq!(metric(&page, "reamer_worker_slo_attainment_ratio"), 1.0);
    assert!(metric(&page, "reamer_worker_latency_p99_seconds") > 0.0);
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// POSTs a KServe body with binary tensors: `header` JSON, then `values` as little-endian
/// FP32, with the Inference-Header-Content-Length header saying where the JSON ends (or
/// `header_length` in its place). Returns the status, the answer's header length, and its body.
fn post_binary(
    http: &ureq::Agent,
    url: &str,
    header: &str,
    values: &[f32],
    header_length: Option<&str>,
) -> (u16, Option<usize>, Vec<u8>) {
    let body = binary_body(header, values);
    let length = header.len().to_string();
    let mut response = http
        .post(url)
        .header("content-type", "application/octet-stream")
        .header(
            "inference-header-content-length",
            header_length.unwrap_or(&length),
        )
        .send(&body[..])
        .expect("POST");
    let answer_length = response
        .headers()
        .get("inference-header-content-length")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let body = response.body_mut().read_to_vec().expect("body");
    (response.status().as_u16(), answer_length, body)
}

#[test]
fn online_on_tract_takes_and_gives_binary_tensors_as_triton_clients_send_them() {
    takes_and_gives_binary_tensors_as_triton_clients_send_them("tract");
}

#[test]
fn online_on_onnxruntime_takes_and_gives_binary_tensors_as_triton_clients_send_them() {
    if onnxruntime_fetched() {
        takes_and_gives_binary_tensors_as_triton_clients_send_them("onnxruntime");
    }
}

fn takes_and_gives_binary_tensors_as_triton_clients_send_them(engine: &str) {
    let (dir, model) = scratch_with_tiny_model(&format!("kserve-binary-{engine}"));
    let worker = OnlineWorker::serve(&dir, &model, &["--cpus", "0", "--engine", engine]);
    let http = agent();
    let (_, server) = get(&http, &format!("{}/v2", worker.base));
    assert_eq!(
        serde_json::from_str::<Value>(&server).unwrap()["extensions"],
        serde_json::json!(["binary_tensor_data"]),
        "the server metadata names the extension"
    );
    let infer = format!("{}/v2/models/tiny/infer", worker.base);
    let batch = items(3, 0.5);
    let values: Vec<f32> = batch.iter().flatten().copied().collect();
    let input =
        r#"{"name":"x","shape":[3,4],"datatype":"FP32","parameters":{"binary_data_size":48}}"#;

    // Binary in, JSON out: the same answer as the JSON request gives.
    let header = format!(r#"{{"id":"b","inputs":[{input}]}}"#);
    let (status, length, body) = post_binary(&http, &infer, &header, &values, None);
    let text = String::from_utf8(body).unwrap();
    assert_eq!((status, length), (200, None), "{text}");
    check_tiny_answer(&text, &batch);

    // Binary in, binary out: the JSON header says each output's size, the values follow.
    let header = format!(
        r#"{{"inputs":[{input}],"outputs":[{{"name":"y","parameters":{{"binary_data":true}}}}]}}"#
    );
    let (status, length, body) = post_binary(&http, &infer, &header, &values, None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let length = length.expect("a binary answer says where its JSON ends");
    let answer: Value = serde_json::from_slice(&body[..length]).unwrap();
    assert_eq!(answer["outputs"][0]["shape"], serde_json::json!([3, 3]));
    assert_eq!(answer["outputs"][0]["parameters"]["binary_data_size"], 36);
    let outputs: Vec<f32> = body[length..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let expected: Vec<f32> = batch.iter().flat_map(|x| tiny_expected(1, x)).collect();
    assert_eq!(outputs.len(), expected.len());
    for (got, want) in outputs.iter().zip(&expected) {
        assert!((got - want).abs() < 1e-3, "{outputs:?} != {expected:?}");
    }

    // Bad binary bodies: a 400 that names the problem, and the worker goes on serving.
    let header = format!(r#"{{"inputs":[{input}]}}"#);
    let cases: [(&[f32], Option<&str>, &str); 3] = [
        (
            &values[..11],
            None,
            "44 bytes after its JSON header; input 'x' says 48",
        ),
        (&values, Some("9999"), "the body is only"),
        (&values, Some("-3"), "must be a byte count"),
    ];
    for (values, header_length, want) in cases {
        let (status, _, body) = post_binary(&http, &infer, &header, values, header_length);
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(want), "{text:?} should say {want:?}");
    }
    let (status, _, _) = post_binary(&http, &infer, &header, &values, None);
    assert_eq!(status, 200);
    let (_, page) = get(&http, &format!("{}/metrics", worker.base));
    assert_eq!(metric(&page, "reamer_worker_requests_ok_total"), 3.0);
    assert_eq!(metric(&page, "reamer_worker_requests_bad_total"), 3.0);
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn rss_kib(pid: u32) -> u64 {
    resident_kib(pid).expect("the worker is running")
}

/// Sends a request's headers, and of a 100 kB body only its first byte: the worker holds a
/// body slot for it until the connection goes.
fn start_endless_body(base: &str) -> TcpStream {
    let mut slow = TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    write!(
        slow,
        "POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
    )
    .unwrap();
    slow.flush().unwrap();
    slow
}

/// Whether the worker has already answered (or closed) `stream`: a client that is still being
/// read gets nothing back.
fn was_answered(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let answered = match stream.read(&mut byte) {
        Ok(_) => true,
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    };
    stream.set_nonblocking(false).unwrap();
    answered
}

#[test]
fn tensor_data_costs_memory_by_its_declared_shape_not_by_its_length() {
    let (dir, model) = scratch_with_tiny_model("data-memory");
    let worker = OnlineWorker::serve(&dir, &model, &["--cpus", "0"]);
    let pid = worker.child.id();
    let http = agent();
    let infer = format!("{}/v2/models/tiny/infer", worker.base);
    assert_eq!(
        post(&http, &infer, &tiny_request("warm", &items(64, 1.0))).0,
        200
    );
    let peak_before = peak_resident_kib(pid).expect("the worker is running");
    // 15 MB of two-byte numbers (7.5 million values) for a shape of 4. As a JSON value tree
    // (about 32 bytes a number) it took over 200 MiB before the shape was checked.
    let values = "1,".repeat(7_500_000);
    let body = format!(
        "{{\"inputs\":[{{\"name\":\"x\",\"shape\":[1,4],\"datatype\":\"FP32\",\
         \"data\":[{values}1]}}]}}"
    );
    let (status, answer) = post(&http, &infer, &body);
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("more values than the shape's 4"),
        "{answer}"
    );
    let grew = peak_resident_kib(pid)
        .unwrap_or(0)
        .saturating_sub(peak_before);
    println!(
        "peak RSS grew {grew} KiB for a {} KiB body",
        body.len() / 1024
    );
    // The body itself, read whole (axum), and little beside it.
    assert!(
        grew < (body.len() / 1024) as u64 * 2 + 16 * 1024,
        "peak RSS grew {grew} KiB for a {} KiB body",
        body.len() / 1024
    );
    // The same declared shape, answered: one item, whatever the request asked.
    let asked_twice = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,4],\"datatype\":\"FP32\",\
                       \"data\":[1,2,3,4]}],\"outputs\":[{\"name\":\"y\"},{\"name\":\"y\"}]}";
    let (status, answer) = post(&http, &infer, asked_twice);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("asked for more than once"), "{answer}");
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A worker of the tiny model that reads one request body at a time, each within
/// `body_timeout_ms`, in a scratch directory named `name`.
fn one_body_slot_worker(name: &str, body_timeout_ms: &str) -> (std::path::PathBuf, OnlineWorker) {
    let (dir, model) = scratch_with_tiny_model(name);
    let args = [
        "--max-concurrent-bodies",
        "1",
        "--cpus",
        "0",
        "--body-timeout-ms",
        body_timeout_ms,
    ];
    let worker = OnlineWorker::serve(&dir, &model, &args);
    (dir, worker)
}

#[test]
fn a_client_that_never_finishes_its_body_gives_its_slot_back_at_the_deadline() {
    let (dir, worker) = one_body_slot_worker("body-deadline", "700");
    let http = agent();
    let infer = format!("{}/v2/models/tiny/infer", worker.base);
    let body = tiny_request("after", &items(4, 1.0));
    assert_eq!(post(&http, &infer, &body).0, 200);
    let mut slow = start_endless_body(&worker.base);
    let mut started = Instant::now();
    // The slot is held once a probe is turned away. A probe read first takes the slot and the
    // slow client is refused instead: then it starts over.
    eventually(
        "the slow client holds the slot",
        Duration::from_secs(5),
        || {
            if post(&http, &infer, &body).0 == 429 {
                return true;
            }
            if was_answered(&mut slow) {
                slow = start_endless_body(&worker.base);
                started = Instant::now();
            }
            false
        },
    );
    // At the deadline the slow client is answered 408, and the slot is free again.
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    let _ = BufReader::new(&mut slow).read_line(&mut answer);
    let waited = started.elapsed();
    assert!(answer.contains("408"), "the slow client got {answer:?}");
    assert!(
        waited < Duration::from_secs(4),
        "answered after {waited:?}, not at the 700 ms deadline"
    );
    assert_eq!(
        post(&http, &infer, &body).0,
        200,
        "the slot was not given back"
    );
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reads what the worker sends on `stream` until it closes it (or 10 s pass).
fn read_until_closed(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn idle_and_slow_headed_connections_are_closed_and_one_past_the_cap_gets_503() {
    let (dir, model) = scratch_with_tiny_model("connections");
    let args = [
        "--cpus",
        "0",
        "--header-timeout-ms",
        "800",
        "--max-connections",
        "2",
    ];
    let worker = OnlineWorker::serve(&dir, &model, &args);
    let address = worker.base.trim_start_matches("http://").to_owned();
    // Two connections take both places: one sends nothing, one a head that never ends.
    let mut silent = TcpStream::connect(&address).unwrap();
    let mut dribbling = TcpStream::connect(&address).unwrap();
    dribbling
        .write_all(b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let held_from = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    // A third is answered at once, with the cap named, not queued behind them.
    let mut third = TcpStream::connect(&address).unwrap();
    let refused = read_until_closed(&mut third);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused:?}");
    assert!(refused.contains("at most 2 at once"), "{refused:?}");
    // Both holders lose their places at the header deadline.
    read_until_closed(&mut silent);
    read_until_closed(&mut dribbling);
    let held = held_from.elapsed();
    assert!(
        held >= Duration::from_millis(700) && held < Duration::from_secs(5),
        "closed after {held:?}, not at the 800 ms deadline"
    );
    // And their places come back.
    let http = agent();
    let infer = format!("{}/v2/models/tiny/infer", worker.base);
    let (status, answer) = post(&http, &infer, &tiny_request("after", &items(4, 1.0)));
    assert_eq!(status, 200, "{answer}");
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_overloaded_worker_answers_429_at_once_and_its_memory_stays_bounded() {
    // The slow client below holds its slot for the whole test: no body deadline within it.
    let (dir, worker) = one_body_slot_worker("overload", "120000");
    let pid = worker.child.id();
    let http = agent();
    let infer = format!("{}/v2/models/tiny/infer", worker.base);
    // Warm the worker up, then hold its one body slot with a client that sends its headers
    // and never finishes its body.
    let batch = items(64, 1.0);
    let body = tiny_request("flood", &batch);
    assert_eq!(post(&http, &infer, &body).0, 200);
    let before = rss_kib(pid);
    let mut slow = start_endless_body(&worker.base);
    // The slot is held once the worker has read those headers: until then a request may still
    // be served. Probe instead of sleeping a fixed time, which a VM that loses its CPU to the
    // hypervisor can outlast; every probe counts in the worker's metrics. A probe being read
    // when the slow client's headers arrive takes the slot first, and the slow client is
    // refused instead: then it starts over.
    let (mut probes_served, mut probes_refused, mut slow_refused) = (0, 0, 0);
    eventually(
        "the slow client holds the one body slot",
        Duration::from_secs(10),
        || {
            match post(&http, &infer, &body).0 {
                429 => probes_refused += 1,
                status => {
                    assert_eq!(status, 200);
                    probes_served += 1;
                    if was_answered(&mut slow) {
                        slow_refused += 1;
                        slow = start_endless_body(&worker.base);
                    }
                }
            }
            probes_refused > 0
        },
    );
    // A flood of 4 clients x 50 requests: every one refused at once, none queued in memory.
    let started = Instant::now();
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..50)
                        .map(|_| post(&http, &infer, &body).0)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let flood_took = started.elapsed();
    assert!(statuses.iter().all(|&s| s == 429), "{statuses:?}");
    let after = rss_kib(pid);
    println!("200 refusals in {flood_took:?}; RSS {before} KiB -> {after} KiB");
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
    // The slot frees when the slow client goes; service resumes.
    drop(slow);
    let mut refused_after = 0;
    let mut answer = String::new();
    eventually(
        "service resumes after the slow client left",
        Duration::from_secs(10),
        || {
            let (status, text) = post(&http, &infer, &body);
            answer = text;
            match status {
                429 => refused_after += 1,
                status => assert_eq!(status, 200, "{answer}"),
            }
            status == 200
        },
    );
    check_tiny_answer(&answer, &batch);
    let (_, page) = get(&http, &format!("{}/metrics", worker.base));
    let refused = 200 + probes_refused + slow_refused + refused_after;
    assert_eq!(
        metric(&page, "reamer_worker_requests_rejected_total"),
        f64::from(refused)
    );
    // Refusals count against the SLO: a few served (the warm-up, probes before the slot was
    // held, the request after) out of some 200 more.
    let served = 2 + probes_served;
    println!("served {served}, refused {refused} (the slow client {slow_refused} times)");
    assert!(
        metric(&page, "reamer_worker_slo_attainment_ratio")
            <= f64::from(served) / f64::from(served + refused) + 1e-9
    );
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_new_model_file_is_swapped_in_without_dropping_a_request() {
    let (dir, model) = scratch_with_tiny_model("reload");
    let worker = OnlineWorker::serve(&dir, &model, &["--reload-poll-ms", "50"]);
    let infer = format!("{}/v2/models/tiny/infer", worker.base);
    let stop = Arc::new(AtomicBool::new(false));
    // Two clients send requests back to back the whole time.
    let clients: Vec<_> = (0..2)
        .map(|c| {
            let (infer, stop) = (infer.clone(), stop.clone());
            std::thread::spawn(move || {
                let http = agent();
                let mut versions = Vec::new();
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    let batch = items(1 + k % 5, (c * 1000 + k) as f32);
                    let (status, body) = post(&http, &infer, &tiny_request("c", &batch));
                    assert_eq!(status, 200, "a request failed during the reload: {body}");
                    versions.push(check_tiny_answer(&body, &batch));
                    k += 1;
                }
                versions
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // The exporter writes version 2 in place, in two halves with a pause between, the way a
    // training job writing a checkpoint would be caught half-way.
    let bytes = std::fs::read(dir.join("tiny.onnx")).unwrap();
    write_tiny_model(&dir.join("v2.onnx"), 2);
    let v2 = std::fs::read(dir.join("v2.onnx")).unwrap();
    assert_eq!(bytes.len(), v2.len());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&model)
        .unwrap();
    file.write_all(&v2[..v2.len() / 2]).unwrap();
    file.flush().unwrap();
    std::thread::sleep(Duration::from_millis(250));
    file.write_all(&v2[v2.len() / 2..]).unwrap();
    drop(file);
    let http = agent();
    let page = || get(&http, &format!("{}/metrics", worker.base)).1;
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&page(), "reamer_worker_model_version") < 2.0 {
        assert!(
            Instant::now() < deadline,
            "version 2 never served:\n{}",
            worker.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    // A file that is not a model at all: logged, and version 2 goes on serving.
    let failures = metric(&page(), "reamer_worker_model_reload_failures_total");
    std::fs::write(&model, b"this is not an ONNX model").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&page(), "reamer_worker_model_reload_failures_total") <= failures {
        assert!(
            Instant::now() < deadline,
            "the corrupt file was not noticed:\n{}",
            worker.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let versions = client.join().expect("a client saw a failed request");
        assert!(versions.len() > 10, "too few requests: {}", versions.len());
        let first_v2 = versions
            .iter()
            .position(|&v| v == 2)
            .expect("no answer from version 2");
        assert!(
            versions[first_v2..].iter().all(|&v| v == 2),
            "went back to version 1"
        );
        assert_eq!(
            *versions.last().unwrap(),
            2,
            "the corrupt file replaced version 2"
        );
    }
    let log = worker.log_text();
    assert!(log.contains("is not a valid ONNX model"), "{log}");
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_or_missing_model_file_is_a_clear_start_up_error() {
    let dir = scratch("badmodel");
    let corrupt = dir.join("corrupt.onnx");
    std::fs::write(&corrupt, b"\x08\x07garbage that is not protobuf").unwrap();
    let missing = dir.join("missing.onnx");
    for (path, want) in [
        (&corrupt, "is not a valid ONNX model"),
        (&missing, "cannot read model file"),
    ] {
        let output = Command::new(worker_bin())
            .args(["online", "--listen", "127.0.0.1:0", "--model"])
            .arg(path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(want) && stderr.contains(path.to_str().unwrap()),
            "{stderr}"
        );
        // The cause is said once, not once per level of the error's chain.
        assert!(
            stderr.matches("No such file or directory").count() <= 1,
            "{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes an offline job of `lines` generated items for `model` into `job`.
fn make_job(model: &std::path::Path, job: &std::path::Path, lines: usize, seed: u64) {
    let status = Command::new(worker_bin())
        .arg("make-job")
        .arg("--model")
        .arg(model)
        .arg("--dir")
        .arg(job)
        .args(["--lines", &lines.to_string(), "--seed", &seed.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "make-job failed ({status})");
}

fn checkpoint(dir: &std::path::Path) -> Value {
    std::fs::read_to_string(dir.join("checkpoint.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// Every input line has exactly one result line, in order, right for its input.
fn check_results(job: &std::path::Path, lines: usize) {
    let inputs = std::fs::read_to_string(job.join("inputs.jsonl")).unwrap();
    let results = std::fs::read_to_string(job.join("results.jsonl")).unwrap();
    let results: Vec<&str> = results.lines().collect();
    assert_eq!(results.len(), lines, "one result per input line");
    for (k, (input, result)) in inputs.lines().zip(&results).enumerate() {
        let result: Value = serde_json::from_str(result).unwrap();
        assert_eq!(result["line"], k + 1, "results out of order or duplicated");
        if k % 97 != 0 {
            continue;
        }
        let input: Value = serde_json::from_str(input).unwrap();
        assert_eq!(result["id"], input["id"]);
        let x: Vec<f32> = input["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let want = tiny_expected(1, &[x[0], x[1], x[2], x[3]]);
        for (j, w) in want.iter().enumerate() {
            let got = result["outputs"]["y"][j].as_f64().unwrap();
            assert!(
                (got - f64::from(*w)).abs() < 1e-3,
                "line {}: {got} != {w}",
                k + 1
            );
        }
    }
}

#[test]
fn an_offline_job_frozen_then_killed_loses_nothing_and_duplicates_nothing() {
    // Frozen the way the enforcer pauses an offline pool: by the cgroup freezer.
    if !privileged("an_offline_job_frozen_then_killed_loses_nothing_and_duplicates_nothing") {
        return;
    }
    let freezer = FreezerGroup::ensure("it-offline-kill", "job").expect("a freezer group");
    let (dir, model) = scratch_with_tiny_model("offline-kill");
    let job = dir.join("job");
    let lines = 200_000;
    make_job(&model, &job, lines, 7);
    let offline = |extra: &[&str]| {
        let mut command = Command::new(worker_bin());
        command
            .args([
                "offline",
                "--model",
                model.to_str().unwrap(),
                "--job",
                job.to_str().unwrap(),
            ])
            .args(["--batch", "4", "--checkpoint-ms", "20"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let mut child = offline(&[]).spawn().unwrap();
    let pid = child.id() as i32;
    freezer
        .add_process(child.id())
        .expect("the worker into the freezer group");
    let deadline = Instant::now() + Duration::from_secs(20);
    while checkpoint(&job)["lines_done"].as_u64().unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "no checkpoint written");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Frozen: no progress while frozen, and it goes on after.
    freezer.set_frozen(true).expect("freezing the worker");
    let frozen_at = checkpoint(&job)["lines_done"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(checkpoint(&job)["lines_done"].as_u64().unwrap(), frozen_at);
    freezer.set_frozen(false).expect("thawing the worker");
    // Thawed, it checkpoints again. Wait for that rather than for a fixed time: a CI run once
    // saw no checkpoint 100 ms after the process was let go on.
    let deadline = Instant::now() + Duration::from_secs(20);
    while checkpoint(&job)["lines_done"].as_u64().unwrap_or(frozen_at) == frozen_at {
        assert!(Instant::now() < deadline, "no progress after the thaw");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Killed without warning, mid-job.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    child.wait().unwrap();
    cgroups::remove_groups("it-offline-kill", &["job"]);
    let at_kill = checkpoint(&job);
    println!("killed at {at_kill}");
    assert_eq!(
        at_kill["complete"], false,
        "the job finished before the kill; make it longer"
    );
    assert!(at_kill["lines_done"].as_u64().unwrap() > frozen_at);
    // Restarted: it resumes from the checkpoint and finishes.
    let output = offline(&[]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    println!("resumed: {summary}");
    assert_eq!(summary["complete"], true);
    assert_eq!(summary["lines_done"], lines);
    assert_eq!(
        summary["lines_this_run"].as_u64().unwrap() + at_kill["lines_done"].as_u64().unwrap(),
        lines as u64,
        "the restart redid or skipped lines"
    );
    assert!(summary["inferences_per_s"].as_f64().unwrap() > 0.0);
    check_results(&job, lines);
    // Run again: already complete, nothing redone.
    let output = offline(&[]).output().unwrap();
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["lines_this_run"], 0);
    check_results(&job, lines);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_offline_job_told_to_stop_checkpoints_what_it_did_and_resumes_from_there() {
    let (dir, model) = scratch_with_tiny_model("offline-stop");
    let job = dir.join("job");
    let lines = 200_000;
    make_job(&model, &job, lines, 3);
    let offline = || {
        let mut command = Command::new(worker_bin());
        command
            .args(["offline", "--model", model.to_str().unwrap(), "--job"])
            .arg(&job)
            // No periodic checkpoint within the test: any checkpoint is the stop's.
            .args(["--batch", "4", "--checkpoint-ms", "600000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let child = offline().spawn().unwrap();
    let results = job.join("results.jsonl");
    eventually("results being written", Duration::from_secs(20), || {
        std::fs::metadata(&results).is_ok_and(|m| m.len() > 0)
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let output = child.wait_with_output().unwrap();
    println!("stopped {:?} after SIGTERM", started.elapsed());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        summary["complete"], false,
        "the job finished first: make it longer"
    );
    // Everything it computed is counted: the next run redoes nothing.
    let at_stop = checkpoint(&job);
    let done = at_stop["lines_done"].as_u64().unwrap();
    assert!(done > 0);
    assert_eq!(summary["lines_done"].as_u64(), Some(done));
    let written = std::fs::read_to_string(&results).unwrap().lines().count() as u64;
    assert_eq!(written, done, "results past the checkpoint would be redone");
    let output = offline().output().unwrap();
    assert!(output.status.success());
    let resumed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(resumed["complete"], true);
    assert_eq!(
        resumed["lines_this_run"].as_u64().unwrap() + done,
        lines as u64
    );
    check_results(&job, lines);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn offline_bad_lines_are_recorded_and_a_corrupt_checkpoint_stops_the_job_untouched() {
    let (dir, model) = scratch_with_tiny_model("offline-bad");
    let job = dir.join("job");
    std::fs::create_dir_all(&job).unwrap();
    let mut inputs = b"{\"id\":\"a\",\"data\":[1,2,3,4]}\n\
         {\"id\":\"b\",\"data\":[[1,1],[1,1]]}\n\
         this line is not JSON\n\
         {\"id\":\"d\",\"data\":[1,2,3]}\n\
         {\"id\":\"e\",\"data\":[0,0,0,1]}\n"
        .to_vec();
    // A byte that is not UTF-8, and a line far longer than any item of the model: each is one
    // rejected line, and the lines after them are read (they stopped every run, and so every
    // resume, at the same place).
    inputs.extend_from_slice(b"{\"id\":\"\xff\",\"data\":[1,2,3,4]}\n");
    inputs.extend_from_slice(b"{\"id\":\"g\",\"data\":[");
    inputs.extend(std::iter::repeat_n(b'7', 4 << 20));
    inputs.extend_from_slice(b"]}\n{\"id\":\"h\",\"data\":[0,0,0,1]}\n");
    std::fs::write(job.join("inputs.jsonl"), inputs).unwrap();
    let run = || {
        Command::new(worker_bin())
            .args([
                "offline",
                "--model",
                model.to_str().unwrap(),
                "--job",
                job.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    let output = run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("line 3") && stderr.contains("line 4"),
        "{stderr}"
    );
    let results: Vec<Value> = std::fs::read_to_string(job.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 8);
    let error = |i: usize| results[i]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error(2).contains("not a job line"), "{}", error(2));
    assert!(error(3).contains("3 values"), "{}", error(3));
    assert!(error(5).contains("not UTF-8"), "{}", error(5));
    assert!(error(6).contains("skipped unread"), "{}", error(6));
    let want = tiny_expected(1, &[0.0, 0.0, 0.0, 1.0]);
    for i in [4, 7] {
        let got = results[i]["outputs"]["y"][0].as_f64().unwrap();
        assert!(
            (got - f64::from(want[0])).abs() < 1e-4,
            "line {}: {got}",
            i + 1
        );
    }

    // A corrupt checkpoint: a clear error, and the results are left as they were.
    std::fs::write(job.join("checkpoint.json"), "{\"format\":1,\"lines_do").unwrap();
    let before = std::fs::read(job.join("results.jsonl")).unwrap();
    let output = run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("corrupt checkpoint") && stderr.contains("checkpoint.json"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(job.join("results.jsonl")).unwrap(), before);

    // No job there at all.
    let output = Command::new(worker_bin())
        .args(["offline", "--model", model.to_str().unwrap(), "--job"])
        .arg(dir.join("nowhere"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("inputs.jsonl"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A job directory is its user's: a worker, which runs as root on some nodes, never writes
/// through a link planted in it, and refuses a directory that another user can change.
#[test]
fn an_offline_worker_never_writes_through_a_link_in_its_job_and_refuses_a_shared_directory() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    let (dir, model) = scratch_with_tiny_model("offline-links");
    let job = dir.join("job");
    make_job(&model, &job, 50, 9);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let missing = dir.join("created-through-a-link");
    symlink(&missing, job.join("worker.lock")).unwrap();
    symlink(&victim, job.join("results.jsonl")).unwrap();
    let run = || {
        Command::new(worker_bin())
            .args(["offline", "--model", model.to_str().unwrap(), "--job"])
            .arg(&job)
            .output()
            .unwrap()
    };
    for name in ["worker.lock", "results.jsonl"] {
        let output = run();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("{name} is a symbolic link, not a regular file")),
            "{stderr}"
        );
        std::fs::remove_file(job.join(name)).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(
        !missing.exists(),
        "root created the file a dangling link named"
    );

    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("can be changed by its group"), "{stderr}");
    assert!(!job.join("results.jsonl").exists(), "nothing written in it");

    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = run();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    check_results(&job, 50);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_worker_on_a_running_job_is_refused() {
    let (dir, model) = scratch_with_tiny_model("offline-twice");
    let job = dir.join("job");
    make_job(&model, &job, 200_000, 5);
    let offline = || {
        let mut command = Command::new(worker_bin());
        command
            .args(["offline", "--model", model.to_str().unwrap(), "--job"])
            .arg(&job)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let mut first = offline().spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while checkpoint(&job)["lines_done"].as_u64().unwrap_or(0) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first worker wrote no checkpoint"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = offline().output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("being run by another worker") && stderr.contains("worker.lock"),
        "{stderr}"
    );
    let _ = first.kill();
    first.wait().unwrap();
    // The lock went with the first worker: the job resumes.
    let resumed = offline().args(["--max-lines", "10"]).output().unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_worker_launched_into_a_pool_follows_the_enforcers_grants() {
    let instance = "it-worker-grants";
    if !privileged("a_worker_launched_into_a_pool_follows_the_enforcers_grants") {
        return;
    }
    let config = "[[pool]]\nname = \"serve\"\nkind = \"offline\"\n\
                  [policy]\ngive_back_after_ms = 200\ndemand_window_ms = 200\ntick_ms = 50\n";
    let daemon = Daemon::start(instance, config);
    let (dir, model) = scratch_with_tiny_model("worker-grants");
    // No --pool or --enforcer-socket: the launcher tells the worker both.
    let worker = OnlineWorker::launch_into(
        instance,
        "serve",
        &["--model", model.to_str().unwrap()],
        dir.join("worker.log"),
    );
    let http = agent();
    let granted = || {
        metric(
            &get(&http, &format!("{}/metrics", worker.base)).1,
            "reamer_worker_granted_cpus",
        )
    };
    let all = granted();
    assert!(all >= 1.0);
    let sim = daemon.launch("--training", "t", SIM, &["--seconds", "1"]);
    wait_ok(sim, "training-sim");
    // Training took cores and gave them back: the worker was told of both. Its threads are
    // SCHED_IDLE in the offline pool, so while training runs they may not run at all: the
    // worker logs the shrink when training leaves, together with the growth.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(worker.log_text().contains("shrinking=true") && granted() >= all) {
        assert!(
            Instant::now() < deadline,
            "the worker did not get a shrink then all its cores back:\n{}",
            worker.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("{}", worker.log_text());
    let batch = items(3, 0.5);
    let (status, body) = post(
        &http,
        &format!("{}/v2/models/tiny/infer", worker.base),
        &tiny_request("g", &batch),
    );
    assert_eq!(status, 200, "{body}");
    check_tiny_answer(&body, &batch);
    assert!(worker.stop().success());
    daemon.stop();
    remove_test_cgroups(instance, "serve");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Items per second one inference thread serves at best within half the SLO, from the
/// start-up profile the worker logs (`profile: [{"threads":..,"batch":..,
/// "batch_latency_ms":..}, ...]`).
fn one_thread_capacity(worker_log: &str, slo_ms: f64) -> f64 {
    let json = worker_log
        .split("profile: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no profile in the worker's log:\n{worker_log}"));
    let points: Value = serde_json::Deserializer::from_str(json)
        .into_iter::<Value>()
        .next()
        .expect("a profile")
        .expect("profile JSON");
    points
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["threads"] == 1)
        .filter_map(|p| {
            let latency_ms = p["batch_latency_ms"].as_f64()?;
            (latency_ms <= slo_ms / 2.0).then(|| p["batch"].as_f64().unwrap() * 1e3 / latency_ms)
        })
        .fold(0.0, f64::max)
}

#[test]
fn an_online_pool_grows_to_its_workers_slo_need_and_shrinks_back() {
    let instance = "it-slo-need";
    if !privileged("an_online_pool_grows_to_its_workers_slo_need_and_shrinks_back") {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("SKIPPED: an online pool cannot grow past one core on a 1-CPU machine");
        return;
    }
    // The worker is not told its SLO: it takes the pool's, which `enforcer launch` passes on.
    let slo_ms = 80.0;
    let config = format!(
        "[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 1\nslo_ms = {slo_ms}\n\
         cpu_weight = 30\n\
         [[pool]]\nname = \"batch\"\nkind = \"offline\"\n\
         [policy]\ngive_back_after_ms = 200\ndemand_window_ms = 200\ntick_ms = 50\n"
    );
    let decision_log = reamer_tests::harness::decision_log_of(instance);
    let _ = std::fs::remove_file(&decision_log);
    let daemon = Daemon::start(instance, &config);
    // A CPU-bound model, so that a modest request rate needs more than one thread.
    let dir = scratch("slo-need");
    let worker = OnlineWorker::launch_cpu_bound_into(instance, "web", &dir);
    let web = || reamer_tests::harness::pool_in(&daemon.snapshot(), "web").0;
    let web_cpus = |pool: &PoolStatus| enforcer_common::cpu_list::count(&pool.cpus);
    let http = agent();
    let granted = || {
        metric(
            &get(&http, &format!("{}/metrics", worker.base)).1,
            "reamer_worker_granted_cpus",
        )
    };
    assert_eq!(web_cpus(&web()), 1, "an idle online pool holds its minimum");
    assert_eq!(
        web().cpu_weight,
        Some(30),
        "status reports the pool's weight"
    );
    // The online worker has the pool's own top-level cpu group (on v2 the pool's only group),
    // out of the idle `reamer` tree where the offline pool is, so that it stays in the normal
    // class against training, at the pool's weight: cpu_weight 30, which v1 takes as 307
    // shares of 1024.
    let group = reamer_tests::harness::cgroup_of(worker.child.id(), "cpu");
    assert_eq!(group, format!("/reamer-online.{instance}.web"));
    let (weight_file, weight) = if reamer_tests::harness::cgroups::is_v2_host() {
        ("cpu.weight", "30")
    } else {
        ("cpu.shares", "307")
    };
    assert_eq!(
        reamer_tests::harness::cgroup_value("cpu", &group, weight_file),
        weight,
        "the online pool's weight"
    );
    assert_eq!(
        reamer_tests::harness::cgroup_value("cpu", "/reamer", "cpu.idle"),
        "1",
        "the offline pool's tree is not idle"
    );
    let page = get(&http, &format!("{}/metrics", worker.base)).1;
    assert_eq!(metric(&page, "reamer_worker_slo_seconds"), slo_ms / 1e3);

    // 1.5 times what one thread serves: the SLO needs a second CPU.
    let capacity = one_thread_capacity(&worker.log_text(), slo_ms);
    let items_per_request = 8;
    let rate = 1.5 * capacity / items_per_request as f64;
    let data: Vec<f32> = (0..items_per_request * 16)
        .map(|i| (i as f32 * 0.1).sin())
        .collect();
    let body = serde_json::json!({"inputs": [{
        "name": "x", "shape": [items_per_request, 16], "datatype": "FP32", "data": data,
    }]});
    std::fs::write(dir.join("body.json"), body.to_string()).unwrap();
    println!("one thread serves {capacity:.0} items/s; offering {rate:.0} requests/s of 8 items");
    let load = Command::new(env!("CARGO_BIN_EXE_load-gen"))
        .args(["--url", &format!("{}/v2/models/mlp/infer", worker.base)])
        .arg("--body")
        .arg(dir.join("body.json"))
        .args(["--rate", &format!("{rate:.1}"), "--seconds", "6"])
        .args(["--slo-ms", &slo_ms.to_string()])
        // Enough connections that the load stays open-loop while one thread falls behind: with
        // the default 16 in flight, arrivals fell to what the slowed worker answered (51
        // requests/s of the 126 offered, in a CI run on a busy host), which one thread
        // "meets", and the pool never grew.
        .args(["--senders", "64"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = |what: &str, seconds: u64, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        while !check() {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {seconds} s\n{}",
                worker.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until("the pool grew to the worker's need", 5, &|| {
        let pool = web();
        pool.need_cpus >= 2 && web_cpus(&pool) >= 2 && granted() >= 2.0
    });
    println!("under load: {:?}", web());
    wait_ok(load, "load-gen");
    // The need falls once the lower rate held for 3 checks; the cores go back to offline.
    until("the pool shrank back to its minimum", 8, &|| {
        let pool = web();
        pool.need_cpus == 1 && web_cpus(&pool) == 1
    });
    assert!(worker.stop().success());
    let log = daemon.stop();
    assert!(log.contains("online pool's SLO need"), "{log}");
    let decisions = std::fs::read_to_string(&decision_log).unwrap_or_default();
    assert!(
        decisions.contains("\"trigger\":\"online_need\""),
        "{decisions}"
    );
    remove_test_cgroups(instance, "web");
    remove_test_cgroups(instance, "batch");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether ONNX Runtime's library is where `cargo xtask test` puts it (target/onnxruntime/);
/// where it is not, the test says so and passes, or fails under REAMER_REQUIRE_PRIVILEGED=1.
fn onnxruntime_fetched() -> bool {
    fetched(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/onnxruntime/libonnxruntime.so"),
    )
}

/// Whether `path`, which `cargo xtask test` fetches, is there; where it is not, says so, and
/// fails under REAMER_REQUIRE_PRIVILEGED=1 (as CI sets it).
fn fetched(path: &std::path::Path) -> bool {
    if path.exists() {
        return true;
    }
    let reason = format!("{} is not fetched (run `cargo xtask test`)", path.display());
    if std::env::var(reamer_tests::harness::REQUIRE_PRIVILEGED).is_ok_and(|v| v == "1") {
        panic!("{reason}");
    }
    eprintln!("SKIPPED: {reason}");
    false
}

/// The PP-OCR text-direction classifier from the rapidocr-onnxruntime wheel, which `cargo
/// xtask test` fetches into target/models/pp-ocr.
fn shipped_classifier() -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/models/pp-ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    fetched(&path).then_some(path)
}

#[test]
fn the_shipped_pp_ocr_classifier_serves_through_kserve() {
    let Some(model) = shipped_classifier() else {
        return;
    };
    let dir = scratch("pp-ocr");
    let mut args = CLASSIFIER_SERVE_ARGS.to_vec();
    args.extend(["--profile-runs", "1", "--cpus", "0"]);
    let worker = OnlineWorker::serve(&dir, &model, &args);
    let http = agent();
    let (status, meta) = get(&http, &format!("{}/v2/models/cls", worker.base));
    assert_eq!(status, 200);
    let meta: Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(
        meta["inputs"][0]["shape"],
        serde_json::json!([-1, 3, 48, 192])
    );
    assert_eq!(meta["outputs"][0]["shape"], serde_json::json!([-1, 2]));
    // Two "images": a horizontal gradient and its mirror, normalized the way PP-OCR feeds them
    // ((pixel - 0.5) / 0.5).
    let item = 3 * 48 * 192;
    let data: Vec<f32> = (0..2 * item)
        .map(|i| {
            let x = (i % 192) as f32 / 191.0;
            let x = if i < item { x } else { 1.0 - x };
            (x - 0.5) / 0.5
        })
        .collect();
    let body =
        serde_json::json!({"inputs": [{"name": meta["inputs"][0]["name"], "shape": [2, 3, 48, 192],
        "datatype": "FP32", "data": data}]})
        .to_string();
    let (status, answer) = post(
        &http,
        &format!("{}/v2/models/cls/infer", worker.base),
        &body,
    );
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let output = &answer["outputs"][0];
    assert_eq!(output["shape"], serde_json::json!([2, 2]));
    // The classifier ends in a softmax over {0°, 180°}: each row is a probability pair.
    let p: Vec<f64> = output["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    println!("orientation probabilities: {p:?}");
    for row in p.chunks(2) {
        assert!(row.iter().all(|v| (0.0..=1.0).contains(v)), "{p:?}");
        assert!((row[0] + row[1] - 1.0).abs() < 1e-3, "{p:?}");
    }
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}
