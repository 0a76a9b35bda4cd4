//! The GPU policy: how much of the time the GPU inference pools may run while training uses
//! the GPU. Pure: it sees signals and a clock, and answers with decisions; `service` applies
//! them (the freezer duty cycle, the MPS percentage).
//!
//! Two signals, of different speeds:
//! - the sensor's CPU-side one, every policy tick (100 ms): training's threads started running
//!   on the CPU, which is how a training step starts issuing kernels. It only detects the rise,
//!   at once: CUDA's default synchronisation spins, so training's CPU use does not fall when
//!   its kernels slow down and says nothing about GPU throughput.
//! - NVML's samples (the driver updates them every 1/6 s to 1 s): whether training has a
//!   process on a GPU, and its SM utilization where NVML attributes it.
//!
//! On a rise, inference is clamped to `clamp_run_fraction` of each period at once (GPUColo's
//! fine-grained tier, applied to inference instead of training), and held there while
//! training is active. With `probe` (off by default), once per `adjust_every` the run
//! fraction grows by `step` while training keeps its SM utilization within `tolerance` of the
//! best it showed, and halves when it does not (additive increase, multiplicative decrease).
//! Off by default because that figure does not show the contention: on an H100 without MPS,
//! NVML gave training and inference 90-99% each at once while the probes ran inference up to
//! its full share and training fell to 70-71% of its pace alone (two runs of
//! `tests/tests/gpu.rs`, docs/gpu.md); under MPS it is not attributed to clients at all. After
//! `idle_after` without either signal, inference runs freely again. A fraction held for
//! `retarget_after` becomes an MPS active-thread percentage for the next clients: the lasting
//! form of the same limit, which costs no freezing.
//!
//! With `on_need` (the default), the clamp is held only while training needs the GPU. The
//! third signal is its launching thread's busy share (`launcher`): a GPU-bound step keeps it
//! busy, a step waiting on its input pipeline leaves it asleep, gated or not. When the median
//! over `need_window` falls below `input_bound_below`, the clamp is let go: the GPU has room,
//! and freeing more of it would not speed training up. It comes back at once when the median
//! reaches `gpu_bound_above` (inference slowing the GPU enough to make the step GPU-bound
//! shows there too). A job found waiting on its input is remembered for `need_memory` after
//! it goes idle, so that its next rise does not clamp first and ask later: a loader-bound
//! job idles between batches every few seconds.

pub(crate) use enforcer_common::protocol::gpu::{ClampReason, GpuDecision, Signal};

use std::collections::VecDeque;

use enforcer_common::stats::median;

use crate::config::gpu::ClampSettings;

/// Launcher samples needed before the window's median counts: a share read right after a
/// rise covers the step's start, not its level.
const MIN_NEED_SAMPLES: usize = 3;

#[derive(Debug)]
pub(crate) struct GpuPolicy {
    config: ClampSettings,
    run_fraction: f64,
    /// When either signal last saw training active; None: training idle.
    last_active_ns: Option<u64>,
    last_adjust_ns: u64,
    /// Training's best SM utilization since it became active.
    best_sm_pct: Option<f64>,
    /// When the run fraction last changed.
    changed_ns: u64,
    /// The percentage last recommended.
    percentage: u32,
    /// Whether NVML's latest sample showed a training process on a GPU. Until it does, the
    /// CPU signal is training's CPU work, not a GPU step starting, and clamps nothing.
    training_on_gpu: bool,
    /// The launching thread's busy shares of the last `need_window`: (time, share).
    need: VecDeque<(u64, f64)>,
    /// When training was last seen waiting on its input; None: GPU-bound, or not seen yet.
    input_bound_at: Option<u64>,
}

impl GpuPolicy {
    pub(crate) fn new(config: ClampSettings) -> Self {
        Self {
            config,
            run_fraction: 1.0,
            last_active_ns: None,
            last_adjust_ns: 0,
            best_sm_pct: None,
            changed_ns: 0,
            percentage: 100,
            training_on_gpu: false,
            need: VecDeque::new(),
            input_bound_at: None,
        }
    }

    /// Whether training waits on its input now, or did within `need_memory` of now.
    fn input_bound(&self, now_ns: u64) -> bool {
        self.config.on_need
            && self
                .input_bound_at
                .is_some_and(|at| now_ns.saturating_sub(at) < self.config.need_memory_ns)
    }

    /// The share of time the clamp lets inference run now: for the tests to read.
    #[cfg(test)]
    pub(crate) fn run_fraction(&self) -> f64 {
        self.run_fraction
    }

    pub(crate) fn training_active(&self) -> bool {
        self.last_active_ns.is_some()
    }

    fn gate(&mut self, now_ns: u64, run_fraction: f64, why: ClampReason) -> GpuDecision {
        self.run_fraction = run_fraction.clamp(0.0, 1.0);
        self.changed_ns = now_ns;
        GpuDecision::Gate {
            run_fraction: self.run_fraction,
            why,
        }
    }

    /// Training became (or stayed) active by `signal`.
    fn active(&mut self, now_ns: u64, signal: Signal) -> Option<GpuDecision> {
        let was_idle = self.last_active_ns.is_none();
        self.last_active_ns = Some(now_ns);
        if !was_idle {
            return None;
        }
        self.best_sm_pct = None;
        self.last_adjust_ns = now_ns;
        if self.input_bound(now_ns) {
            // It waited on its input the last time: active, and watched, but not clamped.
            return None;
        }
        let clamp = self.config.clamp_run_fraction;
        Some(self.gate(now_ns, clamp, ClampReason::TrainingRose { signal }))
    }

    /// Ungates inference after `idle_after` without activity.
    fn idle_check(&mut self, now_ns: u64) -> Option<GpuDecision> {
        let last = self.last_active_ns?;
        if now_ns.saturating_sub(last) < self.config.idle_after_ns {
            return None;
        }
        self.last_active_ns = None;
        self.best_sm_pct = None;
        // The next activity's shares are its own.
        self.need.clear();
        if self.run_fraction >= 1.0 {
            return None;
        }
        Some(self.gate(now_ns, 1.0, ClampReason::TrainingIdle))
    }

    /// The third signal: the busiest launching thread's busy share since the last NVML sample
    /// (`launcher`). It moves the clamp only while training is active.
    pub(crate) fn on_launcher_busy(&mut self, now_ns: u64, share: f64) -> Vec<GpuDecision> {
        if !self.config.on_need || !share.is_finite() {
            return Vec::new();
        }
        self.need.push_back((now_ns, share.clamp(0.0, 1.0)));
        let oldest = now_ns.saturating_sub(self.config.need_window_ns);
        while self.need.front().is_some_and(|(at, _)| *at < oldest) {
            self.need.pop_front();
        }
        if self.last_active_ns.is_none() || self.need.len() < MIN_NEED_SAMPLES {
            return Vec::new();
        }
        let shares: Vec<f64> = self.need.iter().map(|(_, s)| *s).collect();
        let launcher_busy = median(&shares);
        let was_input_bound = self.input_bound(now_ns);
        if launcher_busy < self.config.input_bound_below {
            self.input_bound_at = Some(now_ns);
            if self.run_fraction < 1.0 {
                let why = ClampReason::TrainingInputBound { launcher_busy };
                return vec![self.gate(now_ns, 1.0, why)];
            }
        } else if launcher_busy >= self.config.gpu_bound_above && was_input_bound {
            self.input_bound_at = None;
            self.best_sm_pct = None;
            let clamp = self.config.clamp_run_fraction;
            let why = ClampReason::TrainingGpuBound { launcher_busy };
            return vec![self.gate(now_ns, clamp, why)];
        } else if was_input_bound {
            // Between the bars: as it was, and remembered from now.
            self.input_bound_at = Some(now_ns);
        }
        Vec::new()
    }

    /// The fast signal: training's CPU use over the last tick, in CPUs. It counts only once
    /// NVML has seen training on a GPU: a CPU-only training job must not gate GPU inference.
    pub(crate) fn on_training_cpu(&mut self, now_ns: u64, cpus: f64) -> Vec<GpuDecision> {
        let decision = if self.training_on_gpu && cpus >= self.config.active_cpus {
            self.active(now_ns, Signal::Cpu)
        } else {
            self.idle_check(now_ns)
        };
        let mut decisions: Vec<_> = decision.into_iter().collect();
        decisions.extend(self.retarget(now_ns));
        decisions
    }

    /// The fast signal's short read: training's CPU use over a few milliseconds. Only a rise
    /// counts (an absence that short says nothing about idling; `on_training_cpu` decides that).
    pub(crate) fn on_training_cpu_rise(&mut self, now_ns: u64, cpus: f64) -> Vec<GpuDecision> {
        if cpus < self.config.rise_cpus {
            return Vec::new();
        }
        self.on_training_cpu(now_ns, cpus)
    }

    /// The slow signal: whether training has a process on a GPU, and its SM utilization, None
    /// where NVML cannot attribute it (per-process samples unsupported, or hidden behind an
    /// MPS server).
    pub(crate) fn on_nvml(
        &mut self,
        now_ns: u64,
        training_on_gpu: bool,
        training_sm_pct: Option<f64>,
    ) -> Vec<GpuDecision> {
        self.training_on_gpu = training_on_gpu;
        let mut decisions = Vec::new();
        match training_sm_pct {
            Some(sm) if sm >= self.config.active_sm_pct => {
                decisions.extend(self.active(now_ns, Signal::Nvml));
                decisions.extend(self.adjust(now_ns, sm));
            }
            _ => decisions.extend(self.idle_check(now_ns)),
        }
        decisions.extend(self.retarget(now_ns));
        decisions
    }

    /// Probe up or back off, once per adjustment period, on training's SM utilization.
    fn adjust(&mut self, now_ns: u64, training_sm_pct: f64) -> Option<GpuDecision> {
        if !self.config.probe
            || self.input_bound(now_ns)
            || now_ns.saturating_sub(self.last_adjust_ns) < self.config.adjust_every_ns
        {
            return None;
        }
        self.last_adjust_ns = now_ns;
        let Some(best) = self.best_sm_pct else {
            // The first sample under the clamp is the reference: training nearly alone.
            self.best_sm_pct = Some(training_sm_pct);
            return None;
        };
        self.best_sm_pct = Some(best.max(training_sm_pct));
        if training_sm_pct < best * (1.0 - self.config.tolerance) {
            let lower = (self.run_fraction / 2.0).max(self.config.min_run_fraction);
            if lower == self.run_fraction {
                return None;
            }
            let why = ClampReason::TrainingSlowed {
                training_sm_pct,
                best_sm_pct: best,
            };
            return Some(self.gate(now_ns, lower, why));
        }
        if self.run_fraction >= 1.0 {
            return None;
        }
        let higher = (self.run_fraction + self.config.step).min(1.0);
        Some(self.gate(now_ns, higher, ClampReason::Probe { training_sm_pct }))
    }

    /// Turns a run fraction held long enough into an MPS percentage, once per level.
    fn retarget(&mut self, now_ns: u64) -> Option<GpuDecision> {
        let percentage = ((self.run_fraction * 100.0).round() as u32).clamp(1, 100);
        let held = now_ns.saturating_sub(self.changed_ns) >= self.config.retarget_after_ns;
        let ungated = self.run_fraction >= 1.0;
        if percentage == self.percentage || !(held || ungated) {
            return None;
        }
        self.percentage = percentage;
        Some(GpuDecision::Retarget { percentage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn gates(decisions: &[GpuDecision]) -> Vec<f64> {
        decisions
            .iter()
            .filter_map(|d| match d {
                GpuDecision::Gate { run_fraction, .. } => Some(*run_fraction),
                GpuDecision::Retarget { .. } => None,
            })
            .collect()
    }

    /// A policy whose last NVML sample showed training on a GPU, not yet busy.
    fn on_gpu() -> GpuPolicy {
        let mut policy = GpuPolicy::new(ClampSettings::default());
        assert!(policy.on_nvml(0, true, Some(0.0)).is_empty());
        policy
    }

    #[test]
    fn cpu_only_training_never_gates_gpu_inference() {
        let mut policy = GpuPolicy::new(ClampSettings::default());
        assert!(policy.on_nvml(0, false, None).is_empty());
        for t in 1..50 {
            assert!(policy.on_training_cpu(t * 100 * MS, 2.0).is_empty());
        }
        assert_eq!(policy.run_fraction(), 1.0);
    }

    #[test]
    fn a_short_read_clamps_only_at_a_step_starting() {
        let mut policy = on_gpu();
        // A helper thread's blip over 10 ms: above the tick's bar, below a step's.
        assert!(policy.on_training_cpu_rise(10 * MS, 0.2).is_empty());
        assert!(!policy.training_active());
        assert_eq!(gates(&policy.on_training_cpu_rise(20 * MS, 0.9)), vec![0.1]);
        assert!(policy.training_active());
    }

    #[test]
    fn a_cpu_side_rise_clamps_inference_at_once_and_repeats_do_nothing() {
        let mut policy = on_gpu();
        assert!(policy.on_training_cpu(0, 0.0).is_empty());
        let decisions = policy.on_training_cpu(100 * MS, 1.5);
        assert_eq!(
            decisions,
            vec![GpuDecision::Gate {
                run_fraction: 0.1,
                why: ClampReason::TrainingRose {
                    signal: Signal::Cpu
                },
            }]
        );
        assert!(policy.on_training_cpu(200 * MS, 1.5).is_empty());
        assert!(policy.training_active());
    }

    #[test]
    fn nvml_alone_also_detects_the_rise() {
        let mut policy = GpuPolicy::new(ClampSettings::default());
        let decisions = policy.on_nvml(0, true, Some(80.0));
        assert_eq!(gates(&decisions), vec![0.1]);
        assert!(matches!(
            decisions[0],
            GpuDecision::Gate {
                why: ClampReason::TrainingRose {
                    signal: Signal::Nvml
                },
                ..
            }
        ));
    }

    /// A policy with probing on, whose last NVML sample showed training on a GPU.
    fn probing_on_gpu() -> GpuPolicy {
        let mut policy = GpuPolicy::new(ClampSettings {
            probe: true,
            ..ClampSettings::default()
        });
        assert!(policy.on_nvml(0, true, Some(0.0)).is_empty());
        policy
    }

    #[test]
    fn by_default_the_clamp_holds_whatever_trainings_sm_figure_says() {
        let mut policy = on_gpu();
        policy.on_training_cpu(0, 1.0);
        for second in 1..10 {
            let t = second * 1000 * MS;
            policy.on_training_cpu(t, 1.0);
            assert!(gates(&policy.on_nvml(t, true, Some(98.0))).is_empty());
        }
        assert!((policy.run_fraction() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn inference_probes_up_while_training_keeps_its_share_and_halves_when_it_drops() {
        let mut policy = probing_on_gpu();
        policy.on_training_cpu(0, 1.0);
        let mut t = 0;
        let mut step = |policy: &mut GpuPolicy, sm: f64| {
            t += 1000 * MS;
            policy.on_training_cpu(t, 1.0);
            gates(&policy.on_nvml(t, true, Some(sm)))
        };
        // First sample under the clamp: the reference, no change.
        assert!(step(&mut policy, 90.0).is_empty());
        let probes: Vec<f64> = (0..4).flat_map(|_| step(&mut policy, 89.0)).collect();
        assert_eq!(probes.len(), 4);
        assert!((policy.run_fraction() - 0.5).abs() < 1e-9, "{probes:?}");
        // Training lost more than 5% of its best: back off by half.
        assert_eq!(step(&mut policy, 80.0), vec![0.25]);
        assert_eq!(step(&mut policy, 70.0), vec![0.125]);
        // The floor holds.
        assert_eq!(step(&mut policy, 60.0), vec![0.1]);
        assert!(step(&mut policy, 50.0).is_empty());
        assert!((policy.run_fraction() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn adjustments_wait_for_a_fresh_nvml_period() {
        let mut policy = GpuPolicy::new(ClampSettings {
            probe: true,
            ..ClampSettings::default()
        });
        policy.on_nvml(0, true, Some(90.0));
        policy.on_nvml(1000 * MS, true, Some(90.0)); // reference
        assert_eq!(
            gates(&policy.on_nvml(2000 * MS, true, Some(90.0))),
            vec![0.2]
        );
        assert!(gates(&policy.on_nvml(2200 * MS, true, Some(90.0))).is_empty());
    }

    #[test]
    fn without_per_process_samples_the_clamp_holds() {
        let mut policy = on_gpu();
        policy.on_training_cpu(0, 1.0);
        for i in 1..5 {
            policy.on_training_cpu(i * 1000 * MS, 1.0);
            assert!(gates(&policy.on_nvml(i * 1000 * MS, true, None)).is_empty());
        }
        assert!((policy.run_fraction() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn training_idle_for_the_hold_time_ungates_inference() {
        let mut policy = on_gpu();
        policy.on_training_cpu(0, 1.0);
        assert!(gates(&policy.on_training_cpu(1900 * MS, 0.0)).is_empty());
        let decisions = policy.on_training_cpu(2100 * MS, 0.0);
        assert_eq!(gates(&decisions), vec![1.0]);
        assert!(!policy.training_active());
        // The percentage was never lowered: nothing to restore.
        assert!(
            !decisions
                .iter()
                .any(|d| matches!(d, GpuDecision::Retarget { .. }))
        );
    }

    #[test]
    fn a_fraction_held_long_enough_becomes_an_mps_percentage_once() {
        let mut policy = on_gpu();
        policy.on_training_cpu(0, 1.0);
        let retargets = |d: Vec<GpuDecision>| {
            d.into_iter()
                .filter(|d| matches!(d, GpuDecision::Retarget { .. }))
                .collect::<Vec<_>>()
        };
        assert!(retargets(policy.on_training_cpu(9_900 * MS, 1.0)).is_empty());
        assert_eq!(
            retargets(policy.on_training_cpu(10_000 * MS, 1.0)),
            vec![GpuDecision::Retarget { percentage: 10 }]
        );
        assert!(retargets(policy.on_training_cpu(20_000 * MS, 1.0)).is_empty());
        // Training goes idle: the next clients get the whole GPU again, at once.
        policy.on_training_cpu(21_000 * MS, 0.0);
        assert_eq!(
            retargets(policy.on_training_cpu(22_000 * MS, 0.0)),
            vec![GpuDecision::Retarget { percentage: 100 }]
        );
    }
    /// NVML's sample period: the launcher signal comes with each sample.
    const SAMPLE: u64 = 200 * MS;

    /// Feeds `shares`, one per NVML sample from `start`; returns the gate decisions with the
    /// time each came.
    fn feed(policy: &mut GpuPolicy, start: u64, shares: &[f64]) -> Vec<(u64, f64)> {
        let mut gated = Vec::new();
        for (i, &share) in shares.iter().enumerate() {
            let at = start + i as u64 * SAMPLE;
            // Training's CPU side keeps it active meanwhile.
            policy.on_training_cpu(at, 1.0);
            for run_fraction in gates(&policy.on_launcher_busy(at, share)) {
                gated.push((at, run_fraction));
            }
        }
        gated
    }

    #[test]
    fn a_gpu_bound_job_keeps_its_clamp() {
        let mut policy = on_gpu();
        assert_eq!(gates(&policy.on_training_cpu(0, 1.0)), vec![0.1]);
        // Its launching thread spins in CUDA's synchronisation: busy throughout.
        let shares: Vec<f64> = (0..25).map(|i| 0.97 + 0.01 * (i % 3) as f64).collect();
        assert!(feed(&mut policy, SAMPLE, &shares).is_empty());
        assert_eq!(policy.run_fraction(), 0.1);
    }

    #[test]
    fn a_loader_bound_job_lets_inference_run_within_a_window_and_its_next_step_too() {
        let mut policy = on_gpu();
        assert_eq!(gates(&policy.on_training_cpu(0, 1.0)), vec![0.1]);
        // Its launching thread sleeps in the DataLoader's queue most of each step.
        let gated = feed(&mut policy, SAMPLE, &[0.42, 0.35, 0.40, 0.38, 0.45]);
        assert_eq!(gated.len(), 1, "{gated:?}");
        let (at, run_fraction) = gated[0];
        assert_eq!(run_fraction, 1.0);
        assert!(at <= 1000 * MS, "let go {} ms after the rise", at / MS);
        // Idle between batches, past idle_after: nothing to undo, no decision.
        let idle_at = 2 * 1000 * MS + 4000 * MS;
        assert!(policy.on_training_cpu(idle_at, 0.0).is_empty());
        assert!(!policy.training_active());
        // Its next step is not clamped at its rise: it waited on its input the last time.
        assert!(gates(&policy.on_training_cpu(idle_at + SAMPLE, 1.0)).is_empty());
        assert!(policy.training_active());
        assert_eq!(policy.run_fraction(), 1.0);
    }

    #[test]
    fn a_job_that_inference_makes_gpu_bound_is_clamped_again_and_the_bars_do_not_flap() {
        let mut policy = on_gpu();
        policy.on_training_cpu(0, 1.0);
        assert_eq!(
            feed(&mut policy, SAMPLE, &[0.4, 0.4, 0.4])
                .last()
                .map(|g| g.1),
            Some(1.0)
        );
        // Between the bars (0.6 to 0.85): no change either way.
        let between = feed(&mut policy, 4 * SAMPLE, &[0.7, 0.8, 0.65, 0.75, 0.8, 0.7]);
        assert!(between.is_empty(), "{between:?}");
        // Inference slows the GPU past the loader's pace: the launcher is busy again.
        let again = feed(&mut policy, 10 * SAMPLE, &[0.95, 0.97, 0.99, 0.98]);
        assert_eq!(again.iter().map(|g| g.1).collect::<Vec<_>>(), vec![0.1]);
        let decisions = policy.on_launcher_busy(14 * SAMPLE, 0.99);
        assert!(decisions.is_empty(), "{decisions:?}");
    }

    #[test]
    fn the_memory_of_an_input_bound_job_fades_and_the_signal_can_be_turned_off() {
        let mut policy = on_gpu();
        policy.on_training_cpu(0, 1.0);
        feed(&mut policy, SAMPLE, &[0.3, 0.3, 0.3]);
        assert_eq!(policy.run_fraction(), 1.0);
        policy.on_training_cpu(10_000 * MS, 0.0);
        // 30 s after it was last seen waiting: a rise clamps at once again.
        let later = 4 * SAMPLE + ClampSettings::default().need_memory_ns;
        assert_eq!(gates(&policy.on_training_cpu(later, 1.0)), vec![0.1]);

        let mut off = GpuPolicy::new(ClampSettings {
            on_need: false,
            ..ClampSettings::default()
        });
        off.on_nvml(0, true, Some(0.0));
        off.on_training_cpu(0, 1.0);
        assert!(feed(&mut off, SAMPLE, &[0.1, 0.1, 0.1, 0.1]).is_empty());
        assert_eq!(
            off.run_fraction(),
            0.1,
            "clamped whenever training is active"
        );
    }
}
