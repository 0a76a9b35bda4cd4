//! The GPU side under a real daemon. Without the NVIDIA driver (this machine) it must say so
//! in one log line and in the status, while CPU enforcement of the same pool goes on; with a
//! driver (the device machine) it must report the GPUs it found. `enabled = "off"` turns it
//! off with its own line. With a GPU and PyTorch, the memory guard evicts a GPU pool's process
//! that training grows into, and a training job alone on its GPU gets a busy share that the
//! pace controller follows, through a stop of its GPU work (a checkpoint) as a pause; beside a
//! busy GPU pool, NVML's per-process figure reads such a stop as idle.

use std::{os::unix::process::ExitStatusExt as _, process::Command, time::Duration};

use enforcer_common::protocol::{
    Snapshot,
    gpu::{DeviceReport, GpuReport},
};
use reamer_tests::harness::{
    Daemon, enforcer_bin, eventually,
    gpu::{BUSY_ON_GPU, HOLD_GPU_MEMORY, Mps, gpu_test, wait_holding},
    privileged, remove_test_cgroups, send_signal, status_text, wait_ok,
};

/// Beside the test binary, not at the path cargo built it in: `xtask record-server --part 4`
/// runs a copy of this binary on the GPU server, whose checkout lies elsewhere.
fn hog() -> String {
    reamer_tests::harness::target_dir()
        .join("cpu-hog")
        .to_string_lossy()
        .into_owned()
}

const GPU_POOL: &str = "[[pool]]\nname = \"serve\"\nkind = \"offline\"\ngpu = true\n";

#[test]
fn without_nvml_the_gpu_side_says_so_once_and_cpu_enforcement_goes_on() {
    let instance = "it-gpu";
    if !privileged("without_nvml_the_gpu_side_says_so_once_and_cpu_enforcement_goes_on") {
        return;
    }
    let daemon = Daemon::start(instance, GPU_POOL);
    let hog = daemon.launch(
        "--pool",
        "serve",
        &hog(),
        &["--threads", "1", "--seconds", "2"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let snapshot = daemon.snapshot();
    let gpu = snapshot.gpu.clone().expect("a GPU report");
    let status = status_text(instance);
    let serve = snapshot
        .pool_status("serve")
        .unwrap_or_else(|| panic!("no pool serve in {snapshot:?}"));
    assert!(
        serve.processes.contains(&hog.id()),
        "the GPU pool's process was not placed: {serve:?}"
    );
    wait_ok(hog, "cpu-hog in the GPU pool");
    let log = daemon.stop();
    remove_test_cgroups(instance, "serve");

    match &gpu {
        GpuReport::Disabled { reason } => {
            assert!(!reason.is_empty(), "disabled without a reason: {gpu:?}");
            let lines = log.matches("GPU features disabled").count();
            assert_eq!(lines, 1, "want one log line, got {lines}:\n{log}");
            assert!(
                log.contains("CPU enforcement is unaffected"),
                "the line must say the CPU side goes on:\n{log}"
            );
            assert!(
                status.contains(&format!("GPU: disabled: {reason}")),
                "{status}"
            );
        }
        GpuReport::Active(active) => {
            assert!(log.contains("GPU telemetry on"), "{log}");
            assert!(
                !active.devices.is_empty(),
                "active without devices: {gpu:?}"
            );
            assert!(status.contains("GPU: driver"), "{status}");
        }
        GpuReport::Off => panic!("unexpected GPU state: {gpu:?}"),
    }
}

#[test]
fn gpu_off_by_configuration_is_reported_as_off() {
    let instance = "it-gpu-off";
    if !privileged("gpu_off_by_configuration_is_reported_as_off") {
        return;
    }
    let daemon = Daemon::start(instance, &format!("[gpu]\nenabled = \"off\"\n\n{GPU_POOL}"));
    let snapshot = daemon.snapshot();
    let status = status_text(instance);
    let log = daemon.stop();
    remove_test_cgroups(instance, "serve");
    assert_eq!(snapshot.gpu, Some(GpuReport::Off), "{:?}", snapshot.gpu);
    assert!(log.contains("GPU features off by configuration"), "{log}");
    assert!(!log.contains("GPU features disabled"), "{log}");
    assert!(status.contains("GPU: off"), "{status}");
}

#[test]
fn training_that_grows_into_what_inference_holds_on_the_gpu_gets_it_evicted() {
    let test = "training_that_grows_into_what_inference_holds_on_the_gpu_gets_it_evicted";
    let instance = "it-gpu-evict";
    // The test holds 30 GiB twice.
    if gpu_test(test, 64).is_none() {
        return;
    }
    // 30 GiB each on an 80 GiB H100: inference fits beside the 30000 MiB reserve alone, and
    // no longer once training holds its 30 GiB.
    let daemon = Daemon::start(
        instance,
        &format!(
            "[gpu]\nmps = \"off\"\nsample_ms = 100\ntraining_memory_reserve_mib = 30000\n\n\
             {GPU_POOL}"
        ),
    );
    let mut inference = daemon.launch(
        "--pool",
        "serve",
        "python3",
        &["-c", HOLD_GPU_MEMORY, "30", "60"],
    );
    wait_holding(&mut inference, "inference");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        inference.try_wait().expect("poll inference").is_none(),
        "inference was evicted before training held anything:\n{}",
        daemon.log()
    );
    let mut training = daemon.launch(
        "--training",
        "train",
        "python3",
        &["-c", HOLD_GPU_MEMORY, "30", "30"],
    );
    wait_holding(&mut training, "training");
    eventually(
        "the inference process evicted",
        Duration::from_secs(20),
        || inference.try_wait().expect("poll inference").is_some(),
    );
    let status = inference.wait().expect("reap inference");
    let training_alive = training.try_wait().expect("poll training").is_none();
    let _ = training.kill();
    let _ = training.wait();
    let log = daemon.stop();
    remove_test_cgroups(instance, "serve");
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "inference ended with {status}:\n{log}"
    );
    assert!(
        training_alive,
        "training did not survive the eviction:\n{log}"
    );
    let line = format!("evicting pid {} of pool \"serve\"", inference.id());
    assert!(log.contains(&line), "no {line:?} in the log:\n{log}");
}

#[test]
fn a_training_job_alone_on_its_gpu_gets_a_busy_share_that_the_pace_controller_follows() {
    let test = "a_training_job_alone_on_its_gpu_gets_a_busy_share_that_the_pace_controller_follows";
    let instance = "it-gpu-busy";
    if gpu_test(test, 8).is_none() {
        return;
    }
    // No GPU pool and no progress reports: the device's utilization is training's own, and
    // the only pace there is.
    let daemon = Daemon::start(
        instance,
        "[policy]\nharvest_by_pace = true\n\n[gpu]\nmps = \"off\"\nsample_ms = 100\n",
    );
    let mut training = daemon.launch("--training", "train", "python3", &["-c", BUSY_ON_GPU, "40"]);
    let (mut busy, mut signal) = (None, None);
    eventually(
        "training's GPU busy share, and the pace controller on it",
        Duration::from_secs(30),
        || {
            let snapshot = daemon.snapshot();
            // The job exists once `enforcer launch` registered it.
            busy = snapshot.job("train").and_then(|job| job.gpu_busy);
            signal = snapshot
                .enforcement
                .as_ref()
                .and_then(|e| e.harvest.as_ref())
                .and_then(|h| h.signal.clone());
            busy.is_some() && signal.is_some()
        },
    );
    let status = status_text(instance);
    let _ = training.kill();
    let _ = training.wait();
    let log = daemon.stop();
    // A matmul loop that synchronizes every step keeps its GPU busy most of the time.
    let busy = busy.expect("waited for");
    assert!(
        busy > 0.5 && busy <= 1.0,
        "training's GPU busy share {busy}:\n{log}"
    );
    assert_eq!(signal.as_deref(), Some("gpu_busy"), "{log}");
    assert!(status.contains("GPU busy"), "{status}");
}

#[test]
fn a_job_followed_by_its_gpus_that_stops_is_paused_and_its_level_compared_again() {
    let test = "a_job_followed_by_its_gpus_that_stops_is_paused_and_its_level_compared_again";
    let instance = "it-gpu-pause";
    if gpu_test(test, 8).is_none() {
        return;
    }
    let daemon = Daemon::start(
        instance,
        "[policy]\nharvest_by_pace = true\n\n[gpu]\nmps = \"off\"\nsample_ms = 100\n",
    );
    let training = daemon.launch("--training", "train", "python3", &["-c", BUSY_ON_GPU, "90"]);
    let training = reamer_tests::harness::Reaped(training);
    let harvest = || daemon.snapshot().enforcement.and_then(|e| e.harvest);
    // The controller's steps, from the daemon's recent decisions.
    let reasons = || -> Vec<String> {
        let decisions = daemon.snapshot().enforcement.map(|e| e.recent_decisions);
        let steps = decisions.unwrap_or_default().into_iter();
        let steps = steps.filter_map(|d| Some(d.get("harvest")?.get("reason")?.as_str()?.into()));
        steps.collect()
    };
    // Followed by its GPUs' busy share, past its first 10 s: comparing.
    eventually("the first comparison", Duration::from_secs(40), || {
        let by_gpu = harvest().is_some_and(|h| h.signal.as_deref() == Some("gpu_busy"));
        by_gpu && reasons().iter().any(|r| r == "trial")
    });
    // Its GPU work stops, its process alive, as while it writes a checkpoint: the GPU idle
    // for 2 s silences its count, and 10 s later the controller has no signal and waits for
    // it, paused.
    send_signal(training.id(), libc::SIGSTOP);
    eventually("the pause", Duration::from_secs(20), || {
        harvest().is_some_and(|h| h.paused_job.as_deref() == Some("train"))
    });
    let status = status_text(instance);
    assert!(status.contains("waiting for train, silent"), "{status}");
    // Busy again: followed again, and after 10 s its level compared again where it was.
    send_signal(training.id(), libc::SIGCONT);
    eventually("its level compared again", Duration::from_secs(20), || {
        reasons().iter().any(|r| r == "resumed")
    });
    let reasons = reasons();
    drop(training);
    daemon.stop();
    assert!(!reasons.iter().any(|r| r == "job_changed"), "{reasons:?}");
}

#[test]
fn a_job_that_stops_beside_a_busy_gpu_pool_reads_idle_by_its_own_process_figure() {
    let test = "a_job_that_stops_beside_a_busy_gpu_pool_reads_idle_by_its_own_process_figure";
    let instance = "it-gpu-idle-beside";
    if gpu_test(test, 8).is_none() {
        return;
    }
    // Without MPS NVML samples each process on its own; with a GPU pool on the device the
    // device's utilization is not training's, so its per-process figure is all it has.
    let daemon = Daemon::start(
        instance,
        &format!("[gpu]\nmps = \"off\"\nsample_ms = 100\n\n{GPU_POOL}"),
    );
    let training = daemon.launch("--training", "train", "python3", &["-c", BUSY_ON_GPU, "60"]);
    let training = reamer_tests::harness::Reaped(training);
    let pool = daemon.launch("--pool", "serve", "python3", &["-c", BUSY_ON_GPU, "60"]);
    let pool = reamer_tests::harness::Reaped(pool);
    let sm_of = |pid: u32| {
        let devices = gpu_devices(&daemon.snapshot());
        let mut processes = devices.into_iter().flat_map(|d| d.processes);
        processes.find(|p| p.pid == pid).and_then(|p| p.sm_pct)
    };
    eventually(
        "NVML's figure for training",
        Duration::from_secs(30),
        || sm_of(training.id()).is_some_and(|sm| sm > 0),
    );
    // Busy, it never reads idle: were NVML to stamp the pool's samples apart from training's,
    // a read between the two would.
    let while_busy: Vec<Option<u32>> = (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            sm_of(training.id())
        })
        .collect();
    assert!(
        !while_busy.contains(&Some(0)),
        "training read idle while busy: {while_busy:?}"
    );
    // Its GPU work stops, as while it writes a checkpoint; the pool, ungated once training
    // idles, keeps the device busy.
    send_signal(training.id(), libc::SIGSTOP);
    let mut busy = None;
    eventually(
        "training read idle beside the pool",
        Duration::from_secs(20),
        || {
            busy = daemon.snapshot().job("train").and_then(|job| job.gpu_busy);
            let pool_busy = sm_of(pool.id()).is_some_and(|sm| sm > 0);
            sm_of(training.id()) == Some(0) && pool_busy && busy.is_some_and(|b| b < 0.1)
        },
    );
    send_signal(training.id(), libc::SIGCONT);
    drop((training, pool));
    daemon.stop();
    remove_test_cgroups(instance, "serve");
    eprintln!(
        "{test}: training's SM figures while busy {while_busy:?}, its share stopped {busy:?}"
    );
}

/// The devices the daemon's GPU side reads (none where it is not active).
fn gpu_devices(snapshot: &Snapshot) -> Vec<DeviceReport> {
    match &snapshot.gpu {
        Some(GpuReport::Active(active)) => active.devices.clone(),
        _ => Vec::new(),
    }
}

/// Waits until the daemon's GPU side has read NVML once: the memory guard has figures.
fn wait_first_nvml_sample(daemon: &Daemon) {
    eventually("NVML's first sample", Duration::from_secs(10), || {
        !gpu_devices(&daemon.snapshot()).is_empty()
    });
}

/// `enforcer launch --pool serve -- CMD`, run to its end: (whether it succeeded, stderr).
fn launch_into_serve(instance: &str, command: &[&str]) -> (bool, String) {
    let output = Command::new(enforcer_bin())
        .args(["launch", "--pool", "serve", "--instance", instance, "--"])
        .args(command)
        .output()
        .expect("run enforcer launch");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_gpu_pool_refuses_new_clients_while_training_leaves_no_room_and_takes_them_again_after() {
    let test =
        "a_gpu_pool_refuses_new_clients_while_training_leaves_no_room_and_takes_them_again_after";
    let instance = "it-gpu-refuse";
    let Some(total_mib) = gpu_test(test, 40) else {
        return;
    };
    // Inference may hold total - training - others - reserve: with this reserve, 30 GiB and
    // 256 MiB less what others hold while training holds nothing, and less than the 512 MiB
    // a new client needs once training holds 30 GiB.
    let reserve_mib = total_mib - (30 << 10) - 256;
    let daemon = Daemon::start(
        instance,
        &format!(
            "[gpu]\nmps = \"off\"\nsample_ms = 100\ntraining_memory_reserve_mib = {reserve_mib}\n\n\
             {GPU_POOL}"
        ),
    );
    wait_first_nvml_sample(&daemon);
    let (admitted_before, stderr) = launch_into_serve(instance, &["true"]);
    assert!(
        admitted_before,
        "refused while training held nothing: {stderr}"
    );
    let mut training = daemon.launch(
        "--training",
        "train",
        "python3",
        &["-c", HOLD_GPU_MEMORY, "30", "60"],
    );
    wait_holding(&mut training, "training");
    let mut refusal = String::new();
    eventually("a new client refused", Duration::from_secs(10), || {
        let (admitted, stderr) = launch_into_serve(instance, &["true"]);
        refusal = stderr;
        !admitted
    });
    let _ = training.kill();
    let _ = training.wait();
    eventually("a new client let in again", Duration::from_secs(10), || {
        launch_into_serve(instance, &["true"]).0
    });
    daemon.stop();
    remove_test_cgroups(instance, "serve");
    eprintln!("{test}: the refusal: {}", refusal.trim());
    assert!(
        refusal.contains("GPU pool \"serve\" is full") && refusal.contains("GPU 0: "),
        "the refusal does not name the pool and the GPU's room: {refusal}"
    );
}

/// Allocates argv[1] GiB on the GPU, then argv[2] GiB more, and prints one JSON line: the
/// pinned-memory limit in its environment and each allocation's outcome. Then holds what it
/// got for argv[3] seconds, so that the test can see it among the MPS clients.
const ALLOCATE_TWICE: &str = "import json, os, sys, time, torch
held, outcomes = [], []
for gib in sys.argv[1:3]:
    try:
        held.append(torch.empty(int(gib) << 30, dtype=torch.uint8, device='cuda'))
        torch.cuda.synchronize()
        outcomes.append('ok')
    except RuntimeError as err:
        outcomes.append(type(err).__name__ + ': ' + str(err).splitlines()[0])
print(json.dumps({'pid': os.getpid(),
    'limit': os.environ.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'), 'outcomes': outcomes}), flush=True)
time.sleep(float(sys.argv[3]))
";

/// Runs ALLOCATE_TWICE (4 GiB, then 12 GiB more) launched with `group_flag name`; returns its
/// JSON line and whether the MPS control daemon listed it among its clients.
fn allocate_twice(
    daemon: &Daemon,
    mps: &Mps,
    group_flag: &str,
    name: &str,
) -> (serde_json::Value, bool) {
    let args = ["-c", ALLOCATE_TWICE, "4", "12", "3"];
    let mut child = daemon.launch(group_flag, name, "python3", &args);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().expect("piped stdout")),
        &mut line,
    )
    .expect("read the allocator's line");
    let report: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{name}'s line {line:?}: {e}"));
    let pid = report["pid"].as_u64().expect("pid") as u32;
    let under_mps = mps.clients().contains(&pid);
    wait_ok(child, name);
    (report, under_mps)
}

#[test]
fn mps_fails_an_inference_allocation_beyond_its_pinned_limit_and_not_one_of_trainings() {
    let test = "mps_fails_an_inference_allocation_beyond_its_pinned_limit_and_not_one_of_trainings";
    let instance = "it-gpu-pinned";
    let Some(total_mib) = gpu_test(test, 40) else {
        return;
    };
    let mps = match Mps::start_in(&std::env::temp_dir().join(format!("reamer-{instance}-mps"))) {
        Ok(mps) => mps,
        Err(err) => {
            eprintln!("SKIPPED {test}: no MPS control daemon: {err:#}");
            return;
        }
    };
    // A new inference client may pin 8 GiB less what others hold: 4 GiB fit, 16 do not.
    let reserve_mib = total_mib - (8 << 10);
    let daemon = Daemon::start(
        instance,
        &format!(
            "[gpu]\nmps = \"attach\"\nmps_control = \"{}\"\nmps_pipe_dir = \"{}\"\nsample_ms = 100\n\
             training_memory_reserve_mib = {reserve_mib}\n\n{GPU_POOL}",
            mps.control.display(),
            mps.pipe_dir().display()
        ),
    );
    wait_first_nvml_sample(&daemon);
    // Both find the control daemon, in its own pipe directory, through the environment
    // `enforcer launch` gives them: the pool's client with its limits, training without.
    let (inference, inference_under_mps) = allocate_twice(&daemon, &mps, "--pool", "serve");
    let (training, training_under_mps) = allocate_twice(&daemon, &mps, "--training", "train");
    let log = daemon.stop();
    remove_test_cgroups(instance, "serve");
    eprintln!("{test}: inference {inference}, training {training}");
    assert!(
        inference_under_mps && training_under_mps,
        "both must be clients of the MPS daemon (inference {inference_under_mps}, training \
         {training_under_mps}):\n{log}"
    );
    let limit = inference["limit"].as_str().unwrap_or_default();
    assert!(limit.starts_with("0="), "inference's limit {limit:?}");
    assert_eq!(inference["outcomes"][0], "ok", "{inference}");
    let second = inference["outcomes"][1].as_str().unwrap_or_default();
    assert!(
        second.starts_with("OutOfMemoryError"),
        "12 GiB more went past the limit {limit}: {inference}"
    );
    assert!(
        training["limit"].is_null(),
        "training got a limit: {training}"
    );
    assert_eq!(
        training["outcomes"],
        serde_json::json!(["ok", "ok"]),
        "training's allocations under the same MPS daemon: {training}"
    );
}

/// BUSY_ON_GPU's steps per second, from its last line, after it ran `seconds`.
fn busy_steps_per_s(child: std::process::Child, what: &str, seconds: f64) -> f64 {
    let output = child.wait_with_output().expect("wait for the GPU loop");
    assert!(output.status.success(), "{what} failed: {}", output.status);
    let text = String::from_utf8_lossy(&output.stdout);
    let last: serde_json::Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{what} printed no step count: {text}"));
    last["steps"].as_f64().expect("steps") / seconds
}

/// What one run of training beside gated inference showed.
struct SharedRun {
    steps_per_s: f64,
    training_sm: Vec<f64>,
    inference_sm: Vec<f64>,
    gates: Vec<String>,
}

/// Training (BUSY_ON_GPU for 12 s) beside a GPU pool's BUSY_ON_GPU, under a daemon without
/// MPS, `probe` as given. `alone`: training's steps/s without inference, measured first when
/// None.
fn training_beside_gated_inference(
    instance: &str,
    probe: bool,
    alone: &mut Option<f64>,
) -> SharedRun {
    let daemon = Daemon::start(
        instance,
        &format!("[gpu]\nmps = \"off\"\nsample_ms = 100\nprobe = {probe}\n\n{GPU_POOL}"),
    );
    let busy_training =
        || daemon.launch("--training", "train", "python3", &["-c", BUSY_ON_GPU, "12"]);
    if alone.is_none() {
        *alone = Some(busy_steps_per_s(busy_training(), "training alone", 12.0));
        std::thread::sleep(Duration::from_secs(3));
    }
    let mut inference = daemon.launch("--pool", "serve", "python3", &["-c", BUSY_ON_GPU, "60"]);
    std::thread::sleep(Duration::from_secs(5));
    let mut training = busy_training();
    // The SM figures NVML attributes to training and to inference while training runs.
    let (mut training_sm, mut inference_sm) = (Vec::new(), Vec::new());
    while training_sm.len() < 200 && training.try_wait().expect("poll training").is_none() {
        let Some(device) = gpu_devices(&daemon.snapshot()).into_iter().next() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if let Some(sm) = device.training_sm_pct {
            training_sm.push(sm);
        }
        let inference_pid = inference.id();
        if let Some(sm) = device
            .processes
            .iter()
            .find(|p| p.pid == inference_pid)
            .and_then(|p| p.sm_pct)
        {
            inference_sm.push(f64::from(sm));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let steps_per_s = busy_steps_per_s(training, "training beside inference", 12.0);
    let _ = inference.kill();
    let _ = inference.wait();
    let log = daemon.stop();
    remove_test_cgroups(instance, "serve");
    let gates = log
        .lines()
        .filter(|l| l.contains("GPU inference gate changed"))
        .map(str::to_owned)
        .collect();
    SharedRun {
        steps_per_s,
        training_sm,
        inference_sm,
        gates,
    }
}

#[test]
fn without_mps_nvml_attributes_sm_use_but_the_clamp_holds_since_that_figure_hides_contention() {
    let test =
        "without_mps_nvml_attributes_sm_use_but_the_clamp_holds_since_that_figure_hides_contention";
    let instance = "it-gpu-feedback";
    if gpu_test(test, 8).is_none() {
        return;
    }
    let mut alone = None;
    let probing = training_beside_gated_inference(instance, true, &mut alone);
    let holding = training_beside_gated_inference(instance, false, &mut alone);
    let alone = alone.expect("measured");
    for (arm, run) in [
        ("probe = true", &probing),
        ("probe = false (default)", &holding),
    ] {
        eprintln!(
            "{test}: {arm}: training {:.1} steps/s, {:.0}% of its {alone:.1} alone\n\
             training's SM %: {:?}\ninference's SM %: {:?}\ngate decisions:\n{}",
            run.steps_per_s,
            run.steps_per_s / alone * 100.0,
            run.training_sm,
            run.inference_sm,
            run.gates.join("\n")
        );
    }
    for run in [&probing, &holding] {
        assert!(
            !run.training_sm.is_empty(),
            "NVML gave no SM figure for training without MPS"
        );
        assert!(
            run.gates.iter().any(|g| g.contains("TrainingRose")),
            "no clamp when training rose: {:?}",
            run.gates
        );
    }
    // Probing acts on the figure; the default holds the clamp whatever it says.
    assert!(
        probing
            .gates
            .iter()
            .any(|g| g.contains("Probe") || g.contains("TrainingSlowed")),
        "with probe = true the clamp never acted on training's SM figure: {:?}",
        probing.gates
    );
    assert!(
        !holding
            .gates
            .iter()
            .any(|g| g.contains("Probe") || g.contains("TrainingSlowed")),
        "the default clamp moved on the SM figure: {:?}",
        holding.gates
    );
}
