//! `[sensor]`: what raises an event, the clock of the timestamps, and the inference threads
//! the sensor classifies.

use serde::Deserialize;

use super::InvalidField;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SensorConfig {
    /// A training thread that waited in the run queue longer than this raises an event.
    /// 2 ms: well above the p99 wait of an uncontended training thread measured here
    /// (tens of µs), well below a training step.
    pub wait_threshold_us: u64,
    /// Minimum spacing of events from one CPU. 100 µs bounds the event rate at 10 000/s per
    /// CPU, while the consumer's own wakeup takes tens of µs
    /// (docs/experiments/2026-11-22-fast-path-latency.md).
    pub event_min_interval_us: u64,
    /// The clock of the sensor's per-switch timestamps.
    pub clock: SensorClock,
    /// Inference threads classified at once: the entries of the sensor's `pool_threads` map
    /// (about 100 bytes each). Training's threads have a map of their own (65,536 entries),
    /// which no number of inference threads can fill.
    pub max_inference_threads: u32,
}

impl Default for SensorConfig {
    fn default() -> Self {
        Self {
            wait_threshold_us: 2000,
            event_min_interval_us: 100,
            clock: SensorClock::RunQueue,
            max_inference_threads: enforcer_common::MAX_POOL_THREADS,
        }
    }
}

impl SensorConfig {
    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), InvalidField> {
        if !(1..=MAX_INFERENCE_THREADS_LIMIT).contains(&self.max_inference_threads) {
            return Err(InvalidField {
                field: "max_inference_threads",
                message: format!(
                    "{} is outside 1..={MAX_INFERENCE_THREADS_LIMIT}",
                    self.max_inference_threads
                ),
            });
        }
        Ok(())
    }
}

/// The largest `pool_threads` map: 4 Mi entries, the kernel's default `pid_max` on 64-bit.
const MAX_INFERENCE_THREADS_LIMIT: u32 = 4 * 1024 * 1024;

/// Where the sensor's wait and run-time timestamps come from (docs/sensor.md, "Clock").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SensorClock {
    /// The run queue's own clock (`rq->clock`), which the scheduler has just read: three
    /// loads instead of a clock read on every training thread's wakeup and switch, and the
    /// clock of the kernel's own run delay (schedstat). A wakeup that preempts at once reads
    /// as a zero wait, as in schedstat. Falls back to `monotonic` on a kernel without
    /// CONFIG_FAIR_GROUP_SCHED.
    RunQueue,
    /// `bpf_ktime_get_ns` on every timestamp: also sees the microseconds between a
    /// preempting wakeup and the switch, for a clock read per training event (the cost of
    /// both settings is in docs/benchmarks.md).
    Monotonic,
}
