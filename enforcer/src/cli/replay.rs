//! `enforcer replay`: the CPU policy run over a trace that `enforcer observe --json` recorded,
//! without a daemon, root or the traced machine.
//!
//! Each line of the trace is one interval: training's running and demand CPUs, and, in traces
//! recorded since they were added, the machine's CPU count and the contention reports per CPU.
//! The replay feeds the interval's contention reports to the fast path and its demand to the
//! slow path, at the end of the interval, as the daemon's tick does, and reports what was
//! reserved for training during each interval.
//!
//! What it can show: how the policy answers a job's demand over time (how many cores it
//! reserves, when offline pauses, how often the job ran on more CPUs than it had). What it
//! cannot: how the job would have answered the policy. The trace's demand is what the job did
//! under the reservations of the run that recorded it, and contention reports are what that
//! run's sensor sent (none from CPUs that run held for training, where they would have changed
//! nothing).

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use enforcer_common::{
    replay::ReplaySummary,
    stats::{median, quantile, sorted},
    types::MAX_CPUS,
};
use serde::Serialize;

use super::observe::ObservedInterval;
use crate::{
    config::{self, Config, Machine, OnlinePool, PolicySettings, PoolKind, PoolSettings, Settings},
    host::topology::Topology,
    policy::{Policy, PoolSpec},
};

/// The online pool's guaranteed cores in the default scenario: as in the co-location runs on
/// the 16-CPU GPU server that the shipped trace comes from.
pub(crate) const DEFAULT_ONLINE_MIN_CORES: usize = 2;

/// `DEFAULT_ONLINE_MIN_CORES`, or half the traced machine's CPUs where that is less: on a
/// machine of 2 CPUs, 2 would leave training no core (the enforcer refuses such a config), and
/// the replay would pause offline whenever training ran at all.
pub(crate) fn default_online_min_cores(cpus: usize) -> usize {
    DEFAULT_ONLINE_MIN_CORES.min(cpus / 2)
}

/// One interval as replayed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplayedInterval {
    /// Seconds from the trace's start to the interval's end.
    pub t_s: f64,
    /// Training's CPUs running and demanded (running or runnable), summed over its jobs.
    pub running_cpus: f64,
    pub demand_cpus: f64,
    /// Cores reserved for training during the interval (the policy's state at its start).
    pub reserved_cores: usize,
    /// Whether offline pools were paused during the interval.
    pub offline_paused: bool,
    /// Contention reports in the interval.
    pub contentions: u64,
    /// The policy's demand estimate after the interval's tick.
    pub estimate_cpus: f64,
}

/// The policy and pools a replay runs with.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub policy: PolicySettings,
    pub pools: Vec<PoolSettings>,
}

impl Scenario {
    /// The default policy, one online pool of `default_online_min_cores` and one offline pool,
    /// for a machine of `cpus` CPUs.
    pub(crate) fn default_for_replay(cpus: usize) -> Self {
        let defaults = Settings::default();
        let pool = |name: &str, kind| PoolSettings {
            name: name.to_owned(),
            kind,
            gpu: false,
            sources: Vec::new(),
        };
        Self {
            policy: defaults.policy,
            pools: vec![
                pool(
                    "online",
                    PoolKind::Online(OnlinePool {
                        min_cores: default_online_min_cores(cpus),
                        slo_ms: None,
                        cpu_weight: config::DEFAULT_ONLINE_CPU_WEIGHT,
                        min_cpu_weight: config::DEFAULT_MIN_ONLINE_CPU_WEIGHT,
                    }),
                ),
                pool("offline", PoolKind::Offline),
            ],
        }
    }

    /// The `[policy]` and `[[pool]]` sections of a config file (its training jobs and group
    /// members do not enter a replay).
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        Self {
            policy: settings.policy,
            pools: settings.pools.clone(),
        }
    }

    /// One line per pool and the policy's knobs, for the replay's header.
    pub(crate) fn describe(&self) -> String {
        let pools: Vec<String> = self
            .pools
            .iter()
            .map(|pool| match pool.kind.online() {
                Some(online) => format!("{} (online, min_cores {})", pool.name, online.min_cores),
                None => format!("{} (offline)", pool.name),
            })
            .collect();
        format!(
            "pools: {}; demand_window_ms {}, give_back_after_ms {}, headroom_cpus {}, \
             pause_offline_when_training_short {}",
            pools.join(", "),
            self.policy.demand_window_ns / 1_000_000,
            self.policy.give_back_after_ns / 1_000_000,
            self.policy.headroom_cpus,
            self.policy.pause_offline_when_training_short,
        )
    }
}

/// Reads a trace: one `ObservedInterval` per non-empty line.
pub(crate) fn read_trace(path: &Path) -> anyhow::Result<Vec<ObservedInterval>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut intervals = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let interval: ObservedInterval = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}:{}: not a line of `enforcer observe --json`",
                path.display(),
                index + 1
            )
        })?;
        check_interval(&interval).with_context(|| format!("{}:{}", path.display(), index + 1))?;
        intervals.push(interval);
    }
    if intervals.is_empty() {
        bail!("{}: no intervals in the trace", path.display());
    }
    Ok(intervals)
}

/// The longest interval a trace may hold: `observe` writes one every `--interval` seconds,
/// and a day is far past any interval a user asks for.
const MAX_INTERVAL_S: f64 = 86_400.0;

/// Checks an interval's numbers against what `observe` can write: a CPU count the sensor
/// supports (`MAX_CPUS`, the entries of its per-CPU map), and CPU figures that are finite,
/// not negative and within it. Replaying a count nobody checked sized the policy's topology
/// by it: a one-line trace with a huge count exhausted memory.
fn check_interval(interval: &ObservedInterval) -> anyhow::Result<()> {
    if !(interval.seconds.is_finite()
        && interval.seconds > 0.0
        && interval.seconds <= MAX_INTERVAL_S)
    {
        bail!(
            "interval of {} s: a trace's intervals last a positive time of at most {MAX_INTERVAL_S} s",
            interval.seconds
        );
    }
    if let Some(cpus) = interval.online_cpus
        && !(1..=MAX_CPUS as usize).contains(&cpus)
    {
        bail!("{cpus} online CPUs: the sensor supports 1 to {MAX_CPUS}");
    }
    if let Some(reserved) = interval.reserved_cpus
        && reserved > MAX_CPUS as usize
    {
        bail!("{reserved} CPUs reserved: more than the {MAX_CPUS} the sensor supports");
    }
    if interval.contentions_by_cpu.len() > MAX_CPUS as usize {
        bail!(
            "contentions on {} CPUs: more than the {MAX_CPUS} the sensor supports",
            interval.contentions_by_cpu.len()
        );
    }
    for job in &interval.jobs {
        for (what, cpus) in [("running", job.running_cpus), ("demand", job.demand_cpus)] {
            if !(cpus.is_finite() && (0.0..=f64::from(MAX_CPUS)).contains(&cpus)) {
                bail!(
                    "job {:?}: {what} CPUs {cpus}: a number of CPUs from 0 to {MAX_CPUS}",
                    job.name
                );
            }
        }
    }
    Ok(())
}

/// The traced machine's CPU count: `--cpus`, or what the trace records, which must agree.
pub(crate) fn traced_cpus(
    intervals: &[ObservedInterval],
    given: Option<usize>,
) -> anyhow::Result<usize> {
    let recorded: BTreeSet<usize> = intervals.iter().filter_map(|i| i.online_cpus).collect();
    if recorded.len() > 1 {
        bail!("the trace records different CPU counts ({recorded:?}): one machine per trace");
    }
    match (recorded.first().copied(), given) {
        (Some(recorded), Some(given)) if recorded != given => {
            bail!("--cpus {given}, but the trace was recorded on {recorded} CPUs: leave --cpus out")
        }
        (_, Some(0)) => bail!("--cpus 0: the traced machine had at least one CPU"),
        (_, Some(given)) if given > MAX_CPUS as usize => {
            bail!("--cpus {given}: the sensor supports at most {MAX_CPUS} CPUs")
        }
        (Some(cpus), _) | (None, Some(cpus)) => Ok(cpus),
        (None, None) => bail!(
            "the trace does not record its machine's CPU count (recorded before `observe --json` \
             did): give it with --cpus N"
        ),
    }
}

/// Runs the policy of `scenario` over `intervals` on a machine of `cpus` CPUs without SMT
/// (a trace does not say which CPUs are siblings).
pub(crate) fn replay(
    intervals: &[ObservedInterval],
    scenario: &Scenario,
    cpus: usize,
) -> (Vec<ReplayedInterval>, ReplaySummary) {
    let mut policy_settings = scenario.policy;
    // As the daemon: nothing to pause without an offline pool the CPU side owns.
    let pausable = scenario
        .pools
        .iter()
        .any(|p| p.kind == PoolKind::Offline && !p.gpu);
    policy_settings.pause_offline_when_training_short &= pausable;
    let specs = scenario.pools.iter().map(PoolSpec::from).collect();
    let mut policy = Policy::new(policy_settings, Topology::flat(cpus as u32), specs);
    let mut now_ns = 0u64;
    let mut decisions = 0;
    let mut replayed = Vec::with_capacity(intervals.len());
    for interval in intervals {
        let during = policy.allocation();
        now_ns += (interval.seconds * 1e9) as u64;
        let mut contentions = 0;
        for (cpu, &count) in interval.contentions_by_cpu.iter().enumerate() {
            contentions += count;
            if count > 0 && policy.contended(cpu as u32).is_some() {
                decisions += 1;
            }
        }
        let running_cpus: f64 = interval.jobs.iter().map(|j| j.running_cpus).sum();
        let demand_cpus: f64 = interval.jobs.iter().map(|j| j.demand_cpus).sum();
        if policy.observe_demand(now_ns, demand_cpus).is_some() {
            decisions += 1;
        }
        replayed.push(ReplayedInterval {
            t_s: now_ns as f64 / 1e9,
            running_cpus,
            demand_cpus,
            reserved_cores: during.training.len(),
            offline_paused: during.offline_paused,
            contentions,
            estimate_cpus: policy.estimate_cpus(),
        });
    }
    let summary = summarize(&replayed, cpus, decisions);
    (replayed, summary)
}

fn summarize(replayed: &[ReplayedInterval], cpus: usize, decisions: usize) -> ReplaySummary {
    let running = sorted(replayed.iter().map(|r| r.running_cpus));
    let demand = sorted(replayed.iter().map(|r| r.demand_cpus));
    let reserved = sorted(replayed.iter().map(|r| r.reserved_cores as f64));
    let share = |count: usize| 100.0 * count as f64 / replayed.len().max(1) as f64;
    let paused = replayed.iter().filter(|r| r.offline_paused).count();
    let short = replayed
        .iter()
        .filter(|r| r.running_cpus > r.reserved_cores as f64)
        .count();
    ReplaySummary {
        intervals: replayed.len(),
        cpus,
        running_cpus_p50: median(&running),
        running_cpus_p90: quantile(&running, 0.9),
        demand_cpus_p50: median(&demand),
        demand_cpus_p90: quantile(&demand, 0.9),
        reserved_cores_p50: median(&reserved),
        reserved_cores_p90: quantile(&reserved, 0.9),
        offline_paused_pct: share(paused),
        paused_at_half_or_less: replayed
            .iter()
            .filter(|r| r.offline_paused && r.running_cpus <= cpus as f64 / 2.0)
            .count(),
        short_pct: share(short),
        decisions,
    }
}

/// `enforcer replay`: reads the trace and the scenario, replays, prints.
pub(crate) fn run(
    trace: &Path,
    config: Option<PathBuf>,
    cpus: Option<usize>,
    json: bool,
) -> anyhow::Result<()> {
    let intervals = read_trace(trace)?;
    let cpus = traced_cpus(&intervals, cpus)?;
    let scenario = match &config {
        Some(path) => {
            Scenario::from_settings(&Config::load(path, Machine::Elsewhere { cpus })?.settings())
        }
        None => Scenario::default_for_replay(cpus),
    };
    let (replayed, summary) = replay(&intervals, &scenario, cpus);
    let mut out = std::io::stdout().lock();
    if json {
        for interval in &replayed {
            writeln!(out, "{}", serde_json::to_string(interval)?)?;
        }
        writeln!(out, "{}", serde_json::to_string(&summary)?)?;
        return Ok(());
    }
    let source = config.map_or_else(
        || "the default scenario".to_owned(),
        |path| path.display().to_string(),
    );
    writeln!(
        out,
        "replaying {} on {cpus} CPUs with {source}\n{}",
        trace.display(),
        scenario.describe()
    )?;
    writeln!(
        out,
        "{:>8} {:>8} {:>8} {:>9} {:>8} {:>7} {:>12}",
        "t (s)", "running", "demand", "estimate", "reserved", "paused", "contentions"
    )?;
    for r in &replayed {
        writeln!(
            out,
            "{:>8.1} {:>8.2} {:>8.2} {:>9.2} {:>8} {:>7} {:>12}",
            r.t_s,
            r.running_cpus,
            r.demand_cpus,
            r.estimate_cpus,
            r.reserved_cores,
            if r.offline_paused { "yes" } else { "-" },
            r.contentions
        )?;
    }
    writeln!(
        out,
        "{} intervals: training ran on {:.2} CPUs at the median ({:.2} at p90); cores \
         reserved for it: {} at the median ({} at p90); offline paused {:.1}% of the time ({} \
         intervals with training on half the CPUs or fewer); training ran on more CPUs than \
         it had reserved in {:.1}% of the intervals; {} decisions",
        summary.intervals,
        summary.running_cpus_p50,
        summary.running_cpus_p90,
        summary.reserved_cores_p50,
        summary.reserved_cores_p90,
        summary.offline_paused_pct,
        summary.paused_at_half_or_less,
        summary.short_pct,
        summary.decisions,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensor::interval::JobInterval;

    /// A 100 ms interval of one job at `running` CPUs (demand the same), with `contended`
    /// CPUs reported.
    fn interval(running: f64, contended: &[usize], cpus: Option<usize>) -> ObservedInterval {
        let mut contentions_by_cpu = vec![0; 16];
        for &cpu in contended {
            contentions_by_cpu[cpu] += 1;
        }
        ObservedInterval {
            seconds: 0.1,
            online_cpus: cpus,
            jobs: vec![JobInterval {
                name: "job".into(),
                threads: 8,
                wait_p50_ns: None,
                wait_p99_ns: None,
                wait_max_ns: None,
                waits: 0,
                demand_cpus: running,
                running_cpus: running,
                events_per_s: 0.0,
                behind_inference_per_s: 0.0,
                offline_wait_pct: 0.0,
                pace_steps_per_s: None,
                gpu_busy: None,
            }],
            contentions_by_cpu,
            counters: Default::default(),
            sensor_ns_per_run: None,
            reserved_cpus: None,
            offline_paused: None,
            harvest: None,
        }
    }

    #[test]
    fn each_interval_shows_the_reservation_it_ran_under() {
        // 3 CPUs for 3 s, a contention on CPU 9 at 2 s, then 5 CPUs for a tick.
        let mut trace: Vec<ObservedInterval> = (0..30)
            .map(|i| interval(3.0, if i == 20 { &[9] } else { &[] }, None))
            .collect();
        trace.push(interval(5.0, &[], None));
        let (replayed, summary) = replay(&trace, &Scenario::default_for_replay(16), 16);
        assert_eq!(
            replayed[0].reserved_cores, 0,
            "nothing before the first tick"
        );
        assert_eq!(replayed[1].reserved_cores, 4, "ceil(3 + 0.25)");
        assert_eq!(
            replayed[20].reserved_cores, 4,
            "the contention comes within"
        );
        assert_eq!(replayed[21].reserved_cores, 5, "and holds after");
        assert_eq!(replayed[20].contentions, 1);
        assert_eq!(summary.intervals, 31);
        // Short: the first interval (3 CPUs on none) and the last (5 on 5 is not short).
        assert!(
            (summary.short_pct - 100.0 / 31.0).abs() < 1e-9,
            "{summary:?}"
        );
        assert_eq!(summary.reserved_cores_p50, 4.0);
        assert_eq!(summary.offline_paused_pct, 0.0);
        assert_eq!(
            summary.decisions, 2,
            "the first tick's rise and the contention"
        );
    }

    #[test]
    fn the_default_scenario_leaves_training_a_core_on_a_small_machine() {
        let min_cores = |cpus| match &Scenario::default_for_replay(cpus).pools[0].kind {
            PoolKind::Online(online) => online.min_cores,
            other => panic!("{other:?}"),
        };
        assert_eq!(min_cores(16), 2);
        assert_eq!(min_cores(4), 2);
        assert_eq!(min_cores(2), 1);
        assert_eq!(min_cores(1), 0);
        // On 2 CPUs, training at 0.5 CPUs (its headroom included, within one core) gets the
        // core the online pool leaves, and offline is not paused (with 2 guaranteed, it was
        // paused whenever training ran).
        let trace: Vec<ObservedInterval> = (0..40).map(|_| interval(0.5, &[], Some(2))).collect();
        let (_, summary) = replay(&trace, &Scenario::default_for_replay(2), 2);
        assert_eq!(summary.reserved_cores_p50, 1.0, "{summary:?}");
        assert_eq!(summary.offline_paused_pct, 0.0, "{summary:?}");
    }

    #[test]
    fn the_cpu_count_comes_from_the_trace_or_the_flag_and_they_must_agree() {
        let recorded = vec![interval(1.0, &[], Some(16)), interval(1.0, &[], Some(16))];
        assert_eq!(traced_cpus(&recorded, None).unwrap(), 16);
        assert_eq!(traced_cpus(&recorded, Some(16)).unwrap(), 16);
        let err = traced_cpus(&recorded, Some(8)).unwrap_err().to_string();
        assert!(err.contains("recorded on 16 CPUs"), "{err}");
        let old = vec![interval(1.0, &[], None)];
        assert_eq!(traced_cpus(&old, Some(4)).unwrap(), 4);
        let err = traced_cpus(&old, None).unwrap_err().to_string();
        assert!(err.contains("--cpus N"), "{err}");
        assert!(traced_cpus(&old, Some(0)).is_err());
        let err = traced_cpus(&old, Some(1 << 40)).unwrap_err().to_string();
        assert!(err.contains("at most 1024"), "{err}");
        let mixed = vec![interval(1.0, &[], Some(16)), interval(1.0, &[], Some(8))];
        assert!(traced_cpus(&mixed, None).is_err());
    }

    /// A trace's numbers are checked as it is read: a CPU count past what the sensor supports
    /// sized the replay's topology (one such line exhausted memory), and CPU figures that are
    /// negative or past it are no trace `observe` writes.
    #[test]
    fn a_trace_with_numbers_no_sensor_writes_is_refused_naming_its_line() {
        let path =
            std::env::temp_dir().join(format!("reamer-bad-trace-{}.jsonl", std::process::id()));
        let good = serde_json::to_string(&interval(1.0, &[], Some(16))).unwrap();
        let job = |running: f64| {
            let mut i = interval(running, &[], Some(16));
            i.jobs[0].running_cpus = running;
            serde_json::to_string(&i).unwrap()
        };
        for (bad, want) in [
            (
                serde_json::to_string(&interval(1.0, &[], Some(1 << 40))).unwrap(),
                "1099511627776 online CPUs: the sensor supports 1 to 1024",
            ),
            (job(-1.0), "running CPUs -1"),
            (job(5000.0), "running CPUs 5000"),
            (
                {
                    let mut long = interval(1.0, &[], Some(16));
                    long.seconds = 1e9;
                    serde_json::to_string(&long).unwrap()
                },
                "at most 86400 s",
            ),
        ] {
            std::fs::write(&path, format!("{good}\n{bad}\n")).unwrap();
            let err = format!("{:#}", read_trace(&path).unwrap_err());
            assert!(
                err.contains(&format!("{}:2", path.display())) && err.contains(want),
                "{err}"
            );
        }
        std::fs::write(&path, format!("{good}\n")).unwrap();
        assert_eq!(read_trace(&path).unwrap().len(), 1);
        std::fs::remove_file(&path).unwrap();
    }
}
