//! Prometheus `/metrics` (text exposition format 0.0.4) on a local TCP address.
//!
//! The daemon's snapshot is rendered on each scrape; the sensor's log-linear histograms are
//! folded into power-of-two `le` buckets (1 µs to about 1 s), which Prometheus can aggregate.

use std::{fmt::Write as _, net::SocketAddr};

use enforcer_common::{NR_CLASSES, histogram::bucket_upper_bound};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
};
use tracing::warn;

use crate::sensor::Snapshot;

/// Power-of-two bucket bounds for exported histograms: 2^10 ns (1 µs) to 2^30 ns (1.07 s).
const EXPORT_EXPONENTS: std::ops::RangeInclusive<u32> = 10..=30;

/// (le in seconds, cumulative count) for a sensor histogram, then +Inf.
fn cumulative(hist: &[u64]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for exponent in EXPORT_EXPONENTS {
        let le_ns = 1u64 << exponent;
        let count: u64 = hist
            .iter()
            .enumerate()
            .filter(|(bucket, _)| bucket_upper_bound(*bucket) < le_ns)
            .map(|(_, count)| count)
            .sum();
        out.push((format!("{}", le_ns as f64 / 1e9), count));
    }
    out.push(("+Inf".to_owned(), hist.iter().sum()));
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, hist: &[u64], sum_ns: u64) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (le, count) in cumulative(hist) {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
    }
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {}", sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count{braces} {}", hist.iter().sum::<u64>());
}

/// Label values are names validated to [A-Za-z0-9_.-]; escaping is still applied.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The whole exposition for one snapshot.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    header(
        &mut out,
        "reamer_training_wait_seconds",
        "histogram",
        "Run-queue waits of training threads.",
    );
    for job in &snapshot.jobs {
        let labels = format!("job=\"{}\"", label(&job.name));
        histogram(
            &mut out,
            "reamer_training_wait_seconds",
            &labels,
            &job.wait_hist,
            job.wait_ns,
        );
    }
    for (name, help, field) in [
        (
            "reamer_training_run_seconds_total",
            "Time training threads ran.",
            0,
        ),
        (
            "reamer_training_behind_inference_total",
            "Times a training thread was queued behind inference.",
            1,
        ),
        (
            "reamer_training_long_waits_total",
            "Waits longer than the configured threshold.",
            2,
        ),
        (
            "reamer_training_events_received_total",
            "Sensor events userspace received for the job.",
            3,
        ),
    ] {
        header(&mut out, name, "counter", help);
        for job in &snapshot.jobs {
            let value = match field {
                0 => job.run_ns as f64 / 1e9,
                1 => job.behind_inference as f64,
                2 => job.long_waits as f64,
                _ => job.events_received as f64,
            };
            let _ = writeln!(out, "{name}{{job=\"{}\"}} {value}", label(&job.name));
        }
    }
    header(
        &mut out,
        "reamer_training_threads",
        "gauge",
        "Threads classified into the job.",
    );
    for job in &snapshot.jobs {
        let _ = writeln!(
            out,
            "reamer_training_threads{{job=\"{}\"}} {}",
            label(&job.name),
            job.threads
        );
    }
    header(
        &mut out,
        "reamer_sensor_counter_total",
        "counter",
        "Sensor diagnostics: events sent, dropped, skew, map full.",
    );
    for (name, value) in &snapshot.counters {
        let _ = writeln!(
            out,
            "reamer_sensor_counter_total{{counter=\"{}\"}} {value}",
            label(name)
        );
    }
    header(
        &mut out,
        "reamer_cpu_class_seconds_total",
        "counter",
        "Time each CPU spent running each class.",
    );
    let classes: [&str; NR_CLASSES] = ["other", "training", "online", "offline", "idle"];
    for (cpu, per_class) in snapshot.cpu_class_ns.iter().enumerate() {
        for (class, ns) in classes.iter().zip(per_class) {
            let _ = writeln!(
                out,
                "reamer_cpu_class_seconds_total{{cpu=\"{cpu}\",class=\"{class}\"}} {}",
                *ns as f64 / 1e9
            );
        }
    }
    if let Some(enforcement) = &snapshot.enforcement {
        header(
            &mut out,
            "reamer_enforcer_reactions_total",
            "counter",
            "Fast-path decisions (event to cgroup write).",
        );
        let _ = writeln!(
            out,
            "reamer_enforcer_reactions_total {}",
            enforcement.reactions
        );
        header(
            &mut out,
            "reamer_enforcer_training_demand_cpus",
            "gauge",
            "Training's demand estimate.",
        );
        let _ = writeln!(
            out,
            "reamer_enforcer_training_demand_cpus {}",
            enforcement.demand_estimate_cpus
        );
        header(
            &mut out,
            "reamer_pool_cpus",
            "gauge",
            "CPUs in each pool's cpuset now.",
        );
        for pool in &enforcement.pools {
            let count = crate::topology::parse_cpu_list(&pool.cpus).map_or(0, |c| c.len());
            let _ = writeln!(
                out,
                "reamer_pool_cpus{{pool=\"{}\",kind=\"{}\"}} {count}",
                label(&pool.name),
                pool.kind
            );
        }
        header(
            &mut out,
            "reamer_pool_cpu_weight",
            "gauge",
            "Each online pool's CPU weight now (cgroup v2 scale; training has 100).",
        );
        for pool in &enforcement.pools {
            if let Some(weight) = pool.cpu_weight {
                let _ = writeln!(
                    out,
                    "reamer_pool_cpu_weight{{pool=\"{}\"}} {weight}",
                    label(&pool.name)
                );
            }
        }
        header(
            &mut out,
            "reamer_pool_paused",
            "gauge",
            "1 while an offline pool is frozen because training is short of cores.",
        );
        for pool in enforcement.pools.iter().filter(|p| p.kind == "offline") {
            let _ = writeln!(
                out,
                "reamer_pool_paused{{pool=\"{}\"}} {}",
                label(&pool.name),
                u8::from(pool.paused)
            );
        }
        if !enforcement.event_to_ran_hist.is_empty() {
            header(
                &mut out,
                "reamer_enforcer_event_to_training_ran_seconds",
                "histogram",
                "From the kernel event to the waiting training thread running.",
            );
            histogram(
                &mut out,
                "reamer_enforcer_event_to_training_ran_seconds",
                "",
                &enforcement.event_to_ran_hist,
                enforcement.event_to_ran_sum_ns,
            );
        }
        if !enforcement.event_to_write_hist.is_empty() {
            header(
                &mut out,
                "reamer_enforcer_event_to_write_seconds",
                "histogram",
                "From the kernel event to the completed cgroup write.",
            );
            histogram(
                &mut out,
                "reamer_enforcer_event_to_write_seconds",
                "",
                &enforcement.event_to_write_hist,
                enforcement.event_to_write_sum_ns,
            );
        }
    }
    if let Some(gpu) = &snapshot.gpu {
        render_gpu(&mut out, gpu);
    }
    out
}

/// The GPU side's gauges: whether it runs, each device's load and memory by owner, and the
/// gate on inference.
fn render_gpu(out: &mut String, gpu: &crate::gpu::report::GpuReport) {
    use crate::gpu::report::GpuReport;
    header(
        out,
        "reamer_gpu_enabled",
        "gauge",
        "1 when NVML found a GPU and the GPU policy runs; 0 when off or disabled.",
    );
    let GpuReport::Active(active) = gpu else {
        let _ = writeln!(out, "reamer_gpu_enabled 0");
        return;
    };
    let _ = writeln!(out, "reamer_gpu_enabled 1");
    header(
        out,
        "reamer_gpu_utilization_ratio",
        "gauge",
        "Share of NVML's last sample period during which a kernel ran.",
    );
    for device in &active.devices {
        let _ = writeln!(
            out,
            "reamer_gpu_utilization_ratio{{gpu=\"{}\"}} {}",
            device.index,
            f64::from(device.utilization_pct) / 100.0
        );
    }
    header(
        out,
        "reamer_gpu_memory_bytes",
        "gauge",
        "GPU memory held, by owner (training, inference, other), and the device total.",
    );
    for device in &active.devices {
        for (owner, mib) in [
            ("training", device.training_mib),
            ("inference", device.inference_mib),
            ("other", device.other_mib),
            ("total", device.memory_total_mib),
        ] {
            let _ = writeln!(
                out,
                "reamer_gpu_memory_bytes{{gpu=\"{}\",owner=\"{owner}\"}} {}",
                device.index,
                mib * 1024 * 1024
            );
        }
    }
    header(
        out,
        "reamer_gpu_inference_run_fraction",
        "gauge",
        "Share of each duty-cycle period the GPU pools run (1: not gated).",
    );
    let _ = writeln!(
        out,
        "reamer_gpu_inference_run_fraction {}",
        active.gate.run_fraction
    );
    header(
        out,
        "reamer_gpu_freezes_total",
        "counter",
        "Times the GPU pools were frozen by the duty cycle.",
    );
    let _ = writeln!(out, "reamer_gpu_freezes_total {}", active.gate.freezes);
    header(
        out,
        "reamer_gpu_evictions_total",
        "counter",
        "Inference processes evicted to keep training's GPU memory.",
    );
    let _ = writeln!(out, "reamer_gpu_evictions_total {}", active.evictions);
}

/// Serves `/metrics` on `listener` with snapshots from `snapshot`, until the task is dropped.
/// Loopback by default; any other path answers 404.
pub async fn serve(listener: TcpListener, snapshot: impl Fn() -> Snapshot + Send + Sync + 'static) {
    let snapshot = std::sync::Arc::new(snapshot);
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let snapshot = snapshot.clone();
        tokio::spawn(async move {
            let Ok(Some(request)) =
                tokio::time::timeout(REQUEST_TIMEOUT, read_request_head(&mut stream)).await
            else {
                return;
            };
            let request = String::from_utf8_lossy(&request);
            let path = request.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if path == "/metrics" {
                ("200 OK", render(&snapshot()))
            } else {
                ("404 Not Found", "only /metrics is served here\n".to_owned())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            if let Err(err) = stream.write_all(response.as_bytes()).await {
                warn!("metrics client: {err}");
            }
        });
    }
}

/// How long a client may take to send its request line and headers.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// The most of a request that is read: the request line and headers of a scraper fit.
const MAX_REQUEST_HEAD: usize = 2048;

/// The request line and headers, read up to the blank line that ends them (or
/// `MAX_REQUEST_HEAD` bytes, or the client's end of stream). A client may send them in
/// pieces: answering after the first read, as this once did, closed the connection under a
/// client still writing its headers (a test's client on a busy host got a broken pipe). None
/// when the connection fails or sends nothing.
async fn read_request_head(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = vec![0u8; MAX_REQUEST_HEAD];
    let mut len = 0;
    while len < head.len() && !head[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut head[len..]).await {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(_) => return None,
        }
    }
    head.truncate(len);
    (len > 0).then_some(head)
}

/// Binds the metrics address; on failure the daemon goes on without metrics, loudly.
pub async fn bind(addr: SocketAddr) -> Option<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(listener) => Some(listener),
        Err(err) => {
            warn!("metrics disabled: cannot listen on {addr}: {err}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensor::snapshot::JobTotals;
    use enforcer_common::histogram::{NR_BUCKETS, bucket_of};

    #[tokio::test]
    async fn a_request_head_sent_in_pieces_is_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\n")
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            stream.write_all(b"Host: x\r\n\r\n").await.unwrap();
            stream
        });
        let (mut server, _) = listener.accept().await.unwrap();
        let head = read_request_head(&mut server).await.unwrap();
        assert_eq!(head, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        drop(client.await.unwrap());
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
                ..Default::default()
            }],
            counters: [("events_sent".to_owned(), 7u64)].into_iter().collect(),
            enforcement: Some(crate::enforce::EnforcementStatus {
                pools: vec![
                    crate::enforce::PoolStatus {
                        name: "web".into(),
                        kind: "online".into(),
                        cpus: "1".into(),
                        cpu_weight: Some(25),
                        min_cpu_weight: Some(10),
                        ..Default::default()
                    },
                    crate::enforce::PoolStatus {
                        name: "batch".into(),
                        kind: "offline".into(),
                        cpus: "1".into(),
                        paused: true,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = render(&snapshot);
        assert!(
            text.contains(
                "reamer_training_wait_seconds_bucket{job=\"resnet\",le=\"0.000001024\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "reamer_training_wait_seconds_bucket{job=\"resnet\",le=\"0.000004096\"} 3"
            ),
            "{text}"
        );
        assert!(
            text.contains("reamer_training_wait_seconds_bucket{job=\"resnet\",le=\"+Inf\"} 4"),
            "{text}"
        );
        assert!(text.contains("reamer_training_wait_seconds_count{job=\"resnet\"} 4"));
        assert!(text.contains("reamer_training_run_seconds_total{job=\"resnet\"} 1.5"));
        assert!(text.contains("reamer_sensor_counter_total{counter=\"events_sent\"} 7"));
        assert!(
            text.contains("reamer_pool_cpu_weight{pool=\"web\"} 25"),
            "{text}"
        );
        assert!(
            text.contains("reamer_pool_paused{pool=\"batch\"} 1"),
            "{text}"
        );
        assert!(!text.contains("reamer_pool_paused{pool=\"web\"}"), "{text}");
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
}
