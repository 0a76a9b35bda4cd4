//! Unit tests of `service`.

use super::*;
use crate::{
    cli::launch::supervise::{StartedWith, relaunch_reason},
    config::gpu::ClampSettings,
};

const MS: u64 = 1_000_000;

#[test]
fn an_eviction_signals_the_process_judged_and_never_one_that_took_its_pid() {
    use std::os::unix::process::ExitStatusExt as _;
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = procfs::start_time(pid);
    // As if the pid now named a process started at another time: left alone.
    signal(pid, started.map(|s| s + 1), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(100));
    assert!(child.try_wait().unwrap().is_none(), "signalled a stranger");
    signal(pid, started, libc::SIGTERM);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
}

/// The service as it runs with NVML and an attached MPS control daemon, without either:
/// the policy's signals are fed by hand.
fn attached(gpu_pools: &[&str], config: ClampSettings) -> GpuService {
    let inner = Arc::new(Inner {
        policy: Mutex::new(GpuPolicy::new(config)),
        gate: None,
        gpu_pools: gpu_pools.iter().map(|p| (*p).to_owned()).collect(),
        mps: None,
        mps_set_defaults: false,
        mps_limit_servers: false,
        reserve_mib: 4096,
        evict: false,
        state: Mutex::new(State {
            driver: String::new(),
            devices: Vec::new(),
            device_errors: Vec::new(),
            client_percentage: 100,
            mps: MpsReport::Attached {
                started: false,
                in_force: None,
                last_error: None,
            },
            mps_due: false,
            evictions: 0,
            evicted: HashMap::new(),
            recent: VecDeque::new(),
            launcher_busy: None,
            busy: BusyPace::new(200 * MS),
        }),
        log: DecisionLog::none(),
        stop: AtomicBool::new(false),
    });
    GpuService {
        inner: Some(inner),
        inactive: None,
        sampler: Mutex::new(None),
    }
}

#[test]
fn only_servers_of_inference_alone_and_of_no_training_uid_take_inference_limits() {
    let training_uids = HashSet::from([0]);
    // Inference under its own uid: limited.
    assert!(server_takes_inference_limits(
        true,
        Some(1000),
        &training_uids
    ));
    // The uid training runs under: its next context would join this server.
    assert!(!server_takes_inference_limits(
        true,
        Some(0),
        &training_uids
    ));
    // A training client, or a server whose uid cannot be read: left alone.
    assert!(!server_takes_inference_limits(
        false,
        Some(1000),
        &training_uids
    ));
    assert!(!server_takes_inference_limits(true, None, &training_uids));
}

#[test]
fn a_held_clamp_becomes_the_percentage_relaunching_launchers_start_workers_with() {
    let config = ClampSettings {
        retarget_after_ns: 1000 * MS,
        ..ClampSettings::default()
    };
    let gpu = attached(&["serve"], config);
    let new_worker = |gpu: &GpuService| StartedWith::new(0, &gpu.client_env("serve").unwrap());
    let mut running = new_worker(&gpu);
    assert_eq!(running.percentage, 100);
    // NVML shows training on a GPU, then its launch thread starts a step: clamped at once,
    // and the clamp alone changes no percentage.
    gpu.decide(0, |policy| policy.on_nvml(0, true, Some(0.0)));
    gpu.on_training_cpu_rise(10 * MS, 1.0);
    let last = |gpu: &GpuService| {
        let inner = gpu.inner.as_ref().unwrap();
        lock(&inner.state).recent.back().map(|r| r.decision)
    };
    assert!(
        matches!(last(&gpu), Some(GpuDecision::Gate { run_fraction, .. }) if run_fraction == 0.1),
        "{:?}",
        last(&gpu)
    );
    assert_eq!(relaunch_reason(&mut running, new_worker(&gpu)), None);
    // Held past retarget_after: the lasting form of the same share, which a relaunching
    // launcher sees at its next poll.
    gpu.on_training_cpu(1100 * MS, 1.0);
    assert_eq!(new_worker(&gpu).percentage, 10);
    let reason = relaunch_reason(&mut running, new_worker(&gpu)).unwrap();
    assert!(reason.contains("percentage of 10"), "{reason}");
    // A pool that does not use the GPU starts with no MPS limits.
    assert!(gpu.client_env("batch").unwrap().is_empty());
}

#[test]
fn training_starts_with_the_pipe_directory_of_the_attached_mps_daemon_and_no_limits() {
    let mut gpu = attached(&["serve"], ClampSettings::default());
    // NVIDIA's default directory: nothing to tell training.
    assert!(gpu.training_env().is_empty());
    let inner = Arc::get_mut(gpu.inner.as_mut().unwrap()).unwrap();
    inner.mps = Some(MpsControl::new(
        "nvidia-cuda-mps-control",
        Some(std::path::PathBuf::from("/run/reamer-mps")),
    ));
    assert_eq!(
        gpu.training_env(),
        vec![(
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            "/run/reamer-mps".to_owned()
        )]
    );
    // A pool's client is told the same directory, with its limits.
    let pool_env = gpu.client_env("serve").unwrap();
    assert!(pool_env.contains(&(
        "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
        "/run/reamer-mps".to_owned()
    )));
    assert!(pool_env.iter().any(|(k, _)| k == mps::PERCENTAGE_ENV));
    // No control daemon answered: training is told nothing.
    let inner = gpu.inner.as_ref().unwrap();
    lock(&inner.state).mps = MpsReport::Unavailable {
        reason: "no control daemon".to_owned(),
    };
    assert!(gpu.training_env().is_empty());
}
