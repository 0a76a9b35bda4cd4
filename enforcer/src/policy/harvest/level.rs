//! The pace controller's rungs, from offline held back to offline on training's own cores,
//! and what each does to the core policy's allocation.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::policy::cores::Allocation;

/// The rungs, least offline work first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Level {
    /// Offline pools paused.
    Held,
    /// Offline pools on a share of the CPUs the core policy gives them.
    Quarter,
    Half,
    ThreeQuarters,
    /// The core policy's allocation as it is.
    Policy,
    /// The policy's, without its pause of offline while training is short of cores.
    Unpaused,
    /// The policy's without the pause, with offline on training's reserved cores too.
    TrainingCores,
}

impl Level {
    pub(crate) const LADDER: [Level; 7] = [
        Level::Held,
        Level::Quarter,
        Level::Half,
        Level::ThreeQuarters,
        Level::Policy,
        Level::Unpaused,
        Level::TrainingCores,
    ];

    /// Where a search starts: it comes down from the most offline work.
    pub(super) const TOP: Level = Level::TrainingCores;

    pub(super) fn index(self) -> usize {
        Self::LADDER
            .iter()
            .position(|&l| l == self)
            .expect("every level is on the ladder")
    }

    pub(super) fn up(self) -> Option<Level> {
        Self::LADDER.get(self.index() + 1).copied()
    }

    pub(super) fn down(self) -> Option<Level> {
        self.index().checked_sub(1).map(|i| Self::LADDER[i])
    }

    /// The level of `name` (as `name` writes it), if any.
    pub(crate) fn from_name(name: &str) -> Option<Level> {
        Self::LADDER.into_iter().find(|level| level.name() == name)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Held => "held",
            Level::Quarter => "quarter",
            Level::Half => "half",
            Level::ThreeQuarters => "three_quarters",
            Level::Policy => "policy",
            Level::Unpaused => "unpaused",
            Level::TrainingCores => "training_cores",
        }
    }

    /// The share of the offline CPUs the policy gives that offline keeps at this level (1 at
    /// `Policy` and above; `Held` pauses instead).
    pub(crate) fn offline_share(self) -> f64 {
        match self {
            Level::Held => 0.0,
            Level::Quarter => 0.25,
            Level::Half => 0.5,
            Level::ThreeQuarters => 0.75,
            Level::Policy | Level::Unpaused | Level::TrainingCores => 1.0,
        }
    }

    /// The share of each second offline may run on training's reserved cores at this level,
    /// once no free core is left (`Policy::share_training_cores`): all of it at the top, none
    /// below.
    pub(crate) fn training_cores_share(self) -> f64 {
        if self == Level::TrainingCores {
            1.0
        } else {
            0.0
        }
    }

    /// Whether the core policy may pause offline while training is short of cores at this
    /// level (where configured: `pause_offline_when_training_short`).
    pub(crate) fn pauses_when_short(self) -> bool {
        self < Level::Unpaused
    }
}

/// `allocation` at `level`, for the offline pools named in `offline`: `Held` pauses them; a
/// share keeps each on that share of its CPUs (at least one), the highest-numbered, farthest
/// from training, which the policy grows from CPU 0; `Policy` and above leave the allocation
/// as the policy made it (which does not pause for training's shortage from `Unpaused` up,
/// `Policy::pause_when_short`, and shares training's cores at `TrainingCores`,
/// `Policy::share_training_cores`).
pub(crate) fn shape(level: Level, mut allocation: Allocation, offline: &[String]) -> Allocation {
    match level {
        Level::Held => allocation.offline_paused = true,
        Level::Quarter | Level::Half | Level::ThreeQuarters => {
            for name in offline {
                if let Some(cpus) = allocation.pools.get_mut(name) {
                    let keep = ((cpus.len() as f64 * level.offline_share()).ceil() as usize).max(1);
                    let top: BTreeSet<u32> = cpus.iter().rev().take(keep).copied().collect();
                    *cpus = top;
                }
            }
        }
        Level::Policy | Level::Unpaused | Level::TrainingCores => {}
    }
    allocation
}
