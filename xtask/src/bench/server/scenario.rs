//! The server benchmark's scenarios: what each sets up, its key in the saved run and the
//! JSON report, and its label in the table and the plot.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    Alone,
    PlainCfs,
    OfflineCpuIdle,
    OfflineCpuIdleQuarter,
    OfflineCpuIdleHalf,
    OfflineCpuIdleThreeQuarters,
    StaticPartition,
    Reamer,
    ReamerOfflineNotPaused,
    ReamerByPace,
    AloneObserved,
    AloneSensed,
}

impl Scenario {
    pub const ALL: [Scenario; 12] = [
        Scenario::Alone,
        Scenario::PlainCfs,
        Scenario::OfflineCpuIdle,
        Scenario::OfflineCpuIdleQuarter,
        Scenario::OfflineCpuIdleHalf,
        Scenario::OfflineCpuIdleThreeQuarters,
        Scenario::StaticPartition,
        Scenario::Reamer,
        Scenario::ReamerOfflineNotPaused,
        Scenario::ReamerByPace,
        Scenario::AloneObserved,
        Scenario::AloneSensed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Alone => "alone",
            Scenario::PlainCfs => "plain_cfs",
            Scenario::OfflineCpuIdle => "offline_cpu_idle",
            Scenario::OfflineCpuIdleQuarter => "offline_cpu_idle_quarter",
            Scenario::OfflineCpuIdleHalf => "offline_cpu_idle_half",
            Scenario::OfflineCpuIdleThreeQuarters => "offline_cpu_idle_three_quarters",
            Scenario::StaticPartition => "static_partition",
            Scenario::Reamer => "reamer",
            Scenario::ReamerOfflineNotPaused => "reamer_offline_not_paused",
            Scenario::ReamerByPace => "reamer_by_pace",
            Scenario::AloneObserved => "alone_observed_10hz",
            Scenario::AloneSensed => "alone_sensed",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Scenario::Alone => "training alone",
            Scenario::PlainCfs => "plain CFS, no control",
            Scenario::OfflineCpuIdle => "offline in a `cpu.idle` group, no enforcer",
            Scenario::OfflineCpuIdleQuarter => {
                "inference on the upper quarter of the cores, offline in a `cpu.idle` group"
            }
            Scenario::OfflineCpuIdleHalf => {
                "inference on the upper half of the cores, offline in a `cpu.idle` group"
            }
            Scenario::OfflineCpuIdleThreeQuarters => {
                "inference on the upper three quarters of the cores, offline in a `cpu.idle` group"
            }
            Scenario::StaticPartition => "static partition (inference on the upper half)",
            Scenario::Reamer => "reamer, defaults",
            Scenario::ReamerOfflineNotPaused => {
                "reamer, `pause_offline_when_training_short = false`"
            }
            Scenario::ReamerByPace => "reamer, `harvest_by_pace = true`",
            Scenario::AloneObserved => {
                "training alone, observed at 10 Hz by a daemon that does not enforce"
            }
            Scenario::AloneSensed => {
                "training alone under a daemon that does not enforce, not observed"
            }
        }
    }

    /// The share of the machine's CPUs inference is confined to, in whole cores from the top
    /// (`cores::upper_cores`): the static frontier between training and inference.
    pub(crate) fn confined_to(self) -> Option<f64> {
        match self {
            Scenario::OfflineCpuIdleQuarter => Some(0.25),
            Scenario::OfflineCpuIdleHalf => Some(0.5),
            Scenario::OfflineCpuIdleThreeQuarters => Some(0.75),
            _ => None,
        }
    }

    pub(crate) fn reamer(self) -> bool {
        matches!(
            self,
            Scenario::Reamer | Scenario::ReamerOfflineNotPaused | Scenario::ReamerByPace
        )
    }

    /// Whether inference runs beside training.
    pub(crate) fn inference(self) -> bool {
        !matches!(
            self,
            Scenario::Alone | Scenario::AloneObserved | Scenario::AloneSensed
        )
    }

    /// Whether an enforcer daemon runs, and training is launched through it.
    pub(super) fn daemon(self) -> bool {
        self.reamer() || matches!(self, Scenario::AloneObserved | Scenario::AloneSensed)
    }
}
