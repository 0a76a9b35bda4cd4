//! `cargo xtask bench`: the benchmarks, each in a module of its own, and the report they
//! write into docs/benchmarks.md.
//!
//! - `sensor`: the sensor's cost per event and in throughput beside a no-op floor;
//! - `reaction`: the enforcer's time from kernel event to cgroup write;
//! - `worker`: the inference worker against ONNX Runtime;
//! - `replay`: the CPU policy over the trace recorded on the 16-CPU GPU server;
//! - `colocation`: training beside online and offline inference, scenario by scenario;
//! - `gpu`: a PyTorch training loop beside PyTorch inference on one GPU.

pub mod colocation;
pub mod docs;
pub mod gpu;
pub mod progress_bar;
pub mod reaction;
pub mod replay;
pub mod sensor;
pub mod stats;
pub mod worker;

use std::path::PathBuf;

use anyhow::Context as _;

use crate::{bootstrap, cargo, models};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    Sensor,
    Reaction,
    Worker,
    Replay,
    Colocation,
    Gpu,
}

/// The options of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct Options {
    /// The sections to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sensor,reaction,worker,replay,colocation,gpu"
    )]
    pub only: Vec<Section>,
    /// Rounds of the co-location benchmark (each runs every scenario once).
    #[arg(long, default_value_t = 12)]
    pub colocation_rounds: usize,
    /// Seconds of training per co-location window.
    #[arg(long, default_value_t = 4.0)]
    pub window: f64,
    /// Only these co-location scenarios (comma-separated keys of the JSON report, such as
    /// reamer,reamer_offline_not_paused), each beside training alone; for a quicker look.
    /// Such a run leaves docs/benchmarks.md alone. Default: every scenario.
    #[arg(long, value_delimiter = ',', value_name = "SCENARIOS")]
    pub scenarios: Vec<String>,
    /// Sensor and co-location rounds are kept only if the hypervisor stole at most
    /// this share of the CPU (%) while they ran; others are run again, up to three
    /// attempts per one asked for. On this kind of VM steal moves a result more than the
    /// effects measured.
    #[arg(long, default_value_t = 3.0, value_name = "PERCENT")]
    pub max_steal: f64,
    /// Interleaved repetitions per engine in the worker section.
    #[arg(long, default_value_t = 3)]
    pub worker_reps: usize,
    /// Timed runs per batch size and repetition in the worker section.
    #[arg(long, default_value_t = 20)]
    pub worker_runs: usize,
    /// Rounds of the GPU benchmark (each runs every GPU scenario once).
    #[arg(long, default_value_t = 3)]
    pub gpu_rounds: usize,
    /// Rounds of the sensor's throughput measurement (each runs the workloads without
    /// programs, with the sensor, and with a no-op on each of its tracepoints).
    #[arg(long, default_value_t = 30)]
    pub rounds: usize,
    /// Seconds per ping-pong measurement (hackbench runs a fixed amount of work).
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Training bursts for the reaction measurement.
    #[arg(long, default_value_t = 60)]
    pub bursts: usize,
    /// A short smoke run (3 rounds of 1 s, 10 bursts, 1 worker repetition, 3 co-location
    /// rounds of 1.5 s windows, kept whatever the steal); does not touch docs/benchmarks.md.
    #[arg(long)]
    pub quick: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Do not update docs/benchmarks.md.
    #[arg(long)]
    pub no_docs: bool,
    /// Use the release binaries already in target/release: no toolchain check, no build.
    /// For a machine without the Rust toolchain (a GPU server the repository and its
    /// built target/release were copied to), running target/release/xtask from the
    /// repository's root.
    #[arg(long)]
    pub prebuilt: bool,
}

/// Runs the sections `options.only` names and writes their report.
pub fn run(options: Options) -> anyhow::Result<()> {
    let Options {
        only,
        colocation_rounds,
        window,
        scenarios,
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
    } = options;
    if !prebuilt {
        bootstrap::ensure()?;
    }
    let privileged = only
        .iter()
        .any(|s| !matches!(s, Section::Worker | Section::Replay));
    if privileged && !cargo::is_root() {
        anyhow::bail!(
            "the sensor, reaction and co-location benchmarks load eBPF programs and \
             write cgroups: run them as root (sudo -E cargo xtask bench), or only the \
             worker's and the replay with --only worker,replay"
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
    let scenarios = colocation_scenarios(&scenarios)?;
    let every_scenario = scenarios.len() == colocation::report::Scenario::ALL.len();
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
        (Section::Replay, "replay"),
        (Section::Colocation, "colocation"),
        (Section::Gpu, "gpu"),
    ]
    .iter()
    .filter(|(section, _)| only.contains(section))
    .map(|(_, name)| *name)
    .collect();
    if names.len() < 6 {
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
    if !every_scenario {
        let names: Vec<&str> = scenarios.iter().map(|s| s.name()).collect();
        command.push_str(&format!(" --scenarios {}", names.join(",")));
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
        let sensor = sensor::run(rounds, seconds, hackbench_loops, max_steal, &progress)?;
        sections.push(("sensor", sensor::markdown(&sensor, &command, &machine)));
        body["sensor"] = serde_json::to_value(&sensor)?;
    }
    if only.contains(&Section::Reaction) {
        let reaction = reaction::run(bursts, &progress)?;
        sections.push((
            "reaction",
            reaction::markdown(&reaction, &command, &machine),
        ));
        body["reaction"] = serde_json::to_value(&reaction)?;
    }
    if only.contains(&Section::Worker) {
        let worker = worker::run(worker_reps, worker_runs, &progress)?;
        sections.push(("worker", worker::markdown(&worker, &command, &machine)));
        body["worker"] = serde_json::to_value(&worker)?;
    }
    if only.contains(&Section::Replay) {
        let replay = replay::run(&progress)?;
        sections.push(("replay", replay::markdown(&replay)));
        body["replay"] = serde_json::to_value(&replay)?;
    }
    if only.contains(&Section::Colocation) {
        let measured =
            colocation::run(colocation_rounds, window, max_steal, &scenarios, &progress)?;
        let figures = colocation::report::figures(&measured);
        // The plot goes beside benchmarks.md when the run updates it.
        let plot = if quick || no_docs || !every_scenario {
            cargo::workspace_root().join("target/bench/colocation.svg")
        } else {
            cargo::workspace_root().join("docs/colocation.svg")
        };
        std::fs::write(
            &plot,
            colocation::plot::svg(&figures, &format!("reamer co-location: {machine}")),
        )
        .with_context(|| format!("writing {}", plot.display()))?;
        eprintln!("[bench] plot written to {}", plot.display());
        sections.push((
            "colocation",
            colocation::report::markdown(&figures, &measured, &command, &machine, "colocation.svg"),
        ));
        body["scenarios"] = colocation::report::scenarios_json(&figures);
        // Every window, for a second look at the figures.
        body["colocation"] = serde_json::to_value(&measured)?;
    }
    if only.contains(&Section::Gpu) {
        match gpu::unavailable() {
            Some(reason) => {
                eprintln!(
                    "[bench] gpu: skipped, docs/benchmarks.md keeps its GPU section: {reason}"
                );
                body["gpu"] = serde_json::json!({"skipped": reason});
            }
            None => {
                let run = gpu::run(gpu_rounds, gpu_train, &progress)?;
                let figures = gpu::report::figures(&run);
                sections.push((
                    "gpu",
                    gpu::report::markdown(&run, &figures, &command, &machine),
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
            if *name == "colocation" && !every_scenario {
                eprintln!("[bench] docs/benchmarks.md keeps its co-location section: --scenarios");
                continue;
            }
            docs::replace_section(name, section)?;
        }
        eprintln!("[bench] docs/benchmarks.md updated");
    }
    Ok(())
}

/// The co-location scenarios `--scenarios` names; every one where it names none.
fn colocation_scenarios(names: &[String]) -> anyhow::Result<Vec<colocation::report::Scenario>> {
    use colocation::report::Scenario;
    if names.is_empty() {
        return Ok(Scenario::ALL.to_vec());
    }
    names
        .iter()
        .map(|name| {
            Scenario::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                anyhow::anyhow!(
                    "--scenarios: no scenario {name:?}; the scenarios are {}",
                    known.join(", ")
                )
            })
        })
        .collect()
}
