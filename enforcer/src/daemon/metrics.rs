//! Prometheus `/metrics` (text exposition format 0.0.4), served by axum on a local TCP
//! address and encoded by `prometheus-client` from the daemon's snapshot at each scrape.
//!
//! The sensor's log-linear histograms are folded into power-of-two `le` buckets (1 µs to
//! about 1 s), which Prometheus can aggregate.

mod harvest;

use std::{fmt, net::SocketAddr, sync::Arc};

use axum::{Router, http::header, response::IntoResponse, routing::get};
use enforcer_common::{
    NR_CLASSES, cpu_list,
    histogram::bucket_upper_bound,
    http_serve::{self, HttpLimits},
    protocol::{PodInfo, Snapshot, gpu::GpuReport},
};
use prometheus_client::{
    collector::Collector,
    encoding::{
        DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, MetricEncoder, NoLabelSet,
        prometheus_text,
    },
    metrics::MetricType,
    registry::Registry,
};
use tokio::net::TcpListener;
use tracing::warn;

use super::{
    snapshot::{Detail, take_snapshot},
    state::Shared,
};

/// Power-of-two bucket bounds for exported histograms: 2^10 ns (1 µs) to 2^30 ns (1.07 s).
const EXPORT_EXPONENTS: std::ops::RangeInclusive<u32> = 10..=30;

/// The whole exposition for one snapshot.
pub(crate) fn render(snapshot: Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotMetrics(snapshot)));
    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).expect("encoding into a String cannot fail");
    out
}

/// A snapshot, encoded as metrics when Prometheus scrapes.
#[derive(Debug)]
struct SnapshotMetrics(Snapshot);

/// (upper bound in seconds, count in that bucket alone) for a sensor histogram, then +Inf.
fn buckets(hist: &[u64]) -> Vec<(f64, u64)> {
    let mut out = Vec::new();
    let mut below = 0;
    for exponent in EXPORT_EXPONENTS {
        let le_ns = 1u64 << exponent;
        let cumulative: u64 = hist
            .iter()
            .enumerate()
            .filter(|(bucket, _)| bucket_upper_bound(*bucket) < le_ns)
            .map(|(_, count)| count)
            .sum();
        out.push((le_ns as f64 / 1e9, cumulative - below));
        below = cumulative;
    }
    out.push((f64::INFINITY, hist.iter().sum::<u64>() - below));
    out
}

fn histogram(metric: &mut MetricEncoder, hist: &[u64], sum_ns: u64) -> fmt::Result {
    let count = hist.iter().sum();
    metric.encode_histogram::<NoLabelSet>(sum_ns as f64 / 1e9, count, &buckets(hist), None)
}

/// A counter's value: a count (u64) or seconds (f64).
fn counter<V: EncodeCounterValue>(metric: &mut MetricEncoder, value: V) -> fmt::Result {
    metric.encode_counter::<NoLabelSet, V, f64>(&value, None)
}

/// A gauge's value: a count (u64) or a ratio, CPUs or seconds (f64).
fn gauge<V: EncodeGaugeValue>(metric: &mut MetricEncoder, value: V) -> fmt::Result {
    metric.encode_gauge(&value)
}

impl Collector for SnapshotMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let snapshot = &self.0;
        let mut family = encoder.encode_descriptor(
            "reamer_training_wait_seconds",
            "Run-queue waits of training threads.",
            None,
            MetricType::Histogram,
        )?;
        for job in &snapshot.jobs {
            let labels = [("job", job.name.as_str())];
            histogram(
                &mut family.encode_family(&labels)?,
                &job.wait_hist,
                job.wait_ns,
            )?;
        }
        type JobSeconds = fn(&enforcer_common::protocol::JobTotals) -> u64;
        let job_seconds: [(&str, &str, JobSeconds); 2] = [
            (
                "reamer_training_run_seconds",
                "Time training threads ran, the slices running at the reading included.",
                |job| job.run_ns,
            ),
            (
                "reamer_training_offline_wait_seconds",
                "Run-queue waits of training threads that began behind offline inference.",
                |job| job.offline_wait_ns,
            ),
        ];
        for (name, help, ns) in job_seconds {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for job in &snapshot.jobs {
                let labels = [("job", job.name.as_str())];
                counter(&mut family.encode_family(&labels)?, ns(job) as f64 / 1e9)?;
            }
        }
        type JobCount = fn(&enforcer_common::protocol::JobTotals) -> u64;
        let job_counters: [(&str, &str, JobCount); 3] = [
            (
                "reamer_training_behind_inference",
                "Times a training thread was queued behind inference.",
                |job| job.behind_inference,
            ),
            (
                "reamer_training_long_waits",
                "Waits longer than the configured threshold.",
                |job| job.long_waits,
            ),
            (
                "reamer_training_events_received",
                "Sensor events userspace received for the job.",
                |job| job.events_received,
            ),
        ];
        for (name, help, value) in job_counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for job in &snapshot.jobs {
                let labels = [("job", job.name.as_str())];
                counter(&mut family.encode_family(&labels)?, value(job))?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "reamer_training_threads",
            "Threads classified into the job.",
            None,
            MetricType::Gauge,
        )?;
        for job in &snapshot.jobs {
            let labels = [("job", job.name.as_str())];
            gauge(&mut family.encode_family(&labels)?, job.threads as u64)?;
        }
        // The job's own progress, for jobs that report it: the steps it counted (a counter
        // Prometheus can rate), and the daemon's pace over its window.
        let mut family = encoder.encode_descriptor(
            "reamer_training_progress_steps",
            "Steps the training job reports it has done (jobs that report progress).",
            None,
            MetricType::Counter,
        )?;
        for job in &snapshot.jobs {
            if let Some(progress) = job.progress {
                let labels = [("job", job.name.as_str())];
                counter(&mut family.encode_family(&labels)?, progress.steps)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "reamer_training_pace_steps_per_second",
            "The training job's pace over its last 5 s of progress reports.",
            None,
            MetricType::Gauge,
        )?;
        for job in &snapshot.jobs {
            if let Some(pace) = job.progress.and_then(|progress| progress.steps_per_s) {
                let labels = [("job", job.name.as_str())];
                gauge(&mut family.encode_family(&labels)?, pace)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "reamer_training_gpu_busy",
            "The training job's GPUs' busy share over the last 5 s, in GPUs busy, where it is \
             the job's own (NVML's per-process figures, or a device it holds alone).",
            None,
            MetricType::Gauge,
        )?;
        for job in &snapshot.jobs {
            if let Some(busy) = job.gpu_busy {
                let labels = [("job", job.name.as_str())];
                gauge(&mut family.encode_family(&labels)?, busy)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "reamer_sensor_counter",
            "Sensor diagnostics: events sent, dropped, skew, map full.",
            None,
            MetricType::Counter,
        )?;
        for (name, value) in &snapshot.counters {
            let labels = [("counter", name.as_str())];
            counter(&mut family.encode_family(&labels)?, *value)?;
        }
        let mut family = encoder.encode_descriptor(
            "reamer_cpu_class_seconds",
            "Time each CPU spent running each class.",
            None,
            MetricType::Counter,
        )?;
        let classes: [&str; NR_CLASSES] = ["other", "training", "online", "offline", "idle"];
        for (cpu, per_class) in snapshot.cpu_class_ns.iter().enumerate() {
            let cpu = cpu.to_string();
            for (class, ns) in classes.iter().zip(per_class) {
                let labels = [("cpu", cpu.as_str()), ("class", class)];
                counter(&mut family.encode_family(&labels)?, *ns as f64 / 1e9)?;
            }
        }
        if let Some(enforcement) = &snapshot.enforcement {
            counter(
                &mut encoder.encode_descriptor(
                    "reamer_enforcer_reactions",
                    "Fast-path decisions (event to cgroup write).",
                    None,
                    MetricType::Counter,
                )?,
                enforcement.reactions,
            )?;
            gauge(
                &mut encoder.encode_descriptor(
                    "reamer_enforcer_training_demand_cpus",
                    "Training's demand estimate.",
                    None,
                    MetricType::Gauge,
                )?,
                enforcement.demand_estimate_cpus,
            )?;
            if let Some(harvest) = &enforcement.harvest {
                harvest::encode(&mut encoder, harvest)?;
            }
            let mut family = encoder.encode_descriptor(
                "reamer_pool_cpus",
                "CPUs in each pool's cpuset now.",
                None,
                MetricType::Gauge,
            )?;
            for pool in &enforcement.pools {
                let labels = [("pool", pool.name.as_str()), ("kind", pool.kind.as_str())];
                let cpus = cpu_list::count(&pool.cpus) as u64;
                gauge(&mut family.encode_family(&labels)?, cpus)?;
            }
            let mut family = encoder.encode_descriptor(
                "reamer_pool_cpu_weight",
                "Each online pool's CPU weight now (cgroup v2 scale; training has 100).",
                None,
                MetricType::Gauge,
            )?;
            for pool in &enforcement.pools {
                if let Some(weight) = pool.cpu_weight {
                    let labels = [("pool", pool.name.as_str())];
                    gauge(&mut family.encode_family(&labels)?, u64::from(weight))?;
                }
            }
            let mut family = encoder.encode_descriptor(
                "reamer_pool_paused",
                "1 while an offline pool is frozen because training is short of cores.",
                None,
                MetricType::Gauge,
            )?;
            for pool in enforcement.pools.iter().filter(|p| p.kind == "offline") {
                let labels = [("pool", pool.name.as_str())];
                gauge(&mut family.encode_family(&labels)?, u64::from(pool.paused))?;
            }
            if !enforcement.event_to_ran_hist.is_empty() {
                histogram(
                    &mut encoder.encode_descriptor(
                        "reamer_enforcer_event_to_training_ran_seconds",
                        "From the kernel event to the waiting training thread running.",
                        None,
                        MetricType::Histogram,
                    )?,
                    &enforcement.event_to_ran_hist,
                    enforcement.event_to_ran_sum_ns,
                )?;
            }
            if !enforcement.event_to_write_hist.is_empty() {
                histogram(
                    &mut encoder.encode_descriptor(
                        "reamer_enforcer_event_to_write_seconds",
                        "From the kernel event to the completed cgroup write.",
                        None,
                        MetricType::Histogram,
                    )?,
                    &enforcement.event_to_write_hist,
                    enforcement.event_to_write_sum_ns,
                )?;
            }
        }
        if !snapshot.pods.is_empty() {
            encode_pods(&mut encoder, &snapshot.pods)?;
        }
        if let Some(gpu) = &snapshot.gpu {
            encode_gpu(&mut encoder, gpu)?;
        }
        Ok(())
    }
}

/// The Kubernetes pods the daemon manages, named `namespace/name`.
fn encode_pods(encoder: &mut DescriptorEncoder, pods: &[PodInfo]) -> fmt::Result {
    let mut family = encoder.encode_descriptor(
        "reamer_pod_info",
        "1 for each managed pod: its role, its job or pool, and how reamer holds it \
         (measured, enforced, observe_only, exclusive, contested, failing; waiting: a training \
         pod that found every job slot taken, taken when one frees; refused: a pod whose \
         claim reamer does not take, such as a role its namespace may not claim).",
        None,
        MetricType::Gauge,
    )?;
    for pod in pods {
        let labels = [
            ("pod", pod.pod.as_str()),
            ("role", pod.role.as_str()),
            ("group", pod.group.as_str()),
            ("state", pod.state.as_str()),
        ];
        gauge(&mut family.encode_family(&labels)?, 1u64)?;
    }
    let mut family = encoder.encode_descriptor(
        "reamer_pod_threads",
        "Threads in each managed pod's container groups.",
        None,
        MetricType::Gauge,
    )?;
    for pod in pods {
        let labels = [("pod", pod.pod.as_str())];
        gauge(&mut family.encode_family(&labels)?, pod.threads as u64)?;
    }
    let mut family = encoder.encode_descriptor(
        "reamer_pod_foreign_writes",
        "Writes by someone else (the kubelet, another agent) to the files reamer holds for an \
         inference pod.",
        None,
        MetricType::Counter,
    )?;
    for pod in pods.iter().filter(|p| p.role != "training") {
        let labels = [("pod", pod.pod.as_str())];
        counter(&mut family.encode_family(&labels)?, pod.foreign_writes)?;
    }
    Ok(())
}

/// The GPU side's gauges: whether it runs, each device's load and memory by owner, and the
/// gate on inference.
fn encode_gpu(encoder: &mut DescriptorEncoder, gpu: &GpuReport) -> fmt::Result {
    let mut enabled = encoder.encode_descriptor(
        "reamer_gpu_enabled",
        "1 when NVML found a GPU and the GPU policy runs; 0 when off or disabled.",
        None,
        MetricType::Gauge,
    )?;
    let GpuReport::Active(active) = gpu else {
        return gauge(&mut enabled, 0u64);
    };
    gauge(&mut enabled, 1u64)?;
    let mut family = encoder.encode_descriptor(
        "reamer_gpu_utilization_ratio",
        "Share of NVML's last sample period during which a kernel ran.",
        None,
        MetricType::Gauge,
    )?;
    for device in &active.devices {
        let index = device.index.to_string();
        let labels = [("gpu", index.as_str())];
        let ratio = f64::from(device.utilization_pct) / 100.0;
        gauge(&mut family.encode_family(&labels)?, ratio)?;
    }
    let mut family = encoder.encode_descriptor(
        "reamer_gpu_memory_bytes",
        "GPU memory held, by owner (training, inference, other), and the device total.",
        None,
        MetricType::Gauge,
    )?;
    for device in &active.devices {
        let index = device.index.to_string();
        for (owner, mib) in [
            ("training", device.training_mib),
            ("inference", device.inference_mib),
            ("other", device.other_mib),
            ("total", device.memory_total_mib),
        ] {
            let labels = [("gpu", index.as_str()), ("owner", owner)];
            gauge(&mut family.encode_family(&labels)?, mib * 1024 * 1024)?;
        }
    }
    gauge(
        &mut encoder.encode_descriptor(
            "reamer_gpu_inference_run_fraction",
            "Share of each duty-cycle period the GPU pools run (1: not gated).",
            None,
            MetricType::Gauge,
        )?,
        active.gate.run_fraction,
    )?;
    counter(
        &mut encoder.encode_descriptor(
            "reamer_gpu_freezes",
            "Times the GPU pools were frozen by the duty cycle.",
            None,
            MetricType::Counter,
        )?,
        active.gate.freezes,
    )?;
    counter(
        &mut encoder.encode_descriptor(
            "reamer_gpu_evictions",
            "Inference processes evicted to keep training's GPU memory.",
            None,
            MetricType::Counter,
        )?,
        active.evictions,
    )
}

/// The `/metrics` endpoint: a snapshot taken on the blocking pool at each scrape. Any other
/// path answers 404.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let shared = shared.clone();
                async move {
                    match tokio::task::spawn_blocking(move || take_snapshot(&shared, Detail::Full))
                        .await
                    {
                        Ok(snapshot) => (
                            [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
                            render(snapshot),
                        )
                            .into_response(),
                        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    }
                }
            }),
        )
        .fallback(|| async {
            (
                axum::http::StatusCode::NOT_FOUND,
                "only /metrics is served here\n",
            )
        })
}

/// Binds the metrics address; on failure the daemon goes on without metrics, loudly.
pub(crate) async fn bind(addr: SocketAddr) -> Option<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(listener) => Some(listener),
        Err(err) => {
            warn!("metrics disabled: cannot listen on {addr}: {err}");
            None
        }
    }
}

/// What scrapers may hold: a Prometheus server keeps one connection per target, and asks
/// every 15 s or so, so a head not complete within 10 s, or a connection idle as long, is
/// closed, and a few dozen connections are plenty. One address holds at most 4 of them (a
/// few replicas of a scraper on one node), so that one client cannot take them all. Nothing
/// vital depends on this server: the probes ask over the control socket (`enforcer health`).
const METRICS_LIMITS: HttpLimits = HttpLimits {
    header_timeout: std::time::Duration::from_secs(10),
    max_connections: 32,
    max_per_client: 4,
};

/// Serves `router` on `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, router: Router) {
    http_serve::serve(listener, router, METRICS_LIMITS, std::future::pending()).await;
}

#[cfg(test)]
mod tests;
