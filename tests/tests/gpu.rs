//! The GPU side under a real daemon. Without the NVIDIA driver (this machine) it must say so
//! in one log line and in the status, while CPU enforcement of the same pool goes on; with a
//! driver (the device machine) it must report the GPUs it found. `enabled = "off"` turns it
//! off with its own line. With a GPU and PyTorch, the memory guard evicts a GPU pool's process
//! that training grows into.

use std::{
    io::{BufRead as _, BufReader},
    os::unix::process::ExitStatusExt as _,
    process::{Child, Command},
    time::Duration,
};

use reamer_tests::harness::{
    Daemon, enforcer_bin, eventually, privileged, remove_test_cgroups, wait_ok,
};

const HOG: &str = env!("CARGO_BIN_EXE_cpu-hog");

const GPU_POOL: &str = "[[pool]]\nname = \"serve\"\nkind = \"offline\"\ngpu = true\n";

fn status_text(instance: &str) -> String {
    let output = Command::new(enforcer_bin())
        .args(["status", "--instance", instance])
        .output()
        .expect("run enforcer status");
    assert!(output.status.success(), "enforcer status failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

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
        HOG,
        &["--threads", "1", "--seconds", "2"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let snapshot = daemon.snapshot();
    let gpu = &snapshot["gpu"];
    let status = status_text(instance);
    let pools = snapshot["enforcement"]["pools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let serve = pools
        .iter()
        .find(|p| p["name"] == "serve")
        .unwrap_or_else(|| panic!("no pool serve in {pools:?}"));
    let hog_pid = u64::from(hog.id());
    assert!(
        serve["processes"]
            .as_array()
            .is_some_and(|p| p.iter().any(|pid| pid.as_u64() == Some(hog_pid))),
        "the GPU pool's process was not placed: {serve}"
    );
    wait_ok(hog, "cpu-hog in the GPU pool");
    let log = daemon.stop();
    remove_test_cgroups(instance, "serve");

    match gpu["state"].as_str() {
        Some("disabled") => {
            let reason = gpu["reason"].as_str().unwrap_or_default();
            assert!(!reason.is_empty(), "disabled without a reason: {gpu}");
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
        Some("active") => {
            assert!(log.contains("GPU telemetry on"), "{log}");
            let devices = gpu["devices"].as_array().map_or(0, Vec::len);
            assert!(devices > 0, "active without devices: {gpu}");
            assert!(status.contains("GPU: driver"), "{status}");
        }
        other => panic!("unexpected GPU state {other:?}: {gpu}"),
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
    assert_eq!(snapshot["gpu"]["state"], "off", "{}", snapshot["gpu"]);
    assert!(log.contains("GPU features off by configuration"), "{log}");
    assert!(!log.contains("GPU features disabled"), "{log}");
    assert!(status.contains("GPU: off"), "{status}");
}

/// Allocates argv[1] GiB on the GPU, says so, and holds it for argv[2] seconds.
const HOLD_GPU_MEMORY: &str = "import sys, time, torch\n\
x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device='cuda')\n\
torch.cuda.synchronize()\n\
print('holding', flush=True)\n\
time.sleep(float(sys.argv[2]))\n";

/// Why this machine cannot run PyTorch on an NVIDIA GPU of 64 GiB or more (the test holds
/// 30 GiB twice), if it cannot.
fn no_gpu_with_torch() -> Option<String> {
    let torch = Command::new("python3")
        .args([
            "-c",
            "import torch; assert torch.cuda.is_available(), 'no CUDA device'; \
             assert torch.cuda.get_device_properties(0).total_memory >= 64 << 30, \
             'the GPU has less than the 64 GiB this test holds'",
        ])
        .output();
    match torch {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "no GPU with PyTorch: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )),
        Err(err) => Some(format!("no GPU with PyTorch: python3: {err}")),
    }
}

/// Waits for the process's "holding" line: its memory is allocated.
fn wait_holding(child: &mut Child, what: &str) {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the holder's line");
    assert_eq!(
        line.trim(),
        "holding",
        "{what} did not allocate its GPU memory"
    );
}

#[test]
fn training_that_grows_into_what_inference_holds_on_the_gpu_gets_it_evicted() {
    let test = "training_that_grows_into_what_inference_holds_on_the_gpu_gets_it_evicted";
    let instance = "it-gpu-evict";
    if !privileged(test) {
        return;
    }
    if let Some(reason) = no_gpu_with_torch() {
        eprintln!("SKIPPED {test}: {reason}");
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
