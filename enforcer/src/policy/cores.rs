//! Who gets which cores: a pure module, driven by the sensor's signals and unit-tested on
//! recorded traces (no kernel, no cgroups).
//!
//! - Training's CPU demand is estimated as the median of its per-tick demand over a window
//!   (`demand`): the level it runs at, not its bursts, and never more than the machine.
//! - Training gets whole physical cores (SMT siblings together), enough for its estimate plus a
//!   headroom, at once when the estimate asks for more.
//! - A CPU where a training thread was just queued behind inference joins training's
//!   reservation at once (the fast path), up to one core above what the estimate asks for:
//!   a job's threads wander over every CPU, so each of its queuings would otherwise claim
//!   another core (on the 16-CPU server, 15 cores within a second for a job using 3 CPUs).
//!   Beyond that the report is declined, and the sensor is told not to send it.
//! - Offline pools pause while the estimate is more than training may reserve beside the
//!   online pools' minimums: training's demand cannot be met on its own cores. Where the
//!   estimate fits those cores but its headroom does not, offline pools run on a duty cycle,
//!   paused for the share of the headroom that is missing.
//! - What training holds beyond what the estimate asks for goes back after the estimate has
//!   stayed below it for `give_back_after`: the pause first, then every excess core at once,
//!   a full hold later (hysteresis: the grants do not oscillate).
//! - Online pools keep their guaranteed minimum of cores even against training. Beyond it
//!   they get the cores their workers say their SLO needs at the current load, from the cores
//!   training leaves free (training comes first); offline pools get the rest and share the
//!   online pools' cores, under SCHED_IDLE (`cpu.idle`), where the kernel preempts them at
//!   every wakeup of online inference or of a training thread placed there. They share
//!   training's reserved cores only where training holds every core (or where
//!   `offline_on_training_cores` says so, for the share of each second it says).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::demand::DemandWindow;
use crate::{
    config::{PolicySettings, PoolKind, PoolSettings},
    host::topology::Topology,
};

/// A pool as the policy sees it: its name and kind.
#[derive(Debug, Clone)]
pub(crate) struct PoolSpec {
    pub name: String,
    pub kind: PoolKind,
}

impl From<&PoolSettings> for PoolSpec {
    fn from(pool: &PoolSettings) -> Self {
        Self {
            name: pool.name.clone(),
            kind: pool.kind,
        }
    }
}

/// An online pool's guaranteed cores; 0 for an offline pool.
fn min_cores(kind: &PoolKind) -> usize {
    kind.online().map_or(0, |online| online.min_cores)
}

/// The CPUs of training's reservation and of each pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Allocation {
    pub training: BTreeSet<u32>,
    pub pools: BTreeMap<String, BTreeSet<u32>>,
    /// Offline pools are paused: training's demand is more than it may reserve, or they are
    /// in the paused part of the duty cycle of a training tight on its cores. They keep their
    /// CPUs above, to resume on.
    pub offline_paused: bool,
}

/// Why the allocation changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "trigger", rename_all = "snake_case")]
pub(crate) enum Trigger {
    /// A training thread was queued behind inference on `cpu`.
    Contended { cpu: u32 },
    /// Training's demand estimate rose above the reservation.
    DemandRose { estimate_cpus: f64 },
    /// The estimate stayed below the reservation for the hold time.
    DemandFell { estimate_cpus: f64 },
    /// Training holds every core it may and its estimate fits them, but not its headroom:
    /// offline pools run on a duty cycle, paused for `paused_fraction` of each period; this
    /// is one of its flips (the allocation says which way).
    OfflineDuty { paused_fraction: f64 },
    /// The workers of online pool `pool` need `cores` cores for their SLO at their load.
    OnlineNeed { pool: String, cores: usize },
    /// Offline pools share training's cores for `share` of each period: this is one of its
    /// flips (the allocation says which way).
    TrainingCoresShare { share: f64 },
    /// The pace controller moved offline inference to `level` (`policy::harvest`; its
    /// reason is the decision log's `harvest` line just before).
    Pace { level: &'static str },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Decision {
    #[serde(flatten)]
    pub trigger: Trigger,
    pub training_cores_before: usize,
    pub training_cores_after: usize,
    pub allocation: Allocation,
}

/// Demand below this (CPUs) is none: 2% of one CPU, less than an idle training process's
/// housekeeping threads use; with the headroom, any positive estimate would hold a core.
const IDLE_DEMAND_CPUS: f64 = 0.02;

/// The period of the offline duty cycles (paused while training is tight on its cores; on
/// training's cores for a share of the time): short enough that offline work comes every
/// second, long enough that each stretch is several ticks.
const DUTY_PERIOD_NS: u64 = 1_000_000_000;

#[derive(Clone)]
pub(crate) struct Policy {
    config: PolicySettings,
    topology: Topology,
    pools: Vec<PoolSpec>,
    demand: DemandWindow,
    /// Indexes into `topology.cores` reserved for training, in the order they were taken.
    training: Vec<usize>,
    /// Offline pools paused for training's demand (`pause_offline_when_training_short`).
    offline_paused: bool,
    /// The offline duty cycle's current period began then, while training is tight.
    duty_since_ns: Option<u64>,
    /// Offline pools paused in this period of the duty cycle.
    duty_paused: bool,
    /// The current period of offline's part-time share of training's cores began then.
    share_since_ns: Option<u64>,
    /// Offline pools on training's cores in this period (a share under 1).
    sharing_now: bool,
    /// Since when the estimate has wanted less than training holds (fewer cores, or no pause).
    low_since_ns: Option<u64>,
    /// Cores each online pool's workers need for their SLO, where they said so.
    online_need: BTreeMap<String, usize>,
}

impl Policy {
    pub(crate) fn new(config: PolicySettings, topology: Topology, pools: Vec<PoolSpec>) -> Self {
        Self {
            demand: DemandWindow::new(config.demand_window_ns, topology.cpus.len()),
            config,
            topology,
            pools,
            training: Vec::new(),
            offline_paused: false,
            duty_since_ns: None,
            duty_paused: false,
            share_since_ns: None,
            // Part-time sharing starts with the first tick's period.
            sharing_now: config.training_cores_share >= 1.0,
            low_since_ns: None,
            online_need: BTreeMap::new(),
        }
    }

    pub(crate) fn estimate_cpus(&self) -> f64 {
        self.demand.estimate()
    }

    /// The CPUs the policy divides: the machine's online CPUs.
    pub(crate) fn cpus(&self) -> &BTreeSet<u32> {
        &self.topology.cpus
    }

    /// Cores online pools are guaranteed, which training may not take.
    fn guaranteed_online_cores(&self) -> usize {
        self.pools.iter().map(|p| min_cores(&p.kind)).sum()
    }

    fn max_training_cores(&self) -> usize {
        self.topology
            .cores
            .len()
            .saturating_sub(self.guaranteed_online_cores())
    }

    /// How many cores the fast path may bring training's reservation up to: one core above
    /// what the estimate asks for (one where it asks for none), within what training may
    /// reserve. A job's burst spills onto a core or so beyond its level; its threads queued
    /// on many CPUs at once are one burst, not many.
    fn contention_limit(&self) -> usize {
        (self.wanted().cores.max(1) + 1).min(self.max_training_cores())
    }

    /// CPUs where a report of training queued behind inference would change nothing, so that
    /// the sensor does not send it: the cores training holds, and every CPU once training
    /// holds all the cores the fast path may give it (`contended` declines exactly these).
    /// Each report wakes the real-time event thread, which preempts whoever runs, often the
    /// training thread just queued, so a report that can change nothing only costs training.
    pub(crate) fn quiet_cpus(&self) -> BTreeSet<u32> {
        if self.training.len() >= self.contention_limit() {
            return self.topology.cpus.clone();
        }
        self.allocation().training
    }

    /// Whole cores needed for the estimate plus headroom, and whether offline pools are to
    /// pause because the estimate is more than training may reserve.
    fn wanted(&self) -> Wanted {
        let estimate = self.demand.estimate();
        let threads_per_core = self.topology.threads_per_core();
        let cores = match estimate < IDLE_DEMAND_CPUS {
            true => 0,
            false => ((estimate + self.config.headroom_cpus) / threads_per_core).ceil() as usize,
        };
        let max = self.max_training_cores();
        let reservable_cpus = max as f64 * threads_per_core;
        Wanted {
            cores: cores.min(max),
            offline_paused: self.config.pause_offline_when_training_short
                && estimate > reservable_cpus,
        }
    }

    /// Training's hold as one count for the hysteresis: its cores, and the offline pools'
    /// pause as one step above them (taken last, given back first).
    fn held_steps(&self) -> usize {
        self.training.len() + usize::from(self.offline_paused)
    }

    fn decision(&self, trigger: Trigger, before: usize) -> Decision {
        Decision {
            trigger,
            training_cores_before: before,
            training_cores_after: self.training.len(),
            allocation: self.allocation(),
        }
    }

    /// Fast path: a training thread was queued behind inference on `cpu`. Its core joins
    /// training's reservation now, while training holds fewer than `contention_limit` cores.
    /// The core is held for at least `give_back_after`, like any other.
    pub(crate) fn contended(&mut self, cpu: u32) -> Option<Decision> {
        let core = self.topology.cores.iter().position(|c| c.contains(&cpu))?;
        if self.training.contains(&core) || self.training.len() >= self.contention_limit() {
            return None;
        }
        let before = self.training.len();
        self.training.push(core);
        self.low_since_ns = None;
        Some(self.decision(Trigger::Contended { cpu }, before))
    }

    /// The workers of online pool `pool` need `cores` cores to meet its SLO at their current
    /// load (0: no more than the guaranteed minimum). A decision when the allocation changes.
    /// The workers themselves hold a smaller need for a few seconds before they report it, so
    /// a noisy load does not make the grants oscillate.
    pub(crate) fn set_online_need(&mut self, pool: &str, cores: usize) -> Option<Decision> {
        let is_online = self
            .pools
            .iter()
            .any(|p| p.name == pool && p.kind.online().is_some());
        if !is_online || self.online_need.get(pool).copied().unwrap_or(0) == cores {
            return None;
        }
        let before = self.allocation();
        self.online_need.insert(pool.to_owned(), cores);
        if self.allocation() == before {
            return None;
        }
        Some(self.decision(
            Trigger::OnlineNeed {
                pool: pool.to_owned(),
                cores,
            },
            self.training.len(),
        ))
    }

    /// Slow path: a new demand sample (average CPUs runnable or running over the tick that
    /// ended at `now_ns`). Grows the reservation, or pauses offline pools, at once when the
    /// estimate asks for it; gives back after the hold; runs the offline duty cycle while
    /// training is tight on its cores, and offline's part-time share of training's cores.
    pub(crate) fn observe_demand(&mut self, now_ns: u64, demand_cpus: f64) -> Option<Decision> {
        let before = self.training.len();
        let was_paused = self.allocation_paused();
        // Only a part-time share flips offline on and off training's cores.
        let share = self.config.training_cores_share;
        let part_time = share > 0.0 && share < 1.0;
        let pools_before = part_time.then(|| self.allocation().pools);
        self.demand.add(now_ns, demand_cpus);
        let by_demand = self.follow_demand(now_ns);
        let paused_fraction = self.tight_paused_fraction();
        self.duty_paused = self.duty_flip(now_ns, paused_fraction);
        self.sharing_now = self.share_flip(now_ns);
        match by_demand {
            Some(trigger) => Some(self.decision(trigger, before)),
            None if self.allocation_paused() != was_paused => {
                Some(self.decision(Trigger::OfflineDuty { paused_fraction }, before))
            }
            // A flip of the share, where it moves offline (only where no core is free).
            None if pools_before.is_some_and(|pools| pools != self.allocation().pools) => {
                Some(self.decision(Trigger::TrainingCoresShare { share }, before))
            }
            None => None,
        }
    }

    /// Whether offline pools are paused, for demand or in the duty cycle.
    fn allocation_paused(&self) -> bool {
        self.offline_paused || self.duty_paused
    }

    /// The share of the time offline pools are paused because training is tight: it holds
    /// every core it may, its estimate fits them, but its headroom does not. The share of the
    /// headroom that is missing: none at the edge where the headroom fits, all of it where
    /// the estimate itself fills the cores (where the demand pause takes over).
    ///
    /// On the 2-vCPU VM, training's estimate sat just under the one CPU it may reserve, and
    /// offline work beside it, unpaused, cost training about 2% of its pace although the
    /// sensor saw little waiting behind it (docs/benchmarks.md, co-location): paused whenever
    /// the headroom did not fit, offline got almost nothing.
    fn tight_paused_fraction(&self) -> f64 {
        let max = self.max_training_cores();
        let headroom = self.config.headroom_cpus;
        let estimate = self.demand.estimate();
        if !self.config.pause_offline_when_training_short
            || self.offline_paused
            || max == 0
            || self.training.len() < max
            || headroom <= 0.0
            || estimate < IDLE_DEMAND_CPUS
        {
            return 0.0;
        }
        let reservable_cpus = max as f64 * self.topology.threads_per_core();
        ((estimate + headroom - reservable_cpus) / headroom).clamp(0.0, 1.0)
    }

    /// Whether offline pools are paused at `now_ns` in the duty cycle of `paused_fraction`:
    /// each period runs them first, then pauses them for the fraction.
    fn duty_flip(&mut self, now_ns: u64, paused_fraction: f64) -> bool {
        if paused_fraction <= 0.0 {
            self.duty_since_ns = None;
            return false;
        }
        into_period(&mut self.duty_since_ns, now_ns) >= 1.0 - paused_fraction
    }

    /// Whether offline pools may be on training's cores at `now_ns`: always at a share of 1,
    /// never at 0, and otherwise in the first `training_cores_share` of each period.
    fn share_flip(&mut self, now_ns: u64) -> bool {
        let share = self.config.training_cores_share;
        if share <= 0.0 || share >= 1.0 {
            self.share_since_ns = None;
            return share >= 1.0;
        }
        into_period(&mut self.share_since_ns, now_ns) < share
    }

    /// The reservation and the demand pause after a new estimate: the trigger of a change.
    fn follow_demand(&mut self, now_ns: u64) -> Option<Trigger> {
        let estimate_cpus = self.demand.estimate();
        let wanted = self.wanted();
        let before = self.training.len();
        let grow = wanted.cores > before;
        let pause = wanted.offline_paused && !self.offline_paused;
        if grow || pause {
            let free: Vec<usize> = (0..self.topology.cores.len())
                .filter(|c| !self.training.contains(c))
                .collect();
            let missing = wanted.cores.saturating_sub(before);
            self.training.extend(free.into_iter().take(missing));
            self.offline_paused |= wanted.offline_paused;
            self.low_since_ns = None;
            return Some(Trigger::DemandRose { estimate_cpus });
        }
        if wanted.steps() >= self.held_steps() {
            self.low_since_ns = None;
            return None;
        }
        let since = *self.low_since_ns.get_or_insert(now_ns);
        if now_ns.saturating_sub(since) < self.config.give_back_after_ns {
            return None;
        }
        // Resume offline first; the cores a full hold later, all the excess at once, those
        // taken longest ago first (the newest are where training's threads were last queued).
        if self.offline_paused {
            self.offline_paused = false;
        } else {
            let excess = before - wanted.cores;
            self.training.drain(..excess);
        }
        self.low_since_ns = Some(now_ns);
        Some(Trigger::DemandFell { estimate_cpus })
    }

    /// The share of the time offline pools may run on training's reserved cores once no
    /// free core is left (0: never, 1: always): the pace controller's `training_cores` levels
    /// set it, over the config's `offline_on_training_cores` and its share.
    pub(crate) fn share_training_cores(&mut self, share: f64) {
        self.config.training_cores_share = share;
        self.sharing_now = share >= 1.0;
        self.share_since_ns = None;
    }

    /// Whether offline pools pause while training is short of cores, and run on the duty
    /// cycle while it is tight: the pace controller lifts the configured
    /// `pause_offline_when_training_short` from its `Unpaused` level up. Lifted, a pause in
    /// force ends at once.
    pub(crate) fn pause_when_short(&mut self, pause: bool) {
        self.config.pause_offline_when_training_short = pause;
        if !pause {
            self.offline_paused = false;
            self.duty_paused = false;
            self.duty_since_ns = None;
        }
    }

    /// The number of cores training holds.
    pub(crate) fn training_cores(&self) -> usize {
        self.training.len()
    }

    /// The current allocation of CPUs.
    pub(crate) fn allocation(&self) -> Allocation {
        let core_cpus = |core: usize| self.topology.cores[core].iter().copied();
        let training: BTreeSet<u32> = self.training.iter().flat_map(|&c| core_cpus(c)).collect();
        // Free cores, highest first: training grows from the low end.
        let mut free: Vec<usize> = (0..self.topology.cores.len())
            .rev()
            .filter(|c| !self.training.contains(c))
            .collect();
        let mut pools = BTreeMap::new();
        // Every online pool's minimum first, then what their SLOs need beyond it.
        let mut online_cores: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for pool in &self.pools {
            if let Some(online) = pool.kind.online() {
                let take = online.min_cores.min(free.len());
                online_cores.insert(&pool.name, free.drain(..take).collect());
            }
        }
        for pool in &self.pools {
            if let Some(online) = pool.kind.online() {
                let need = self.online_need.get(&pool.name).copied().unwrap_or(0);
                let take = need.saturating_sub(online.min_cores).min(free.len());
                let extra = free.drain(..take);
                online_cores.entry(&pool.name).or_default().extend(extra);
            }
        }
        for (name, cores) in online_cores {
            let cpus: BTreeSet<u32> = cores.into_iter().flat_map(core_cpus).collect();
            pools.insert(name.to_owned(), cpus);
        }
        // Offline runs under SCHED_IDLE, which the kernel preempts at once for any normal
        // task's wakeup, training's or online inference's. So it gets every CPU training does
        // not hold, the online pools' as well as the free ones: kept off the online cores, it
        // left most of them idle. Not training's cores, where the wakeup preemption is not
        // enough (EEVDF can pick the idle group while a queued training thread is not yet
        // eligible, and nothing takes the CPU back before the next tick), unless training
        // holds every core, where the alternative would be to stop it
        // (docs/experiments/2026-11-24-offline-off-training-cores.md).
        let outside_training: BTreeSet<u32> =
            self.topology.cpus.difference(&training).copied().collect();
        let offline = if outside_training.is_empty() || (free.is_empty() && self.sharing_now) {
            self.topology.cpus.clone()
        } else {
            outside_training
        };
        for pool in &self.pools {
            if pool.kind == PoolKind::Offline {
                pools.insert(pool.name.clone(), offline.clone());
            }
        }
        Allocation {
            training,
            pools,
            offline_paused: self.allocation_paused(),
        }
    }
}

/// How far `now_ns` is into the duty period that began at `since` (0 to 1), starting a
/// period there where none is running or the last is over.
fn into_period(since: &mut Option<u64>, now_ns: u64) -> f64 {
    let start = since.get_or_insert(now_ns);
    if now_ns.saturating_sub(*start) >= DUTY_PERIOD_NS {
        *start = now_ns;
    }
    now_ns.saturating_sub(*start) as f64 / DUTY_PERIOD_NS as f64
}

/// What training's demand estimate asks for.
struct Wanted {
    /// Cores to reserve, at most what the online pools' minimums leave.
    cores: usize,
    /// It wants more than that: offline pools are to pause.
    offline_paused: bool,
}

impl Wanted {
    /// As `Policy::held_steps` counts.
    fn steps(&self) -> usize {
        self.cores + usize::from(self.offline_paused)
    }
}

#[cfg(test)]
mod tests;
