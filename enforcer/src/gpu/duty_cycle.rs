//! Duty-cycle gating of the GPU inference pools: within each period they are frozen (their
//! cgroup's freezer) for `1 - run_fraction` and thawed for the rest. A frozen process issues
//! no kernels, so training has the GPU to itself for that share of the time. This is the one
//! lever that acts on running CUDA clients at once: an MPS percentage only binds clients
//! created after it is set.
//!
//! The thread wakes at once on a new fraction and starts the new cycle frozen, so a clamp
//! takes effect within one cgroup write, not at the next period boundary. At shutdown every
//! pool is thawed: no inference is left frozen without the daemon.

use std::{
    sync::{Arc, Condvar, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

pub use enforcer_common::protocol::gpu::GateStats;
use tracing::warn;

use crate::actuate::freezer::Freezer;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Target {
    run_fraction: f64,
    /// Bumped on every change, so the thread knows to start a new cycle.
    generation: u64,
    stop: bool,
}

struct Shared {
    target: Mutex<Target>,
    changed: Condvar,
    stats: Mutex<GateStats>,
}

pub struct DutyCycle {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl DutyCycle {
    /// Starts the gating thread over `pools`, ungated.
    pub fn start(
        pools: Vec<Arc<Freezer>>,
        period: Duration,
        rt_priority: i32,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            target: Mutex::new(Target {
                run_fraction: 1.0,
                generation: 0,
                stop: false,
            }),
            changed: Condvar::new(),
            stats: Mutex::new(GateStats {
                run_fraction: 1.0,
                ..GateStats::default()
            }),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("reamer-gpu-gate".to_owned())
                .spawn(move || {
                    crate::actuate::thread_policy::run_as_fifo(rt_priority, "GPU gating thread");
                    gate_forever(&shared, &pools, period);
                })?
        };
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Sets the share of each period the pools run (1: never frozen, 0: frozen until changed).
    pub fn set(&self, run_fraction: f64) {
        let mut target = self.shared.target.lock().unwrap_or_else(|e| e.into_inner());
        let run_fraction = run_fraction.clamp(0.0, 1.0);
        if target.run_fraction != run_fraction {
            target.run_fraction = run_fraction;
            target.generation += 1;
            self.shared.changed.notify_all();
        }
    }

    pub fn stats(&self) -> GateStats {
        *self.shared.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops gating and thaws every pool; returns once they are thawed.
    pub fn stop(&self) {
        {
            let mut target = self.shared.target.lock().unwrap_or_else(|e| e.into_inner());
            target.stop = true;
            self.shared.changed.notify_all();
        }
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for DutyCycle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until `deadline` or a change of generation; returns the target then.
fn wait_until(shared: &Shared, generation: u64, deadline: Option<Instant>) -> Target {
    let mut target = shared.target.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if target.stop || target.generation != generation {
            return *target;
        }
        match deadline {
            None => {
                target = shared
                    .changed
                    .wait(target)
                    .unwrap_or_else(|e| e.into_inner());
            }
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return *target;
                }
                target = shared
                    .changed
                    .wait_timeout(target, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

fn set_all(pools: &[Arc<Freezer>], frozen: bool, shared: &Shared) {
    let start = Instant::now();
    for pool in pools {
        if let Err(err) = pool.set_gated(frozen) {
            warn!(pool = pool.pool, "GPU gating: {err}");
        }
    }
    if frozen {
        let mut stats = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.freezes += 1;
        stats.last_freeze_write_us = start.elapsed().as_secs_f64() * 1e6;
    }
}

/// Gates until stopped. Each cycle's phases end at fixed offsets from the cycle's start, and a
/// cycle starts where the last one ended: the time spent in the cgroup writes and in waking up
/// does not stretch the period (waking an idle vCPU took milliseconds on a busy VM host here,
/// docs/experiments/2026-11-22-idle-vcpu-wake.md; with each phase timed from its own wake-up, a test run on such a host
/// counted 14 freezes in a 2 s window of 100 ms periods). A new target starts a new cycle at
/// once, frozen first.
fn gate_forever(shared: &Shared, pools: &[Arc<Freezer>], period: Duration) {
    let mut target = *shared.target.lock().unwrap_or_else(|e| e.into_inner());
    let mut cycle_start = Instant::now();
    loop {
        if target.stop {
            set_all(pools, false, shared);
            return;
        }
        shared
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .run_fraction = target.run_fraction;
        let generation = target.generation;
        if target.run_fraction >= 1.0 {
            set_all(pools, false, shared);
            target = wait_until(shared, generation, None);
            cycle_start = Instant::now();
            continue;
        }
        // One cycle, frozen first: a clamp acts at once.
        set_all(pools, true, shared);
        let frozen_until = cycle_start + period.mul_f64(1.0 - target.run_fraction);
        let next = wait_until(shared, generation, Some(frozen_until));
        if next.stop || next.generation != generation {
            target = next;
            cycle_start = Instant::now();
            continue;
        }
        if target.run_fraction <= 0.0 {
            target = wait_until(shared, generation, None);
            cycle_start = Instant::now();
            continue;
        }
        set_all(pools, false, shared);
        let cycle_end = cycle_start + period;
        target = wait_until(shared, generation, Some(cycle_end));
        cycle_start = next_cycle_start(cycle_end, period, Instant::now(), target, generation);
    }
}

/// Where the cycle after one that ended at `cycle_end` starts: right there, unless the target
/// changed (a new cycle starts now) or the thread fell a whole period behind (it was not
/// scheduled for that long: starting afresh beats a burst of cut-short cycles to catch up).
fn next_cycle_start(
    cycle_end: Instant,
    period: Duration,
    now: Instant,
    target: Target,
    generation: u64,
) -> Instant {
    let changed = target.stop || target.generation != generation;
    if changed || now >= cycle_end + period {
        now
    } else {
        cycle_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_millis(100);

    fn target(generation: u64, stop: bool) -> Target {
        Target {
            run_fraction: 0.3,
            generation,
            stop,
        }
    }

    #[test]
    fn a_cycle_starts_where_the_last_one_ended_even_when_woken_late() {
        let end = Instant::now();
        let late = end + Duration::from_millis(7);
        assert_eq!(
            next_cycle_start(end, PERIOD, late, target(1, false), 1),
            end
        );
    }

    #[test]
    fn a_thread_a_whole_period_behind_starts_afresh() {
        let end = Instant::now();
        let stalled = end + PERIOD + Duration::from_millis(1);
        assert_eq!(
            next_cycle_start(end, PERIOD, stalled, target(1, false), 1),
            stalled
        );
    }

    #[test]
    fn a_new_target_or_a_stop_starts_a_cycle_now() {
        let end = Instant::now();
        let now = end + Duration::from_millis(1);
        assert_eq!(next_cycle_start(end, PERIOD, now, target(2, false), 1), now);
        assert_eq!(next_cycle_start(end, PERIOD, now, target(1, true), 1), now);
    }
}
