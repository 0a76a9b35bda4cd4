//! What `Request::Snapshot` answers: the sensor's totals per training job, the pools, the
//! enforcement state and the GPU side, read at one instant. `enforcer observe` turns two of
//! them into an interval's figures, `status` renders one, `/metrics` exports one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::gpu::GpuReport;
use crate::NR_CLASSES;

/// Everything `observe` and `status` show, read at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub instance: String,
    /// CLOCK_MONOTONIC at the reading, the clock of the sensor's timestamps.
    pub monotonic_ns: u64,
    /// The machine's online CPUs (0 from a daemon older than this field).
    #[serde(default)]
    pub online_cpus: usize,
    pub jobs: Vec<JobTotals>,
    /// Per CPU, the sensor's reports received so far of a training thread queued behind (or
    /// preempted by) inference there: the enforcer's fast path's input.
    #[serde(default)]
    pub contentions_by_cpu: Vec<u64>,
    pub pools: Vec<PoolInfo>,
    /// Per CPU, time spent running each class (other, training, online, offline, idle).
    pub cpu_class_ns: Vec<[u64; NR_CLASSES]>,
    pub counters: BTreeMap<String, u64>,
    pub programs: Vec<ProgramStats>,
    /// Cores and pools as enforced now, with recent decisions.
    pub enforcement: Option<EnforcementStatus>,
    /// Where /metrics is served, if anywhere.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The GPU side: off, disabled (and why) or what it sees and does.
    #[serde(default)]
    pub gpu: Option<GpuReport>,
    /// How the event thread is scheduled ("SCHED_FIFO 10", or the normal class and its slice
    /// where real time was refused).
    #[serde(default)]
    pub event_thread: Option<String>,
    /// The Kubernetes pods the daemon manages (none without Kubernetes).
    #[serde(default)]
    pub pods: Vec<PodInfo>,
}

impl Snapshot {
    /// The training job named `name`.
    pub fn job(&self, name: &str) -> Option<&JobTotals> {
        self.jobs.iter().find(|job| job.name == name)
    }

    /// Pool `name` as classified (threads, relaunching launchers).
    pub fn pool(&self, name: &str) -> Option<&PoolInfo> {
        self.pools.iter().find(|pool| pool.name == name)
    }

    /// Pool `name` as enforced (CPUs, processes, weight, pause).
    pub fn pool_status(&self, name: &str) -> Option<&PoolStatus> {
        self.enforcement
            .as_ref()?
            .pools
            .iter()
            .find(|pool| pool.name == name)
    }
}

/// Cumulative totals of one training job, summed over CPUs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct JobTotals {
    pub id: u32,
    pub name: String,
    /// Threads classified into the job at the last reconcile.
    pub threads: usize,
    /// Time its threads ran: completed slices, and the slices running at the reading up to
    /// the reading, so that a difference of two readings is the time run in between.
    pub run_ns: u64,
    pub wait_ns: u64,
    pub waits: u64,
    pub max_wait_ns: u64,
    pub behind_inference: u64,
    pub long_waits: u64,
    /// The part of `wait_ns` in waits that began behind offline inference.
    #[serde(default)]
    pub offline_wait_ns: u64,
    /// Events userspace received for the job.
    pub events_received: u64,
    pub wait_hist: Vec<u64>,
    /// Reports behind inference whose thread has run since, and the delay histogram.
    #[serde(default)]
    pub reports_ran: u64,
    #[serde(default)]
    pub report_to_ran_ns: u64,
    #[serde(default)]
    pub report_to_ran_hist: Vec<u64>,
    /// What the job reports of its own progress (`Request::Progress`), if it reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<JobProgress>,
    /// Its GPUs' busy share over the last 5 s, in GPUs busy, where the share is its own
    /// (the enforcer's `gpu::training_busy`): the pace signal of a job that reports nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
}

/// A training job's own count of its progress, and its pace from it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct JobProgress {
    /// The newest count the job sent.
    pub steps: u64,
    /// Steps a second over the last 5 s of reports; None with too few reports, or none for
    /// 10 s.
    pub steps_per_s: Option<f64>,
    /// Seconds since the newest report.
    pub age_s: f64,
}

/// An inference pool as the daemon classifies it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolInfo {
    pub id: u32,
    pub name: String,
    pub kind: String,
    pub threads: usize,
    /// The pool's relaunch generation (raised by `enforcer relaunch`).
    #[serde(default)]
    pub relaunch_generation: u64,
    /// The launchers started with `--relaunch` that watch the pool.
    #[serde(default)]
    pub relaunching_launchers: Vec<u32>,
}

/// A Kubernetes pod the daemon manages.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodInfo {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    /// "training", "online" or "offline".
    pub role: String,
    /// Its training job or pool.
    pub group: String,
    /// Its container groups seen so far.
    pub containers: usize,
    /// Its threads at the last reconcile.
    pub threads: usize,
    /// "measured" (training), "enforced", "observe_only", "exclusive" (the CPU manager's),
    /// "contested" (another agent writes its groups) or "failing".
    pub state: String,
    /// The state in words, with why reamer leaves it alone where it does.
    #[serde(default)]
    pub detail: String,
    /// Writes by someone else to the files reamer holds for it.
    pub foreign_writes: u64,
}

/// Run statistics of one sensor program, from `bpf_prog_info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramStats {
    /// Kernel program id, as `bpftool prog show` lists it.
    pub id: u32,
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// The pace controller's state (`[policy] harvest_by_pace`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HarvestStatus {
    /// Where offline inference is held: `held`, `quarter`, `half`, `three_quarters`,
    /// `policy` (the core policy's CPUs), `unpaused` (without its pause for training's
    /// shortage), `training_cores` (training's cores too).
    pub level: String,
    /// Where training's pace comes from: `progress` (the job's reports, steps a second) or
    /// `gpu_busy` (its GPUs' busy share, busy microseconds a second); None without a pace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The training job whose pace it follows (kept while it has a pace; else the first in the
    /// registry's order with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The job followed, silent while its processes run (a checkpoint, an evaluation), for
    /// `paused_s` since its signal was lost: the controller waits for it at `policy` for up to
    /// ten minutes, with what it measured of the job kept, and compares its level again once
    /// it reports (reason `resumed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_s: Option<f64>,
    /// Training's pace with offline held back, at the last probe, in the units of `signal`.
    pub reference_steps_per_s: Option<f64>,
    /// The controller's last change, as the decision log holds it: the level, the reason
    /// (`reason`), and where a trial was judged its pace against the reference (`ratio`,
    /// `low`, `high`: what offline cost training, measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<serde_json::Value>,
    /// Seconds the controller has held offline back (its probes, and a level found too
    /// costly down to a quarter) of the `running_s` since it started: what it costs offline.
    #[serde(default)]
    pub held_back_s: f64,
    #[serde(default)]
    pub running_s: f64,
    /// How long each half of the last comparison measured, s, after its 1 s settling: two of
    /// the job's report periods, or longer where its pace narrows with the length faster than
    /// the length costs (a bursty job's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_measure_s: Option<f64>,
    /// The controller's steps since it started, by reason (`probe`, `trial`, `kept`,
    /// `too_costly`, ...), as the decision log writes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, u64>,
    /// The training jobs beside the one followed, with two cycles or more in the current
    /// comparison (the last one, once settled): what the level compared cost each of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beside: Vec<BesideJob>,
}

/// A training job beside the one the pace controller follows: its pace at the level compared
/// over its pace with offline held back, over the comparison's cycles (`ratio`, with its 95%
/// interval `low` to `high`, over `cycles` cycles).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BesideJob {
    pub job: String,
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    pub cycles: usize,
}

/// What `status` shows of enforcement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnforcementStatus {
    pub enforcing: bool,
    pub training_cpus: String,
    pub demand_estimate_cpus: f64,
    /// Each pool: its kind, the CPUs in its cpuset now, its processes.
    pub pools: Vec<PoolStatus>,
    pub reactions: u64,
    pub event_to_write_p50_ns: Option<u64>,
    pub event_to_write_p99_ns: Option<u64>,
    /// The event-to-write histogram (sensor bucket layout) and its sum, for /metrics.
    #[serde(default)]
    pub event_to_write_hist: Vec<u64>,
    #[serde(default)]
    pub event_to_write_sum_ns: u64,
    /// The latest decisions, oldest first, each as the decision log's line holds it.
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
    /// The pace controller, where `[policy] harvest_by_pace` runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harvest: Option<HarvestStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
