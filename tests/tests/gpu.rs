//! The GPU side under a real daemon. Without the NVIDIA driver (this machine) it must say so
//! in one log line and in the status, while CPU enforcement of the same pool goes on; with a
//! driver (the device machine) it must report the GPUs it found. `enabled = "off"` turns it
//! off with its own line.

use std::{process::Command, time::Duration};

use reamer_tests::harness::{Daemon, enforcer_bin, privileged, remove_test_cgroups, wait_ok};

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
