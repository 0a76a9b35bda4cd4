//! The settings every part of the daemon takes: the validated config converted once, with its
//! defaults filled in and its units made the ones the code works in (ns, `Duration`).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use enforcer_common::WAIT_THRESHOLD_UNIT_NS;

use super::{
    Config, GroupConfig, PoolKindField, SensorClock, control::ControlSettings, gpu::GpuSettings,
    kubernetes::KubernetesSection,
};

/// Everything `enforcer run` needs from its config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub sensor: SensorSettings,
    pub policy: PolicySettings,
    /// false: observe only, never touch a pool's CPUs, weight or freezer.
    pub enforce: bool,
    /// The slow path's period: how often training's demand is read.
    pub tick: Duration,
    /// SCHED_FIFO priority of the threads that react to events (0: the normal class).
    pub event_thread_rt_priority: i32,
    /// Where `/metrics` is served; None: nowhere.
    pub metrics: Option<SocketAddr>,
    pub gpu: GpuSettings,
    /// The control socket's caps and idle timeout.
    pub control: ControlSettings,
    pub training: Vec<GroupSettings>,
    pub pools: Vec<PoolSettings>,
    /// The node's pods to follow (docs/kubernetes.md); None: Kubernetes is off
    /// (`[kubernetes] enabled`).
    pub kubernetes: Option<KubernetesSection>,
}

/// The sensor's knobs, in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SensorSettings {
    pub wait_threshold_ns: u64,
    pub event_min_interval_ns: u64,
    pub clock: SensorClock,
    /// Entries of the inference threads' map (`pool_threads`), set at load.
    pub max_inference_threads: u32,
}

impl SensorSettings {
    /// The runtime knobs as the sensor's `settings` map holds them.
    pub fn kernel(&self) -> enforcer_common::Settings {
        enforcer_common::Settings {
            wait_threshold_ns: self.wait_threshold_ns,
            event_min_interval_ns: self.event_min_interval_ns,
        }
    }
}

/// The CPU policy's tunables (`policy::cores`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicySettings {
    /// The window whose median per-tick demand is training's estimate, in ns.
    pub demand_window_ns: u64,
    /// How long the estimate must stay below the reservation before a core goes back, in ns.
    pub give_back_after_ns: u64,
    /// CPUs reserved above the estimate.
    pub headroom_cpus: f64,
    /// The share of each second offline pools run on training's cores as soon as no free
    /// core is left, not only where training holds every core: 0, never; 1, always.
    pub training_cores_share: f64,
    /// Offline pools pause (the enforcer freezes them) while training's estimate is more CPUs
    /// than it may reserve beside the online pools' minimums.
    pub pause_offline_when_training_short: bool,
    /// Offline inference's share set by training's reported pace (`policy::harvest`); None:
    /// the core policy's alone.
    pub harvest: Option<HarvestSettings>,
}

/// The pace controller's settings (`policy::harvest`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HarvestSettings {
    /// Training's pace may fall this far below its pace with offline held back (0.01: 1%).
    pub epsilon: f64,
}

/// Where a group's threads come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Every thread in this cgroup directory.
    Cgroup(PathBuf),
    /// This process, its threads and its descendants.
    Process(u32),
}

/// A training job of the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSettings {
    pub name: String,
    pub sources: Vec<Source>,
}

/// An inference pool of the config.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    pub name: String,
    pub kind: PoolKind,
    /// Its processes use the GPU: the GPU side gates, limits and guards them.
    pub gpu: bool,
    pub sources: Vec<Source>,
}

/// What a pool is for, with what that kind needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// A latency SLO: normal class below training, guaranteed cores.
    Online(OnlinePool),
    /// Best effort: idle class, whatever cores training leaves.
    Offline,
}

/// An online pool's guarantees and weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnlinePool {
    /// Cores guaranteed even against training.
    pub min_cores: usize,
    /// The SLO its workers serve (reported to them; they size themselves to it).
    pub slo_ms: Option<u64>,
    /// Its CPU weight against training's 100, where both want a CPU (cgroup v2's scale).
    pub cpu_weight: u32,
    /// The lowest weight it is steered down to while its latency tail has room.
    pub min_cpu_weight: u32,
}

impl PoolKind {
    /// The online pool's fields; None for an offline pool.
    pub fn online(&self) -> Option<&OnlinePool> {
        match self {
            Self::Online(online) => Some(online),
            Self::Offline => None,
        }
    }
}

impl PoolSettings {
    pub fn is_online(&self) -> bool {
        self.kind.online().is_some()
    }
}

fn sources_of(group: &GroupConfig) -> Vec<Source> {
    let cgroup = group
        .cgroup
        .iter()
        .map(|c| Source::Cgroup(c.get_ref().clone()));
    let pids = group.pids.iter().map(|p| Source::Process(*p.get_ref()));
    cgroup.chain(pids).collect()
}

impl Config {
    /// The settings of this (validated) config.
    pub fn settings(&self) -> Settings {
        let policy = &self.policy;
        let ms_to_ns = |ms: u64| ms.saturating_mul(1_000_000);
        Settings {
            sensor: SensorSettings {
                wait_threshold_ns: self
                    .sensor
                    .wait_threshold_us
                    .saturating_mul(WAIT_THRESHOLD_UNIT_NS),
                event_min_interval_ns: self.sensor.event_min_interval_us.saturating_mul(1000),
                clock: self.sensor.clock,
                max_inference_threads: self.sensor.max_inference_threads,
            },
            policy: PolicySettings {
                demand_window_ns: ms_to_ns(policy.demand_window_ms),
                give_back_after_ns: ms_to_ns(policy.give_back_after_ms),
                headroom_cpus: policy.headroom_cpus,
                training_cores_share: if policy.offline_on_training_cores {
                    policy.offline_on_training_cores_share
                } else {
                    0.0
                },
                pause_offline_when_training_short: policy.pause_offline_when_training_short,
                harvest: policy.harvest_by_pace.then_some(HarvestSettings {
                    epsilon: policy.pace_epsilon,
                }),
            },
            enforce: policy.enforce,
            // A period under 10 ms would only burn CPU: the estimate decays over seconds.
            tick: Duration::from_millis(policy.tick_ms.max(10)),
            event_thread_rt_priority: policy.event_thread_rt_priority,
            metrics: self.metrics.address(),
            gpu: self.gpu.settings(),
            control: self.control.settings(),
            training: self
                .training
                .iter()
                .map(|job| GroupSettings {
                    name: job.name.get_ref().clone(),
                    sources: sources_of(job),
                })
                .collect(),
            pools: self
                .pool
                .iter()
                .map(|pool| PoolSettings {
                    name: pool.name.get_ref().clone(),
                    kind: match pool.pool_kind() {
                        PoolKindField::Online => PoolKind::Online(OnlinePool {
                            min_cores: pool.min_cores(),
                            slo_ms: pool.slo_ms(),
                            cpu_weight: pool.cpu_weight(),
                            min_cpu_weight: pool.min_cpu_weight(),
                        }),
                        PoolKindField::Offline => PoolKind::Offline,
                    },
                    gpu: pool.uses_gpu(),
                    sources: sources_of(pool),
                })
                .collect(),
            kubernetes: self
                .kubernetes
                .is_enabled()
                .then(|| self.kubernetes.clone()),
        }
    }
}

impl Default for Settings {
    /// The settings of an empty config file: `enforcer run` without one.
    fn default() -> Self {
        Config::default().settings()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{DEFAULT_MIN_ONLINE_CPU_WEIGHT, DEFAULT_ONLINE_CPU_WEIGHT};

    fn settings(text: &str) -> Settings {
        Config::parse(Path::new("test.toml"), text)
            .unwrap()
            .settings()
    }

    #[test]
    fn units_are_converted_and_defaults_filled_once() {
        let defaults = Settings::default();
        assert_eq!(defaults.sensor.wait_threshold_ns, 2_000_000);
        assert_eq!(defaults.sensor.event_min_interval_ns, 100_000);
        assert_eq!(defaults.policy.give_back_after_ns, 2_000_000_000);
        assert_eq!(defaults.policy.demand_window_ns, 2_000_000_000);
        assert_eq!(defaults.tick, Duration::from_millis(100));
        assert!(defaults.enforce);
        assert_eq!(defaults.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        let pools = settings(
            "[[pool]]\nname = \"web\"\nkind = \"online\"\nslo_ms = 50\n\
             [[pool]]\nname = \"batch\"\nkind = \"offline\"\ngpu = true\n",
        )
        .pools;
        assert_eq!(
            pools[0].kind,
            PoolKind::Online(OnlinePool {
                min_cores: 1,
                slo_ms: Some(50),
                cpu_weight: DEFAULT_ONLINE_CPU_WEIGHT,
                min_cpu_weight: DEFAULT_MIN_ONLINE_CPU_WEIGHT,
            })
        );
        assert_eq!((pools[1].kind, pools[1].gpu), (PoolKind::Offline, true));
        assert_eq!(
            settings("[policy]\ntick_ms = 1\n").tick,
            Duration::from_millis(10)
        );
    }
}
