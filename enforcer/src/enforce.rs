//! Applying the policy to the pools' cgroups: the fast path (a sensor event names a contended
//! CPU) and the slow path (a periodic demand sample), each decision logged as a JSON line with
//! the time from the kernel event to the completed cgroup write.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    io::Write as _,
    path::{Path, PathBuf},
};

use enforcer_common::{
    EVENT_ENQUEUED_BEHIND_INFERENCE, EVENT_PREEMPTED_BY_INFERENCE, SensorEvent,
    histogram::{NR_BUCKETS, bucket_of},
};
use serde::Serialize;
use tracing::{info, warn};

use crate::{
    cgroups::PoolCgroup,
    config::{Config, PoolKind as ConfigPoolKind},
    control::Grant,
    online_weight::{TailReport, WeightChange, WeightSteering},
    policy::{Allocation, Decision, Policy, PolicyConfig, PoolKind, PoolSpec},
    sensor::snapshot::{monotonic_ns, percentile},
    topology::{Topology, format_cpu_list},
};

/// When the sensor event behind a fast-path decision happened and when the event thread read
/// it, both CLOCK_MONOTONIC (the kernel's `bpf_ktime_get_ns` is the same clock).
#[derive(Debug, Clone, Copy)]
struct EventTiming {
    ts_ns: u64,
    read_ns: u64,
}

/// Recent decisions (allocations and weight changes) kept for `status`.
const RECENT_DECISIONS: usize = 32;
/// One logged decision.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    /// CLOCK_MONOTONIC when the cgroup writes completed.
    pub at_ns: u64,
    #[serde(flatten)]
    pub decision: Decision,
    /// Pools whose CPUs were rewritten.
    pub rewritten: Vec<String>,
    /// Offline pools frozen by this decision, and those thawed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paused: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<String>,
    /// From the sensor event's timestamp to the last cgroup write done (fast path only).
    pub event_to_write_ns: Option<u64>,
    /// The first part of it: from the event's timestamp to the event thread reading it, which
    /// is the ring buffer's wakeup of the sleeping thread (fast path only).
    pub event_to_read_ns: Option<u64>,
}

/// What `status` shows of enforcement.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct EnforcementStatus {
    pub enforcing: bool,
    pub training_cpus: String,
    pub demand_estimate_cpus: f64,
    /// Pool → (kind, CPUs in its cpuset now, processes).
    pub pools: Vec<PoolStatus>,
    pub reactions: u64,
    pub event_to_write_p50_ns: Option<u64>,
    pub event_to_write_p99_ns: Option<u64>,
    /// The event-to-write histogram (sensor bucket layout) and its sum, for /metrics.
    #[serde(default)]
    pub event_to_write_hist: Vec<u64>,
    #[serde(default)]
    pub event_to_write_sum_ns: u64,
    pub recent_decisions: Vec<serde_json::Value>,
    /// From the kernel event to the waiting training thread's next switch-in, over all jobs
    /// (aggregated by the sensor).
    #[serde(default)]
    pub event_to_ran_p50_ns: Option<u64>,
    #[serde(default)]
    pub event_to_ran_p99_ns: Option<u64>,
    #[serde(default)]
    pub event_to_ran_hist: Vec<u64>,
    #[serde(default)]
    pub event_to_ran_sum_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub name: String,
    pub kind: String,
    pub cpus: String,
    pub processes: Vec<u32>,
    /// Workers subscribed to the pool's grants, whose connection is still open.
    #[serde(default)]
    pub subscribers: usize,
    /// CPUs its workers said their SLO needs (online pools; 0 where none said).
    #[serde(default)]
    pub need_cpus: usize,
    /// Online pools: the CPU weight against training's 100 now, between `min_cpu_weight`
    /// and `[[pool]] cpu_weight`, steered by the workers' latency tail.
    #[serde(default)]
    pub cpu_weight: Option<u32>,
    /// Online pools whose weight is steered: the lowest it goes (`[[pool]] min_cpu_weight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_cpu_weight: Option<u32>,
    /// Offline pools: frozen now because training is short of cores
    /// (`[policy] pause_offline_when_training_short`).
    #[serde(default)]
    pub paused: bool,
}

/// What one allocation's cgroup writes did, pool by pool.
#[derive(Default)]
struct Written {
    rewritten: Vec<String>,
    paused: Vec<String>,
    resumed: Vec<String>,
}

/// A logged change of an online pool's weight: what the decision log and `status` show.
#[derive(Debug, Clone, Serialize)]
struct WeightRecord<'a> {
    at_ns: u64,
    pool: &'a str,
    from: u32,
    to: u32,
    /// The pool's tail: the highest of its workers' latest p99 over their SLO.
    tail_over_slo: f64,
    /// The report that made the change.
    pid: u32,
    p99_us: u64,
    slo_us: u64,
}

pub struct Enforcer {
    instance: String,
    enforcing: bool,
    policy: Policy,
    topology: Topology,
    pools: BTreeMap<String, (PoolKind, PoolCgroup)>,
    applied: BTreeMap<String, BTreeSet<u32>>,
    /// Offline pools whose freezer the CPU policy may use to pause them: not the GPU pools,
    /// whose freezer the GPU duty cycle owns.
    pausable: BTreeSet<String>,
    /// The pools frozen now by the policy's pause.
    paused: BTreeSet<String>,
    /// Serialized `DecisionRecord`s and `{"weight": WeightRecord}`s, oldest first.
    recent: VecDeque<serde_json::Value>,
    log: Option<std::fs::File>,
    /// Event-to-write latency histogram (shared bucket layout with the sensor) and its sum.
    reaction_hist: Vec<u64>,
    reaction_sum_ns: u64,
    /// Last (time, training run+wait total) for the demand rate.
    last_demand: Option<(u64, u64)>,
    /// The sensor's `reserved_cpus` map (the CPUs where it sends no contention report) and
    /// what was last published in it.
    reserved_map: Option<aya::maps::Array<aya::maps::MapData, u32>>,
    published: BTreeSet<u32>,
    /// Workers subscribed to each pool's grants.
    subscribers: BTreeMap<String, Vec<tokio::sync::mpsc::UnboundedSender<Grant>>>,
    /// CPUs each worker of an online pool said its SLO needs: pool → pid → CPUs.
    needs: BTreeMap<String, BTreeMap<u32, usize>>,
    /// Each online pool's CPU weight, steered by its workers' latency reports.
    steering: BTreeMap<String, WeightSteering>,
}

impl Enforcer {
    /// Creates (or adopts) the pools' cgroups and applies the initial allocation.
    pub fn new(
        config: &Config,
        instance: &str,
        decision_log: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let topology = Topology::detect().map_err(anyhow::Error::msg)?;
        let mut specs = Vec::new();
        let mut pools = BTreeMap::new();
        let mut steering = BTreeMap::new();
        let mut pausable = BTreeSet::new();
        for pool in &config.pool {
            let name = pool.name.get_ref().clone();
            if pool.pool_kind() == ConfigPoolKind::Offline && !pool.uses_gpu() {
                pausable.insert(name.clone());
            }
            let kind = match pool.pool_kind() {
                ConfigPoolKind::Online => {
                    steering.insert(
                        name.clone(),
                        WeightSteering::new(pool.cpu_weight(), pool.min_cpu_weight()),
                    );
                    PoolKind::Online {
                        min_cores: pool.min_cores(),
                    }
                }
                ConfigPoolKind::Offline => PoolKind::Offline,
            };
            let cgroup = PoolCgroup::create_or_adopt(instance, &name, pool.cpu_class())?;
            if let (Some(steering), Some(left)) = (steering.get_mut(&name), cgroup.adopted_weight())
            {
                // An observe-only daemon steers nothing: it holds the configured weight.
                let resumed = if config.policy.enforce {
                    steering.resume_at(left)
                } else {
                    steering.weight()
                };
                if resumed != left {
                    cgroup.set_weight(resumed)?;
                }
                info!(
                    pool = name.as_str(),
                    left,
                    resumed,
                    "adopted pool: the weight a previous daemon left, and the one held from now"
                );
            }
            specs.push(PoolSpec {
                name: name.clone(),
                kind: kind.clone(),
            });
            pools.insert(name, (kind, cgroup));
        }
        if !pools.is_empty() {
            crate::cgroups::set_tree_idle(true)?;
        }
        let pause = config.policy.pause_offline_when_training_short;
        if pause && pausable.is_empty() {
            info!(
                "pause_offline_when_training_short has no pool to pause: no offline pool, or \
                 only ones with gpu = true, which the GPU duty cycle gates"
            );
        }
        let policy_config = PolicyConfig {
            demand_half_life_ns: config.policy.demand_half_life_ms.saturating_mul(1_000_000),
            give_back_after_ns: config.policy.give_back_after_ms.saturating_mul(1_000_000),
            headroom_cpus: config.policy.headroom_cpus,
            offline_on_training_cores: config.policy.offline_on_training_cores,
            pause_offline_when_training_short: pause && !pausable.is_empty(),
        };
        let log = match decision_log {
            None => None,
            Some(path) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| anyhow::anyhow!("opening decision log {}: {e}", path.display()))?,
            ),
        };
        let mut enforcer = Self {
            instance: instance.to_owned(),
            enforcing: config.policy.enforce,
            policy: Policy::new(policy_config, topology.clone(), specs),
            topology,
            pools,
            applied: BTreeMap::new(),
            pausable,
            paused: BTreeSet::new(),
            recent: VecDeque::new(),
            log,
            reaction_hist: vec![0; NR_BUCKETS],
            reaction_sum_ns: 0,
            last_demand: None,
            subscribers: BTreeMap::new(),
            needs: BTreeMap::new(),
            steering,
            reserved_map: None,
            published: BTreeSet::new(),
        };
        let initial = enforcer.policy.allocation();
        enforcer.write(&initial);
        Ok(enforcer)
    }

    /// Subscribes a worker of `pool` (a process with pid `pid`) to its grants; the current
    /// grant is sent at once. Refused unless the process is in the pool's cgroup.
    pub fn subscribe(
        &mut self,
        pool: &str,
        pid: u32,
        worker: tokio::sync::mpsc::UnboundedSender<Grant>,
    ) -> Result<(), String> {
        let (_, cgroup) = self
            .pools
            .get(pool)
            .ok_or_else(|| format!("no pool {pool:?}"))?;
        if !cgroup.processes().contains(&pid) {
            return Err(format!(
                "process {pid} is not in pool {pool:?}: a worker may only subscribe for its own \
                 pool (start it with `enforcer launch --pool {pool} -- ...`)"
            ));
        }
        let cpus = self
            .applied
            .get(pool)
            .cloned()
            .unwrap_or_else(|| self.topology.cpus.clone());
        let grant = Grant {
            pool: pool.to_owned(),
            cpus: cpus.into_iter().collect(),
            shrinking: false,
            paused: self.paused.contains(pool),
        };
        worker
            .send(grant)
            .map_err(|_| "worker went away".to_owned())?;
        let workers = self.subscribers.entry(pool.to_owned()).or_default();
        workers.retain(|w| !w.is_closed());
        workers.push(worker);
        Ok(())
    }

    /// Worker `pid` of `pool` needs `cpus` CPUs for its SLO (None: it went away). The pool's
    /// need, summed over its workers and rounded up to whole cores, goes to the policy; an
    /// offline pool has no SLO and gets what is left, so its workers' needs are only logged.
    pub fn set_need(&mut self, pool: &str, pid: u32, cpus: Option<usize>) {
        let online = matches!(self.pools.get(pool), Some((PoolKind::Online { .. }, _)));
        if !online {
            if let Some(cpus) = cpus {
                info!(
                    pool,
                    pid, cpus, "need noted, not granted: an offline pool gets what is left"
                );
            }
            return;
        }
        let needs = self.needs.entry(pool.to_owned()).or_default();
        let changed = match cpus {
            Some(cpus) => needs.insert(pid, cpus) != Some(cpus),
            None => needs.remove(&pid).is_some(),
        };
        if !changed {
            return;
        }
        // Saturating: a worker may claim any number; the policy caps it at the free cores.
        let total = needs.values().fold(0usize, |sum, n| sum.saturating_add(*n));
        let threads_per_core = (self.topology.cpus.len() / self.topology.cores.len().max(1)).max(1);
        let cores = total.div_ceil(threads_per_core);
        info!(
            pool,
            pid,
            ?cpus,
            pool_cores = cores,
            "online pool's SLO need"
        );
        if let Some(decision) = self.policy.set_online_need(pool, cores) {
            self.apply(decision, None);
        }
    }

    /// Worker `pid` of `pool` reported its latency tail over the last period: the pool's
    /// weight moves by it (`online_weight`), and a change is written, logged and kept for
    /// `status`. Offline pools and observe-only daemons ignore it.
    pub fn set_latency(&mut self, pool: &str, pid: u32, report: &TailReport, now_ns: u64) {
        if !self.enforcing {
            return;
        }
        let Some(steering) = self.steering.get_mut(pool).filter(|s| s.steers()) else {
            return;
        };
        let Some(change) = steering.report(pid, report, now_ns) else {
            return;
        };
        self.apply_weight(pool, pid, report, change);
    }

    /// Worker `pid` of `pool` went away: its need and its latency tail no longer count.
    pub fn worker_gone(&mut self, pool: &str, pid: u32) {
        self.set_need(pool, pid, None);
        if let Some(steering) = self.steering.get_mut(pool) {
            steering.forget(pid);
        }
    }

    fn apply_weight(&mut self, pool: &str, pid: u32, report: &TailReport, change: WeightChange) {
        let Some((_, cgroup)) = self.pools.get(pool) else {
            return;
        };
        if let Err(err) = cgroup.set_weight(change.to) {
            // A cgroup removed underneath us: say so, keep serving the other pools.
            warn!("pool {pool}: {err}");
            return;
        }
        let record = WeightRecord {
            at_ns: monotonic_ns(),
            pool,
            from: change.from,
            to: change.to,
            tail_over_slo: change.tail_over_slo,
            pid,
            p99_us: report.p99_us,
            slo_us: report.slo_us,
        };
        info!(
            pool,
            from = change.from,
            to = change.to,
            tail_over_slo = format!("{:.2}", change.tail_over_slo),
            "online pool's CPU weight changed"
        );
        self.record(serde_json::json!({ "weight": record }));
    }

    /// Appends a decision to the decision log and to what `status` shows.
    fn record(&mut self, value: serde_json::Value) {
        if let Some(log) = &mut self.log {
            // A full disk must not stop enforcement; the decision is still applied and kept.
            let _ = writeln!(log, "{value}");
        }
        if self.recent.len() == RECENT_DECISIONS {
            self.recent.pop_front();
        }
        self.recent.push_back(value);
    }

    /// Hands the enforcer the sensor's `reserved_cpus` map, where it publishes the CPUs whose
    /// contention reports would change nothing (`Policy::quiet_cpus`).
    pub fn set_reserved_map(&mut self, map: aya::maps::Array<aya::maps::MapData, u32>) {
        self.reserved_map = Some(map);
        if self.enforcing {
            self.publish_quiet_cpus();
        }
    }

    /// Tells the sensor where to stay quiet (only the changes), after the cgroup writes: where
    /// training holds the CPU, or holds all the cores it may, the enforcer has nothing to do.
    fn publish_quiet_cpus(&mut self) {
        let Some(map) = &mut self.reserved_map else {
            return;
        };
        let quiet = self.policy.quiet_cpus();
        for &cpu in self.published.symmetric_difference(&quiet) {
            if let Err(err) = map.set(cpu, u32::from(quiet.contains(&cpu)), 0) {
                warn!("publishing quiet CPU {cpu}: {err}");
            }
        }
        self.published = quiet;
    }

    /// Moves process `pid` into pool `name`'s cgroup.
    pub fn add_process(&self, pool: &str, pid: u32) -> anyhow::Result<()> {
        let (_, cgroup) = self
            .pools
            .get(pool)
            .ok_or_else(|| anyhow::anyhow!("no pool {pool:?}"))?;
        Ok(cgroup.add_process(pid)?)
    }

    /// Each pool's name and the directory listing its threads: every thread in a pool's
    /// cgroup is a member, whoever put it there and whichever daemon did.
    pub fn pool_member_dirs(&self) -> Vec<(String, PathBuf)> {
        self.pools
            .iter()
            .filter_map(|(name, (_, cgroup))| Some((name.clone(), cgroup.member_dir()?)))
            .collect()
    }

    /// Writes the pools whose CPUs or pause changed. Their workers hear of it first.
    fn write(&mut self, allocation: &Allocation) -> Written {
        let mut written = Written::default();
        if !self.enforcing {
            return written;
        }
        for (name, cpus) in &allocation.pools {
            let paused = allocation.offline_paused && self.pausable.contains(name);
            let cpus_changed = self.applied.get(name) != Some(cpus);
            let pause_changed = self.paused.contains(name) != paused;
            if !cpus_changed && !pause_changed {
                continue;
            }
            let Some((_, cgroup)) = self.pools.get(name) else {
                continue;
            };
            // Workers hear of a shrink before the cgroup holds them to it.
            let shrinking = self
                .applied
                .get(name)
                .is_some_and(|old| !cpus.is_superset(old));
            let grant = Grant {
                pool: name.clone(),
                cpus: cpus.iter().copied().collect(),
                shrinking,
                paused,
            };
            if let Some(subscribers) = self.subscribers.get_mut(name) {
                subscribers.retain(|worker| worker.send(grant.clone()).is_ok());
            }
            if cpus_changed {
                match cgroup.set_cpus(cpus) {
                    Ok(()) => {
                        self.applied.insert(name.clone(), cpus.clone());
                        written.rewritten.push(name.clone());
                    }
                    // A cgroup removed underneath us: say so, keep serving the others.
                    Err(err) => warn!("pool {name}: {err}"),
                }
            }
            if pause_changed {
                match cgroup.set_frozen(paused) {
                    Ok(()) if paused => {
                        self.paused.insert(name.clone());
                        written.paused.push(name.clone());
                    }
                    Ok(()) => {
                        self.paused.remove(name);
                        written.resumed.push(name.clone());
                    }
                    Err(err) => warn!("pool {name}: {err}"),
                }
            }
        }
        written
    }

    fn apply(&mut self, decision: Decision, event: Option<EventTiming>) {
        let written = self.write(&decision.allocation);
        let at_ns = monotonic_ns();
        if self.enforcing {
            self.publish_quiet_cpus();
        }
        let event_to_write_ns = event.map(|e| at_ns.saturating_sub(e.ts_ns));
        let event_to_read_ns = event.map(|e| e.read_ns.saturating_sub(e.ts_ns));
        if let Some(ns) = event_to_write_ns {
            self.reaction_hist[bucket_of(ns)] += 1;
            self.reaction_sum_ns += ns;
        }
        let record = DecisionRecord {
            at_ns,
            decision,
            rewritten: written.rewritten,
            paused: written.paused,
            resumed: written.resumed,
            event_to_write_ns,
            event_to_read_ns,
        };
        info!(
            training = %format_cpu_list(&record.decision.allocation.training),
            offline_paused = record.decision.allocation.offline_paused,
            event_to_write_ns = ?record.event_to_write_ns,
            "allocation changed"
        );
        if let Ok(value) = serde_json::to_value(&record) {
            self.record(value);
        }
    }

    /// Fast path: a sensor event, read from the ring buffer at `read_ns` (CLOCK_MONOTONIC).
    pub fn on_event(&mut self, event: &SensorEvent, read_ns: u64) {
        if event.kind != EVENT_ENQUEUED_BEHIND_INFERENCE
            && event.kind != EVENT_PREEMPTED_BY_INFERENCE
        {
            return;
        }
        if let Some(decision) = self.policy.contended(event.ts_ns, event.cpu) {
            let timing = EventTiming {
                ts_ns: event.ts_ns,
                read_ns,
            };
            self.apply(decision, Some(timing));
        }
    }

    /// Slow path: `run_wait_ns` is the total run + wait time of all training jobs so far.
    pub fn on_tick(&mut self, now_ns: u64, run_wait_ns: u64) {
        let Some((then, before)) = self.last_demand.replace((now_ns, run_wait_ns)) else {
            return;
        };
        if now_ns <= then {
            return;
        }
        let demand = run_wait_ns.saturating_sub(before) as f64 / (now_ns - then) as f64;
        if let Some(decision) = self.policy.observe_demand(now_ns, demand) {
            self.apply(decision, None);
        }
    }

    pub fn status(&self) -> EnforcementStatus {
        let pools = self
            .pools
            .iter()
            .map(|(name, (kind, cgroup))| PoolStatus {
                name: name.clone(),
                kind: match kind {
                    PoolKind::Online { .. } => "online".to_owned(),
                    PoolKind::Offline => "offline".to_owned(),
                },
                cpus: cgroup.cpus().unwrap_or_else(|| "?".to_owned()),
                processes: cgroup.processes(),
                subscribers: self.subscribers.get(name).map_or(0, |workers| {
                    workers.iter().filter(|w| !w.is_closed()).count()
                }),
                need_cpus: self.needs.get(name).map_or(0, |needs| {
                    needs.values().fold(0usize, |sum, n| sum.saturating_add(*n))
                }),
                // Every online pool has a steering, fixed or not; offline pools have no weight.
                cpu_weight: self.steering.get(name).map(WeightSteering::weight),
                min_cpu_weight: self
                    .steering
                    .get(name)
                    .filter(|s| s.steers())
                    .map(WeightSteering::floor),
                paused: self.paused.contains(name),
            })
            .collect();
        EnforcementStatus {
            enforcing: self.enforcing,
            training_cpus: format_cpu_list(&self.policy.allocation().training),
            demand_estimate_cpus: self.policy.estimate_cpus(),
            pools,
            reactions: self.reaction_hist.iter().sum(),
            event_to_write_p50_ns: percentile(&self.reaction_hist, 0.5),
            event_to_write_p99_ns: percentile(&self.reaction_hist, 0.99),
            event_to_write_hist: self.reaction_hist.clone(),
            // Filled by the daemon from the sensor's per-job histograms.
            event_to_ran_p50_ns: None,
            event_to_ran_p99_ns: None,
            event_to_ran_hist: Vec::new(),
            event_to_ran_sum_ns: 0,
            event_to_write_sum_ns: self.reaction_sum_ns,
            recent_decisions: self.recent.iter().cloned().collect(),
        }
    }

    /// Leaves every inference process runnable on every CPU, unfrozen, at normal priority;
    /// removes pool cgroups that are empty (the others stay for a restarted daemon to adopt).
    pub fn shutdown(&self) {
        for (name, (_, cgroup)) in &self.pools {
            if let Err(err) = cgroup.release(&self.topology.cpus) {
                warn!("pool {name}: releasing at shutdown: {err}");
            }

            cgroup.remove_if_empty();
        }
        if let Err(err) = crate::cgroups::release_tree(&self.instance) {
            warn!("releasing the reamer cgroup tree at shutdown: {err}");
        }
    }
}
