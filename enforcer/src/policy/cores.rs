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
//!   `offline_on_training_cores` says so).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::demand::DemandWindow;
use crate::{
    config::{PolicySettings, PoolKind, PoolSettings},
    host::topology::Topology,
};

/// A pool as the policy sees it: its name and kind.
#[derive(Debug, Clone)]
pub struct PoolSpec {
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
pub struct Allocation {
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
pub enum Trigger {
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
    /// The pace controller moved offline inference to `level` (`policy::harvest`; its
    /// reason is the decision log's `harvest` line just before).
    Pace { level: &'static str },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    #[serde(flatten)]
    pub trigger: Trigger,
    pub training_cores_before: usize,
    pub training_cores_after: usize,
    pub allocation: Allocation,
}

/// Demand below this (CPUs) is none: 2% of one CPU, less than an idle training process's
/// housekeeping threads use; with the headroom, any positive estimate would hold a core.
const IDLE_DEMAND_CPUS: f64 = 0.02;

/// The period of the offline duty cycle while training is tight on its cores: short enough
/// that offline work comes every second, long enough that each stretch is several ticks.
const DUTY_PERIOD_NS: u64 = 1_000_000_000;

#[derive(Clone)]
pub struct Policy {
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
    /// Since when the estimate has wanted less than training holds (fewer cores, or no pause).
    low_since_ns: Option<u64>,
    /// Cores each online pool's workers need for their SLO, where they said so.
    online_need: BTreeMap<String, usize>,
}

impl Policy {
    pub fn new(config: PolicySettings, topology: Topology, pools: Vec<PoolSpec>) -> Self {
        Self {
            demand: DemandWindow::new(config.demand_window_ns, topology.cpus.len()),
            config,
            topology,
            pools,
            training: Vec::new(),
            offline_paused: false,
            duty_since_ns: None,
            duty_paused: false,
            low_since_ns: None,
            online_need: BTreeMap::new(),
        }
    }

    pub fn estimate_cpus(&self) -> f64 {
        self.demand.estimate()
    }

    /// The CPUs the policy divides: the machine's online CPUs.
    pub fn cpus(&self) -> &BTreeSet<u32> {
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
    pub fn quiet_cpus(&self) -> BTreeSet<u32> {
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
    pub fn contended(&mut self, cpu: u32) -> Option<Decision> {
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
    pub fn set_online_need(&mut self, pool: &str, cores: usize) -> Option<Decision> {
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
    /// training is tight on its cores.
    pub fn observe_demand(&mut self, now_ns: u64, demand_cpus: f64) -> Option<Decision> {
        let before = self.training.len();
        let was_paused = self.allocation_paused();
        self.demand.add(now_ns, demand_cpus);
        let by_demand = self.follow_demand(now_ns);
        let paused_fraction = self.tight_paused_fraction();
        self.duty_paused = self.duty_flip(now_ns, paused_fraction);
        match by_demand {
            Some(trigger) => Some(self.decision(trigger, before)),
            None if self.allocation_paused() != was_paused => {
                Some(self.decision(Trigger::OfflineDuty { paused_fraction }, before))
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
        let since = self.duty_since_ns.get_or_insert(now_ns);
        if now_ns.saturating_sub(*since) >= DUTY_PERIOD_NS {
            *since = now_ns;
        }
        let into_period = now_ns.saturating_sub(*since) as f64;
        into_period >= (1.0 - paused_fraction) * DUTY_PERIOD_NS as f64
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

    /// Whether offline pools may share training's reserved cores once no free core is left:
    /// the pace controller's top level sets it, over the config's `offline_on_training_cores`.
    pub fn share_training_cores(&mut self, share: bool) {
        self.config.offline_on_training_cores = share;
    }

    /// The number of cores training holds.
    pub fn training_cores(&self) -> usize {
        self.training.len()
    }

    /// The current allocation of CPUs.
    pub fn allocation(&self) -> Allocation {
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
        let offline = if outside_training.is_empty()
            || (free.is_empty() && self.config.offline_on_training_cores)
        {
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
mod tests {
    use super::*;
    use crate::config::OnlinePool;

    const MS: u64 = 1_000_000;

    /// An online pool guaranteed `min_cores`.
    fn online(min_cores: usize) -> PoolKind {
        PoolKind::Online(OnlinePool {
            min_cores,
            slo_ms: None,
            cpu_weight: 50,
            min_cpu_weight: 10,
        })
    }

    fn config() -> PolicySettings {
        PolicySettings {
            demand_window_ns: 1000 * MS,
            give_back_after_ns: 2000 * MS,
            headroom_cpus: 0.25,
            offline_on_training_cores: false,
            pause_offline_when_training_short: false,
            harvest: None,
        }
    }

    fn pools() -> Vec<PoolSpec> {
        vec![
            PoolSpec {
                name: "web".into(),
                kind: online(1),
            },
            PoolSpec {
                name: "batch".into(),
                kind: PoolKind::Offline,
            },
        ]
    }

    /// Replays (time ms, demand) samples; returns the reserved core count after each.
    fn replay(policy: &mut Policy, trace: &[(u64, f64)]) -> Vec<usize> {
        trace
            .iter()
            .map(|&(ms, demand)| {
                policy.observe_demand(ms * MS, demand);
                policy.allocation().training.len()
            })
            .collect()
    }

    /// A window's worth of 100 ms ticks at `demand`, ending at `end_ms`: the estimate is then
    /// `demand` (clamped to the machine).
    fn settle(policy: &mut Policy, end_ms: u64, demand: f64) {
        for ms in (end_ms.saturating_sub(1000)..=end_ms).step_by(100) {
            policy.observe_demand(ms * MS, demand);
        }
    }

    /// 100 ms ticks from `from` (in ticks) to `to`, excluded, at `demand`.
    fn ticks(from: u64, to: u64, demand: f64) -> impl Iterator<Item = (u64, f64)> {
        (from..to).map(move |i| (i * 100, demand))
    }

    #[test]
    fn demand_rise_is_taken_within_half_a_window_and_the_fall_at_once_after_the_hold() {
        let mut policy = Policy::new(config(), Topology::flat(8), pools());
        // 1 s idle, a 3.2-CPU level for 2 s, idle for 6 s.
        let trace: Vec<(u64, f64)> = ticks(0, 10, 0.0)
            .chain(ticks(10, 30, 3.2))
            .chain(ticks(30, 90, 0.0))
            .collect();
        let reserved = replay(&mut policy, &trace);
        assert_eq!(reserved[9], 0, "nothing reserved while idle");
        // The window holds 11 ticks: the sixth at the new level moves the median.
        assert_eq!(reserved[14], 0, "{reserved:?}");
        assert_eq!(reserved[15], 4, "ceil(3.2 + 0.25) cores: {reserved:?}");
        assert!(reserved[15..35].iter().all(|&r| r == 4), "{reserved:?}");
        // The estimate falls half a window after the demand, and the cores go back a hold
        // later, all at once.
        let back = reserved.iter().rposition(|&r| r == 4).unwrap();
        assert!((54..=56).contains(&back), "{reserved:?}");
        assert!(reserved[back + 1..].iter().all(|&r| r == 0), "{reserved:?}");
    }

    #[test]
    fn a_burst_above_the_level_reserves_nothing_for_itself() {
        let mut policy = Policy::new(config(), Topology::flat(16), pools());
        // The server's ResNet-50 job in miniature: a 3-CPU level, bursts of 13 every fourth
        // tick, and a long-slice artefact of 28 once.
        let mut trace: Vec<(u64, f64)> = (0..100)
            .map(|i| (i * 100, if i % 4 == 3 { 13.0 } else { 3.0 }))
            .collect();
        trace[50].1 = 28.1;
        let reserved = replay(&mut policy, &trace);
        assert!(reserved.iter().all(|&r| r == 4), "{reserved:?}");
        assert!(policy.estimate_cpus() <= 16.0);
    }

    #[test]
    fn no_estimate_is_above_the_machine() {
        let mut policy = Policy::new(config(), Topology::flat(16), pools());
        settle(&mut policy, 1000, 28.1);
        assert_eq!(policy.estimate_cpus(), 16.0);
        assert_eq!(policy.allocation().training.len(), 15, "all but web's core");
    }

    #[test]
    fn every_core_comes_back_after_training_stops() {
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        let trace: Vec<(u64, f64)> = ticks(0, 10, 2.5).chain(ticks(10, 60, 0.0)).collect();
        let reserved = replay(&mut policy, &trace);
        assert_eq!(reserved[9], 3);
        assert_eq!(*reserved.last().unwrap(), 0, "a core is held: {reserved:?}");
    }

    #[test]
    fn many_unused_cores_go_back_in_one_step() {
        let mut policy = Policy::new(config(), Topology::flat(16), pools());
        // A level of 8 CPUs, then 2: nine cores, then three, in one decision after the hold.
        settle(&mut policy, 1000, 8.0);
        assert_eq!(policy.allocation().training.len(), 9);
        let decisions: Vec<Decision> = (11..60)
            .filter_map(|i| policy.observe_demand(i * 100 * MS, 2.0))
            .collect();
        assert_eq!(decisions.len(), 1, "{decisions:?}");
        assert_eq!(decisions[0].training_cores_before, 9);
        assert_eq!(decisions[0].training_cores_after, 3);
    }

    #[test]
    fn a_noisy_demand_around_a_core_boundary_does_not_oscillate() {
        let mut policy = Policy::new(config(), Topology::flat(8), pools());
        // Demand alternating 1.7 / 2.9 every 100 ms for 10 s.
        let trace: Vec<(u64, f64)> = (0..100)
            .map(|i| (i * 100, if i % 2 == 0 { 1.7 } else { 2.9 }))
            .collect();
        let reserved = replay(&mut policy, &trace);
        let changes = reserved.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(
            changes <= 2,
            "the grants changed {changes} times: {reserved:?}"
        );
        assert_eq!(*reserved.last().unwrap(), 4);
    }

    #[test]
    fn contention_claims_the_core_at_once_and_holds_it() {
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        policy.observe_demand(0, 0.0);
        let decision = policy.contended(2).expect("a decision");
        assert_eq!(decision.trigger, Trigger::Contended { cpu: 2 });
        assert!(decision.allocation.training.contains(&2));
        assert!(!decision.allocation.pools["batch"].contains(&2));
        assert!(!decision.allocation.pools["web"].contains(&2));
        // The same CPU again changes nothing.
        assert!(policy.contended(2).is_none());
        // Low samples do not give it back within the hold, and do after it.
        let back = (1..40)
            .find(|i| policy.observe_demand(i * 100 * MS, 0.0).is_some())
            .expect("given back");
        assert!((21..=22).contains(&back), "given back after {back} ticks");
        assert!(policy.allocation().training.is_empty());
    }

    #[test]
    fn contentions_spread_over_many_cpus_claim_one_core_above_the_estimate() {
        // The server's case: 16 CPUs, 2 guaranteed to online inference, a job at a level of
        // 3 CPUs whose threads are queued behind inference on every CPU within a second.
        let server_pools = vec![
            PoolSpec {
                name: "web".into(),
                kind: online(2),
            },
            PoolSpec {
                name: "batch".into(),
                kind: PoolKind::Offline,
            },
        ];
        let mut policy = Policy::new(config(), Topology::flat(16), server_pools);
        settle(&mut policy, 1000, 3.0);
        assert_eq!(policy.allocation().training.len(), 4);
        let claimed = (0..16)
            .filter(|&cpu| policy.contended(cpu).is_some())
            .count();
        assert_eq!(claimed, 1, "one core above ceil(3 + 0.25)");
        assert_eq!(policy.allocation().training.len(), 5);
        // With no demand yet, a contention still claims a core, and one more.
        let mut fresh = Policy::new(config(), Topology::flat(16), pools());
        let claimed = (0..16)
            .filter(|&cpu| fresh.contended(cpu).is_some())
            .count();
        assert_eq!(claimed, 2);
    }

    /// For every CPU: whether `contended` would decline there, on a copy of the policy.
    fn declined_cpus(policy: &Policy) -> BTreeSet<u32> {
        policy
            .topology
            .cpus
            .iter()
            .copied()
            .filter(|&cpu| policy.clone().contended(cpu).is_none())
            .collect()
    }

    #[test]
    fn the_sensor_is_quiet_exactly_where_contention_would_change_nothing() {
        // Six cores, one guaranteed to the online pool: training may take five, and the fast
        // path two while the estimate asks for none.
        let mut policy = Policy::new(config(), Topology::flat(6), pools());
        policy.observe_demand(0, 0.0);
        assert!(policy.quiet_cpus().is_empty(), "training holds nothing yet");
        let mut quiet_sizes = Vec::new();
        for cpu in [0, 1] {
            assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
            policy.contended(cpu).expect("a free core is taken");
            quiet_sizes.push(policy.quiet_cpus().len());
        }
        // At the fast path's limit a report from anywhere would change nothing.
        assert_eq!(quiet_sizes, [1, 6]);
        assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
        // A higher estimate raises the limit: the sensor speaks again off training's cores.
        settle(&mut policy, 1000, 2.0);
        assert_eq!(policy.allocation().training.len(), 3);
        assert_eq!(policy.quiet_cpus().len(), 3);
        assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));

        // Every core guaranteed to online pools: no report could ever be acted on.
        let all_online = vec![PoolSpec {
            name: "web".into(),
            kind: online(2),
        }];
        let policy = Policy::new(config(), Topology::flat(2), all_online);
        assert_eq!(policy.quiet_cpus(), BTreeSet::from([0, 1]));
        assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
    }

    #[test]
    fn online_minimum_is_guaranteed_and_offline_keeps_off_training_with_no_free_core() {
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        policy.observe_demand(0, 10.0);
        let allocation = policy.allocation();
        assert_eq!(
            allocation.training.len(),
            3,
            "all but the online pool's guaranteed core"
        );
        assert_eq!(allocation.pools["web"].len(), 1);
        assert!(allocation.pools["web"].is_disjoint(&allocation.training));
        // No free core left: offline shares the online pool's core under cpu.idle, and only
        // that one.
        assert_eq!(allocation.pools["batch"], allocation.pools["web"]);
        // Where the operator chose offline throughput, it shares every core, training's too.
        let sharing = PolicySettings {
            offline_on_training_cores: true,
            ..config()
        };
        let mut shared = Policy::new(sharing, Topology::flat(4), pools());
        shared.observe_demand(0, 10.0);
        assert_eq!(
            shared.allocation().pools["batch"],
            (0..4).collect::<BTreeSet<u32>>()
        );
        // Training holding every core (no online pool): offline shares them all rather than
        // stop, still under cpu.idle.
        let offline_only = pools()
            .into_iter()
            .filter(|pool| pool.kind == PoolKind::Offline)
            .collect();
        let mut everything = Policy::new(config(), Topology::flat(4), offline_only);
        everything.observe_demand(0, 10.0);
        let all_training = everything.allocation();
        assert_eq!(all_training.training.len(), 4);
        assert_eq!(all_training.pools["batch"], all_training.training);
        // Contention on the online pool's own core cannot take it: the guarantee holds.
        let web_cpu = *allocation.pools["web"].iter().next().unwrap();
        assert!(policy.contended(web_cpu).is_none());
        assert_eq!(policy.allocation().pools["web"], allocation.pools["web"]);
    }

    #[test]
    fn offline_shares_the_online_cores_beside_the_free_ones_but_never_trainings() {
        // 16 CPUs, 8 guaranteed to online inference, training on 2: offline gets the 6 free
        // CPUs and the 8 online ones, where the kernel preempts it for online inference.
        let pools = vec![
            PoolSpec {
                name: "web".into(),
                kind: online(8),
            },
            PoolSpec {
                name: "batch".into(),
                kind: PoolKind::Offline,
            },
        ];
        let mut policy = Policy::new(config(), Topology::flat(16), pools);
        policy.observe_demand(0, 1.5);
        let allocation = policy.allocation();
        assert_eq!(allocation.training.len(), 2);
        assert_eq!(allocation.pools["web"].len(), 8);
        let batch = &allocation.pools["batch"];
        assert_eq!(batch.len(), 14);
        assert!(batch.is_superset(&allocation.pools["web"]));
        assert!(batch.is_disjoint(&allocation.training));
    }

    #[test]
    fn an_online_slo_need_takes_free_cores_and_yields_them_to_training_but_not_the_minimum() {
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        policy.observe_demand(0, 0.0);
        assert_eq!(policy.allocation().pools["web"].len(), 1);
        // The workers need 3 cores: web grows to 3, offline keeps the one left (and shares
        // web's under SCHED_IDLE).
        let decision = policy.set_online_need("web", 3).expect("a decision");
        assert_eq!(
            decision.trigger,
            Trigger::OnlineNeed {
                pool: "web".into(),
                cores: 3
            }
        );
        let web = &decision.allocation.pools["web"];
        assert_eq!(web.len(), 3);
        let batch = &decision.allocation.pools["batch"];
        assert_eq!(batch.difference(web).count(), 1, "offline's own core");
        assert!(batch.is_superset(web), "offline does not share web's cores");
        assert!(policy.set_online_need("web", 3).is_none(), "no change");
        // Training wants 2 cores: they come out of web's extra cores, not its minimum.
        settle(&mut policy, 2000, 1.5);
        let allocation = policy.allocation();
        assert_eq!(allocation.training.len(), 2);
        assert_eq!(allocation.pools["web"].len(), 2);
        assert!(allocation.training.is_disjoint(&allocation.pools["web"]));
        // Training wants everything: web keeps its guaranteed core.
        settle(&mut policy, 4000, 10.0);
        let allocation = policy.allocation();
        assert_eq!(allocation.training.len(), 3);
        assert_eq!(allocation.pools["web"].len(), 1);
        // Offline pools state no need; an unknown pool neither.
        assert!(policy.set_online_need("batch", 4).is_none());
        assert!(policy.set_online_need("nope", 4).is_none());
    }

    #[test]
    fn offline_pauses_while_training_is_short_and_resumes_first_after_the_hold() {
        let pausing = PolicySettings {
            pause_offline_when_training_short: true,
            ..config()
        };
        // Two cores, one guaranteed to the online pool: training may reserve one CPU.
        let mut policy = Policy::new(pausing, Topology::flat(2), pools());
        // 1 s at 0.6 CPUs, 2 s at 1.6 (more than the one it may have), then idle.
        let trace: Vec<(u64, f64)> = ticks(0, 10, 0.6)
            .chain(ticks(10, 30, 1.6))
            .chain(ticks(30, 150, 0.0))
            .collect();
        let states: Vec<(usize, bool)> = trace
            .iter()
            .map(|&(ms, demand)| {
                policy.observe_demand(ms * MS, demand);
                let allocation = policy.allocation();
                (allocation.training.len(), allocation.offline_paused)
            })
            .collect();
        assert_eq!(states[9], (1, false), "one core covers 0.6 + 0.25");
        assert_eq!(states[14], (1, false), "{states:?}");
        assert_eq!(
            states[15],
            (1, true),
            "short once the median is: {states:?}"
        );
        let paused_until = states.iter().rposition(|s| s.1).unwrap();
        let core_until = states.iter().rposition(|s| s.0 == 1).unwrap();
        // The pause outlasts the level by half a window and the hold, and goes before the
        // core does, a hold later.
        assert!(paused_until >= 29 + 5 + 20, "{states:?}");
        assert!(core_until >= paused_until + 20, "{states:?}");
        assert_eq!(*states.last().unwrap(), (0, false));
        // The offline pool keeps its CPUs while paused: it resumes where it was.
        let mut short = Policy::new(pausing, Topology::flat(2), pools());
        short.observe_demand(0, 1.6);
        let allocation = short.allocation();
        assert!(allocation.offline_paused);
        assert_eq!(allocation.pools["batch"], allocation.pools["web"]);

        // The same trace without the option never pauses.
        let mut policy = Policy::new(config(), Topology::flat(2), pools());
        assert!(replay(&mut policy, &trace).iter().all(|&cores| cores <= 1));
        assert!(!policy.allocation().offline_paused);
        // Demand that one core covers, with the headroom past it: no pause. Training is short
        // of its headroom, not of CPUs.
        let mut level = Policy::new(pausing, Topology::flat(2), pools());
        settle(&mut level, 1000, 0.95);
        assert_eq!(level.allocation().training.len(), 1);
        assert!(!level.allocation().offline_paused);
        // Training short of no core, with the option: no pause. Four cores, one online:
        // 2.6 + 0.25 wants three, all it may have.
        let mut roomy = Policy::new(pausing, Topology::flat(4), pools());
        roomy.observe_demand(0, 2.6);
        assert_eq!(roomy.allocation().training.len(), 3);
        assert!(!roomy.allocation().offline_paused);
    }

    #[test]
    fn offline_runs_a_duty_cycle_while_training_fits_its_cores_but_not_its_headroom() {
        let pausing = PolicySettings {
            pause_offline_when_training_short: true,
            ..config()
        };
        // Two cores, one online: training may reserve one CPU. At 0.95 CPUs its estimate
        // fits, its 0.25 headroom does not: 0.2 of it is missing, so offline is paused for
        // 80% of each second.
        let mut policy = Policy::new(pausing, Topology::flat(2), pools());
        let mut paused = Vec::new();
        let mut decisions = Vec::new();
        for i in 0..50u64 {
            if let Some(decision) = policy.observe_demand(i * 100 * MS, 0.95) {
                decisions.push(decision);
            }
            paused.push(policy.allocation().offline_paused);
        }
        assert_eq!(policy.allocation().training.len(), 1);
        // In whole ticks of 100 ms: 0.2 s running is two or three of them.
        let share = paused[10..].iter().filter(|&&p| p).count() as f64 / 40.0;
        assert!((0.7..=0.8).contains(&share), "paused {share}: {paused:?}");
        // Runs first in each period, then pauses: a flip each way per second.
        let flips = paused.windows(2).filter(|w| w[0] != w[1]).count();
        assert!((8..=10).contains(&flips), "{flips} flips: {paused:?}");
        assert!(decisions.iter().any(|d| matches!(
            d.trigger,
            Trigger::OfflineDuty { paused_fraction } if (paused_fraction - 0.8).abs() < 1e-9
        )));
        assert!(decisions.iter().all(|d| d.training_cores_after == 1));

        // Where the headroom fits, or training may take more cores, no duty cycle.
        let mut fits = Policy::new(pausing, Topology::flat(2), pools());
        let mut roomy = Policy::new(pausing, Topology::flat(8), pools());
        for i in 0..20u64 {
            fits.observe_demand(i * 100 * MS, 0.7);
            roomy.observe_demand(i * 100 * MS, 0.95);
            assert!(!fits.allocation().offline_paused);
            assert!(!roomy.allocation().offline_paused);
        }
        // Without the pause, none either.
        let mut running = Policy::new(config(), Topology::flat(2), pools());
        for i in 0..20u64 {
            running.observe_demand(i * 100 * MS, 0.95);
            assert!(!running.allocation().offline_paused);
        }
    }

    #[test]
    fn smt_siblings_are_reserved_together() {
        let topology = Topology {
            cpus: (0..4).collect(),
            cores: vec![BTreeSet::from([0, 2]), BTreeSet::from([1, 3])],
        };
        let mut policy = Policy::new(
            config(),
            topology,
            vec![PoolSpec {
                name: "batch".into(),
                kind: PoolKind::Offline,
            }],
        );
        let decision = policy.contended(2).expect("a decision");
        assert_eq!(decision.allocation.training, BTreeSet::from([0, 2]));
        assert_eq!(decision.allocation.pools["batch"], BTreeSet::from([1, 3]));
    }
}
