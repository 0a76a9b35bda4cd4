//! Who gets which cores: a pure module, driven by the sensor's signals and unit-tested on
//! recorded traces (no kernel, no cgroups).
//!
//! - Training's CPU demand is estimated with fast attack and slow decay: a rise is taken at
//!   once, a fall only as an exponential average with a configurable half-life.
//! - Training gets whole physical cores (SMT siblings together), enough for its estimate plus a
//!   headroom. A CPU where a training thread was just queued behind inference joins training's
//!   reservation at once (the fast path).
//! - Cores go back only after the estimate has stayed below the reservation for
//!   `give_back_after`, one core per period (hysteresis: the grants do not oscillate).
//! - Online pools keep their guaranteed minimum of cores even against training. Beyond it
//!   they get the cores their workers say their SLO needs at the current load, from the cores
//!   training leaves free (training comes first); offline pools get the rest and share the
//!   online pools' cores, under SCHED_IDLE (`cpu.idle`), where the kernel preempts them at
//!   every wakeup of online inference or of a training thread placed there. They share
//!   training's reserved cores only where training holds every core (or where
//!   `offline_on_training_cores` says so).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

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
    /// Offline pools are paused: training wants more cores than it may reserve. They keep
    /// their CPUs above, to resume on.
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
    /// The workers of online pool `pool` need `cores` cores for their SLO at their load.
    OnlineNeed { pool: String, cores: usize },
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
/// housekeeping threads use.
const IDLE_DEMAND_CPUS: f64 = 0.02;

#[derive(Clone)]
pub struct Policy {
    config: PolicySettings,
    topology: Topology,
    pools: Vec<PoolSpec>,
    /// Demand estimate, CPUs.
    estimate: f64,
    last_sample_ns: Option<u64>,
    /// Indexes into `topology.cores` reserved for training, in the order they were taken.
    training: Vec<usize>,
    /// Offline pools paused for training (`pause_offline_when_training_short`).
    offline_paused: bool,
    /// Since when the estimate has wanted less than training holds (fewer cores, or no pause).
    low_since_ns: Option<u64>,
    /// Cores each online pool's workers need for their SLO, where they said so.
    online_need: BTreeMap<String, usize>,
}

impl Policy {
    pub fn new(config: PolicySettings, topology: Topology, pools: Vec<PoolSpec>) -> Self {
        Self {
            config,
            topology,
            pools,
            estimate: 0.0,
            last_sample_ns: None,
            training: Vec::new(),
            offline_paused: false,
            low_since_ns: None,
            online_need: BTreeMap::new(),
        }
    }

    pub fn estimate_cpus(&self) -> f64 {
        self.estimate
    }

    /// Cores online pools are guaranteed, which training may not take.
    fn guaranteed_online_cores(&self) -> usize {
        self.pools.iter().map(|p| min_cores(&p.kind)).sum()
    }

    /// CPUs where a report of training queued behind inference would change nothing, so that
    /// the sensor does not send it: the cores training holds, and every CPU once training holds
    /// all the cores the online minimums leave it (`contended` declines exactly these). Each
    /// report wakes the real-time event thread, which preempts whoever runs, often the training
    /// thread just queued, so a report that can change nothing only costs training.
    pub fn quiet_cpus(&self) -> BTreeSet<u32> {
        if self.training.len() >= self.max_training_cores() {
            return self.topology.cpus.clone();
        }
        self.allocation().training
    }

    fn max_training_cores(&self) -> usize {
        self.topology
            .cores
            .len()
            .saturating_sub(self.guaranteed_online_cores())
    }

    /// Whole cores needed for the estimate plus headroom, and whether offline pools are to
    /// pause because that is more than training may reserve.
    /// An estimate below `IDLE_DEMAND_CPUS` is no demand: the exponential decay never reaches
    /// zero exactly, and with the headroom any positive estimate would hold a core for ever.
    fn wanted(&self) -> Wanted {
        let threads_per_core = self.topology.threads_per_core();
        let cpus = self.estimate + self.config.headroom_cpus;
        let cores = if self.estimate < IDLE_DEMAND_CPUS {
            0
        } else {
            (cpus / threads_per_core).ceil() as usize
        };
        let max = self.max_training_cores();
        Wanted {
            cores: cores.min(max),
            offline_paused: self.config.pause_offline_when_training_short && cores > max,
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
    /// training's reservation now, if the online guarantees leave room.
    pub fn contended(&mut self, now_ns: u64, cpu: u32) -> Option<Decision> {
        let core = self.topology.cores.iter().position(|c| c.contains(&cpu))?;
        if self.training.contains(&core) || self.training.len() >= self.max_training_cores() {
            return None;
        }
        let before = self.training.len();
        self.training.push(core);
        self.low_since_ns = None;
        // The estimate must cover what was just granted, or the slow path would take it back.
        let threads_per_core = self.topology.threads_per_core();
        let covered =
            (self.training.len() as f64 * threads_per_core - self.config.headroom_cpus).max(0.0);
        self.estimate = self.estimate.max(covered);
        let _ = now_ns;
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

    /// Slow path: a new demand sample (average CPUs runnable or running over the last
    /// interval). Grows the reservation at once, shrinks it after the hold time.
    pub fn observe_demand(&mut self, now_ns: u64, demand_cpus: f64) -> Option<Decision> {
        let demand_cpus = demand_cpus.max(0.0);
        let dt = self.last_sample_ns.map_or(0, |t| now_ns.saturating_sub(t));
        self.last_sample_ns = Some(now_ns);
        if demand_cpus >= self.estimate {
            self.estimate = demand_cpus;
        } else {
            let half_lives = dt as f64 / self.config.demand_half_life_ns.max(1) as f64;
            let keep = 0.5f64.powf(half_lives);
            self.estimate = self.estimate * keep + demand_cpus * (1.0 - keep);
        }
        let wanted = self.wanted();
        let before = self.training.len();
        if wanted.steps() > self.held_steps() {
            let free: Vec<usize> = (0..self.topology.cores.len())
                .filter(|c| !self.training.contains(c))
                .collect();
            let grow = wanted.cores.saturating_sub(before);
            self.training.extend(free.into_iter().take(grow));
            self.offline_paused |= wanted.offline_paused;
            self.low_since_ns = None;
            return Some(self.decision(
                Trigger::DemandRose {
                    estimate_cpus: self.estimate,
                },
                before,
            ));
        }
        if wanted.steps() == self.held_steps() {
            self.low_since_ns = None;
            return None;
        }
        match self.low_since_ns {
            None => {
                self.low_since_ns = Some(now_ns);
                None
            }
            Some(since) if now_ns.saturating_sub(since) >= self.config.give_back_after_ns => {
                // Resume offline first, then give back the core taken longest ago, each after
                // a full period.
                if self.offline_paused {
                    self.offline_paused = false;
                } else {
                    self.training.remove(0);
                }
                self.low_since_ns = Some(now_ns);
                Some(self.decision(
                    Trigger::DemandFell {
                        estimate_cpus: self.estimate,
                    },
                    before,
                ))
            }
            Some(_) => None,
        }
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
            offline_paused: self.offline_paused,
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
            demand_half_life_ns: 1000 * MS,
            give_back_after_ns: 2000 * MS,
            headroom_cpus: 0.25,
            offline_on_training_cores: false,
            pause_offline_when_training_short: false,
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

    /// Replays (time ms, demand) samples every 100 ms; returns the reserved core count after each.
    fn replay(policy: &mut Policy, trace: &[(u64, f64)]) -> Vec<usize> {
        trace
            .iter()
            .map(|&(ms, demand)| {
                policy.observe_demand(ms * MS, demand);
                policy.allocation().training.len()
            })
            .collect()
    }

    #[test]
    fn demand_rise_is_taken_at_once_and_fall_only_after_the_hold() {
        let mut policy = Policy::new(config(), Topology::flat(8), pools());
        // 1 s idle, then a training step burst of 3.2 CPUs for 1 s, then idle for 6 s.
        let mut trace: Vec<(u64, f64)> = (0..10).map(|i| (i * 100, 0.0)).collect();
        trace.extend((10..20).map(|i| (i * 100, 3.2)));
        trace.extend((20..80).map(|i| (i * 100, 0.0)));
        let reserved = replay(&mut policy, &trace);
        assert_eq!(reserved[9], 0, "nothing reserved while idle");
        assert_eq!(
            reserved[10], 4,
            "ceil(3.2 + 0.25) cores at the first sample"
        );
        assert!(reserved[10..20].iter().all(|&r| r == 4));
        // Nothing goes back within the 2 s hold after demand fell.
        assert!(
            reserved[20..40].iter().all(|&r| r == 4),
            "{:?}",
            &reserved[20..40]
        );
        // Then one core per hold period, never growing again, until nothing is left.
        let tail = &reserved[40..];
        assert!(tail.windows(2).all(|w| w[1] <= w[0]), "{tail:?}");
        assert!(*tail.last().unwrap() < 4);
    }

    #[test]
    fn every_core_comes_back_after_training_stops() {
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        let mut trace: Vec<(u64, f64)> = (0..10).map(|i| (i * 100, 2.5)).collect();
        trace.extend((10..400).map(|i| (i * 100, 0.0)));
        let reserved = replay(&mut policy, &trace);
        assert_eq!(reserved[9], 3);
        assert_eq!(
            *reserved.last().unwrap(),
            0,
            "a core is held for ever: {:?}",
            &reserved[300..]
        );
    }

    #[test]
    fn a_noisy_demand_around_a_core_boundary_does_not_oscillate() {
        let mut policy = Policy::new(config(), Topology::flat(8), pools());
        // Demand alternating 1.7 / 2.9 every 100 ms for 10 s: the estimate rides the peaks.
        let trace: Vec<(u64, f64)> = (0..100)
            .map(|i| (i * 100, if i % 2 == 0 { 1.7 } else { 2.9 }))
            .collect();
        let reserved = replay(&mut policy, &trace);
        let changes = reserved.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(
            changes <= 1,
            "the grants changed {changes} times: {reserved:?}"
        );
        assert_eq!(*reserved.last().unwrap(), 4);
    }

    #[test]
    fn contention_claims_the_core_at_once_and_the_slow_path_keeps_it() {
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        policy.observe_demand(0, 0.0);
        let decision = policy.contended(100 * MS, 2).expect("a decision");
        assert_eq!(decision.trigger, Trigger::Contended { cpu: 2 });
        assert!(decision.allocation.training.contains(&2));
        assert!(!decision.allocation.pools["batch"].contains(&2));
        assert!(!decision.allocation.pools["web"].contains(&2));
        // The same CPU again changes nothing.
        assert!(policy.contended(101 * MS, 2).is_none());
        // A low sample right after does not give it back.
        assert!(policy.observe_demand(200 * MS, 0.5).is_none());
        assert!(policy.allocation().training.contains(&2));
    }

    /// For every CPU: whether `contended` would decline there, on a copy of the policy.
    fn declined_cpus(policy: &Policy) -> BTreeSet<u32> {
        policy
            .topology
            .cpus
            .iter()
            .copied()
            .filter(|&cpu| policy.clone().contended(0, cpu).is_none())
            .collect()
    }

    #[test]
    fn the_sensor_is_quiet_exactly_where_contention_would_change_nothing() {
        // Four cores, one guaranteed to the online pool: training may take three.
        let mut policy = Policy::new(config(), Topology::flat(4), pools());
        policy.observe_demand(0, 0.0);
        assert!(policy.quiet_cpus().is_empty(), "training holds nothing yet");
        let mut quiet_sizes = Vec::new();
        for cpu in [0, 1, 2] {
            assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
            policy.contended(MS, cpu).expect("a free core is taken");
            quiet_sizes.push(policy.quiet_cpus().len());
        }
        // Training holds its three cores: a report from anywhere, the online core included,
        // would change nothing.
        assert_eq!(quiet_sizes, [1, 2, 4]);
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
        assert!(policy.contended(MS, web_cpu).is_none());
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
        policy.observe_demand(100 * MS, 1.5);
        let allocation = policy.allocation();
        assert_eq!(allocation.training.len(), 2);
        assert_eq!(allocation.pools["web"].len(), 2);
        assert!(allocation.training.is_disjoint(&allocation.pools["web"]));
        // Training wants everything: web keeps its guaranteed core.
        policy.observe_demand(200 * MS, 10.0);
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
        // Two cores, one guaranteed to the online pool: training may reserve one.
        let mut policy = Policy::new(pausing, Topology::flat(2), pools());
        // 1 s at 0.6 CPUs (one core is enough), 2 s at 1.6 (more than the one it may have),
        // then idle.
        let mut trace: Vec<(u64, f64)> = (0..10).map(|i| (i * 100, 0.6)).collect();
        trace.extend((10..30).map(|i| (i * 100, 1.6)));
        trace.extend((30..150).map(|i| (i * 100, 0.0)));
        let states: Vec<(usize, bool)> = trace
            .iter()
            .map(|&(ms, demand)| {
                policy.observe_demand(ms * MS, demand);
                let allocation = policy.allocation();
                (allocation.training.len(), allocation.offline_paused)
            })
            .collect();
        assert_eq!(states[9], (1, false), "one core covers 0.6 + 0.25");
        assert_eq!(
            states[10],
            (1, true),
            "short of cores: paused at the first sample"
        );
        let paused_until = states.iter().rposition(|s| s.1).unwrap();
        let core_until = states.iter().rposition(|s| s.0 == 1).unwrap();
        // The pause outlasts the burst by at least the hold, and goes before the core does,
        // a hold later.
        assert!(paused_until >= 29 + 20, "{states:?}");
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
        policy.observe_demand(0, 1.6);
        assert!(!policy.allocation().offline_paused);
        // Training short of no core, with the option: no pause. Four cores, one online:
        // 2.6 + 0.25 wants three, all it may have.
        let mut roomy = Policy::new(pausing, Topology::flat(4), pools());
        roomy.observe_demand(0, 2.6);
        assert_eq!(roomy.allocation().training.len(), 3);
        assert!(!roomy.allocation().offline_paused);
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
        let decision = policy.contended(0, 2).expect("a decision");
        assert_eq!(decision.allocation.training, BTreeSet::from([0, 2]));
        assert_eq!(decision.allocation.pools["batch"], BTreeSet::from([1, 3]));
    }
}
