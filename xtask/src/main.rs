//! reamer's developer tasks. `cargo xtask --help` lists them.

mod bench_colocation;
mod bench_gpu;
mod bench_reaction;
mod bench_sensor;
mod bench_worker;
mod bootstrap;
mod cargo;
mod colocation_plot;
mod colocation_report;
mod demo;
mod docs;
mod gpu_report;
mod models;
mod progress_bar;
mod stats;
mod wake_probe;

use std::{os::unix::process::CommandExt as _, path::PathBuf, process::ExitCode};

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

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Section {
    Sensor,
    Reaction,
    Worker,
    Colocation,
    Gpu,
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
    /// The built-in default scenario: inference on every CPU, then a training job that needs
    /// them and gets them through the enforcer's fast path, watched live through the sensor
    /// (needs root).
    Demo,
    /// Run every test: unit, contract, and the privileged integration tests on the real kernel
    /// (these skip with a reason when not root; REAMER_REQUIRE_PRIVILEGED=1 makes that fail).
    Test {
        /// Arguments for the test binaries: a name filter, --nocapture, ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks, written to docs/benchmarks.md: the sensor's cost per event and its effect
    /// on context-switch-heavy workloads, the enforcer's reaction time from kernel event to
    /// cgroup write, the inference worker's latency against ONNX Runtime on the shipped PP-OCR
    /// models, and the co-location benchmark: training beside online and offline inference
    /// under eleven scenarios (alone, plain CFS, static partition, low shares, a 1 s
    /// utilization poller, a PSI trigger, reamer, reamer with offline inference not paused
    /// while training is short of cores, the same with it also on training's cores, and the
    /// static partition and reamer again under a heavy online load),
    /// and on a machine with an NVIDIA GPU the GPU
    /// benchmark: a PyTorch training loop beside a PyTorch inference loop under MPS, with and
    /// without the enforcer's clamp (skipped, saying why, without a GPU). All but the
    /// worker's need root.
    Bench {
        /// The sections to run, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "sensor,reaction,worker,colocation,gpu"
        )]
        only: Vec<Section>,
        /// Rounds of the co-location benchmark (each runs every scenario once).
        #[arg(long, default_value_t = 12)]
        colocation_rounds: usize,
        /// Seconds of training per co-location window.
        #[arg(long, default_value_t = 4.0)]
        window: f64,
        /// Sensor and co-location rounds are kept only if the hypervisor stole at most
        /// this share of the CPU (%) while they ran; others are run again, up to three
        /// attempts per one asked for. On this kind of VM steal moves a result more than the
        /// effects measured.
        #[arg(long, default_value_t = 3.0, value_name = "PERCENT")]
        max_steal: f64,
        /// Interleaved repetitions per engine in the worker section.
        #[arg(long, default_value_t = 3)]
        worker_reps: usize,
        /// Timed runs per batch size and repetition in the worker section.
        #[arg(long, default_value_t = 20)]
        worker_runs: usize,
        /// Rounds of the GPU benchmark (each runs every GPU scenario once).
        #[arg(long, default_value_t = 3)]
        gpu_rounds: usize,
        /// Rounds of the sensor's throughput measurement (each runs the workloads without
        /// programs, with the sensor, and with a no-op on each of its tracepoints).
        #[arg(long, default_value_t = 30)]
        rounds: usize,
        /// Seconds per ping-pong measurement (hackbench runs a fixed amount of work).
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Training bursts for the reaction measurement.
        #[arg(long, default_value_t = 60)]
        bursts: usize,
        /// A short smoke run (3 rounds of 1 s, 10 bursts, 1 worker repetition, 3 co-location
        /// rounds of 1.5 s windows, kept whatever the steal); does not touch docs/benchmarks.md.
        #[arg(long)]
        quick: bool,
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Do not update docs/benchmarks.md.
        #[arg(long)]
        no_docs: bool,
        /// Use the release binaries already in target/release: no toolchain check, no build.
        /// For a machine without the Rust toolchain (a GPU server the repository and its
        /// built target/release were copied to), running target/release/xtask from the
        /// repository's root.
        #[arg(long)]
        prebuilt: bool,
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
            models::ensure_models()?;
            demo::run()
        }
        Task::Test { args } => {
            bootstrap::ensure()?;
            models::ensure_models()?;
            // The integration tests run the enforcer, worker and workload binaries built beside them.
            cargo::build_bins(false)?;
            // One test at a time: the privileged tests measure scheduling on a shared machine.
            let mut test_args = vec!["--", "--test-threads=1"];
            test_args.extend(args.iter().map(String::as_str));
            cargo::cargo_test(&test_args)
        }
        Task::Bench {
            only,
            colocation_rounds,
            window,
            max_steal,
            worker_reps,
            worker_runs,
            rounds,
            seconds,
            bursts,
            quick,
            json,
            no_docs,
            gpu_rounds,
            prebuilt,
        } => {
            if !prebuilt {
                bootstrap::ensure()?;
            }
            let privileged = only.iter().any(|s| *s != Section::Worker);
            if privileged && !cargo::is_root() {
                anyhow::bail!(
                    "the sensor, reaction and co-location benchmarks load eBPF programs and \
                     write cgroups: run them as root (sudo -E cargo xtask bench), or only the \
                     worker's with --only worker"
                );
            }
            if !(window >= 1.0 && window.is_finite()) || colocation_rounds == 0 || gpu_rounds == 0 {
                anyhow::bail!(
                    "--window must be at least 1 second, --colocation-rounds and --gpu-rounds \
                     at least 1"
                );
            }
            if !(0.0..=100.0).contains(&max_steal) {
                anyhow::bail!("--max-steal is a share of the CPU: 0 to 100 (%), not {max_steal}");
            }
            if only.contains(&Section::Colocation) && !prebuilt {
                // The online inference there serves the PP-OCR classifier.
                models::ensure_models()?;
            }
            if prebuilt {
                cargo::check_release_bins()?;
            } else {
                cargo::build_release()?;
            }
            let (rounds, seconds, hackbench_loops) = if quick {
                (3, 1.0, 200)
            } else {
                (rounds, seconds, 500)
            };
            let progress = |step: &str| eprintln!("[bench] {step}");
            let bursts = if quick { 10 } else { bursts };
            let (worker_reps, worker_runs) = if quick {
                (1, 3)
            } else {
                (worker_reps, worker_runs)
            };
            let (colocation_rounds, window) = if quick {
                (3, 1.5)
            } else {
                (colocation_rounds, window)
            };
            let (gpu_rounds, gpu_train) = if quick {
                (1, std::time::Duration::from_secs(4))
            } else {
                (gpu_rounds, std::time::Duration::from_secs(8))
            };
            // A smoke run checks the mechanics, whatever the host's steal.
            let max_steal = if quick { 100.0 } else { max_steal };
            // The command that reproduces this run, with only the options that mattered to it.
            // With --prebuilt it ran as the copied binary, without cargo.
            let mut command = if prebuilt {
                "target/release/xtask bench --prebuilt".to_owned()
            } else {
                "cargo xtask bench".to_owned()
            };
            if quick {
                command.push_str(" --quick");
            }
            let names: Vec<&str> = [
                (Section::Sensor, "sensor"),
                (Section::Reaction, "reaction"),
                (Section::Worker, "worker"),
                (Section::Colocation, "colocation"),
                (Section::Gpu, "gpu"),
            ]
            .iter()
            .filter(|(section, _)| only.contains(section))
            .map(|(_, name)| *name)
            .collect();
            if names.len() < 5 {
                command.push_str(&format!(" --only {}", names.join(",")));
            }
            if !quick && only.contains(&Section::Sensor) {
                command.push_str(&format!(" --rounds {rounds} --seconds {seconds}"));
            }
            if !quick && only.contains(&Section::Reaction) {
                command.push_str(&format!(" --bursts {bursts}"));
            }
            if !quick && only.contains(&Section::Worker) {
                command.push_str(&format!(
                    " --worker-reps {worker_reps} --worker-runs {worker_runs}"
                ));
            }
            if !quick && only.contains(&Section::Colocation) {
                command.push_str(&format!(
                    " --colocation-rounds {colocation_rounds} --window {window}"
                ));
            }
            if !quick && only.contains(&Section::Gpu) {
                command.push_str(&format!(" --gpu-rounds {gpu_rounds}"));
            }
            if !quick && (only.contains(&Section::Sensor) || only.contains(&Section::Colocation)) {
                command.push_str(&format!(" --max-steal {max_steal}"));
            }
            let machine = docs::machine_description();
            let mut body = serde_json::json!({"machine": machine});
            let mut sections = Vec::new();
            if only.contains(&Section::Sensor) {
                let sensor =
                    bench_sensor::run(rounds, seconds, hackbench_loops, max_steal, &progress)?;
                sections.push((
                    "sensor",
                    bench_sensor::markdown(&sensor, &command, &machine),
                ));
                body["sensor"] = serde_json::to_value(&sensor)?;
            }
            if only.contains(&Section::Reaction) {
                let reaction = bench_reaction::run(bursts, &progress)?;
                sections.push((
                    "reaction",
                    bench_reaction::markdown(&reaction, &command, &machine),
                ));
                body["reaction"] = serde_json::to_value(&reaction)?;
            }
            if only.contains(&Section::Worker) {
                let worker = bench_worker::run(worker_reps, worker_runs, &progress)?;
                sections.push((
                    "worker",
                    bench_worker::markdown(&worker, &command, &machine),
                ));
                body["worker"] = serde_json::to_value(&worker)?;
            }
            if only.contains(&Section::Colocation) {
                let measured =
                    bench_colocation::run(colocation_rounds, window, max_steal, &progress)?;
                let figures = colocation_report::figures(&measured);
                // The plot goes beside benchmarks.md when the run updates it.
                let plot = if quick || no_docs {
                    cargo::workspace_root().join("target/bench/colocation.svg")
                } else {
                    cargo::workspace_root().join("docs/colocation.svg")
                };
                std::fs::write(
                    &plot,
                    colocation_plot::svg(&figures, &format!("reamer co-location: {machine}")),
                )
                .with_context(|| format!("writing {}", plot.display()))?;
                eprintln!("[bench] plot written to {}", plot.display());
                sections.push((
                    "colocation",
                    colocation_report::markdown(
                        &figures,
                        &measured,
                        &command,
                        &machine,
                        "colocation.svg",
                    ),
                ));
                body["scenarios"] = colocation_report::scenarios_json(&figures);
                // Every window, for a second look at the figures.
                body["colocation"] = serde_json::to_value(&measured)?;
            }
            if only.contains(&Section::Gpu) {
                match bench_gpu::unavailable() {
                    Some(reason) => {
                        eprintln!(
                            "[bench] gpu: skipped, docs/benchmarks.md keeps its GPU section: {reason}"
                        );
                        body["gpu"] = serde_json::json!({"skipped": reason});
                    }
                    None => {
                        let run = bench_gpu::run(gpu_rounds, gpu_train, &progress)?;
                        let figures = gpu_report::figures(&run);
                        sections.push((
                            "gpu",
                            gpu_report::markdown(&run, &figures, &command, &machine),
                        ));
                        body["gpu"] = serde_json::json!({
                            "scenarios": figures,
                            "run": run,
                        });
                    }
                }
            }
            for (_, section) in &sections {
                println!("{section}");
            }
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&body)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if !quick && !no_docs {
                for (name, section) in &sections {
                    docs::replace_section(name, section)?;
                }
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
