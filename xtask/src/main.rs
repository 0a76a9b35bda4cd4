//! reamer's developer tasks. `cargo xtask --help` lists them.

mod bench_reaction;
mod bench_sensor;
mod bootstrap;
mod cargo;
mod demo;
mod docs;
mod stats;

use std::{os::unix::process::CommandExt as _, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// reamer's developer tasks: install the toolchain, build, load, demo, test, benchmark.
///
/// Every task first installs what is missing (nightly rust-src, LLVM 22, bpf-linker, bpftool)
/// and says what it installs.
#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the eBPF toolchain parts that are missing; nothing else.
    Bootstrap,
    /// Build the enforcer (with its eBPF object) and the workload binaries, release mode.
    Build,
    /// Build everything and run the enforcer with ARGS, as root (through sudo when needed).
    ///
    /// Example: cargo xtask run -- run --config deploy/enforcer.example.toml
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The built-in default scenario: training, then inference competing for its CPUs, watched
    /// live through the sensor (needs root).
    Demo,
    /// Run every test: unit, contract, and the privileged integration tests on the real kernel
    /// (these skip with a reason when not root; REAMER_REQUIRE_PRIVILEGED=1 makes that fail).
    Test {
        /// Arguments for the test binaries: a name filter, --nocapture, ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks (needs root): the sensor's cost per event and its effect on
    /// context-switch-heavy workloads, and the enforcer's reaction time from kernel event to
    /// cgroup write; written to docs/benchmarks.md.
    Bench {
        /// Paired rounds (with and without the sensor).
        #[arg(long, default_value_t = 30)]
        rounds: usize,
        /// Seconds per ping-pong measurement (hackbench runs a fixed amount of work).
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Training bursts for the reaction measurement.
        #[arg(long, default_value_t = 60)]
        bursts: usize,
        /// A short smoke run: 3 rounds of 1 s, 10 bursts; does not touch docs/benchmarks.md.
        #[arg(long)]
        quick: bool,
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Do not update docs/benchmarks.md.
        #[arg(long)]
        no_docs: bool,
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
            cargo::build_release()
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
            demo::run()
        }
        Task::Test { args } => {
            bootstrap::ensure()?;
            // The integration tests run the enforcer, worker and workload binaries built beside them.
            cargo::cargo(
                &[
                    "build",
                    "--bins",
                    "-p",
                    "enforcer",
                    "-p",
                    "reamer-tests",
                    "-p",
                    "inference-worker",
                ],
                &[],
            )?;
            // One test at a time: the privileged tests measure scheduling on a shared machine.
            let mut test_args = vec!["--", "--test-threads=1"];
            test_args.extend(args.iter().map(String::as_str));
            cargo::cargo_test(&test_args)
        }
        Task::Bench {
            rounds,
            seconds,
            bursts,
            quick,
            json,
            no_docs,
        } => {
            bootstrap::ensure()?;
            if !cargo::is_root() {
                anyhow::bail!(
                    "the benchmarks load eBPF programs: run them as root (sudo -E cargo xtask bench)"
                );
            }
            cargo::build_release()?;
            let (rounds, seconds, hackbench_loops) = if quick {
                (3, 1.0, 200)
            } else {
                (rounds, seconds, 500)
            };
            let progress = |step: &str| eprintln!("[bench] {step}");
            let bursts = if quick { 10 } else { bursts };
            let sensor = bench_sensor::run(rounds, seconds, hackbench_loops, &progress)?;
            let reaction = bench_reaction::run(bursts, &progress)?;
            let command = if quick {
                "cargo xtask bench --quick".to_owned()
            } else {
                format!("cargo xtask bench --rounds {rounds} --seconds {seconds} --bursts {bursts}")
            };
            let machine = docs::machine_description();
            let sensor_section = bench_sensor::markdown(&sensor, &command, &machine);
            let reaction_section = bench_reaction::markdown(&reaction, &command, &machine);
            println!("{sensor_section}\n{reaction_section}");
            if let Some(path) = json {
                let body =
                    serde_json::json!({"machine": machine, "sensor": sensor, "reaction": reaction});
                std::fs::write(&path, serde_json::to_string_pretty(&body)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if !quick && !no_docs {
                docs::replace_section("sensor", &sensor_section)?;
                docs::replace_section("reaction", &reaction_section)?;
                eprintln!("[bench] docs/benchmarks.md updated");
            }
            Ok(())
        }
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
