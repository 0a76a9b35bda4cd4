//! `[policy]`: how cores move between training and inference, and offline's share by
//! training's pace.

use serde::Deserialize;
use toml::Spanned;

use super::InvalidField;

/// The shares of training's pace `pace_epsilon` may be. Below 0.1% the probes could never
/// tell; above half, "training first" would mean nothing.
pub(crate) const PACE_EPSILON_RANGE: std::ops::RangeInclusive<f64> = 0.001..=0.5;
/// `pace_epsilon` where the config does not say: training may lose 1% of its pace.
pub(crate) const DEFAULT_PACE_EPSILON: f64 = 0.01;

/// How cores move between training and inference.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySection {
    /// false: observe only, never touch a cgroup's CPUs.
    pub enforce: bool,
    /// Training's demand estimate is the median of its per-tick demand over this window.
    pub demand_window_ms: u64,
    /// Replaced by `demand_window_ms`; rejected with a message that says so.
    pub demand_half_life_ms: Option<Spanned<u64>>,
    /// How long demand must stay low before a core goes back to inference (hysteresis).
    pub give_back_after_ms: u64,
    /// CPUs reserved for training above its estimated demand.
    pub headroom_cpus: f64,
    /// true: offline pools also share training's reserved cores once no core is left outside
    /// them and the online pools' (the enforcer's behaviour before this option): more offline
    /// throughput on a small machine, for a slower training job. false (the default): training
    /// first; offline pools share training's cores only where training has reserved every core.
    /// Under `harvest_by_pace` the pace controller chooses it (its `training_cores` level).
    pub offline_on_training_cores: bool,
    /// With `offline_on_training_cores`: the share of each second offline pools may run on
    /// training's cores (the first part of each second; the rest they are kept off them). 1
    /// (the default): all the time; 0.25: a quarter of it. A static point between training
    /// first and full sharing, for a machine where full sharing costs training too much.
    pub offline_on_training_cores_share: f64,
    /// true (the default): offline pools pause (their cgroup is frozen) while training's
    /// demand estimate is more CPUs than the online pools' minimums leave it, and resume after
    /// the estimate has stayed below that for `give_back_after_ms`. Training first, at the price of offline
    /// work where training is short of cores; where it is not, nothing changes. false: offline
    /// pools run on whatever CPUs they get, under SCHED_IDLE, however short training is. Pools
    /// with `gpu = true` are left to the GPU duty cycle, which owns their freezer. Under
    /// `harvest_by_pace` the pace controller lifts it where training's pace shows it free (its
    /// `unpaused` level and above).
    pub pause_offline_when_training_short: bool,
    /// true: offline inference's share is set by training's own pace, from the progress a
    /// training job reports (`python/reamer_progress.py`), or else from its GPUs' busy share
    /// (NVML): the most offline work that keeps training within `pace_epsilon` of its pace
    /// with offline held back, found by running each level and holding offline back in turn,
    /// seconds apart (docs/enforcer.md, "Offline's share, set by training's pace"). A job
    /// with neither keeps the core policy alone. false (the default, until measured on the GPU
    /// server): the core policy alone.
    pub harvest_by_pace: bool,
    /// How much of training's pace offline inference may cost under `harvest_by_pace`: 0.01 is
    /// 1%.
    pub pace_epsilon: f64,
    /// How often the slow path re-reads training's demand.
    pub tick_ms: u64,
    /// SCHED_FIFO priority of the thread that reacts to sensor events (0: normal class). Where
    /// the kernel refuses it, the thread stays in the normal class with the shortest time slice.
    pub event_thread_rt_priority: i32,
}

impl PolicySection {
    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), InvalidField> {
        // NaN compares false with everything: it would reserve nothing, silently.
        if !self.headroom_cpus.is_finite() || self.headroom_cpus < 0.0 {
            return Err(InvalidField {
                field: "headroom_cpus",
                message: format!(
                    "{} is not a number of CPUs: it must be finite and at least 0",
                    self.headroom_cpus
                ),
            });
        }
        if !(self.pace_epsilon.is_finite() && PACE_EPSILON_RANGE.contains(&self.pace_epsilon)) {
            return Err(InvalidField {
                field: "pace_epsilon",
                message: format!(
                    "{} is not a share of training's pace from 0.001 (0.1%) to 0.5 (50%)",
                    self.pace_epsilon
                ),
            });
        }
        if !(self.offline_on_training_cores_share.is_finite()
            && self.offline_on_training_cores_share > 0.0
            && self.offline_on_training_cores_share <= 1.0)
        {
            return Err(InvalidField {
                field: "offline_on_training_cores_share",
                message: format!(
                    "{} is not a share of each second: it must be above 0 and at most 1 (to \
                     keep offline off training's cores, set offline_on_training_cores = false)",
                    self.offline_on_training_cores_share
                ),
            });
        }
        // A share set without the option would share nothing, silently.
        if self.offline_on_training_cores_share < 1.0 && !self.offline_on_training_cores {
            return Err(InvalidField {
                field: "offline_on_training_cores_share",
                message: format!(
                    "{} shares nothing without offline_on_training_cores = true",
                    self.offline_on_training_cores_share
                ),
            });
        }
        Ok(())
    }
}

impl Default for PolicySection {
    fn default() -> Self {
        // 2 s hold: several training steps at the 50 steps/s measured here, so a step's idle
        // phase never gives a core away. 2 s window: 16 steps of the ResNet-50 job on the GPU
        // server (1,024 images/s at batch 128), a new level taken within a second; replayed
        // over that job's trace, a 1 s window rode the median's swings and reserved 7 cores at
        // the median where 2 s reserved 6 (docs/enforcer.md, "Replaying a trace").
        Self {
            enforce: true,
            demand_window_ms: 2000,
            demand_half_life_ms: None,
            give_back_after_ms: 2000,
            headroom_cpus: 0.25,
            // Training first: offline work on training's reserved core cost training its pace
            // (docs/experiments/2026-11-24-offline-off-training-cores.md).
            offline_on_training_cores: false,
            offline_on_training_cores_share: 1.0,
            // Training first: offline work on the online pool's core, while training spills
            // onto it, cost training its pace (docs/experiments/2026-11-24-offline-pause.md).
            pause_offline_when_training_short: true,
            harvest_by_pace: false,
            pace_epsilon: DEFAULT_PACE_EPSILON,
            tick_ms: 100,
            // Above ordinary tasks, below the kernel's own RT threads (priority 50 and up).
            event_thread_rt_priority: 10,
        }
    }
}
