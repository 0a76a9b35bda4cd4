//! Online-mode counters and the request latency histogram, encoded for Prometheus by
//! `prometheus-client`.
//!
//! Latency is measured per request from the moment its body was read to the moment its answer
//! was ready, in the log-linear buckets the sensor uses (at most 1/8 relative width).

use std::{
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::Duration,
};

use enforcer_common::histogram::{NR_BUCKETS, bucket_of, percentile};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet, prometheus_text},
    metrics::MetricType,
    registry::Registry,
};

pub struct Metrics {
    slo: Duration,
    latency_ns: Vec<AtomicU64>,
    /// Requests answered with their outputs.
    pub ok: AtomicU64,
    pub within_slo: AtomicU64,
    /// Refused because the queue was full (429).
    pub rejected: AtomicU64,
    /// Refused for bad input (4xx other than 429).
    pub bad_request: AtomicU64,
    /// Inference failed (500).
    pub failed: AtomicU64,
    /// Items asked for (refused ones included): the arrival rate the adaptation follows.
    pub arrived_items: AtomicU64,
    pub batches: AtomicU64,
    pub batch_items: AtomicU64,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    /// CPUs the SLO needs at the measured load, as last told to the enforcer.
    pub needed_cpus: AtomicU64,
}

/// The latency of the requests answered since the last look: what an online worker tells the
/// enforcer once a second, which steers its pool's CPU weight by it.
pub struct LatencyWindow {
    seen: Vec<u64>,
    missed: u64,
}

/// One window's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLatency {
    /// Requests answered with outputs.
    pub requests: u64,
    /// Requests refused for overload, or failed: misses whatever their latency.
    pub missed: u64,
    /// The answered requests' 99th percentile (the upper bound of its bucket), if any.
    pub p99: Option<Duration>,
}

impl LatencyWindow {
    /// Starts the first window now.
    pub fn new(metrics: &Metrics) -> Self {
        Self {
            seen: metrics.latency_histogram(),
            missed: metrics.missed(),
        }
    }

    /// The requests since the last call to `next` (or `new`), and starts the next window.
    pub fn next(&mut self, metrics: &Metrics) -> WindowLatency {
        let (latency, seen, missed) = self.so_far(metrics);
        self.seen = seen;
        self.missed = missed;
        latency
    }

    /// The requests of the window so far, which goes on.
    pub fn peek(&self, metrics: &Metrics) -> WindowLatency {
        self.so_far(metrics).0
    }

    /// The window's requests, and the counters it would start the next window from.
    fn so_far(&self, metrics: &Metrics) -> (WindowLatency, Vec<u64>, u64) {
        let now = metrics.latency_histogram();
        let window: Vec<u64> = now
            .iter()
            .zip(&self.seen)
            .map(|(now, before)| now.saturating_sub(*before))
            .collect();
        let missed = metrics.missed();
        let latency = WindowLatency {
            requests: window.iter().sum(),
            missed: missed.saturating_sub(self.missed),
            p99: percentile(&window, 0.99).map(Duration::from_nanos),
        };
        (latency, now, missed)
    }
}

/// Gauges read from elsewhere at render time.
pub struct Gauges {
    pub queue_items: usize,
    pub threads: usize,
    pub cpus: usize,
    pub max_batch: usize,
    pub batch_delay: Duration,
    pub model_version: u64,
}

impl Metrics {
    pub fn new(slo: Duration) -> Self {
        Self {
            slo,
            latency_ns: (0..NR_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            ok: AtomicU64::new(0),
            within_slo: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            bad_request: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            arrived_items: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_items: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            needed_cpus: AtomicU64::new(0),
        }
    }

    pub fn slo(&self) -> Duration {
        self.slo
    }

    pub fn record_ok(&self, latency: Duration) {
        let ns = latency.as_nanos() as u64;
        self.latency_ns[bucket_of(ns)].fetch_add(1, Relaxed);
        self.ok.fetch_add(1, Relaxed);
        if latency <= self.slo {
            self.within_slo.fetch_add(1, Relaxed);
        }
    }

    pub fn latency_histogram(&self) -> Vec<u64> {
        self.latency_ns.iter().map(|c| c.load(Relaxed)).collect()
    }

    /// Requests refused for overload or failed, so far.
    fn missed(&self) -> u64 {
        self.rejected.load(Relaxed) + self.failed.load(Relaxed)
    }

    /// Requests answered within the SLO, as a percentage of every request that was not bad
    /// input: a request refused for overload or failed counts as missed.
    pub fn slo_attainment_pct(&self) -> Option<f64> {
        let served = self.ok.load(Relaxed) + self.missed();
        (served > 0).then(|| 100.0 * self.within_slo.load(Relaxed) as f64 / served as f64)
    }

    /// The Prometheus exposition (text format 0.0.4) of these metrics and `gauges`.
    pub fn render(&self, gauges: &Gauges) -> String {
        let hist = self.latency_histogram();
        let seconds = |ns: Option<u64>| ns.map_or(f64::NAN, |ns| ns as f64 / 1e9);
        let count = |c: &AtomicU64| c.load(Relaxed) as f64;
        use MetricType::{Counter, Gauge};
        // Name, type, help, value: one row per metric. Counters are named without their
        // `_total`, which the encoder appends.
        let rows = vec![
            (
                "reamer_worker_requests_ok",
                Counter,
                "Inference requests answered with outputs.",
                count(&self.ok),
            ),
            (
                "reamer_worker_requests_within_slo",
                Counter,
                "Requests answered within the latency SLO.",
                count(&self.within_slo),
            ),
            (
                "reamer_worker_requests_rejected",
                Counter,
                "Requests refused with 429 because the queue was full.",
                count(&self.rejected),
            ),
            (
                "reamer_worker_requests_bad",
                Counter,
                "Requests refused for bad input (4xx).",
                count(&self.bad_request),
            ),
            (
                "reamer_worker_requests_failed",
                Counter,
                "Requests whose inference failed (500).",
                count(&self.failed),
            ),
            (
                "reamer_worker_slo_seconds",
                Gauge,
                "The latency SLO this worker serves (--slo-ms, or its pool's slo_ms).",
                self.slo.as_secs_f64(),
            ),
            (
                "reamer_worker_slo_attainment_ratio",
                Gauge,
                "Share of requests (overload refusals and failures included) answered within the SLO.",
                self.slo_attainment_pct().map_or(f64::NAN, |p| p / 100.0),
            ),
            (
                "reamer_worker_latency_p50_seconds",
                Gauge,
                "Median request latency since start.",
                seconds(percentile(&hist, 0.5)),
            ),
            (
                "reamer_worker_latency_p99_seconds",
                Gauge,
                "99th percentile request latency since start.",
                seconds(percentile(&hist, 0.99)),
            ),
            (
                "reamer_worker_batches",
                Counter,
                "Batches run.",
                count(&self.batches),
            ),
            (
                "reamer_worker_inferences",
                Counter,
                "Items inferred (the sum of batch sizes).",
                count(&self.batch_items),
            ),
            (
                "reamer_worker_model_reloads",
                Counter,
                "Model files swapped in while serving.",
                count(&self.reloads),
            ),
            (
                "reamer_worker_model_reload_failures",
                Counter,
                "New model files that could not be loaded (the old model kept serving).",
                count(&self.reload_failures),
            ),
            (
                "reamer_worker_model_version",
                Gauge,
                "Version of the model serving now (1 at start, +1 per reload).",
                gauges.model_version as f64,
            ),
            (
                "reamer_worker_queue_items",
                Gauge,
                "Items waiting in the request queue.",
                gauges.queue_items as f64,
            ),
            (
                "reamer_worker_threads",
                Gauge,
                "Inference threads running.",
                gauges.threads as f64,
            ),
            (
                "reamer_worker_granted_cpus",
                Gauge,
                "CPUs granted to this worker.",
                gauges.cpus as f64,
            ),
            (
                "reamer_worker_needed_cpus",
                Gauge,
                "CPUs the SLO needs at the measured load (told to the enforcer).",
                self.needed_cpus.load(Relaxed) as f64,
            ),
            (
                "reamer_worker_max_batch",
                Gauge,
                "Largest batch the dynamic batcher forms now.",
                gauges.max_batch as f64,
            ),
            (
                "reamer_worker_batch_delay_seconds",
                Gauge,
                "Longest time the batcher holds a request to fill a batch.",
                gauges.batch_delay.as_secs_f64(),
            ),
        ];
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Rows(rows)));
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).expect("encoding into a String cannot fail");
        out
    }
}

/// Values read at one scrape: (name, type, help, value).
#[derive(Debug)]
struct Rows(Vec<(&'static str, MetricType, &'static str, f64)>);

impl Collector for Rows {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for (name, kind, help, value) in &self.0 {
            let mut metric = encoder.encode_descriptor(name, help, None, *kind)?;
            match kind {
                MetricType::Counter => {
                    metric.encode_counter::<NoLabelSet, f64, f64>(value, None)?;
                }
                _ => metric.encode_gauge(value)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_window_holds_only_the_requests_since_the_last_look() {
        let metrics = Metrics::new(Duration::from_millis(50));
        metrics.record_ok(Duration::from_millis(40));
        let mut window = LatencyWindow::new(&metrics);
        for _ in 0..99 {
            metrics.record_ok(Duration::from_millis(2));
        }
        metrics.record_ok(Duration::from_millis(30));
        metrics.rejected.fetch_add(2, Relaxed);
        let first = window.next(&metrics);
        assert_eq!((first.requests, first.missed), (100, 2));
        // The 99th of 100 is a 2 ms one (its bucket's upper bound, within 1/8): the 40 ms
        // request before the window does not count, the 30 ms one is the 100th.
        let p99 = first.p99.unwrap();
        assert!(
            p99 >= Duration::from_millis(2) && p99 <= Duration::from_micros(2_250),
            "{p99:?}"
        );
        let empty = window.next(&metrics);
        assert_eq!((empty.requests, empty.missed, empty.p99), (0, 0, None));
        // A look does not start a new window.
        metrics.record_ok(Duration::from_millis(3));
        assert_eq!(window.peek(&metrics).requests, 1);
        assert_eq!(window.peek(&metrics).requests, 1);
        metrics.failed.fetch_add(1, Relaxed);
        assert_eq!(window.next(&metrics).missed, 1);
    }
}
