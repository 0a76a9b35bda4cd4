//! Unit tests of `metrics`.

use enforcer_common::{
    histogram::{NR_BUCKETS, bucket_of},
    protocol::{BesideJob, EnforcementStatus, HarvestStatus, JobProgress, JobTotals, PoolStatus},
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

#[tokio::test]
async fn a_request_head_sent_in_pieces_is_answered() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/metrics", get(|| async { "ok" }));
    let server = tokio::spawn(serve(listener, router));
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    stream
        .write_all(b"Host: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    server.abort();
}

#[test]
fn renders_cumulative_histograms_and_counters() {
    let mut hist = vec![0; NR_BUCKETS];
    for ns in [500u64, 3_000, 3_000, 2_000_000] {
        hist[bucket_of(ns)] += 1;
    }
    let snapshot = Snapshot {
        jobs: vec![JobTotals {
            name: "resnet".into(),
            wait_hist: hist,
            wait_ns: 2_006_500,
            run_ns: 1_500_000_000,
            offline_wait_ns: 250_000_000,
            progress: Some(JobProgress {
                steps: 1200,
                steps_per_s: Some(11.5),
                age_s: 0.4,
            }),
            gpu_busy: Some(0.87),
            ..Default::default()
        }],
        counters: [("events_sent".to_owned(), 7u64)].into_iter().collect(),
        enforcement: Some(EnforcementStatus {
            pools: vec![
                PoolStatus {
                    name: "web".into(),
                    kind: "online".into(),
                    cpus: "1".into(),
                    cpu_weight: Some(25),
                    min_cpu_weight: Some(10),
                    ..Default::default()
                },
                PoolStatus {
                    name: "batch".into(),
                    kind: "offline".into(),
                    cpus: "1".into(),
                    paused: true,
                    ..Default::default()
                },
            ],
            harvest: Some(HarvestStatus {
                level: "half".into(),
                signal: Some("progress".into()),
                job: Some("resnet".into()),
                reference_steps_per_s: Some(11.5),
                last_change: Some(serde_json::json!({
                    "level": "half", "reason": "too_costly", "tried": "three_quarters",
                    "ratio": {"ratio": 0.97, "low": 0.95, "high": 0.99}
                })),
                held_back_s: 36.5,
                running_s: 300.0,
                half_measure_s: Some(10.0),
                steps: [("probe".to_owned(), 12), ("too_costly".to_owned(), 1)].into(),
                beside: vec![BesideJob {
                    job: "bert".into(),
                    ratio: 0.98,
                    low: 0.96,
                    high: 1.0,
                    cycles: 3,
                }],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut snapshot = snapshot;
    snapshot.pods = vec![PodInfo {
        pod: "ml/batch-0".into(),
        role: "offline".into(),
        group: "batch".into(),
        state: "contested".into(),
        threads: 3,
        foreign_writes: 4,
        ..Default::default()
    }];
    let text = render(snapshot);
    for line in [
        "reamer_pod_info{pod=\"ml/batch-0\",role=\"offline\",group=\"batch\",state=\"contested\"} 1",
        "reamer_pod_threads{pod=\"ml/batch-0\"} 3",
        "reamer_pod_foreign_writes_total{pod=\"ml/batch-0\"} 4",
        "reamer_training_wait_seconds_bucket{job=\"resnet\",le=\"1.024e-06\"} 1",
        "reamer_training_wait_seconds_bucket{job=\"resnet\",le=\"4.096e-06\"} 3",
        "reamer_training_wait_seconds_bucket{job=\"resnet\",le=\"+Inf\"} 4",
        "reamer_training_wait_seconds_count{job=\"resnet\"} 4",
        "reamer_training_run_seconds_total{job=\"resnet\"} 1.5",
        "reamer_training_offline_wait_seconds_total{job=\"resnet\"} 0.25",
        "reamer_training_progress_steps_total{job=\"resnet\"} 1200",
        "reamer_training_pace_steps_per_second{job=\"resnet\"} 11.5",
        "reamer_training_gpu_busy{job=\"resnet\"} 0.87",
        "reamer_harvest_reference_steps_per_second{job=\"resnet\"} 11.5",
        "reamer_harvest_pace_ratio{job=\"resnet\",bound=\"low\"} 0.95",
        "reamer_harvest_pace_ratio{job=\"bert\",bound=\"ratio\"} 0.98",
        "reamer_harvest_held_back_seconds_total 36.5",
        "reamer_harvest_half_measure_seconds 10.0",
        "reamer_harvest_level{level=\"half\"} 1",
        "reamer_harvest_level{level=\"policy\"} 0",
        "reamer_harvest_steps_total{reason=\"probe\"} 12",
        "reamer_harvest_steps_total{reason=\"too_costly\"} 1",
        "reamer_sensor_counter_total{counter=\"events_sent\"} 7",
        "reamer_pool_cpu_weight{pool=\"web\"} 25",
        "reamer_pool_paused{pool=\"batch\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in {text}");
    }
    assert!(!text.contains("reamer_pool_paused{pool=\"web\"}"), "{text}");
    // Every level of the ladder, one of them in force.
    let levels: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("reamer_harvest_level{"))
        .collect();
    assert_eq!(levels.len(), 7, "{levels:?}");
    let in_force = levels.iter().filter(|line| line.ends_with(" 1")).count();
    assert_eq!(in_force, 1, "{levels:?}");
    // Every sample line is `name{labels} value` or `name value`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert_eq!(
            line.rsplit(' ')
                .next()
                .map(|v| v.parse::<f64>().is_ok() || v == "+Inf"),
            Some(true),
            "{line}"
        );
    }
}

/// The pace ratio's series for `job` and `bound`, as sample lines.
fn pace_ratios<'a>(text: &'a str, job: &str, bound: &str) -> Vec<&'a str> {
    let series = format!("reamer_harvest_pace_ratio{{job=\"{job}\",bound=\"{bound}\"}} ");
    text.lines()
        .filter(|line| line.starts_with(&series))
        .collect()
}

#[test]
fn a_level_left_for_a_job_beside_has_its_ratio_under_that_job_once() {
    let harvest = |beside: Vec<BesideJob>| HarvestStatus {
        level: "quarter".into(),
        signal: Some("progress".into()),
        job: Some("resnet".into()),
        last_change: Some(serde_json::json!({
            "level": "quarter", "reason": "too_costly_for", "tried": "half", "job": "bert",
            "ratio": {"ratio": 0.9, "low": 0.85, "high": 0.95, "cycles": 3}
        })),
        beside,
        ..Default::default()
    };
    let render_with = |beside| {
        render(Snapshot {
            enforcement: Some(EnforcementStatus {
                harvest: Some(harvest(beside)),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    // Left for bert: its ratio is bert's, not the job followed's.
    let text = render_with(Vec::new());
    assert_eq!(
        pace_ratios(&text, "bert", "ratio"),
        ["reamer_harvest_pace_ratio{job=\"bert\",bound=\"ratio\"} 0.9"]
    );
    assert!(pace_ratios(&text, "resnet", "ratio").is_empty(), "{text}");
    // bert measured again at the level below: one series, the comparison now running.
    let now = BesideJob {
        job: "bert".into(),
        ratio: 0.99,
        low: 0.9,
        high: 1.08,
        cycles: 2,
    };
    let text = render_with(vec![now]);
    assert_eq!(
        pace_ratios(&text, "bert", "ratio"),
        ["reamer_harvest_pace_ratio{job=\"bert\",bound=\"ratio\"} 0.99"]
    );
}

#[test]
fn a_reference_from_the_gpus_busy_share_has_its_own_gauge() {
    let snapshot = Snapshot {
        enforcement: Some(EnforcementStatus {
            harvest: Some(HarvestStatus {
                level: "policy".into(),
                signal: Some("gpu_busy".into()),
                reference_steps_per_s: Some(870_000.0),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let text = render(snapshot);
    assert!(
        text.contains("reamer_harvest_reference_gpus_busy 0.87"),
        "{text}"
    );
    assert!(
        !text.contains("reamer_harvest_reference_steps_per_second"),
        "{text}"
    );
}
