//! The start-up profile: batch latency against thread count and batch size, measured on the
//! granted CPUs, and the choice of configuration it implies for an SLO at a given load.
//!
//! On either engine one batch runs on one thread, so threads add capacity, not speed, and
//! batching pays only where the model's per-item cost falls with the batch (measured here with
//! tract on the PP-OCR models, it does not: batch 8 costs about 8 batches of 1; with ONNX
//! Runtime it falls a little). The profile finds that out per model, engine and machine
//! instead of assuming it.

use std::{
    sync::{Arc, Barrier},
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::{
    affinity,
    model::Model,
    session::{RunError, Session},
};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub threads: usize,
    pub batch: usize,
    /// Median time for one batch while `threads` threads run batches at once.
    #[serde(rename = "batch_latency_ms", serialize_with = "as_ms")]
    pub batch_latency: Duration,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Profile {
    pub points: Vec<Point>,
}

/// What the online worker runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub threads: usize,
    pub batch: usize,
    pub batch_delay: Duration,
    /// False when no configuration within the granted CPUs keeps up within the SLO: the
    /// choice is then the one with the most capacity.
    pub meets_slo: bool,
}

/// Why the start-up profile could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profiling the model: {0}")]
    Run(#[from] RunError),
    #[error("profile thread panicked")]
    Panicked,
}

/// Share of the SLO a batch may take to run; the rest is left to queueing and batching.
const SERVICE_SHARE_OF_SLO: f64 = 0.5;
/// Capacity wanted above the measured arrival rate.
const CAPACITY_HEADROOM: f64 = 1.25;

impl Profile {
    /// Measures every batch size of `model` with 1 to `max_threads` threads pinned to `cpus`,
    /// `runs` batches per thread after one warm-up batch.
    pub fn measure(
        model: &Arc<Model>,
        cpus: &[u32],
        max_threads: usize,
        runs: usize,
    ) -> Result<Self, ProfileError> {
        let mut points = Vec::new();
        for threads in 1..=max_threads.max(1) {
            for batch in model.batch_sizes() {
                let barrier = Arc::new(Barrier::new(threads));
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        let (model, barrier, cpus) =
                            (model.clone(), barrier.clone(), cpus.to_vec());
                        std::thread::spawn(move || -> Result<Vec<Duration>, RunError> {
                            let _ = affinity::pin_current_thread(&cpus);
                            let mut session = Session::new(model.clone());
                            let input = vec![0.5f32; batch * model.signature.input_item_len()];
                            session.run(&input, batch)?;
                            barrier.wait();
                            (0..runs.max(1))
                                .map(|_| {
                                    let started = Instant::now();
                                    session.run(&input, batch)?;
                                    Ok(started.elapsed())
                                })
                                .collect()
                        })
                    })
                    .collect();
                let mut samples = Vec::new();
                for handle in handles {
                    samples.extend(handle.join().map_err(|_| ProfileError::Panicked)??);
                }
                samples.sort_unstable();
                points.push(Point {
                    threads,
                    batch,
                    batch_latency: samples[samples.len() / 2],
                });
            }
        }
        Ok(Self { points })
    }

    /// The fewest threads (at most `max_threads`) whose capacity covers `arrivals_per_s` with
    /// headroom while a batch takes at most half the SLO; the smallest batch that does it; and
    /// the longest batching delay that still fits the SLO and the time a batch takes to fill.
    pub fn choose(&self, slo: Duration, arrivals_per_s: f64, max_threads: usize) -> Choice {
        let budget = slo.mul_f64(SERVICE_SHARE_OF_SLO);
        let needed = arrivals_per_s.max(0.0) * CAPACITY_HEADROOM;
        let capacity =
            |p: &Point| p.threads as f64 * p.batch as f64 / p.batch_latency.as_secs_f64().max(1e-9);
        let delay_for = |p: &Point| {
            if p.batch == 1 || arrivals_per_s <= 0.0 {
                return Duration::ZERO;
            }
            let fill = Duration::from_secs_f64((p.batch - 1) as f64 / arrivals_per_s);
            fill.min(budget.saturating_sub(p.batch_latency))
        };
        let points = self.points_up_to(max_threads.max(1));
        let usable: Vec<&Point> = points
            .iter()
            .filter(|p| p.batch_latency <= budget)
            .collect();
        let mut by_threads = usable.clone();
        by_threads.sort_by_key(|p| (p.threads, p.batch));
        if let Some(p) = by_threads.iter().find(|p| capacity(p) >= needed) {
            return Choice {
                threads: p.threads,
                batch: p.batch,
                batch_delay: delay_for(p),
                meets_slo: true,
            };
        }
        // Nothing keeps up: the most capacity the grant allows, still within the SLO where
        // any point is; otherwise the fastest single item on every thread.
        let best = usable
            .iter()
            .max_by(|a, b| capacity(a).total_cmp(&capacity(b)))
            .copied()
            .copied()
            .unwrap_or(Point {
                threads: max_threads.max(1),
                batch: 1,
                batch_latency: Duration::ZERO,
            });
        Choice {
            threads: best.threads,
            batch: best.batch,
            batch_delay: delay_for(&best),
            meets_slo: false,
        }
    }
}

impl Profile {
    /// The CPUs (one inference thread each) that keep up with `arrivals_per_s` within the
    /// SLO, whatever the grant is now: what the worker asks the enforcer for. At most
    /// `machine_cpus`, which is also the answer when nothing keeps up.
    pub fn cpus_needed(&self, slo: Duration, arrivals_per_s: f64, machine_cpus: usize) -> usize {
        self.choose(slo, arrivals_per_s, machine_cpus).threads
    }

    /// The points for 1 to `max_threads` threads. Beyond the thread counts measured (the
    /// first grant's CPUs), a batch is taken to cost what it cost with the most threads
    /// measured: one batch runs on one thread, so a thread on another CPU adds a
    /// batch's worth of capacity, and the contention the measured count showed is kept.
    fn points_up_to(&self, max_threads: usize) -> Vec<Point> {
        let measured = self.points.iter().map(|p| p.threads).max().unwrap_or(0);
        let mut points: Vec<Point> = self
            .points
            .iter()
            .filter(|p| p.threads <= max_threads)
            .copied()
            .collect();
        for threads in measured + 1..=max_threads {
            let widest = self.points.iter().filter(|p| p.threads == measured);
            points.extend(widest.map(|p| Point { threads, ..*p }));
        }
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    /// A model whose batches amortize: batch b costs 2 + b ms; a second thread slows each by
    /// 10 %.
    fn profile() -> Profile {
        let mut points = Vec::new();
        for threads in 1..=4 {
            for batch in [1, 2, 4, 8] {
                let slow = 1.0 + 0.1 * (threads - 1) as f64;
                points.push(Point {
                    threads,
                    batch,
                    batch_latency: ms((2.0 + batch as f64) * slow),
                });
            }
        }
        Profile { points }
    }

    #[test]
    fn idle_load_takes_one_thread_and_no_batching() {
        let choice = profile().choose(ms(50.0), 0.0, 4);
        assert_eq!(
            (choice.threads, choice.batch, choice.batch_delay),
            (1, 1, Duration::ZERO)
        );
        assert!(choice.meets_slo);
    }

    #[test]
    fn more_load_batches_first_then_adds_threads() {
        // 1 thread, batch 1: 333/s. 500/s (625 with headroom) needs batch 4 (667/s).
        let choice = profile().choose(ms(50.0), 500.0, 4);
        assert_eq!((choice.threads, choice.batch), (1, 4));
        assert!(choice.batch_delay > Duration::ZERO && choice.batch_delay <= ms(25.0));
        // 1 thread tops out at 800/s (batch 8); 1000/s needs a second thread.
        let choice = profile().choose(ms(50.0), 1000.0, 4);
        assert_eq!(choice.threads, 2);
        assert!(choice.meets_slo);
    }

    #[test]
    fn a_tight_slo_rules_out_big_batches() {
        // SLO 10 ms leaves 5 ms per batch: only batch 1 (3 ms) and 2 (4 ms) qualify on one
        // thread, so 1000/s needs threads rather than batch 8.
        let choice = profile().choose(ms(10.0), 1000.0, 4);
        assert!(choice.batch <= 2, "{choice:?}");
        assert!(choice.threads >= 3, "{choice:?}");
    }

    #[test]
    fn beyond_the_measured_threads_capacity_is_extrapolated_and_the_need_follows_the_load() {
        // Measured on a grant of one CPU only.
        let one = Profile {
            points: profile()
                .points
                .into_iter()
                .filter(|p| p.threads == 1)
                .collect(),
        };
        // 1 thread tops out at 800/s; 1000/s needs a second one, which was never measured.
        let choice = one.choose(ms(50.0), 1000.0, 4);
        assert_eq!(choice.threads, 2);
        assert!(choice.meets_slo);
        assert_eq!(one.cpus_needed(ms(50.0), 0.0, 16), 1);
        assert_eq!(one.cpus_needed(ms(50.0), 1000.0, 16), 2);
        // 2000/s with headroom is 2500/s: batch 8 on one thread is 800/s, so 4 threads.
        assert_eq!(one.cpus_needed(ms(50.0), 2000.0, 16), 4);
        // More than the machine can do: all of it.
        assert_eq!(one.cpus_needed(ms(50.0), 1e9, 16), 16);
    }

    #[test]
    fn overload_takes_every_granted_thread_and_says_so() {
        let choice = profile().choose(ms(50.0), 100_000.0, 2);
        assert_eq!(choice.threads, 2);
        assert!(!choice.meets_slo);
    }
}
