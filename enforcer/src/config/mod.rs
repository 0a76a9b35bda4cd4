//! The enforcer's TOML configuration.
//!
//! Every error names the file, the line and the field, because an operator fixing a node at
//! night should not have to guess which of forty lines is wrong.
//!
//! ```toml
//! [sensor]
//! wait_threshold_us = 2000       # a training thread waiting longer raises an event
//! event_min_interval_us = 100    # at most one event per CPU per interval
//! clock = "run-queue"            # or "monotonic": see SensorClock
//! max_inference_threads = 65536  # inference threads classified at once (training has its own)
//!
//! [[training]]
//! name = "resnet"
//! cgroup = "/sys/fs/cgroup/cpu/reamer/resnet"   # every thread of the cgroup
//! pids = [4242]                                  # and/or these processes
//!
//! [[pool]]
//! name = "ocr"
//! kind = "offline"                               # or "online"
//! pids = [5151]
//!
//! [[pool]]
//! name = "web"
//! kind = "online"
//! min_cores = 1                                  # guaranteed even against training
//! slo_ms = 50
//! cpu_weight = 50                                # against training's 100 (cgroup v2 scale)
//! min_cpu_weight = 10                            # while the latency tail has room
//! ```

pub mod control;
pub mod gpu;
pub mod kubernetes;
pub mod settings;

use std::{
    ops::Range,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use toml::Spanned;

use crate::host::topology::Topology;

pub use settings::{
    GroupSettings, HarvestSettings, OnlinePool, PolicySettings, PoolKind, PoolSettings,
    SensorSettings, Settings, Source,
};

/// A value of a section serde cannot check (`[gpu]`, `[control]`): the field and what is
/// wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InvalidField {
    pub field: &'static str,
    pub message: String,
}

/// Most characters in a job or pool name.
pub const MAX_NAME_LEN: usize = 63;

/// An online pool's CPU weight, on cgroup v2's scale where training (a default process) has
/// 100. Half of training's: where a training thread and an online worker want the same CPU,
/// training gets two thirds of it, for about a point of online SLO attainment
/// (docs/experiments/2026-11-22-online-pool-weight.md).
pub const DEFAULT_ONLINE_CPU_WEIGHT: u32 = 50;
/// How low an online pool's weight goes while its workers' latency tail is far below their
/// SLO (`online_weight`): a tenth of training's, where a training thread gets 10/11 of a CPU
/// it wants with an online worker. Not lower: near 1 the pool would wait for training's every
/// burst and its tail rise in steps the once-a-second report follows too late.
pub const DEFAULT_MIN_ONLINE_CPU_WEIGHT: u32 = 10;
/// The range of cgroup v2's `cpu.weight`.
const CPU_WEIGHT_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub sensor: SensorConfig,
    #[serde(default)]
    pub policy: PolicySection,
    #[serde(default)]
    pub metrics: MetricsSection,
    #[serde(default)]
    pub gpu: gpu::GpuSection,
    #[serde(default)]
    pub control: control::ControlSection,
    #[serde(default)]
    pub kubernetes: kubernetes::KubernetesSection,
    #[serde(default)]
    pub training: Vec<GroupConfig>,
    #[serde(default)]
    pub pool: Vec<GroupConfig>,
}

/// Prometheus exposition.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// Address for `/metrics`, or "off". Loopback by default: the node's Prometheus agent
    /// scrapes locally; exposing it further is a deliberate choice.
    pub listen: Spanned<String>,
}

impl Default for MetricsSection {
    fn default() -> Self {
        Self {
            listen: Spanned::new(0..0, "127.0.0.1:9464".to_owned()),
        }
    }
}

impl MetricsSection {
    /// The address to serve on, None when "off".
    pub fn address(&self) -> Option<std::net::SocketAddr> {
        self.listen.get_ref().parse().ok()
    }
}

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
    pub offline_on_training_cores: bool,
    /// true (the default): offline pools pause (their cgroup is frozen) while training's
    /// demand estimate is more CPUs than the online pools' minimums leave it, and resume after
    /// the estimate has stayed below that for `give_back_after_ms`. Training first, at the price of offline
    /// work where training is short of cores; where it is not, nothing changes. false: offline
    /// pools run on whatever CPUs they get, under SCHED_IDLE, however short training is. Pools
    /// with `gpu = true` are left to the GPU duty cycle, which owns their freezer.
    pub pause_offline_when_training_short: bool,
    /// true: offline inference's share is set by training's own pace, from the progress a
    /// training job reports (`python/reamer_progress.py`): the most offline work that keeps
    /// training within `pace_epsilon` of its pace with offline held back, found by short
    /// probes (docs/enforcer.md, "Offline's share, set by training's pace"). A job that
    /// reports nothing keeps the core policy alone. false (the default, until measured on the
    /// GPU server): the core policy alone.
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
        // Below 0.1% the probes could never tell; above half, "training first" would mean
        // nothing.
        if !(self.pace_epsilon.is_finite() && (0.001..=0.5).contains(&self.pace_epsilon)) {
            return Err(InvalidField {
                field: "pace_epsilon",
                message: format!(
                    "{} is not a share of training's pace from 0.001 (0.1%) to 0.5 (50%)",
                    self.pace_epsilon
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
            // Training first: offline work on the online pool's core, while training spills
            // onto it, cost training its pace (docs/experiments/2026-11-24-offline-pause.md).
            pause_offline_when_training_short: true,
            harvest_by_pace: false,
            pace_epsilon: 0.01,
            tick_ms: 100,
            // Above ordinary tasks, below the kernel's own RT threads (priority 50 and up).
            event_thread_rt_priority: 10,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SensorConfig {
    /// A training thread that waited in the run queue longer than this raises an event.
    /// 2 ms: well above the p99 wait of an uncontended training thread measured here
    /// (tens of µs), well below a training step.
    pub wait_threshold_us: u64,
    /// Minimum spacing of events from one CPU. 100 µs bounds the event rate at 10 000/s per
    /// CPU, while the consumer's own wakeup takes tens of µs
    /// (docs/experiments/2026-11-22-fast-path-latency.md).
    pub event_min_interval_us: u64,
    /// The clock of the sensor's per-switch timestamps.
    pub clock: SensorClock,
    /// Inference threads classified at once: the entries of the sensor's `pool_threads` map
    /// (about 100 bytes each). Training's threads have a map of their own (65,536 entries),
    /// which no number of inference threads can fill.
    pub max_inference_threads: u32,
}

impl Default for SensorConfig {
    fn default() -> Self {
        Self {
            wait_threshold_us: 2000,
            event_min_interval_us: 100,
            clock: SensorClock::RunQueue,
            max_inference_threads: enforcer_common::MAX_POOL_THREADS,
        }
    }
}

impl SensorConfig {
    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), InvalidField> {
        if !(1..=MAX_INFERENCE_THREADS_LIMIT).contains(&self.max_inference_threads) {
            return Err(InvalidField {
                field: "max_inference_threads",
                message: format!(
                    "{} is outside 1..={MAX_INFERENCE_THREADS_LIMIT}",
                    self.max_inference_threads
                ),
            });
        }
        Ok(())
    }
}

/// The largest `pool_threads` map: 4 Mi entries, the kernel's default `pid_max` on 64-bit.
const MAX_INFERENCE_THREADS_LIMIT: u32 = 4 * 1024 * 1024;

/// Where the sensor's wait and run-time timestamps come from (docs/sensor.md, "Clock").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SensorClock {
    /// The run queue's own clock (`rq->clock`), which the scheduler has just read: three
    /// loads instead of a clock read on every training thread's wakeup and switch, and the
    /// clock of the kernel's own run delay (schedstat). A wakeup that preempts at once reads
    /// as a zero wait, as in schedstat. Falls back to `monotonic` on a kernel without
    /// CONFIG_FAIR_GROUP_SCHED.
    RunQueue,
    /// `bpf_ktime_get_ns` on every timestamp: also sees the microseconds between a
    /// preempting wakeup and the switch, for a clock read per training event (the cost of
    /// both settings is in docs/benchmarks.md).
    Monotonic,
}

/// Members of a training job or an inference pool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: Spanned<String>,
    /// A cgroup directory (v1 or v2): all its threads belong to the group.
    #[serde(default)]
    pub cgroup: Option<Spanned<PathBuf>>,
    /// Processes whose threads (and later children) belong to the group.
    #[serde(default)]
    pub pids: Vec<Spanned<u32>>,
    /// `[[pool]]` only: "online" (latency SLO) or "offline" (best effort).
    #[serde(default)]
    pub kind: Option<Spanned<PoolKindField>>,
    /// Online pools: cores guaranteed even against training (default 1).
    #[serde(default)]
    pub min_cores: Option<Spanned<usize>>,
    /// Online pools: the latency SLO the pool's workers serve, in ms (reported; the workers
    /// size themselves to it).
    #[serde(default)]
    pub slo_ms: Option<Spanned<u64>>,
    /// Online pools: the pool's CPU weight against training where both want a CPU, on cgroup
    /// v2's `cpu.weight` scale (1 to 10000; a default process has 100).
    #[serde(default)]
    pub cpu_weight: Option<Spanned<u32>>,
    /// Online pools: the lowest weight the pool goes down to while its workers' latency tail
    /// is far below their SLO (`cpu_weight` is where it starts and goes back to). Equal to
    /// `cpu_weight`: a fixed weight.
    #[serde(default)]
    pub min_cpu_weight: Option<Spanned<u32>>,
    /// Pools only: its processes use the GPU, so the GPU policy gates, limits and guards them.
    #[serde(default)]
    pub gpu: Option<Spanned<bool>>,
}

impl GroupConfig {
    /// Guaranteed cores of an online pool.
    pub fn min_cores(&self) -> usize {
        self.min_cores.as_ref().map_or(1, |m| *m.get_ref())
    }

    /// An online pool's latency SLO, where the config gives one.
    pub fn slo_ms(&self) -> Option<u64> {
        self.slo_ms.as_ref().map(|m| *m.get_ref())
    }

    /// An online pool's CPU weight (`DEFAULT_ONLINE_CPU_WEIGHT` unless the config says).
    pub fn cpu_weight(&self) -> u32 {
        self.cpu_weight
            .as_ref()
            .map_or(DEFAULT_ONLINE_CPU_WEIGHT, |w| *w.get_ref())
    }

    /// An online pool's lowest weight (`DEFAULT_MIN_ONLINE_CPU_WEIGHT`, or `cpu_weight` where
    /// that is lower, unless the config says).
    pub fn min_cpu_weight(&self) -> u32 {
        self.min_cpu_weight
            .as_ref()
            .map_or(DEFAULT_MIN_ONLINE_CPU_WEIGHT.min(self.cpu_weight()), |w| {
                *w.get_ref()
            })
    }

    /// Whether a pool's processes use the GPU.
    pub fn uses_gpu(&self) -> bool {
        self.gpu.as_ref().is_some_and(|g| *g.get_ref())
    }

    /// The pool kind; `validate` guarantees it is set for every `[[pool]]`.
    pub fn pool_kind(&self) -> PoolKindField {
        self.kind
            .as_ref()
            .map_or(PoolKindField::Offline, |k| *k.get_ref())
    }
}

/// `kind` of a `[[pool]]` as written; the settings make it a `PoolKind` with its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolKindField {
    Online,
    Offline,
}

/// A configuration error, located.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: field `{field}`: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    #[error("{path}:{line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Reads, validates and converts `path`: the settings the daemon runs with.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    Ok(Config::load(path, Machine::This)?.settings())
}

/// The machine a config is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    /// This one: its CPU count, and the cgroups and processes the groups name.
    This,
    /// Another one, of `cpus` CPUs (where a replayed trace was recorded): the groups' members
    /// are that machine's, so they are not looked for here.
    Elsewhere { cpus: usize },
}

impl Machine {
    /// Its physical cores (SMT siblings together, as the CPU policy grants them), and how an
    /// error says so. This machine's are read from its topology.
    fn cores(self) -> (usize, String) {
        match self {
            Machine::This => {
                let topology = Topology::detect().ok();
                let cores = topology.as_ref().map_or_else(
                    || std::thread::available_parallelism().map_or(1, |n| n.get()),
                    |t| t.cores.len(),
                );
                let cpus = topology.map_or(cores, |t| t.cpus.len());
                (
                    cores,
                    format!("this machine has {cores} physical cores ({cpus} CPUs)"),
                )
            }
            Machine::Elsewhere { cpus } => (cpus, format!("the traced machine has {cpus} CPUs")),
        }
    }
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path, machine: Machine) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse_for(path, &text, machine)
    }

    /// Parses and validates `text` for this machine, naming `path` in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        Self::parse_for(path, text, Machine::This)
    }

    /// Parses and validates `text` for `machine`, naming `path` in errors.
    pub fn parse_for(path: &Path, text: &str, machine: Machine) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|err| {
            let span = err.span().unwrap_or(0..0);
            let line = line_of(text, span.start);
            let message = err.message().to_owned();
            match key_at(text, &span) {
                Some(field) => ConfigError::Invalid {
                    path: path.to_owned(),
                    line,
                    field,
                    message,
                },
                None => ConfigError::Syntax {
                    path: path.to_owned(),
                    line,
                    message,
                },
            }
        })?;
        config.validate(path, text, machine)?;
        if machine == Machine::This {
            config.check_members(path, text)?;
        }
        Ok(config)
    }

    /// The checks of the text alone, and of `machine`'s core count: pure where `machine` is
    /// `Elsewhere` (the fuzz target's way), so that any text can be checked anywhere.
    fn validate(&self, path: &Path, text: &str, machine: Machine) -> Result<(), ConfigError> {
        let invalid = |span: Range<usize>, field: &str, message: String| {
            invalid_field(path, text, span, field, message)
        };
        if let Some(old) = &self.policy.demand_half_life_ms {
            let message = "was replaced by `demand_window_ms`: training's demand estimate is now \
                           the median of its per-tick demand over a window (default 2000), not a \
                           decaying peak; remove the line, or set demand_window_ms"
                .to_owned();
            return Err(invalid(old.span(), "demand_half_life_ms", message));
        }
        let listen = self.metrics.listen.get_ref();
        if listen != "off" && listen.parse::<std::net::SocketAddr>().is_err() {
            let message = format!("{listen:?} is not an address like 127.0.0.1:9464, nor \"off\"");
            return Err(invalid(self.metrics.listen.span(), "listen", message));
        }
        let sections = [
            ("sensor", self.sensor.validate()),
            ("policy", self.policy.validate()),
            ("gpu", self.gpu.validate()),
            ("control", self.control.validate()),
            ("kubernetes", self.kubernetes.validate()),
        ];
        for (section, checked) in sections {
            if let Err(InvalidField { field, message }) = checked {
                let offset = section_key_offset(text, section, field);
                return Err(invalid(offset..offset, field, message));
            }
        }
        let mut seen = std::collections::HashSet::new();
        let groups = self.training.iter().map(|g| ("training", g));
        let pools = self.pool.iter().map(|p| ("pool", p));
        for (section, group) in groups.chain(pools) {
            let name = group.name.get_ref();
            match (section, &group.kind) {
                ("training", Some(kind)) => {
                    let message = "`kind` applies to [[pool]] entries only".to_owned();
                    return Err(invalid(kind.span(), "kind", message));
                }
                ("pool", None) => {
                    let message = format!("pool {name:?} needs kind = \"online\" or \"offline\"");
                    return Err(invalid(group.name.span(), "kind", message));
                }
                _ => {}
            }
            if let Some(gpu) = &group.gpu
                && section == "training"
            {
                let message = "`gpu` applies to [[pool]] entries only: training's GPU use is \
                               measured, never limited"
                    .to_owned();
                return Err(invalid(gpu.span(), "gpu", message));
            }
            let offline = group
                .kind
                .as_ref()
                .is_some_and(|k| *k.get_ref() == PoolKindField::Offline);
            for (field, span) in [
                ("min_cores", group.min_cores.as_ref().map(|m| m.span())),
                ("slo_ms", group.slo_ms.as_ref().map(|m| m.span())),
                ("cpu_weight", group.cpu_weight.as_ref().map(|w| w.span())),
                (
                    "min_cpu_weight",
                    group.min_cpu_weight.as_ref().map(|w| w.span()),
                ),
            ] {
                if let Some(span) = span
                    && (section == "training" || offline)
                {
                    let message = format!("`{field}` applies to online pools only");
                    return Err(invalid(span, field, message));
                }
            }
            for (field, weight) in [
                ("cpu_weight", &group.cpu_weight),
                ("min_cpu_weight", &group.min_cpu_weight),
            ] {
                if let Some(weight) = weight
                    && !CPU_WEIGHT_RANGE.contains(weight.get_ref())
                {
                    let message = format!(
                        "{} is outside 1 to 10000 (cgroup v2's cpu.weight scale; a default \
                         process has 100)",
                        weight.get_ref()
                    );
                    return Err(invalid(weight.span(), field, message));
                }
            }
            if let Some(floor) = &group.min_cpu_weight
                && *floor.get_ref() > group.cpu_weight()
            {
                let message = format!(
                    "{} is above the pool's cpu_weight {} (the weight it starts at and goes back \
                     to when its latency tail nears the SLO); set them equal for a fixed weight",
                    floor.get_ref(),
                    group.cpu_weight()
                );
                return Err(invalid(floor.span(), "min_cpu_weight", message));
            }
            if let Err(err) = validate_name(name) {
                return Err(invalid(group.name.span(), "name", err.to_string()));
            }
            if !seen.insert(name.clone()) {
                return Err(invalid(
                    group.name.span(),
                    "name",
                    format!("{section} name {name:?} is used twice; names must be unique"),
                ));
            }
        }
        // A selector's pool must be a pool of the config, of the selector's kind.
        for selector in &self.kubernetes.selector {
            let Some(pool) = &selector.pool else { continue };
            let offset = section_key_offset(text, "kubernetes.selector", "pool");
            let found = self.pool.iter().find(|p| p.name.get_ref() == pool);
            let wanted = match selector.role {
                crate::kubernetes::classify::RoleName::Online => PoolKindField::Online,
                _ => PoolKindField::Offline,
            };
            match found {
                None => {
                    let message = format!(
                        "the selector on {}={} names pool {pool:?}, which no [[pool]] defines",
                        selector.label, selector.value
                    );
                    return Err(invalid(offset..offset, "pool", message));
                }
                Some(found) if found.pool_kind() != wanted => {
                    let message = format!(
                        "the selector on {}={} takes pods as {:?} but pool {pool:?} is not",
                        selector.label, selector.value, selector.role
                    );
                    return Err(invalid(offset..offset, "pool", message));
                }
                Some(_) => {}
            }
        }
        let online_min: usize = self
            .pool
            .iter()
            .filter(|p| p.pool_kind() == PoolKindField::Online)
            .map(GroupConfig::min_cores)
            .sum();
        // `min_cores` are physical cores (SMT siblings together), as the CPU policy grants
        // them: counted against CPUs, 8 cores passed on a machine of 8 cores and 16 CPUs and
        // left training an empty cpuset.
        let (cores, machine_named) = machine.cores();
        if online_min >= cores && online_min > 0 {
            return Err(ConfigError::Syntax {
                path: path.to_owned(),
                line: 1,
                message: format!(
                    "online pools are guaranteed {online_min} cores in all, but {machine_named}: \
                     training would have none"
                ),
            });
        }
        if self.training.len() > enforcer_common::MAX_JOBS as usize {
            return Err(ConfigError::Syntax {
                path: path.to_owned(),
                line: 1,
                message: format!(
                    "{} training jobs configured; the sensor tracks at most {}",
                    self.training.len(),
                    enforcer_common::MAX_JOBS
                ),
            });
        }
        Ok(())
    }

    /// This machine's side of the groups: each cgroup a cgroup directory and each pid a
    /// process, and none of them the enforcer itself where a pool would take it in.
    fn check_members(&self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let invalid = |span: Range<usize>, field: &str, message: String| {
            invalid_field(path, text, span, field, message)
        };
        let groups = self.training.iter().map(|g| ("training", g));
        let pools = self.pool.iter().map(|p| ("pool", p));
        for (section, group) in groups.chain(pools) {
            if let Some(cgroup) = &group.cgroup
                && let Err(err) = check_cgroup(cgroup.get_ref())
            {
                return Err(invalid(cgroup.span(), "cgroup", err.to_string()));
            }
            // A pool moves its members into its cgroup, idle class or frozen: the enforcer
            // among them would starve or stop itself.
            let own_pid = std::process::id();
            let in_pool = |pids: &[u32]| section == "pool" && pids.contains(&own_pid);
            if let Some(cgroup) = &group.cgroup {
                let procs = std::fs::read_to_string(cgroup.get_ref().join("cgroup.procs"))
                    .unwrap_or_default();
                let pids: Vec<u32> = procs
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                if in_pool(&pids) {
                    let message = format!(
                        "{} holds the enforcer itself (pid {own_pid}): the pool would take it \
                         in; run the enforcer in another cgroup, or name the pool's own",
                        cgroup.get_ref().display()
                    );
                    return Err(invalid(cgroup.span(), "cgroup", message));
                }
            }
            for pid in &group.pids {
                let pid_value = *pid.get_ref();
                if pid_value == 0 || !Path::new(&format!("/proc/{pid_value}")).exists() {
                    return Err(invalid(
                        pid.span(),
                        "pids",
                        format!("no process with pid {pid_value}"),
                    ));
                }
                if in_pool(&[pid_value]) {
                    let message = format!("pid {pid_value} is the enforcer itself");
                    return Err(invalid(pid.span(), "pids", message));
                }
            }
        }
        Ok(())
    }
}

/// Field `field` of the config at `path`, whose text is `text`, is invalid at `span`.
fn invalid_field(
    path: &Path,
    text: &str,
    span: Range<usize>,
    field: &str,
    message: String,
) -> ConfigError {
    ConfigError::Invalid {
        path: path.to_owned(),
        line: line_of(text, span.start),
        field: field.to_owned(),
        message,
    }
}

/// A job or pool name that cannot become a map label, a metric label or a log field.
#[derive(Debug, thiserror::Error)]
pub enum InvalidName {
    #[error("name {0:?} must be 1 to {MAX_NAME_LEN} characters")]
    Length(String),
    #[error("name {0:?} may contain only letters, digits, '-', '_' and '.'")]
    Characters(String),
    #[error(
        "name {0:?} must not begin with '.': a pool's name is a cgroup directory, where \".\" \
         and \"..\" are the group itself and its parent (\"..\" would be the shared `reamer` group)"
    )]
    LeadingDot(String),
}

/// Names become map labels, metric labels and log fields: keep them plain.
pub fn validate_name(name: &str) -> Result<(), InvalidName> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(InvalidName::Length(name.to_owned()));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(InvalidName::Characters(name.to_owned()));
    }
    if name.starts_with('.') {
        return Err(InvalidName::LeadingDot(name.to_owned()));
    }
    Ok(())
}

/// A path that is not a cgroup directory.
#[derive(Debug, thiserror::Error)]
pub enum NotACgroup {
    #[error("cgroup {} must be an absolute path", .0.display())]
    Relative(PathBuf),
    #[error("{} is not a cgroup directory (no cgroup.procs)", .0.display())]
    NoProcs(PathBuf),
}

/// A cgroup directory is one with a `cgroup.procs` file, on v1 or v2.
pub fn check_cgroup(dir: &Path) -> Result<(), NotACgroup> {
    if !dir.is_absolute() {
        return Err(NotACgroup::Relative(dir.to_owned()));
    }
    if !dir.join("cgroup.procs").is_file() {
        return Err(NotACgroup::NoProcs(dir.to_owned()));
    }
    Ok(())
}

/// Where `field` is set inside the `[section]` table, for the error's line number (the table's
/// header when the field takes its default).
fn section_key_offset(text: &str, section: &str, field: &str) -> usize {
    let header = format!("[{section}]");
    let Some(table) = text.find(&header) else {
        return 0;
    };
    let body = table + header.len();
    let section_end = text[body..].find("\n[").map_or(text.len(), |i| body + i);
    let mut offset = table;
    for line in text[table..section_end].split_inclusive('\n') {
        let key = line.trim_start().strip_prefix(field);
        if key.is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return offset;
        }
        offset += line.len();
    }
    table
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The key written on the line where an error's span starts, e.g. `pids` in `pids = ["x"]`.
fn key_at(text: &str, span: &Range<usize>) -> Option<String> {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[line_start..line_end];
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('[')).then(|| key.trim_matches('"').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    /// The error `text` is refused with, as the user reads it.
    fn error_of(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn empty_config_takes_defaults() {
        let config = parse("").unwrap();
        assert_eq!(config.sensor.wait_threshold_us, 2000);
        assert_eq!(config.sensor.event_min_interval_us, 100);
        assert!(config.training.is_empty() && config.pool.is_empty());
    }

    #[test]
    fn full_config_parses() {
        let pid = std::process::id();
        // Not this process, which a pool may not take in (the enforcer itself, in `run`).
        let parent = std::os::unix::process::parent_id();
        let text = format!(
            "[sensor]\nwait_threshold_us = 500\n\n[[training]]\nname = \"resnet\"\npids = [{pid}]\n\n\
             [[pool]]\nname = \"ocr\"\nkind = \"offline\"\npids = [{parent}]\n"
        );
        let config = parse(&text).unwrap();
        assert_eq!(config.sensor.wait_threshold_us, 500);
        assert_eq!(config.training[0].name.get_ref(), "resnet");
        assert_eq!(config.pool[0].pool_kind(), PoolKindField::Offline);
        assert_eq!(*config.pool[0].pids[0].get_ref(), parent);
    }

    #[test]
    fn sensor_clock_is_run_queue_unless_asked() {
        assert_eq!(parse("").unwrap().sensor.clock, SensorClock::RunQueue);
        let config = parse("[sensor]\nclock = \"monotonic\"\n").unwrap();
        assert_eq!(config.sensor.clock, SensorClock::Monotonic);
        let err = error_of("[sensor]\nclock = \"tsc\"\n");
        assert!(err.starts_with("test.toml:2: field `clock`"), "{err}");
        assert!(
            err.contains("run-queue") && err.contains("monotonic"),
            "{err}"
        );
    }

    #[test]
    fn the_inference_thread_bound_is_checked() {
        assert_eq!(parse("").unwrap().sensor.max_inference_threads, 65536);
        let err = error_of("[sensor]\nclock = \"monotonic\"\nmax_inference_threads = 0\n");
        assert!(
            err.starts_with("test.toml:3: field `max_inference_threads`") && err.contains("1..="),
            "{err}"
        );
    }

    #[test]
    fn wrong_type_names_file_line_and_field() {
        let err = error_of("[sensor]\n\nwait_threshold_us = \"fast\"\n");
        assert!(
            err.starts_with("test.toml:3: field `wait_threshold_us`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_field_is_named() {
        let err = error_of("[[training]]\nname = \"a\"\ncgruop = \"/x\"\n");
        assert!(
            err.contains("test.toml:3") && err.contains("cgruop"),
            "{err}"
        );
    }

    #[test]
    fn missing_pid_is_named_with_its_line() {
        let err = error_of("[[training]]\nname = \"a\"\npids = [\n  4194305,\n]\n");
        assert!(
            err.starts_with("test.toml:4: field `pids`: no process with pid 4194305"),
            "{err}"
        );
    }

    #[test]
    fn unknown_cgroup_is_named() {
        let err = error_of("[[training]]\nname = \"a\"\ncgroup = \"/nonexistent/cg\"\n");
        assert!(
            err.starts_with("test.toml:3: field `cgroup`") && err.contains("not a cgroup"),
            "{err}"
        );
    }

    #[test]
    fn duplicate_and_bad_names_are_rejected() {
        let err =
            error_of("[[training]]\nname = \"a\"\n[[pool]]\nname = \"a\"\nkind = \"online\"\n");
        assert!(
            err.starts_with("test.toml:4: field `name`") && err.contains("twice"),
            "{err}"
        );
        let err = error_of("[[training]]\nname = \"a b\"\n");
        assert!(err.contains("field `name`"), "{err}");
        for dots in ["..", ".", ".hidden"] {
            let err = error_of(&format!(
                "[[pool]]\nname = \"{dots}\"\nkind = \"offline\"\n"
            ));
            assert!(
                err.starts_with("test.toml:2: field `name`") && err.contains("begin with '.'"),
                "{err}"
            );
        }
        assert!(parse("[[pool]]\nname = \"v1.2\"\nkind = \"offline\"\n").is_ok());
    }

    #[test]
    fn a_headroom_that_is_not_a_number_of_cpus_is_refused() {
        for bad in ["nan", "inf", "-0.5"] {
            let err = error_of(&format!("[policy]\ntick_ms = 100\nheadroom_cpus = {bad}\n"));
            assert!(
                err.starts_with("test.toml:3: field `headroom_cpus`") && err.contains("finite"),
                "{bad}: {err}"
            );
        }
        assert!(parse("[policy]\nheadroom_cpus = 0\n").is_ok());
    }

    #[test]
    fn policy_defaults_and_online_only_fields() {
        let config = parse("[[pool]]\nname = \"web\"\nkind = \"online\"\nslo_ms = 50\n").unwrap();
        assert!(config.policy.enforce);
        assert_eq!(config.policy.give_back_after_ms, 2000);
        assert!(!config.policy.offline_on_training_cores, "training first");
        assert!(
            config.policy.pause_offline_when_training_short,
            "training first"
        );
        assert_eq!(config.pool[0].min_cores(), 1);
        let sharing = parse("[policy]\noffline_on_training_cores = true\n").unwrap();
        assert!(sharing.policy.offline_on_training_cores);
        let running = parse("[policy]\npause_offline_when_training_short = false\n").unwrap();
        assert!(!running.policy.pause_offline_when_training_short);
        let err = error_of("[policy]\npause_offline_when_training_short = 1\n");
        assert!(
            err.starts_with("test.toml:2: field `pause_offline_when_training_short`"),
            "{err}"
        );
        let harvest = parse("[policy]\nharvest_by_pace = true\npace_epsilon = 0.02\n").unwrap();
        assert_eq!(
            harvest.settings().policy.harvest.map(|h| h.epsilon),
            Some(0.02)
        );
        assert_eq!(parse("").unwrap().settings().policy.harvest, None);
        for bad in ["0", "0.7", "nan", "-0.01"] {
            let err = error_of(&format!("[policy]\npace_epsilon = {bad}\n"));
            assert!(
                err.starts_with("test.toml:2: field `pace_epsilon`") && err.contains("0.001"),
                "{err}"
            );
        }
        let err = error_of("[policy]\noffline_on_training_cores = \"yes\"\n");
        assert!(
            err.starts_with("test.toml:2: field `offline_on_training_cores`"),
            "{err}"
        );
        let err = error_of("[[pool]]\nname = \"b\"\nkind = \"offline\"\nmin_cores = 2\n");
        assert!(err.starts_with("test.toml:4: field `min_cores`"), "{err}");
        let err = error_of("[policy]\ngive_back_after_ms = -1\n");
        assert!(
            err.starts_with("test.toml:2: field `give_back_after_ms`"),
            "{err}"
        );
    }

    #[test]
    fn a_config_for_another_machine_is_checked_against_its_cpus_not_this_ones_groups() {
        let text = "[[training]]\nname = \"t\"\ncgroup = \"/sys/fs/cgroup/not-here\"\n\n\
                    [[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 14\n";
        let path = Path::new("trace.toml");
        let there = Config::parse_for(path, text, Machine::Elsewhere { cpus: 16 }).unwrap();
        assert_eq!(there.pool[0].min_cores(), 14);
        let err = Config::parse_for(path, text, Machine::Elsewhere { cpus: 8 })
            .unwrap_err()
            .to_string();
        assert!(err.contains("the traced machine has 8 CPUs"), "{err}");
        assert!(
            Config::parse(path, text).is_err(),
            "checked here: no such cgroup"
        );
    }

    #[test]
    fn a_pool_that_would_take_in_the_enforcer_itself_is_refused() {
        let me = std::process::id();
        let err = error_of(&format!(
            "[[pool]]\nname = \"b\"\nkind = \"offline\"\npids = [{me}]\n"
        ));
        assert!(
            err.starts_with("test.toml:4: field `pids`") && err.contains("enforcer itself"),
            "{err}"
        );
        // This process's own cgroup, in the cpu hierarchy (v1) or the unified one (v2).
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let own = cgroups.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let root = match controllers {
                "" => "/sys/fs/cgroup".to_owned(),
                c if c.split(',').any(|c| c == "cpu") => format!("/sys/fs/cgroup/{c}"),
                _ => return None,
            };
            let dir = PathBuf::from(format!("{root}{path}"));
            dir.join("cgroup.procs").exists().then_some(dir)
        });
        if let Some(dir) = own {
            let text = format!(
                "[[pool]]\nname = \"b\"\nkind = \"offline\"\ncgroup = \"{}\"\n",
                dir.display()
            );
            let err = error_of(&text);
            assert!(
                err.starts_with("test.toml:4: field `cgroup`") && err.contains("enforcer itself"),
                "{err}"
            );
        }
    }

    #[test]
    fn online_minimums_are_checked_against_this_machines_physical_cores() {
        let cores = Topology::detect().unwrap().cores.len();
        let text = format!("[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = {cores}\n");
        let err = error_of(&text);
        assert!(
            err.contains(&format!("this machine has {cores} physical cores")),
            "{err}"
        );
    }

    #[test]
    fn the_old_demand_half_life_is_refused_with_its_replacement_named() {
        assert_eq!(Config::default().policy.demand_window_ms, 2000);
        let config = parse("[policy]\ndemand_window_ms = 3000\n").unwrap();
        assert_eq!(config.settings().policy.demand_window_ns, 3_000_000_000);
        let err = error_of("[policy]\ntick_ms = 50\ndemand_half_life_ms = 100\n");
        assert!(
            err.starts_with(
                "test.toml:3: field `demand_half_life_ms`: was replaced by `demand_window_ms`"
            ),
            "{err}"
        );
    }

    #[test]
    fn cpu_weight_is_for_online_pools_within_the_kernels_range() {
        let online = "[[pool]]\nname = \"web\"\nkind = \"online\"\n";
        let config = parse(online).unwrap();
        assert_eq!(config.pool[0].cpu_weight(), DEFAULT_ONLINE_CPU_WEIGHT);
        let config = parse(&format!("{online}cpu_weight = 60\n")).unwrap();
        assert_eq!(config.pool[0].cpu_weight(), 60);
        for bad in ["0", "10001"] {
            let err = error_of(&format!("{online}cpu_weight = {bad}\n"));
            assert!(
                err.starts_with("test.toml:4: field `cpu_weight`") && err.contains("1 to 10000"),
                "{err}"
            );
        }
        let err = error_of("[[pool]]\nname = \"b\"\nkind = \"offline\"\ncpu_weight = 50\n");
        assert!(
            err.starts_with("test.toml:4: field `cpu_weight`") && err.contains("online pools only"),
            "{err}"
        );
    }

    #[test]
    fn min_cpu_weight_defaults_to_a_tenth_of_training_and_stays_at_most_cpu_weight() {
        let online = "[[pool]]\nname = \"web\"\nkind = \"online\"\n";
        let pool = |extra: &str| parse(&format!("{online}{extra}")).unwrap().pool.remove(0);
        assert_eq!(pool("").min_cpu_weight(), DEFAULT_MIN_ONLINE_CPU_WEIGHT);
        assert_eq!(
            pool("cpu_weight = 5\n").min_cpu_weight(),
            5,
            "a lower cpu_weight is the floor"
        );
        assert_eq!(
            pool("cpu_weight = 60\nmin_cpu_weight = 60\n").min_cpu_weight(),
            60
        );
        let err = error_of(&format!("{online}cpu_weight = 40\nmin_cpu_weight = 41\n"));
        assert!(
            err.starts_with("test.toml:5: field `min_cpu_weight`") && err.contains("above"),
            "{err}"
        );
        let err = error_of(&format!("{online}min_cpu_weight = 0\n"));
        assert!(
            err.starts_with("test.toml:4: field `min_cpu_weight`") && err.contains("1 to 10000"),
            "{err}"
        );
        let err = error_of("[[pool]]\nname = \"b\"\nkind = \"offline\"\nmin_cpu_weight = 5\n");
        assert!(
            err.contains("field `min_cpu_weight`") && err.contains("online pools only"),
            "{err}"
        );
    }

    #[test]
    fn metrics_address_is_checked() {
        assert_eq!(
            parse("").unwrap().metrics.address(),
            Some("127.0.0.1:9464".parse().unwrap())
        );
        assert_eq!(
            parse("[metrics]\nlisten = \"off\"\n")
                .unwrap()
                .metrics
                .address(),
            None
        );
        let err = error_of("[metrics]\nlisten = \"localhost\"\n");
        assert!(err.starts_with("test.toml:2: field `listen`"), "{err}");
    }

    #[test]
    fn bad_pool_kind_is_named() {
        let err = error_of("[[pool]]\nname = \"p\"\nkind = \"batch\"\n");
        assert!(err.contains("test.toml:3") && err.contains("kind"), "{err}");
    }

    #[test]
    fn gpu_section_takes_defaults_and_names_bad_values_by_line() {
        let config = parse("").unwrap();
        assert_eq!(config.gpu.enabled, gpu::GpuSwitch::Auto);
        assert_eq!(config.gpu.mps, gpu::MpsMode::Attach);
        let err = error_of("[gpu]\nmps = \"start\"\nclamp_run_fraction = 1.5\n");
        assert!(
            err.starts_with("test.toml:3: field `clamp_run_fraction`") && err.contains("1.5"),
            "{err}"
        );
        let err = error_of("[gpu]\nmps = \"sometimes\"\n");
        assert!(err.starts_with("test.toml:2: field `mps`"), "{err}");
        let err = error_of("[gpu]\nmin_run_fraction = 0.5\n");
        assert!(err.contains("above clamp_run_fraction"), "{err}");
    }

    #[test]
    fn control_section_takes_defaults_and_names_bad_caps_by_line() {
        let control = parse("").unwrap().settings().control;
        assert_eq!(control.idle_timeout, std::time::Duration::from_secs(60));
        assert_eq!(
            (control.max_connections_per_user, control.max_connections),
            (64, 512)
        );
        let err = error_of(
            "[control]
max_connections_per_user = 8
max_connections = 0
",
        );
        assert!(
            err.starts_with("test.toml:3: field `max_connections`") && err.contains("at least 1"),
            "{err}"
        );
        let err = error_of(
            "[control]
max_connections = 4
max_connections_per_user = 8
",
        );
        assert!(
            err.starts_with("test.toml:3: field `max_connections_per_user`")
                && err.contains("more than max_connections"),
            "{err}"
        );
        let err = error_of(
            "[control]
idle_timeout = 5
",
        );
        assert!(err.contains("idle_timeout"), "{err}");
    }

    #[test]
    fn the_shipped_example_config_parses_with_its_stated_defaults() {
        let config = parse(include_str!("../../../deploy/enforcer.example.toml")).unwrap();
        assert_eq!(config.settings().policy, Settings::default().policy);
        assert_eq!(config.settings().control, Settings::default().control);
        let defaults = gpu::GpuSection::default();
        assert_eq!(config.gpu.sample_ms, defaults.sample_ms);
        assert_eq!(config.gpu.settings(), defaults.settings());
        assert_eq!(
            config.gpu.training_memory_reserve_mib,
            defaults.training_memory_reserve_mib
        );
        let kubernetes = kubernetes::KubernetesSection::default();
        assert_eq!(config.kubernetes.cgroup_root, kubernetes.cgroup_root);
        assert_eq!(config.kubernetes.cgroup_driver, kubernetes.cgroup_driver);
        assert!(config.kubernetes.selector.is_empty() && config.kubernetes.node_name.is_none());
    }

    #[test]
    fn the_helm_charts_default_config_follows_the_nodes_pods_on_a_gpu_server() {
        let text = include_str!("../../../deploy/helm/reamer/files/enforcer.toml");
        // The server reamer is for has 16 CPUs; the online pool keeps 2 of them.
        let config = Config::parse_for(
            Path::new("enforcer.toml"),
            text,
            Machine::Elsewhere { cpus: 16 },
        )
        .unwrap();
        assert!(config.kubernetes.is_enabled());
        let settings = config.settings();
        assert_eq!(settings.metrics, Some("0.0.0.0:9464".parse().unwrap()));
        let kinds: Vec<_> = settings
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p.is_online()))
            .collect();
        assert_eq!(kinds, [("online", true), ("batch", false)]);
    }

    #[test]
    fn gpu_flag_belongs_to_pools() {
        let config = parse("[[pool]]\nname = \"g\"\nkind = \"online\"\ngpu = true\n").unwrap();
        assert!(config.pool[0].uses_gpu());
        let pid = std::process::id();
        let err = error_of(&format!(
            "[[training]]\nname = \"t\"\npids = [{pid}]\ngpu = true\n"
        ));
        assert!(err.starts_with("test.toml:4: field `gpu`"), "{err}");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let err = error_of("[sensor\n");
        assert!(err.starts_with("test.toml:1:"), "{err}");
    }
}
