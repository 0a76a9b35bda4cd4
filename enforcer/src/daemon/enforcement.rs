//! Enforcement: the policy's decisions applied to the pools. It takes the sensor's events (the
//! fast path), training's demand each tick (the slow path) and the workers' SLO needs and
//! latency reports, asks the pure policies what to do, and has the actuators do it: grants
//! first, then the pools' cgroups, the sensor's quiet CPUs, and a line in the decision log
//! with the time from the kernel event to the completed write.
//!
//! Each piece of state has its owner: the CPU policy (`policy::Policy`), the pools' cgroups
//! (`actuate::pools`), the grants (`actuate::grants`), the SLO needs
//! (`policy::online_need`), each online pool's weight (`policy::online_weight`), the decision
//! log, the reaction histogram and the sensor's quiet-CPU map. This file only wires them.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    sync::Arc,
};

use enforcer_common::{
    EVENT_ENQUEUED_BEHIND_INFERENCE, EVENT_PREEMPTED_BY_INFERENCE, SensorEvent, cpu_list,
    protocol::{BesideJob, EnforcementStatus, Grant, HarvestStatus, LatencyReport, PoolStatus},
};
use serde::Serialize;
use tokio::sync::mpsc::Sender;
use tracing::{debug, info, warn};

use super::reactions::Reactions;
use crate::{
    actuate::{
        cgroup::PoolFiles,
        cgroup_error::CgroupError,
        decision_log::{DecisionLog, RecentDecisions},
        grants::{GrantBoard, WorkerGone},
        pools::{Pools, PoolsError},
        quiet_cpus::QuietCpus,
    },
    config::{PoolKind, Settings},
    host::{
        clock::monotonic_ns,
        topology::{Topology, TopologyError},
    },
    policy::{
        Decision, Policy, PoolSpec,
        cores::Trigger,
        harvest::{self, Harvest, Level, PaceSource},
        online_need::OnlineNeeds,
        online_weight::{WeightChange, WeightSteering},
        pace::Report,
    },
};

/// Recent decisions (allocations and weight changes) kept for `status`.
const RECENT_DECISIONS: usize = 32;

/// When the sensor event behind a fast-path decision happened and when the event thread read
/// it, both CLOCK_MONOTONIC (the kernel's `bpf_ktime_get_ns` is the same clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventTiming {
    ts_ns: u64,
    read_ns: u64,
}

impl EventTiming {
    /// The timing of an event that happened at `ts_ns`, read at `read_ns`, for a daemon that
    /// started at `started_ns`; None for an event from before it started. The pinned ring
    /// buffer keeps what the sensor reported while no daemon read it (a restart), and its
    /// latency is that gap, not this daemon's reaction: after a restart here the first
    /// decision read 79 ms from event to write, of which the write took 0.13 ms. The decision
    /// is still made (the contention it reports may stand); only its time is not a reaction's.
    fn of_reaction(ts_ns: u64, read_ns: u64, started_ns: u64) -> Option<Self> {
        (ts_ns >= started_ns).then_some(Self { ts_ns, read_ns })
    }
}

/// One logged allocation decision.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DecisionRecord {
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

#[derive(Debug, thiserror::Error)]
pub enum EnforcementError {
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Pools(#[from] PoolsError),
}

/// Why a worker's subscription was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SubscribeError {
    #[error(transparent)]
    Pool(#[from] PoolsError),
    #[error(
        "process {pid} is not in pool {pool:?}: a worker may only subscribe for its own pool \
         (start it with `enforcer launch --pool {pool} -- ...`)"
    )]
    NotAMember { pid: u32, pool: String },
    #[error(transparent)]
    Gone(#[from] WorkerGone),
}

pub(crate) struct Enforcement {
    /// false: observe only (`[policy] enforce = false`): decisions are logged, never written.
    enforcing: bool,
    /// CPUs per physical core, for an SLO need in whole cores.
    threads_per_core: usize,
    policy: Policy,
    pools: Pools,
    grants: GrantBoard,
    needs: OnlineNeeds,
    /// Each online pool's CPU weight, steered by its workers' latency reports.
    steering: BTreeMap<String, WeightSteering>,
    log: DecisionLog,
    recent: RecentDecisions,
    reactions: Reactions,
    /// The sensor's map of CPUs where contention reports would change nothing; None until
    /// the daemon hands it over.
    quiet: Option<QuietCpus>,
    /// CLOCK_MONOTONIC when this enforcement began: earlier events are not its reactions.
    started_ns: u64,
    /// The pace controller (`[policy] harvest_by_pace`): the level it holds offline at.
    harvest: Option<Harvest>,
    /// Its steps by reason, as the decision log writes them: for status and `/metrics`.
    harvest_steps: BTreeMap<String, u64>,
    /// The offline pools the CPU side pauses and narrows (not those with `gpu = true`).
    cpu_offline_pools: Vec<String>,
    /// `pause_offline_when_training_short` as configured (and kept where some pool can
    /// pause): what the pace controller's levels under `Unpaused` keep.
    pause_when_short: bool,
}

impl Enforcement {
    /// Creates (or adopts) the pools' cgroups and applies the initial allocation.
    pub(crate) fn new(
        settings: &Settings,
        instance: &str,
        log: DecisionLog,
    ) -> Result<Self, EnforcementError> {
        let topology = Topology::detect()?;
        let pools = Pools::create(instance, &settings.pools, topology.cpus.clone())?;
        let mut steering = BTreeMap::new();
        for pool in &settings.pools {
            let PoolKind::Online(online) = &pool.kind else {
                continue;
            };
            let mut weights = WeightSteering::new(online.cpu_weight, online.min_cpu_weight);
            if let Some(left) = pools.adopted_weight(&pool.name) {
                // An observe-only daemon steers nothing: it holds the configured weight.
                let resumed = if settings.enforce {
                    weights.resume_at(left)
                } else {
                    weights.weight()
                };
                if resumed != left {
                    pools.set_weight(&pool.name, resumed)?;
                }
                info!(
                    pool = pool.name.as_str(),
                    left,
                    resumed,
                    "adopted pool: the weight a previous daemon left, and the one held from now"
                );
            }
            steering.insert(pool.name.clone(), weights);
        }
        let mut policy_settings = settings.policy;
        if policy_settings.pause_offline_when_training_short && !pools.any_pausable() {
            info!(
                "pause_offline_when_training_short has no pool to pause: no offline pool, or \
                 only ones with gpu = true, which the GPU duty cycle gates"
            );
            policy_settings.pause_offline_when_training_short = false;
        }
        let threads_per_core = (topology.threads_per_core() as usize).max(1);
        let specs = settings.pools.iter().map(PoolSpec::from).collect();
        let pause_when_short = policy_settings.pause_offline_when_training_short;
        let mut enforcement = Self {
            enforcing: settings.enforce,
            threads_per_core,
            policy: Policy::new(policy_settings, topology, specs),
            pools,
            grants: GrantBoard::default(),
            needs: OnlineNeeds::default(),
            steering,
            log,
            recent: RecentDecisions::new(RECENT_DECISIONS),
            reactions: Reactions::default(),
            quiet: None,
            started_ns: monotonic_ns(),
            harvest: settings.policy.harvest.map(Harvest::new),
            harvest_steps: BTreeMap::new(),
            cpu_offline_pools: settings
                .pools
                .iter()
                .filter(|p| p.kind == PoolKind::Offline && !p.gpu)
                .map(|p| p.name.clone())
                .collect(),
            pause_when_short,
        };
        if enforcement.harvest.is_some() {
            // The controller chooses whether offline shares training's cores (its top level).
            enforcement.policy.share_training_cores(0.0);
        }
        let initial = enforcement.policy.allocation();
        if enforcement.enforcing {
            enforcement.pools.write(&initial, |_| {});
        }
        Ok(enforcement)
    }

    /// Hands over the sensor's `reserved_cpus` map, where the CPUs whose contention reports
    /// would change nothing are published (`Policy::quiet_cpus`).
    pub(crate) fn set_quiet_map(&mut self, quiet: QuietCpus) {
        self.quiet = Some(quiet);
        if self.enforcing {
            self.publish_quiet_cpus();
        }
    }

    /// Tells the sensor where to stay quiet, after the cgroup writes: where training holds the
    /// CPU, or holds all the cores it may, the enforcer has nothing to do.
    fn publish_quiet_cpus(&mut self) {
        if let Some(quiet) = &mut self.quiet {
            quiet.publish(self.policy.quiet_cpus());
        }
    }

    /// The machine's online CPUs, as the policy divides them.
    pub(crate) fn cpus(&self) -> &BTreeSet<u32> {
        self.policy.cpus()
    }

    /// The pools' cgroups, pods and freezers: read for status and start-up, and changed
    /// outside a decision (pods coming and going, the reconcile's read-back), under this lock
    /// like every decision.
    pub(crate) fn pools(&self) -> &Pools {
        &self.pools
    }

    pub(crate) fn pools_mut(&mut self) -> &mut Pools {
        &mut self.pools
    }

    /// Pod `uid` (`key`) joins `pool`, its groups written in place where the daemon enforces
    /// (`pod_in_place`); its group is `relative` in each hierarchy.
    pub(crate) fn attach_pod(
        &mut self,
        pool: &str,
        uid: &str,
        key: &str,
        relative: &Path,
        exclusive_cpus: Option<&str>,
    ) -> Result<(), PoolsError> {
        self.pools
            .attach_pod(pool, uid, key, relative, exclusive_cpus, self.enforcing)
    }

    /// Subscribes a worker of `pool` (already checked to be in its cgroup) to its grants; the
    /// current grant is sent at once.
    pub(crate) fn subscribe(
        &mut self,
        pool: &str,
        worker: Sender<Grant>,
    ) -> Result<(), SubscribeError> {
        let current = self.pools.current_grant(pool)?;
        Ok(self.grants.subscribe(current, worker)?)
    }

    /// Worker `pid` of `pool` needs `cpus` CPUs for its SLO (None: it went away). An online
    /// pool's need, summed over its workers in whole cores, goes to the policy; an offline pool
    /// has no SLO and gets what is left, so its workers' needs are only logged.
    pub(crate) fn set_need(&mut self, pool: &str, pid: u32, cpus: Option<usize>) {
        // Every online pool, and only an online pool, has a steering.
        if !self.steering.contains_key(pool) {
            if let Some(cpus) = cpus {
                info!(
                    pool,
                    pid, cpus, "need noted, not granted: an offline pool gets what is left"
                );
            }
            return;
        }
        let Some(cores) = self.needs.set(pool, pid, cpus, self.threads_per_core) else {
            return;
        };
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
    pub(crate) fn set_latency(
        &mut self,
        pool: &str,
        pid: u32,
        report: &LatencyReport,
        now_ns: u64,
    ) {
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
    pub(crate) fn worker_gone(&mut self, pool: &str, pid: u32) {
        self.set_need(pool, pid, None);
        if let Some(steering) = self.steering.get_mut(pool) {
            steering.forget(pid);
        }
    }

    fn apply_weight(&mut self, pool: &str, pid: u32, report: &LatencyReport, change: WeightChange) {
        if let Err(err) = self.pools.set_weight(pool, change.to) {
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
        self.log.append(&value);
        self.recent.push(value);
    }

    fn apply(&mut self, mut decision: Decision, event: Option<EventTiming>) {
        decision.allocation =
            harvest::shape(self.level(), decision.allocation, &self.cpu_offline_pools);
        let written = if self.enforcing {
            let grants = &mut self.grants;
            self.pools
                .write(&decision.allocation, |grant| grants.publish(&grant))
        } else {
            Default::default()
        };
        let at_ns = monotonic_ns();
        if self.enforcing {
            self.publish_quiet_cpus();
        }
        let event_to_write_ns = event.map(|e| at_ns.saturating_sub(e.ts_ns));
        let event_to_read_ns = event.map(|e| e.read_ns.saturating_sub(e.ts_ns));
        if let Some(ns) = event_to_write_ns {
            self.reactions.record(ns);
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
        // A duty cycle's flip (a pause or resume alone) is a debug line: while training fills
        // its cores but not their headroom they come twice a second, and the decision log
        // keeps each.
        let flip = matches!(
            record.decision.trigger,
            Trigger::OfflineDuty { .. } | Trigger::TrainingCoresShare { .. }
        ) && record.rewritten.is_empty();
        if flip {
            debug!(
                offline_paused = record.decision.allocation.offline_paused,
                "duty cycle flipped"
            );
        } else {
            info!(
                training = %cpu_list::format(&record.decision.allocation.training),
                offline_paused = record.decision.allocation.offline_paused,
                event_to_write_ns = ?record.event_to_write_ns,
                "allocation changed"
            );
        }
        if let Ok(value) = serde_json::to_value(&record) {
            self.record(value);
        }
    }

    /// Fast path: a sensor event, read from the ring buffer at `read_ns` (CLOCK_MONOTONIC).
    pub(crate) fn on_event(&mut self, event: &SensorEvent, read_ns: u64) {
        if event.kind != EVENT_ENQUEUED_BEHIND_INFERENCE
            && event.kind != EVENT_PREEMPTED_BY_INFERENCE
        {
            return;
        }
        if let Some(decision) = self.policy.contended(event.cpu) {
            let timing = EventTiming::of_reaction(event.ts_ns, read_ns, self.started_ns);
            self.apply(decision, timing);
        }
    }

    /// Slow path: training's demand over the last tick, in CPUs (threads runnable or running
    /// on average). Writes that failed since are tried again first.
    pub(crate) fn on_demand(&mut self, now_ns: u64, demand_cpus: f64) {
        if self.enforcing {
            let retried = self.pools.retry_failed();
            for pool in retried
                .rewritten
                .iter()
                .chain(&retried.paused)
                .chain(&retried.resumed)
            {
                info!(pool, "a write that failed earlier is done now");
            }
        }
        match self.policy.observe_demand(now_ns, demand_cpus) {
            Some(decision) => self.apply(decision, None),
            // The fast path's limit follows the estimate, and with it where the sensor is
            // to stay quiet.
            None if self.enforcing => self.publish_quiet_cpus(),
            None => {}
        }
    }

    /// The pace controller's step, once a tick: `signal` where the pace of the training job it
    /// follows comes from now, and that job's name (None: it has none), `reports` that pace's
    /// counts (`policy::pace`), `training_jobs` the jobs that run, `others` the other jobs'
    /// reports, each named. A new level is logged with its reason and written at once.
    pub(crate) fn on_pace(
        &mut self,
        now_ns: u64,
        signal: Option<(PaceSource, &str)>,
        reports: &[Report],
        training_jobs: Vec<String>,
        others: Vec<(String, Vec<Report>)>,
    ) {
        let Some(harvest) = &mut self.harvest else {
            return;
        };
        harvest.set_training_jobs(training_jobs);
        harvest.set_other_jobs(now_ns, others);
        let before = harvest.level();
        let Some(change) = harvest.tick(now_ns, signal, reports) else {
            return;
        };
        info!(level = change.level.name(), why = ?change.why, "pace controller");
        let logged = serde_json::to_value(&change).unwrap_or_default();
        if let Some(reason) = logged["reason"].as_str() {
            *self.harvest_steps.entry(reason.to_owned()).or_default() += 1;
        }
        self.record(serde_json::json!({ "at_ns": now_ns, "harvest": logged }));
        if change.level == before {
            return;
        }
        self.policy
            .share_training_cores(change.level.training_cores_share());
        self.policy
            .pause_when_short(self.pause_when_short && change.level.pauses_when_short());
        let cores = self.policy.training_cores();
        let decision = Decision {
            trigger: Trigger::Pace {
                level: change.level.name(),
            },
            training_cores_before: cores,
            training_cores_after: cores,
            allocation: self.policy.allocation(),
        };
        self.apply(decision, None);
    }

    /// The job whose pace the controller follows, and where that pace comes from, while it
    /// follows one: the daemon keeps to that job while it has a pace (`pace_signal`).
    pub(crate) fn pace_followed(&self) -> Option<(PaceSource, String)> {
        let harvest = self.harvest.as_ref()?;
        Some((harvest.source()?, harvest.job()?.to_owned()))
    }

    /// The job the controller followed, silent now for less than ten minutes
    /// (`PAUSE_KEPT_NS`) while it waits for its return (`harvest/pause.rs`): the daemon keeps
    /// the signal for it.
    pub(crate) fn pace_paused(&self, now_ns: u64) -> Option<(PaceSource, String)> {
        let (source, job, _) = self.harvest.as_ref()?.paused_job(now_ns)?;
        Some((source, job.to_owned()))
    }

    /// Whether the pace controller runs (`[policy] harvest_by_pace`).
    pub(crate) fn harvests_by_pace(&self) -> bool {
        self.harvest.is_some()
    }

    /// Where offline is held: the pace controller's level, the core policy's without one.
    fn level(&self) -> Level {
        self.harvest.as_ref().map_or(Level::Policy, Harvest::level)
    }

    /// What `status` shows, as far as it is this state: the pools' CPUs and processes, which
    /// are files to read, and the recent decisions, which are copied, are left to
    /// `StatusReading::finish`, after letting go of this.
    pub(crate) fn status(&self) -> StatusReading {
        let (pools, files) = self
            .pools
            .views()
            .into_iter()
            .map(|view| {
                let steering = self.steering.get(&view.name);
                let status = PoolStatus {
                    kind: match view.kind {
                        PoolKind::Online(_) => "online".to_owned(),
                        PoolKind::Offline => "offline".to_owned(),
                    },
                    cpus: String::new(),
                    processes: Vec::new(),
                    subscribers: self.grants.subscribers(&view.name),
                    need_cpus: self.needs.cpus(&view.name),
                    // Every online pool has a steering, fixed or not; offline pools have no
                    // weight.
                    cpu_weight: steering.map(WeightSteering::weight),
                    min_cpu_weight: steering.filter(|s| s.steers()).map(WeightSteering::floor),
                    paused: view.paused,
                    name: view.name,
                };
                (status, view.files)
            })
            .unzip();
        let status = EnforcementStatus {
            enforcing: self.enforcing,
            training_cpus: cpu_list::format(&self.policy.allocation().training),
            demand_estimate_cpus: self.policy.estimate_cpus(),
            pools,
            reactions: self.reactions.count(),
            event_to_write_p50_ns: self.reactions.percentile(0.5),
            event_to_write_p99_ns: self.reactions.percentile(0.99),
            event_to_write_hist: self.reactions.hist().to_vec(),
            event_to_write_sum_ns: self.reactions.sum_ns(),
            recent_decisions: Vec::new(),
            // Filled by the daemon from the sensor's per-job histograms.
            event_to_ran_p50_ns: None,
            event_to_ran_p99_ns: None,
            event_to_ran_hist: Vec::new(),
            event_to_ran_sum_ns: 0,
            harvest: self.harvest.as_ref().map(|harvest| {
                let held = harvest.held_back();
                let paused = harvest.paused_job(monotonic_ns());
                HarvestStatus {
                    level: harvest.level().name().to_owned(),
                    signal: harvest.source().map(|source| source.name().to_owned()),
                    job: harvest.job().map(str::to_owned),
                    paused_job: paused.map(|(_, job, _)| job.to_owned()),
                    paused_s: paused.map(|(_, _, ns)| ns as f64 / 1e9),
                    reference_steps_per_s: harvest.reference().map(|m| m.steps_per_s),
                    // As the decision log holds it.
                    last_change: harvest
                        .last_change()
                        .and_then(|change| serde_json::to_value(change).ok()),
                    held_back_s: held.held_ns as f64 / 1e9,
                    running_s: held.running_ns as f64 / 1e9,
                    half_measure_s: harvest.half_measure_ns().map(|ns| ns as f64 / 1e9),
                    steps: self.harvest_steps.clone(),
                    beside: harvest
                        .beside()
                        .into_iter()
                        .map(|(job, r)| BesideJob {
                            job,
                            ratio: r.ratio,
                            low: r.low,
                            high: r.high,
                            cycles: r.cycles,
                        })
                        .collect(),
                }
            }),
        };
        StatusReading {
            status,
            files,
            recent: self.recent.to_vec(),
        }
    }

    /// Leaves every inference process runnable on every CPU, unfrozen, at normal priority;
    /// removes pool cgroups that are empty (the others stay for a restarted daemon to adopt).
    pub(crate) fn shutdown(&mut self, instance: &str) {
        self.pools.release(instance);
    }
}

/// `Enforcement::status` before its files are read and its decisions copied.
pub(crate) struct StatusReading {
    status: EnforcementStatus,
    /// Each pool's files, in the order of `status.pools`.
    files: Vec<PoolFiles>,
    recent: Vec<Arc<serde_json::Value>>,
}

impl StatusReading {
    /// The status with each pool's CPUs and processes read from its files and the recent
    /// decisions copied: the part that must not hold the enforcement's lock.
    pub(crate) fn finish(self) -> EnforcementStatus {
        let mut status = self.status;
        for (pool, files) in status.pools.iter_mut().zip(&self.files) {
            pool.cpus = files.cpus().unwrap_or_else(|| "?".to_owned());
            pool.processes = files.processes();
        }
        status.recent_decisions = self.recent.iter().map(|v| (**v).clone()).collect();
        status
    }

    /// The status without the pools' CPUs and processes and without the recent decisions.
    pub(crate) fn without_files(self) -> EnforcementStatus {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_from_before_the_daemon_started_is_acted_on_but_not_timed_as_a_reaction() {
        let started = 1_000;
        assert_eq!(
            EventTiming::of_reaction(1_500, 1_600, started),
            Some(EventTiming {
                ts_ns: 1_500,
                read_ns: 1_600
            })
        );
        assert_eq!(EventTiming::of_reaction(999, 1_600, started), None);
    }
}
