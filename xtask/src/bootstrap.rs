//! Installs what building the eBPF sensor needs, idempotently, saying what it does:
//! the pinned nightly toolchain with rust-src (for `-Z build-std=core`; the pin and why it is
//! one are in enforcer-ebpf/rust-toolchain.toml), LLVM 22 development files,
//! bpf-linker built against them, bpftool (the integration tests inspect pins with it), perf
//! (the benchmarks run hackbench through it), librsvg's `rsvg-convert` with the DejaVu fonts
//! (the tests render every committed plot), and cargo-fuzz with a C++ compiler for libFuzzer
//! (`cargo xtask fuzz`, which `cargo xtask test` runs briefly).
//!
//! Where it cannot install (not root, or no apt-get), it prints exactly what is missing and
//! the commands that would install it, and fails.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::cargo::workspace_root;

/// Debian packages: LLVM 22 for bpf-linker, compression libraries it links, bpftool (the
/// tests inspect pins with it), perf (the benchmarks run hackbench through it), g++
/// (libfuzzer-sys compiles libFuzzer), and librsvg with the font the plots are laid out in
/// (the tests render every committed plot).
const PACKAGES: [&str; 9] = [
    "llvm-22-dev",
    "libpolly-22-dev",
    "zlib1g-dev",
    "libzstd-dev",
    "bpftool",
    "linux-perf",
    "g++",
    "librsvg2-bin",
    "fonts-dejavu-core",
];
/// cargo-fuzz release verified here with the pinned nightly.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// bpf-linker release verified with LLVM 22 and aya 0.14 here.
const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

pub(crate) fn say(message: &str) {
    eprintln!("reamer bootstrap: {message}");
}

pub(crate) fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn stdout_of(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

pub(crate) fn run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<()> {
    say(&format!("running: {} {}", program, args.join(" ")));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

fn package_installed(package: &str) -> bool {
    stdout_of("dpkg-query", &["-W", "-f=${Status}", package]).contains("install ok installed")
}

include!("../../enforcer-ebpf/pinned_toolchain.rs");

/// The nightly channel that builds the eBPF object (enforcer/build.rs reads the same pin), and
/// the fuzz targets.
pub(crate) fn ebpf_toolchain() -> anyhow::Result<String> {
    pinned_toolchain(&workspace_root().join("enforcer-ebpf"))
}

fn ensure_ebpf_toolchain() -> anyhow::Result<()> {
    let toolchain = ebpf_toolchain()?;
    let installed = stdout_of(
        "rustup",
        &[
            "component",
            "list",
            "--toolchain",
            &toolchain,
            "--installed",
        ],
    );
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        return Ok(());
    }
    if !succeeds("rustup", &["--version"]) {
        bail!(
            "rustup is missing: the eBPF sensor is built with the {toolchain} toolchain and its \
             rust-src. Install rustup (https://rustup.rs), then run `rustup toolchain install \
             {toolchain} --profile minimal --component rust-src`"
        );
    }
    say(&format!(
        "installing the {toolchain} toolchain with rust-src (the eBPF build compiles core for \
         bpfel; pinned to a nightly on LLVM 22, bpf-linker's: enforcer-ebpf/rust-toolchain.toml)"
    ));
    run(
        "rustup",
        &[
            "toolchain",
            "install",
            &toolchain,
            "--profile",
            "minimal",
            "--component",
            "rust-src",
        ],
        &[],
    )
}

fn ensure_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| !package_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let has_apt = succeeds("apt-get", &["--version"]);
    if !crate::cargo::is_root() || !has_apt {
        bail!(
            "missing system packages: {}. Install them with:\n    sudo apt-get update && sudo apt-get install -y {}\n\
             (on a distribution without apt-get: LLVM 22 development files, zlib, zstd, bpftool, \
             perf, a C++ compiler, librsvg's rsvg-convert and the DejaVu fonts)",
            missing.join(", "),
            missing.join(" ")
        );
    }
    say(&format!(
        "installing {} (LLVM 22 for bpf-linker; bpftool and rsvg-convert for the tests)",
        missing.join(", ")
    ));
    run("apt-get", &["update", "-q"], &[])?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&missing);
    run("apt-get", &args, &[("DEBIAN_FRONTEND", "noninteractive")])
}

fn ensure_bpf_linker() -> anyhow::Result<()> {
    if succeeds("bpf-linker", &["--version"]) {
        return Ok(());
    }
    say(&format!(
        "building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (the default feature wants an LLVM \
         Debian 12 does not ship; this takes a few minutes, once)"
    ));
    run(
        "cargo",
        &[
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--no-default-features",
            "--features",
            "llvm-22",
        ],
        &[("LLVM_PREFIX", LLVM_PREFIX)],
    )
}

fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    if succeeds("cargo", &["fuzz", "--version"]) {
        return Ok(());
    }
    say(&format!(
        "installing cargo-fuzz {CARGO_FUZZ_VERSION} (the fuzz targets; under a minute, once)"
    ));
    run(
        "cargo",
        &[
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ],
        &[],
    )
}

/// Makes sure everything is installed; quiet when it already is.
pub fn ensure() -> anyhow::Result<()> {
    ensure_ebpf_toolchain()?;
    ensure_packages()?;
    ensure_bpf_linker()?;
    ensure_cargo_fuzz()?;
    Ok(())
}
