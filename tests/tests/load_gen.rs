//! `load-gen`, the co-location benchmark's online load, against the real worker on loopback:
//! it sends the open-loop Poisson load it promises, from a fixed seed, counts the answers
//! within the SLO, and counts what fails as missed.

use std::process::Command;

use reamer_tests::harness::worker::{
    OnlineWorker, binary_body, scratch_with_tiny_model, tiny_request,
};
use serde_json::Value;

const LOAD_GEN: &str = env!("CARGO_BIN_EXE_load-gen");

/// Runs load-gen; its exit code, its report (Null when it printed none) and its stderr.
fn load_gen(args: &[&str]) -> (i32, Value, String) {
    let output = Command::new(LOAD_GEN)
        .args(args)
        .output()
        .expect("run load-gen");
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (
        output.status.code().unwrap_or(-1),
        report,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn count(report: &Value, field: &str) -> u64 {
    report[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {report}"))
}

#[test]
fn load_gen_sends_a_seeded_poisson_load_and_counts_answers_within_the_slo() {
    let (dir, model) = scratch_with_tiny_model("load-gen");
    let worker = OnlineWorker::serve(&dir, &model, &["--cpus", "0"]);
    let body = dir.join("request.json");
    std::fs::write(&body, tiny_request("lg", &[[1.0, 2.0, 3.0, 4.0]])).unwrap();
    let url = format!("{}/v2/models/tiny/infer", worker.base);
    let args = [
        "--url",
        &url,
        "--body",
        body.to_str().unwrap(),
        "--rate",
        "100",
        "--seconds",
        "1",
        "--slo-ms",
        "1000",
        "--seed",
        "3",
    ];
    let (code, first, _) = load_gen(&args);
    assert_eq!(code, 0, "{first}");
    println!("load-gen report: {first}");
    let sent = count(&first, "sent");
    // 100 arrivals/s for 1 s: Poisson, so 100 ± 40 covers four standard deviations.
    assert!((60..=140).contains(&sent), "{sent} requests sent");
    assert_eq!(count(&first, "ok"), sent, "{first}");
    assert_eq!(count(&first, "within_slo"), sent, "{first}");
    assert_eq!(first["attainment_pct"], 100.0);
    let (p50, p99) = (
        first["p50_ms"].as_f64().unwrap(),
        first["p99_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 < 1000.0, "{first}");
    // The arrivals come from the seed: the same seed offers the same load.
    let (_, second, _) = load_gen(&args);
    assert_eq!(count(&second, "sent"), sent);
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn load_gen_counts_failures_as_misses_and_refuses_a_remote_url() {
    let (dir, _) = scratch_with_tiny_model("load-gen-fail");
    let body = dir.join("request.json");
    std::fs::write(&body, tiny_request("lg", &[[1.0, 2.0, 3.0, 4.0]])).unwrap();
    // A loopback port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v2/models/tiny/infer");
    let body_arg = body.to_str().unwrap();
    let (code, report, _) = load_gen(&[
        "--url",
        &url,
        "--body",
        body_arg,
        "--rate",
        "50",
        "--seconds",
        "0.5",
    ]);
    assert_eq!(code, 0, "{report}");
    let sent = count(&report, "sent");
    assert!(sent > 0, "{report}");
    assert_eq!(count(&report, "failed"), sent, "{report}");
    assert_eq!(count(&report, "within_slo"), 0);
    assert_eq!(report["attainment_pct"], 0.0);

    let (code, report, stderr) = load_gen(&[
        "--url",
        "http://192.0.2.1:8000/v2/models/tiny/infer",
        "--body",
        body_arg,
    ]);
    assert_eq!(code, 2, "{report}");
    assert!(stderr.contains("not a loopback URL"), "{stderr}");
    let (code, _, stderr) = load_gen(&["--url", &url, "--body", "/nonexistent/body.json"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read --body"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn load_gen_sends_binary_tensor_bodies_with_their_header_length() {
    let (dir, model) = scratch_with_tiny_model("load-gen-binary");
    let worker = OnlineWorker::serve(&dir, &model, &["--cpus", "0"]);
    let header = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#;
    let body = dir.join("request.bin");
    std::fs::write(&body, binary_body(header, &[1.0, 2.0, 3.0, 4.0])).unwrap();
    let url = format!("{}/v2/models/tiny/infer", worker.base);
    let run = |header_length: usize| {
        load_gen(&[
            "--url",
            &url,
            "--body",
            body.to_str().unwrap(),
            "--inference-header-length",
            &header_length.to_string(),
            "--rate",
            "50",
            "--seconds",
            "0.5",
            "--slo-ms",
            "1000",
        ])
    };
    let (code, report, _) = run(header.len());
    assert_eq!(code, 0, "{report}");
    let sent = count(&report, "sent");
    assert!(sent > 0, "{report}");
    assert_eq!(count(&report, "ok"), sent, "{report}");
    // A length that cuts the JSON short: the worker answers 400, counted as failed.
    let (code, report, _) = run(header.len() - 1);
    assert_eq!(code, 0, "{report}");
    assert_eq!(count(&report, "failed"), count(&report, "sent"), "{report}");
    let (code, _, stderr) = run(header.len() + 100);
    assert_eq!(code, 2);
    assert!(stderr.contains("longer than the 110-byte body"), "{stderr}");
    assert!(worker.stop().success());
    std::fs::remove_dir_all(&dir).unwrap();
}
