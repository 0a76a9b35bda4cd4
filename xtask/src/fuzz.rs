//! `cargo xtask fuzz`: the fuzz targets in fuzz/ (cargo-fuzz, libFuzzer), each for a bounded
//! time: KServe requests with their headers, the enforcer's config, control-socket lines and
//! offline job lines. `cargo xtask test` runs each for a few seconds.
//!
//! Each target starts from its committed regression inputs (fuzz/regressions/<target>, run
//! every time) and its growing corpus (fuzz/corpus/<target>, not committed). An input that
//! crashes a target is written into its regressions directory, and the run fails naming it:
//! commit it with the fix, and every later run tries it again.
//!
//! Built without a sanitizer and without optimization: what is fuzzed is safe Rust, where a
//! bug is a panic, which libFuzzer catches either way; a sanitizer build of tract and the
//! enforcer took 9 minutes here, this one about 3.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::{bootstrap, cargo::workspace_root};

pub const TARGETS: [&str; 4] = [
    "kserve_request",
    "enforcer_config",
    "control_message",
    "offline_line",
];

/// Runs every target in `only` (all when empty) for `seconds` each.
pub fn run(seconds: u64, only: &[String]) -> anyhow::Result<()> {
    let toolchain = bootstrap::ebpf_toolchain()?;
    let fuzz_dir = workspace_root().join("fuzz");
    let unknown: Vec<&String> = only
        .iter()
        .filter(|t| !TARGETS.contains(&t.as_str()))
        .collect();
    if !unknown.is_empty() {
        bail!("unknown fuzz target(s) {unknown:?}; the targets are {TARGETS:?}");
    }
    let targets: Vec<&str> = TARGETS
        .iter()
        .copied()
        .filter(|t| only.is_empty() || only.iter().any(|o| o == t))
        .collect();
    for target in targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        let regressions = fuzz_dir.join("regressions").join(target);
        for dir in [&corpus, &regressions] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        eprintln!("fuzz: {target} for {seconds} s");
        let status = Command::new("cargo")
            .arg(format!("+{toolchain}"))
            .args(["fuzz", "run", "--dev", "--sanitizer", "none", "--fuzz-dir"])
            .arg(&fuzz_dir)
            .arg(target)
            .arg(&corpus)
            .arg(&regressions)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-artifact_prefix={}/", regressions.display()))
            // The fuzz targets never load the sensor: skip building its eBPF object.
            .env("AYA_BUILD_SKIP", "1")
            .current_dir(&fuzz_dir)
            .status()
            .context("cannot run cargo fuzz (`cargo xtask bootstrap` installs it)")?;
        if !status.success() {
            bail!(
                "fuzz target {target} failed ({status}): the input that crashed it is in {}; \
                 fix the crash and commit the input, which every later run tries again",
                regressions.display()
            );
        }
    }
    Ok(())
}
