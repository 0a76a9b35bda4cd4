//! `enforcer replay-pace` as a user runs it: recordings of a job's step times in, the pace
//! controller's replay out, no privilege needed.

use std::{path::PathBuf, process::Command};

use serde_json::Value;

const ENFORCER: &str = env!("CARGO_BIN_EXE_enforcer");

/// A recording of `steps` steps of `ms` each (the first of half that, so that no step ends on
/// a report's instant), written as a JSON array into file `name` of test `test`'s own folder.
fn recording(test: &str, name: &str, ms: f64, steps: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reamer-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut step_ms = vec![ms; steps];
    step_ms[0] = ms / 2.0;
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(&step_ms).unwrap()).unwrap();
    path
}

fn replay_pace(args: &[&str]) -> std::process::Output {
    Command::new(ENFORCER)
        .arg("replay-pace")
        .args(args)
        .output()
        .expect("running enforcer replay-pace")
}

#[test]
fn a_job_offline_slows_by_a_tenth_is_held_back_and_bad_arguments_are_named() {
    let held = recording("tenth", "held.json", 50.0, 2400);
    let beside = recording("tenth", "beside.json", 55.6, 2160);
    let paths = [held.to_str().unwrap(), beside.to_str().unwrap()];
    let output = replay_pace(&[paths[0], paths[1], "--seconds", "600", "--json"]);
    assert!(output.status.success(), "{output:?}");
    let replay: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(replay["settled_at"], "held", "{replay}");
    assert!(
        replay["time_at_level"]["held"].as_f64().unwrap() > 0.5,
        "{replay}"
    );
    let first = &replay["changes"][0];
    assert_eq!(first["level"], "training_cores", "{replay}");
    assert_eq!(first["reason"], "trial", "{replay}");

    let output = replay_pace(&[paths[0], paths[1], "--epsilon", "2"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--epsilon must be from 0.001 to 0.5"),
        "{stderr}"
    );
    let output = replay_pace(&[paths[0], "--cost", "1.5"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--cost must be from 0 to 0.9"), "{stderr}");
    let output = replay_pace(&[paths[0], "/nonexistent/steps.json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reading /nonexistent/steps.json"),
        "{stderr}"
    );
    std::fs::remove_dir_all(held.parent().unwrap()).unwrap();
}

#[test]
fn one_recording_replays_the_jobs_own_noise_and_with_a_cost_is_held_back() {
    let alone = recording("own-noise", "alone.json", 50.0, 2400);
    let path = alone.to_str().unwrap();
    // Nothing costing the job: the top of the ladder.
    let output = replay_pace(&[path, "--seconds", "300", "--json"]);
    assert!(output.status.success(), "{output:?}");
    let replay: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(replay["settled_at"], "training_cores", "{replay}");
    // Every level above `held` 10% slower, from the same recording.
    let output = replay_pace(&[path, "--cost", "0.1", "--seconds", "600"]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("beside offline from {path}, slowed by 10.0%")),
        "{stdout}"
    );
    assert!(stdout.contains("last settled at `held`"), "{stdout}");
    std::fs::remove_dir_all(alone.parent().unwrap()).unwrap();
}

#[test]
fn a_job_read_by_its_gpus_that_checkpoints_is_paused_not_searched_afresh() {
    // 50 ms steps, 40 of them on the GPU, and after 5 minutes a checkpoint of 30 s: a step
    // with 30 s of idle GPUs.
    let mut step_ms = vec![50.0; 6000];
    step_ms[0] = 25.0;
    step_ms.insert(6000, 30_000.0);
    let dir = std::env::temp_dir().join(format!("reamer-gpu-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("checkpoints.json");
    std::fs::write(&path, serde_json::to_string(&step_ms).unwrap()).unwrap();
    let path = path.to_str().unwrap();
    let output = replay_pace(&[path, "--gpu-busy", "40", "--seconds", "600", "--json"]);
    assert!(output.status.success(), "{output:?}");
    let replay: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    let reasons: Vec<&str> = replay["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| change["reason"].as_str().unwrap())
        .collect();
    // The checkpoint: no signal, then the level it had compared again, not the search from
    // the top that a new job starts.
    let silent = reasons.iter().position(|&r| r == "no_signal");
    let silent = silent.unwrap_or_else(|| panic!("no pause in {reasons:?}"));
    assert_eq!(reasons.get(silent + 1), Some(&"resumed"), "{reasons:?}");
    assert!(!reasons.contains(&"job_changed"), "{reasons:?}");
    let output = replay_pace(&[path, "--gpu-busy", "0"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--gpu-busy must be a step's GPU work in ms"),
        "{stderr}"
    );
    let output = replay_pace(&[path, "--gpu-busy", "40", "--counts-only"]);
    assert!(!output.status.success(), "{output:?}");
    std::fs::remove_dir_all(dir).unwrap();
}
