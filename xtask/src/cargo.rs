//! Running cargo and the workspace's binaries from xtask.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// The workspace root (xtask lives one level below it). A release xtask copied to another
/// machine with the repository (`bench --prebuilt`) finds no build directory there, and takes
/// the current directory: it is run from the repository's root.
pub fn workspace_root() -> PathBuf {
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_owned();
    if built_in.join("Cargo.toml").is_file() {
        return built_in;
    }
    std::env::current_dir().unwrap_or(built_in)
}

/// The cargo that runs this program, or the one on the PATH.
fn cargo_program() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// `cargo ARGS` in the workspace root, failing on a non-zero exit.
pub fn cargo(args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<()> {
    let cargo = cargo_program();
    let status = Command::new(&cargo)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("cannot run {cargo}"))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// `cargo test ARGS`, echoing its output, and ending with one plain summary line
/// ("tests: N passed, N failed, N skipped") summed over every test binary, so that the last
/// line says what ran rather than the last crate's empty doc-test run. A privileged test that
/// cannot run here passes without testing anything: each is listed, and counted as skipped
/// (`REAMER_REQUIRE_PRIVILEGED=1`, as CI sets it, makes it fail instead).
pub fn cargo_test(args: &[&str]) -> anyhow::Result<()> {
    use std::io::{BufRead as _, BufReader};
    let cargo = cargo_program();
    let skip_log = std::env::temp_dir().join(format!("reamer-skipped-{}", std::process::id()));
    let _ = std::fs::remove_file(&skip_log);
    let mut child = Command::new(&cargo)
        .arg("test")
        .args(args)
        .env("REAMER_SKIP_LOG", &skip_log)
        .current_dir(workspace_root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cargo}"))?;
    let (mut passed, mut failed) = (0u64, 0u64);
    for line in BufReader::new(child.stdout.take().context("cargo test stdout")?).lines() {
        let line = line?;
        println!("{line}");
        if let Some(result) = line.strip_prefix("test result: ") {
            let count = |word: &str| -> u64 {
                result
                    .split(';')
                    .find_map(|part| {
                        part.trim()
                            .strip_suffix(word)?
                            .trim()
                            .rsplit(' ')
                            .next()?
                            .parse()
                            .ok()
                    })
                    .unwrap_or(0)
            };
            passed += count("passed");
            failed += count("failed");
        }
    }
    let status = child.wait()?;
    let skipped = std::fs::read_to_string(&skip_log).unwrap_or_default();
    let _ = std::fs::remove_file(&skip_log);
    let skipped: Vec<&str> = skipped.lines().collect();
    for line in &skipped {
        println!("{line}");
    }
    let passed = passed.saturating_sub(skipped.len() as u64);
    println!(
        "tests: {passed} passed, {failed} failed, {} skipped",
        skipped.len()
    );
    if !status.success() {
        bail!("`cargo test {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Builds `package`'s integration test `test` in release mode, without running it: the
/// executable cargo names for it (under target/release/deps, with a hash in its name).
pub fn release_test_executable(package: &str, test: &str) -> anyhow::Result<PathBuf> {
    use std::io::{BufRead as _, BufReader};
    let cargo = cargo_program();
    let args = [
        "test",
        "--release",
        "-p",
        package,
        "--test",
        test,
        "--no-run",
    ];
    let mut child = Command::new(&cargo)
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(workspace_root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cargo}"))?;
    let mut executable = None;
    for line in BufReader::new(child.stdout.take().context("cargo's output")?).lines() {
        let message: serde_json::Value = match serde_json::from_str(&line?) {
            Ok(message) => message,
            Err(_) => continue,
        };
        if message["target"]["name"] == test && message["profile"]["test"] == true {
            executable = message["executable"].as_str().map(PathBuf::from);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    executable.with_context(|| format!("cargo named no executable for {package}'s test {test}"))
}

/// Builds the binaries the demo, the tests and the benchmarks run: the enforcer, the inference
/// worker and the workload generators.
pub fn build_bins(release: bool) -> anyhow::Result<()> {
    let mut args = vec!["build", "--bins"];
    if release {
        args.push("--release");
    }
    for package in ["enforcer", "reamer-tests", "inference-worker"] {
        args.extend(["-p", package]);
    }
    cargo(&args, &[])
}

/// `build_bins` in release mode.
pub fn build_release() -> anyhow::Result<()> {
    build_bins(true)
}

/// `build_release`, and this program in release mode too: `target/release/xtask` is what runs
/// `bench --prebuilt` on a machine without the toolchain. `cargo xtask` itself runs a debug
/// build, so nothing else keeps the release one current.
pub fn build_release_with_xtask() -> anyhow::Result<()> {
    build_release()?;
    cargo(&["build", "--release", "-p", "xtask"], &[])
}

/// For `bench --prebuilt`: the binaries the sections run (the enforcer for every privileged
/// one) must be built already.
pub fn check_release_bins(names: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<String> = names
        .iter()
        .map(|name| release_bin(name))
        .filter(|path| !path.is_file())
        .map(|path| path.display().to_string())
        .collect();
    if !missing.is_empty() {
        bail!(
            "--prebuilt: {} missing; build with `cargo xtask build` and copy target/release along",
            missing.join(", ")
        );
    }
    Ok(())
}

/// A release binary of the workspace.
pub fn release_bin(name: &str) -> PathBuf {
    workspace_root().join("target/release").join(name)
}

pub fn is_root() -> bool {
    // SAFETY-free: `id -u` keeps xtask free of libc.
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
