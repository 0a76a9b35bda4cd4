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

pub(crate) mod control;
pub(crate) mod gpu;
pub(crate) mod kubernetes;
mod members;
pub(crate) mod policy;
mod position;
pub(crate) mod sensor;
pub(crate) mod settings;

use std::{
    ops::Range,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use toml::Spanned;

use crate::host::topology::Topology;

use self::position::{invalid_field, key_at, line_of, section_key_offset};
pub use self::{
    members::{NotACgroup, check_cgroup},
    policy::PolicySection,
    sensor::{SensorClock, SensorConfig},
};
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

#[cfg(test)]
mod tests;
