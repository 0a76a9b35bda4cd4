//! The co-location benchmark's scenarios: what each sets up, its key in the saved run and the
//! JSON report, and its label in the table and the plot.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Scenario {
    Alone,
    PlainCfs,
    StaticPartition,
    LowShares,
    UtilizationPoller,
    PsiTrigger,
    Reamer,
    /// Reamer with `pause_offline_when_training_short = false`: offline inference runs on
    /// the online pool's core under SCHED_IDLE however short of cores training is, as the
    /// enforcer did by default before. The trade the option makes, offline throughput for
    /// training's pace, side by side.
    ReamerOfflineNotPaused,
    /// Reamer with `offline_on_training_cores = true` as well: offline inference also shares
    /// training's cores once none is free, as the enforcer did by default before that.
    ReamerOfflineOnTrainingCores,
    /// The same with `offline_on_training_cores_share = 0.25` and `0.5`: offline on
    /// training's cores for the first quarter, or half, of each second. The static points
    /// between training first and full sharing: what each costs training on this host (not
    /// rungs of the pace controller: docs/experiments/2026-11-27-training-core-shares-vm.md).
    ReamerTrainingCoresQuarter,
    ReamerTrainingCoresHalf,
    /// Reamer with `[policy] harvest_by_pace = true`: offline inference's share set by the
    /// training simulator's reported pace (`policy::harvest`). Its first probe waits for 10 s
    /// of reports, and on the VM its search ended a median 71 s after training started: it
    /// needs training to run untimed first (`--settle`), and windows long enough to hold its
    /// rechecks (`--window`).
    ReamerByPace,
    /// Reamer with both workers on tract (`--engine tract`) where the others run ONNX
    /// Runtime: what a harvested CPU is worth to offline inference on each engine, side by
    /// side.
    ReamerTract,
    /// Reamer with `enforcer observe --json --interval 0.1` running through the window, as a
    /// user watching it would: what watching costs training (a snapshot every 100 ms).
    ReamerObserved,
    /// The static partition and reamer again, with the online load raised until online
    /// inference needs about half a CPU (`HEAVY_ONLINE_CPUS`): the load at which a static
    /// core shared with offline inference runs short.
    StaticPartitionHeavyOnline,
    ReamerHeavyOnline,
}

impl Scenario {
    /// The default run's scenarios: those a 4 s window measures.
    pub const ALL: [Self; 12] = [
        Self::Alone,
        Self::PlainCfs,
        Self::StaticPartition,
        Self::LowShares,
        Self::UtilizationPoller,
        Self::PsiTrigger,
        Self::Reamer,
        Self::ReamerOfflineNotPaused,
        Self::ReamerOfflineOnTrainingCores,
        Self::ReamerObserved,
        Self::StaticPartitionHeavyOnline,
        Self::ReamerHeavyOnline,
    ];

    /// Scenarios that need longer windows than the default run's 4 s, left out of it.
    pub const LONG_WINDOWS: [Self; 1] = [Self::ReamerByPace];

    /// The static sharing of part of training's cores, left out of the default run: the
    /// frontier that `ReamerByPace` is compared with.
    pub const TRAINING_CORE_SHARES: [Self; 2] = [
        Self::ReamerTrainingCoresQuarter,
        Self::ReamerTrainingCoresHalf,
    ];

    /// Scenarios that compare the workers' engines, left out of the default run.
    pub const OTHER_ENGINE: [Self; 1] = [Self::ReamerTract];

    /// Whether `run` has every scenario of the default run: a run whose section may replace
    /// docs/benchmarks.md's.
    pub fn cover_the_default_run(run: &[Self]) -> bool {
        Self::ALL.iter().all(|s| run.contains(s))
    }

    /// Every scenario `--scenarios` may name: the default run's, then those needing long
    /// windows, the part-time shares of training's cores, and the engine comparison.
    pub fn known() -> impl Iterator<Item = Self> {
        Self::ALL
            .into_iter()
            .chain(Self::LONG_WINDOWS)
            .chain(Self::TRAINING_CORE_SHARES)
            .chain(Self::OTHER_ENGINE)
    }

    /// The engine its workers run, where the run's is `default`.
    pub fn engine(self, default: &'static str) -> &'static str {
        match self {
            Self::ReamerTract => "tract",
            _ => default,
        }
    }

    /// How the machine is set up for it: the scenario itself, or the one it repeats at the
    /// heavy online load or with another enforcer option.
    pub fn setup(self) -> Self {
        match self {
            Self::StaticPartitionHeavyOnline => Self::StaticPartition,
            Self::ReamerHeavyOnline
            | Self::ReamerOfflineNotPaused
            | Self::ReamerOfflineOnTrainingCores
            | Self::ReamerTrainingCoresQuarter
            | Self::ReamerTrainingCoresHalf
            | Self::ReamerByPace
            | Self::ReamerTract
            | Self::ReamerObserved => Self::Reamer,
            other => other,
        }
    }

    pub fn heavy_online(self) -> bool {
        matches!(
            self,
            Self::StaticPartitionHeavyOnline | Self::ReamerHeavyOnline
        )
    }

    /// The key in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Alone => "alone",
            Self::PlainCfs => "plain_cfs",
            Self::StaticPartition => "static_partition",
            Self::LowShares => "low_shares",
            Self::UtilizationPoller => "utilization_poller_1s",
            Self::PsiTrigger => "psi_trigger_500ms",
            Self::Reamer => "reamer",
            Self::ReamerOfflineNotPaused => "reamer_offline_not_paused",
            Self::ReamerOfflineOnTrainingCores => "reamer_offline_on_training_cores",
            Self::ReamerTrainingCoresQuarter => "reamer_training_cores_quarter",
            Self::ReamerTrainingCoresHalf => "reamer_training_cores_half",
            Self::ReamerByPace => "reamer_by_pace",
            Self::ReamerTract => "reamer_tract",
            Self::ReamerObserved => "reamer_observed_10hz",
            Self::StaticPartitionHeavyOnline => "static_partition_heavy_online",
            Self::ReamerHeavyOnline => "reamer_heavy_online",
        }
    }

    /// What it is, for the table and the plot.
    pub fn label(self) -> &'static str {
        match self {
            Self::Alone => "training alone",
            Self::PlainCfs => "plain CFS",
            Self::StaticPartition => "static partition",
            Self::LowShares => "low shares",
            Self::UtilizationPoller => "1 s util. poller",
            Self::PsiTrigger => "PSI 500 ms",
            Self::Reamer => "reamer",
            Self::ReamerOfflineNotPaused => "reamer, offline not paused",
            Self::ReamerOfflineOnTrainingCores => "reamer, offline on training's cores",
            Self::ReamerTrainingCoresQuarter => {
                "reamer, offline on training's cores 1/4 of the time"
            }
            Self::ReamerTrainingCoresHalf => "reamer, offline on training's cores 1/2 of the time",
            Self::ReamerByPace => "reamer, offline's share by training's pace",
            Self::ReamerTract => "reamer, workers on tract",
            Self::ReamerObserved => "reamer, observed at 10 Hz",
            Self::StaticPartitionHeavyOnline => "static partition, heavy online",
            Self::ReamerHeavyOnline => "reamer, heavy online",
        }
    }
}

impl From<Scenario> for &'static str {
    fn from(scenario: Scenario) -> Self {
        scenario.name()
    }
}

/// A saved run's scenario, by its key.
impl TryFrom<String> for Scenario {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Self::known()
            .find(|s| s.name() == name)
            .ok_or_else(|| format!("no co-location scenario {name:?}"))
    }
}
