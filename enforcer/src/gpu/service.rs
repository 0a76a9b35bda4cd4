//! The GPU side of the daemon: samples NVML, attributes processes, runs the GPU policy and
//! the memory guard, gates the GPU pools with the freezer, and keeps MPS limits in force.
//!
//! Without NVML (no driver, no GPU) it logs one line saying so and reports `disabled`; the
//! CPU side never depends on it. NVML and the MPS control program are blocking calls, so the
//! sampling runs on a thread of its own, off the async runtime and off the event thread.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use enforcer_common::protocol::gpu::{
    DeviceReport, GpuActive, GpuDecisionRecord, GpuReport, MemLimitMib, MpsReport, ProcessReport,
};
use tracing::{info, warn};

use super::{
    attribution::{self, Owner},
    clamp::{GpuDecision, GpuPolicy},
    duty_cycle::{DutyCycle, GateStats},
    launcher::LauncherWatch,
    memory_guard::{self, Eviction},
    mps::{self, MpsControl},
    telemetry::GpuTelemetry,
    training_busy,
};
use crate::{
    actuate::{decision_log::DecisionLog, freezer::Freezer},
    config::{
        Settings,
        gpu::{GpuSettings, MpsMode},
    },
    host::{clock::monotonic_ns, procfs},
    policy::{busy_pace::BusyPace, pace::Report},
};

/// Decisions kept for the status.
const RECENT: usize = 8;
/// How often MPS settings are re-applied to new servers and read back.
const MPS_RECONCILE: Duration = Duration::from_secs(5);
/// An evicted process gets this long to exit on SIGTERM before SIGKILL.
const EVICTION_GRACE: Duration = Duration::from_secs(10);
/// A new inference client needs at least this much GPU memory to start a CUDA context.
const MIN_CLIENT_MIB: u64 = 512;

/// A GPU pool that cannot admit another process: no device has room for a CUDA context.
#[derive(Debug, thiserror::Error)]
#[error(
    "GPU pool {pool:?} is full: no GPU has {MIN_CLIENT_MIB} MiB left for a new inference client \
     beside training and its reserve ({})",
    room.iter().map(|(d, mib)| format!("GPU {d}: {mib} MiB")).collect::<Vec<_>>().join(", ")
)]
pub(crate) struct PoolFull {
    pub pool: String,
    /// Each device and the MiB a new client would get there.
    pub room: Vec<(u32, u64)>,
}

/// Who owns which thread id, read from the registry when asked.
pub(crate) type OwnersFn = Arc<dyn Fn() -> HashMap<u32, Owner> + Send + Sync>;

pub(crate) struct GpuService {
    inner: Option<Arc<Inner>>,
    /// Set when the GPU side is not running: off, or disabled with a reason.
    inactive: Option<GpuReport>,
    sampler: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    policy: Mutex<GpuPolicy>,
    gate: Option<DutyCycle>,
    gpu_pools: BTreeSet<String>,
    mps: Option<MpsControl>,
    mps_set_defaults: bool,
    mps_limit_servers: bool,
    reserve_mib: u64,
    evict: bool,
    state: Mutex<State>,
    log: DecisionLog,
    stop: AtomicBool,
}

struct State {
    driver: String,
    devices: Vec<DeviceReport>,
    device_errors: Vec<String>,
    client_percentage: u32,
    mps: MpsReport,
    mps_due: bool,
    evictions: u64,
    /// Each evicted process: when SIGTERM went, and its start time then (what tells it from
    /// a process that reused its pid).
    evicted: HashMap<u32, (Instant, Option<u64>)>,
    recent: VecDeque<GpuDecisionRecord>,
    /// Training's launching threads' latest busy share (`launcher`).
    launcher_busy: Option<f64>,
    /// Each training job's GPU busy time, counted (`training_busy`): the pace controller's
    /// signal for a job that reports no progress.
    busy: BusyPace,
}

impl GpuService {
    /// Starts the GPU side as configured; never fails. `freezers` are the GPU pools', which
    /// the duty cycle gates; decisions go to `log`.
    pub(crate) fn start(
        settings: &Settings,
        freezers: Vec<Arc<Freezer>>,
        log: DecisionLog,
        owners: OwnersFn,
    ) -> Self {
        let section = &settings.gpu;
        if !section.enabled {
            info!("GPU features off by configuration ([gpu] enabled = \"off\")");
            return Self::inactive(GpuReport::Off);
        }
        let telemetry = match GpuTelemetry::open() {
            Ok(telemetry) => telemetry,
            Err(reason) => {
                warn!("GPU features disabled: {reason}. CPU enforcement is unaffected.");
                return Self::inactive(GpuReport::Disabled {
                    reason: reason.to_string(),
                });
            }
        };
        let driver = telemetry.driver_version();
        info!(
            gpus = telemetry.device_count(),
            driver, "GPU telemetry on (NVML)"
        );

        let gpu_pools: BTreeSet<String> = settings
            .pools
            .iter()
            .filter(|p| p.gpu)
            .map(|p| p.name.clone())
            .collect();
        let gate = if freezers.is_empty() {
            info!("no [[pool]] has gpu = true: GPU telemetry only, nothing to gate");
            None
        } else {
            let period = section.gate_period;
            match DutyCycle::start(freezers, period, settings.event_thread_rt_priority) {
                Ok(gate) => Some(gate),
                Err(err) => {
                    warn!("GPU gating off: cannot start its thread: {err}");
                    None
                }
            }
        };
        let (mps, mps_report) = attach_mps(section);
        let inner = Arc::new(Inner {
            policy: Mutex::new(GpuPolicy::new(section.clamp.clone())),
            gate,
            gpu_pools,
            mps,
            mps_set_defaults: section.mps_set_defaults,
            mps_limit_servers: section.mps_limit_servers,
            reserve_mib: section.training_memory_reserve_mib,
            evict: section.evict,
            state: Mutex::new(State {
                driver,
                devices: Vec::new(),
                device_errors: Vec::new(),
                client_percentage: 100,
                mps: mps_report,
                mps_due: true,
                evictions: 0,
                evicted: HashMap::new(),
                recent: VecDeque::new(),
                launcher_busy: None,
                busy: BusyPace::new(section.sample_every.as_nanos() as u64),
            }),
            log,
            stop: AtomicBool::new(false),
        });
        let period = section.sample_every;
        let sampler = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("reamer-gpu".to_owned())
                .spawn(move || sample_forever(&inner, telemetry, &owners, period))
        };
        let sampler = match sampler {
            Ok(handle) => Some(handle),
            Err(err) => {
                warn!("GPU sampling off: cannot start its thread: {err}");
                None
            }
        };
        Self {
            inner: Some(inner),
            inactive: None,
            sampler: Mutex::new(sampler),
        }
    }

    fn inactive(report: GpuReport) -> Self {
        Self {
            inner: None,
            inactive: Some(report),
            sampler: Mutex::new(None),
        }
    }

    /// Whether some GPU pool is gated: then the daemon watches training's CPU use at the fast
    /// signal's period as well as at its policy tick.
    pub(crate) fn gates(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|inner| inner.gate.is_some())
    }

    /// Training's CPU use over the last policy tick.
    pub(crate) fn on_training_cpu(&self, now_ns: u64, cpus: f64) {
        self.decide(now_ns, |policy| policy.on_training_cpu(now_ns, cpus));
    }

    /// Training's CPU use over the fast signal's short period: a rise, or nothing.
    pub(crate) fn on_training_cpu_rise(&self, now_ns: u64, cpus: f64) {
        self.decide(now_ns, |policy| policy.on_training_cpu_rise(now_ns, cpus));
    }

    fn decide(&self, now_ns: u64, signal: impl FnOnce(&mut GpuPolicy) -> Vec<GpuDecision>) {
        if let Some(inner) = &self.inner {
            let decisions = signal(&mut lock(&inner.policy));
            for decision in decisions {
                inner.apply(now_ns, decision);
            }
        }
    }

    /// The environment a training process launched through the enforcer starts with: where
    /// the attached MPS control daemon listens, when `mps_pipe_dir` moved it from NVIDIA's
    /// default. Without it CUDA looks in /tmp/nvidia-mps, finds no daemon, and training runs
    /// outside the server its GPU pools share, time-sliced against it instead of beside it.
    /// No limits: those only tighten the clients given them.
    pub(crate) fn training_env(&self) -> Vec<(String, String)> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        if !matches!(lock(&inner.state).mps, MpsReport::Attached { .. }) {
            return Vec::new();
        }
        inner
            .mps
            .as_ref()
            .and_then(MpsControl::pipe_dir)
            .map(|dir| {
                vec![(
                    mps::PIPE_DIRECTORY_ENV.to_owned(),
                    dir.display().to_string(),
                )]
            })
            .unwrap_or_default()
    }

    /// The environment a process joining `pool` starts with: its MPS limits when the pool
    /// uses the GPU and MPS is attached. Refuses the process when no device has room for a
    /// CUDA context beside training.
    pub(crate) fn client_env(&self, pool: &str) -> Result<Vec<(String, String)>, PoolFull> {
        let Some(inner) = &self.inner else {
            return Ok(Vec::new());
        };
        if !inner.gpu_pools.contains(pool) {
            return Ok(Vec::new());
        }
        let state = lock(&inner.state);
        let limits: Vec<(u32, MemLimitMib)> = state
            .devices
            .iter()
            .map(|d| (d.index, MemLimitMib(d.new_client_limit_mib)))
            .collect();
        if !limits.is_empty() && limits.iter().all(|(_, l)| l.0 < MIN_CLIENT_MIB) {
            return Err(PoolFull {
                pool: pool.to_owned(),
                room: limits.iter().map(|(d, l)| (*d, l.0)).collect(),
            });
        }
        if !matches!(state.mps, MpsReport::Attached { .. }) {
            return Ok(Vec::new());
        }
        let pipe_dir = inner.mps.as_ref().and_then(MpsControl::pipe_dir);
        Ok(mps::client_env(state.client_percentage, &limits, pipe_dir))
    }

    /// `job`'s GPU busy time as progress reports (`training_busy`): (time in ns, busy µs so
    /// far); None where its GPUs give no figure of its own, or it has none yet.
    pub(crate) fn busy_reports(&self, job: &str, now_ns: u64) -> Option<Vec<Report>> {
        lock(&self.inner.as_ref()?.state).busy.reports(job, now_ns)
    }

    /// `job`'s GPU busy share over the last 5 s, in GPUs busy (`training_busy`).
    pub(crate) fn busy_share(&self, job: &str, now_ns: u64) -> Option<f64> {
        lock(&self.inner.as_ref()?.state).busy.share(job, now_ns)
    }

    pub(crate) fn report(&self) -> GpuReport {
        if let Some(report) = &self.inactive {
            return report.clone();
        }
        let inner = self.inner.as_ref().expect("active without inner");
        let state = lock(&inner.state);
        GpuReport::Active(Box::new(GpuActive {
            driver: state.driver.clone(),
            devices: state.devices.clone(),
            device_errors: state.device_errors.clone(),
            gated_pools: inner.gpu_pools.iter().cloned().collect(),
            gate: inner.gate.as_ref().map_or(
                GateStats {
                    run_fraction: 1.0,
                    ..GateStats::default()
                },
                DutyCycle::stats,
            ),
            training_active: lock(&inner.policy).training_active(),
            launcher_busy: state.launcher_busy,
            client_percentage: state.client_percentage,
            mps: state.mps.clone(),
            evictions: state.evictions,
            recent: state.recent.iter().cloned().collect(),
        }))
    }

    /// Stops sampling and gating; the gated pools are thawed when this returns.
    pub(crate) fn shutdown(&self) {
        let Some(inner) = &self.inner else { return };
        inner.stop.store(true, Ordering::Relaxed);
        if let Some(sampler) = lock(&self.sampler).take() {
            let _ = sampler.join();
        }
        if let Some(gate) = &inner.gate {
            gate.stop();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn attach_mps(section: &GpuSettings) -> (Option<MpsControl>, MpsReport) {
    if section.mps == MpsMode::Off {
        return (None, MpsReport::Off);
    }
    // A daemon the enforcer may start gets a pipe directory only root can write; attaching
    // without `mps_pipe_dir` looks where the operator's daemon listens, NVIDIA's default.
    let pipe_dir = section.mps_pipe_dir.clone().or_else(|| {
        (section.mps == MpsMode::Start)
            .then(|| std::path::PathBuf::from(crate::host::paths::MPS_PIPE_DIR))
    });
    let control = MpsControl::new(&section.mps_control, pipe_dir);
    match control.start_or_attach(section.mps == MpsMode::Start) {
        Ok(started) => {
            info!(started, "MPS control daemon in use");
            let report = MpsReport::Attached {
                started,
                in_force: None,
                last_error: None,
            };
            (Some(control), report)
        }
        Err(err) => {
            warn!("MPS limits disabled: {err}. Gating and the memory guard still act.");
            (
                None,
                MpsReport::Unavailable {
                    reason: err.to_string(),
                },
            )
        }
    }
}

impl Inner {
    fn apply(&self, now_ns: u64, decision: GpuDecision) {
        match decision {
            GpuDecision::Gate { run_fraction, why } => {
                if let Some(gate) = &self.gate {
                    gate.set(run_fraction);
                }
                info!(run_fraction, ?why, "GPU inference gate changed");
            }
            GpuDecision::Retarget { percentage } => {
                let mut state = lock(&self.state);
                state.client_percentage = percentage;
                state.mps_due = true;
                info!(
                    percentage,
                    "new GPU inference clients get this MPS percentage"
                );
            }
        }
        let record = GpuDecisionRecord {
            at_ns: now_ns,
            decision,
        };
        self.log.append(&serde_json::json!({ "gpu": &record }));
        let mut state = lock(&self.state);
        if state.recent.len() == RECENT {
            state.recent.pop_front();
        }
        state.recent.push_back(record);
    }

    /// SIGTERM, then SIGKILL after the grace period, to processes of the GPU pools only.
    fn evict(&self, eviction: &Eviction, state: &mut State) {
        if !self.gpu_pools.contains(&eviction.pool) {
            return;
        }
        let pid = eviction.pid;
        if !self.evict {
            let started = procfs::start_time(pid);
            if state
                .evicted
                .insert(pid, (Instant::now(), started))
                .is_none()
            {
                warn!("{} (not done: [gpu] evict = false)", eviction.message);
            }
            return;
        }
        match state.evicted.get(&pid).copied() {
            None => {
                // Read with the sample that placed it in the pool: from here on the start time
                // tells this process from one that reuses its pid.
                let started = procfs::start_time(pid);
                warn!("{}", eviction.message);
                signal(pid, started, libc::SIGTERM);
                state.evicted.insert(pid, (Instant::now(), started));
                state.evictions += 1;
            }
            Some((since, started)) if since.elapsed() >= EVICTION_GRACE => {
                warn!(pid, "still holding GPU memory after SIGTERM: SIGKILL");
                signal(pid, started, libc::SIGKILL);
            }
            Some(_) => {}
        }
    }

    /// Sets inference's limits on servers that serve inference only and the defaults, each
    /// where configured, then reads back what is in force.
    fn reconcile_mps(&self, owners: &HashMap<u32, Owner>) {
        let Some(control) = &self.mps else { return };
        let (percentage, limits, devices) = {
            let state = lock(&self.state);
            let limits: Vec<(u32, MemLimitMib)> = state
                .devices
                .iter()
                .map(|d| (d.index, MemLimitMib(d.new_client_limit_mib)))
                .collect();
            let devices: Vec<u32> = state.devices.iter().map(|d| d.index).collect();
            (state.client_percentage, limits, devices)
        };
        let is_inference = |pid: &u32| matches!(owners.get(pid), Some(Owner::Pool(pool)) if self.gpu_pools.contains(pool));
        let result = (|| -> Result<_, mps::MpsError> {
            if self.mps_set_defaults {
                control.set_default_thread_percentage(percentage)?;
                for (device, limit) in &limits {
                    control.set_default_mem_limit(*device, *limit)?;
                }
            }
            if !self.mps_limit_servers {
                return control.limits_in_force(&devices);
            }
            let training_uids: HashSet<u32> = owners
                .iter()
                .filter(|(_, owner)| matches!(owner, Owner::Training(_)))
                .filter_map(|(pid, _)| procfs::uid_of(*pid))
                .collect();
            for server in control.server_list()? {
                let clients = control.client_list(server)?;
                let all_inference = !clients.is_empty() && clients.iter().all(is_inference);
                if !server_takes_inference_limits(
                    all_inference,
                    procfs::uid_of(server),
                    &training_uids,
                ) {
                    continue;
                }
                control.set_thread_percentage(server, percentage)?;
                for (device, limit) in &limits {
                    control.set_mem_limit(server, *device, *limit)?;
                }
            }
            control.limits_in_force(&devices)
        })();
        let mut state = lock(&self.state);
        if let MpsReport::Attached {
            in_force,
            last_error,
            ..
        } = &mut state.mps
        {
            match result {
                Ok(force) => {
                    *in_force = Some(force);
                    *last_error = None;
                }
                Err(err) => {
                    if last_error.as_deref() != Some(&err.to_string()) {
                        warn!("MPS: {err}");
                    }
                    *last_error = Some(err.to_string());
                }
            }
        }
    }
}

/// Whether an MPS server gets inference's limits: it serves inference only, and no training
/// process runs under its uid. MPS serves each uid from one server, so a training process of
/// that uid would join it, limits and all, with its next CUDA context.
fn server_takes_inference_limits(
    clients_all_inference: bool,
    server_uid: Option<u32>,
    training_uids: &HashSet<u32>,
) -> bool {
    clients_all_inference && server_uid.is_some_and(|uid| !training_uids.contains(&uid))
}

fn sample_forever(inner: &Inner, mut telemetry: GpuTelemetry, owners: &OwnersFn, period: Duration) {
    let mut last_mps = Instant::now();
    let mut launchers = LauncherWatch::default();
    while !inner.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let owners = owners();
        let mut devices = Vec::new();
        let mut device_errors = Vec::new();
        let mut evictions = Vec::new();
        let mut training_sm: Option<f64> = None;
        let mut training_pids: Vec<u32> = Vec::new();
        let mut busy: BTreeMap<String, f64> = BTreeMap::new();
        for sample in telemetry.sample() {
            let sample = match sample {
                Ok(sample) => sample,
                Err(err) => {
                    device_errors.push(err.to_string());
                    continue;
                }
            };
            let attributed = attribution::attribute(&sample, &owners);
            training_pids.extend(
                sample
                    .processes
                    .iter()
                    .zip(&attributed.processes)
                    .filter(|(_, (_, owner))| matches!(owner, Some(Owner::Training(_))))
                    .map(|(process, _)| process.pid),
            );
            if let Some(sm) = attributed.training_sm_pct {
                *training_sm.get_or_insert(0.0) += sm;
            }
            for (job, share) in training_busy::busy_on_device(&sample, &attributed) {
                *busy.entry(job).or_insert(0.0) += share;
            }
            let verdict = memory_guard::judge(&attributed.memory, inner.reserve_mib);
            evictions.extend(verdict.evict.iter().cloned());
            devices.push(DeviceReport {
                index: sample.index,
                name: sample.name.clone(),
                utilization_pct: sample.utilization_pct,
                memory_used_mib: sample.memory_used_mib,
                memory_total_mib: sample.memory_total_mib,
                training_mib: attributed.memory.training_mib,
                inference_mib: attributed.memory.inference.iter().map(|p| p.used_mib).sum(),
                other_mib: attributed.memory.other_mib,
                training_sm_pct: attributed.training_sm_pct,
                new_client_limit_mib: verdict.new_client_limit.0,
                processes: sample
                    .processes
                    .iter()
                    .zip(attributed.processes)
                    .map(|(process, (_, owner))| ProcessReport {
                        pid: process.pid,
                        owner,
                        used_mib: process.used_mib,
                        sm_pct: process.sm_pct,
                    })
                    .collect(),
            });
        }
        let now = monotonic_ns();
        let launcher_busy = launchers.busy_share(now, &training_pids);
        let decisions = {
            let mut policy = lock(&inner.policy);
            let training_on_gpu = !training_pids.is_empty();
            let mut decisions = policy.on_nvml(now, training_on_gpu, training_sm);
            if let Some(share) = launcher_busy {
                decisions.extend(policy.on_launcher_busy(now, share));
            }
            decisions
        };
        for decision in decisions {
            inner.apply(now, decision);
        }
        let mps_due = {
            let mut state = lock(&inner.state);
            state.launcher_busy = launcher_busy;
            state.busy.record(now, &busy);
            state.devices = devices;
            state.device_errors = device_errors;
            let on_gpu: BTreeSet<u32> = state
                .devices
                .iter()
                .flat_map(|d| d.processes.iter().map(|p| p.pid))
                .collect();
            state.evicted.retain(|pid, _| on_gpu.contains(pid));
            for eviction in &evictions {
                inner.evict(eviction, &mut state);
            }
            state.mps_due || last_mps.elapsed() >= MPS_RECONCILE
        };
        if mps_due {
            inner.reconcile_mps(&owners);
            lock(&inner.state).mps_due = false;
            last_mps = Instant::now();
        }
        let rest = period.saturating_sub(started.elapsed());
        // Sleep in short slices so that shutdown does not wait a whole period.
        let until = Instant::now() + rest;
        while Instant::now() < until && !inner.stop.load(Ordering::Relaxed) {
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
        }
    }
}

/// Sends `signal` to an evicted process through a pidfd: the handle is taken first, the
/// process it names is checked to be the one judged (`started`, its start time then), and the
/// signal goes through the handle, so it cannot reach a process that took the pid meanwhile.
/// A refusal is logged, not silent: another user's process needs CAP_KILL, which
/// `enforcer check` notes when it is missing.
fn signal(pid: u32, started: Option<u64>, signal: i32) {
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        // Gone already: nothing left to evict.
        if err.raw_os_error() != Some(libc::ESRCH) {
            warn!(pid, signal, "cannot evict: pidfd_open: {err}");
        }
        return;
    }
    // SAFETY: a descriptor pidfd_open just returned, owned here alone.
    let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    if started.is_none() || procfs::start_time(pid) != started {
        warn!(
            pid,
            "not evicted: the pid now names another process than the one judged"
        );
        return;
    }
    // SAFETY: a live pidfd, a signal number, no siginfo, no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent == 0 {
        return;
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        return;
    }
    warn!(
        pid,
        signal, "cannot evict: {err} (another user's process needs CAP_KILL)"
    );
}

#[cfg(test)]
mod tests;
