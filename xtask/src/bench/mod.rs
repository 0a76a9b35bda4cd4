//! `cargo xtask bench`: the benchmarks, each in a module of its own, and the report they
//! write into docs/benchmarks.md.
//!
//! - `sensor`: the sensor's cost per event and in throughput beside a no-op floor;
//! - `reaction`: the enforcer's time from kernel event to cgroup write;
//! - `worker`: the inference worker against ONNX Runtime;
//! - `replay`: the CPU policy over the trace recorded on the 16-CPU GPU server;
//! - `colocation`: training beside online and offline inference, scenario by scenario;
//! - `gpu`: a PyTorch training loop beside PyTorch inference on one GPU;
//! - `server`: a real PyTorch training job on the GPU server, inference on its spare cores.

pub mod colocation;
pub mod docs;
pub mod gpu;
pub(crate) mod plot;
pub mod plots_written;
pub mod progress_bar;
pub mod reaction;
pub mod replay;
pub mod saved;
pub mod sensor;
pub mod server;
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
    Server,
}

/// The options of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct Options {
    /// The sections to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sensor,reaction,worker,replay,colocation,gpu,server"
    )]
    pub only: Vec<Section>,
    /// Rounds of the co-location benchmark (each runs every scenario once).
    #[arg(long, default_value_t = 12)]
    pub colocation_rounds: usize,
    /// Seconds of training per co-location window.
    #[arg(long, default_value_t = 4.0)]
    pub window: f64,
    /// Report the co-location benchmark from what a run saved (target/bench/colocation/run.json,
    /// written at its end), with its plots; nothing is run. With --only colocation; updates
    /// docs/benchmarks.md and its plots as the run would have.
    #[arg(long, value_name = "FILE")]
    pub colocation_from: Option<PathBuf>,
    /// Only these co-location scenarios (comma-separated keys of the JSON report, such as
    /// reamer,reamer_offline_not_paused), each beside training alone; for a quicker look.
    /// Such a run leaves docs/benchmarks.md alone. Default: every scenario but
    /// reamer_by_pace (offline's share set by training's pace), which takes about 25 s to
    /// settle: name it with --window 60.
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
    /// Rounds of the GPU benchmark (each runs every GPU scenario once), per training job.
    #[arg(long, default_value_t = 3)]
    pub gpu_rounds: usize,
    /// The GPU benchmark's training jobs, each through every scenario: the GPU-bound MLP and
    /// the loader-bound ResNet-50 (with --loader-workers DataLoader processes).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "mlp,resnet50-loader"
    )]
    pub gpu_jobs: Vec<gpu::TrainingJob>,
    /// Report the GPU benchmark from what a run saved (target/bench/gpu/run.json, written
    /// after each window), for a run cut short; nothing is run. With --only gpu; updates
    /// docs/benchmarks.md as the run would have.
    #[arg(long, value_name = "FILE")]
    pub gpu_from: Option<PathBuf>,
    /// Rounds of the server benchmark (each runs every server scenario once).
    #[arg(long, default_value_t = 3)]
    pub server_rounds: usize,
    /// Only these server scenarios (comma-separated keys of the JSON report, such as
    /// reamer,alone_observed_10hz), each beside training alone; to fit a short lease of the
    /// GPU server. Default: every scenario.
    #[arg(long, value_delimiter = ',', value_name = "SCENARIOS")]
    pub server_scenarios: Vec<String>,
    /// Report the server benchmark from what a run saved (target/bench/server/run.json,
    /// written after each window), for a run cut short; nothing is run. With --only server;
    /// updates docs/benchmarks.md as the run would have.
    #[arg(long, value_name = "FILE")]
    pub server_from: Option<PathBuf>,
    /// Seconds of the server benchmark's training job timed per window (after its warm-up).
    #[arg(long, default_value_t = 25.0)]
    pub server_seconds: f64,
    /// The server benchmark's online load, requests a second (40 with --quick).
    #[arg(long, default_value_t = 150.0)]
    pub server_online_rate: f64,
    /// DataLoader worker processes of the server benchmark's PyTorch job, and of the GPU
    /// benchmark's ResNet-50: 6 leaves most of a 16-CPU server's cores idle.
    #[arg(long, default_value_t = 6)]
    pub loader_workers: usize,
    /// A stand-in for the server benchmark's PyTorch job, for a machine without a GPU: a
    /// command (words split at whitespace) that takes `--seconds S --json` and prints a JSON
    /// line with steps_per_s, step_ms_p50, step_ms_p99, cpu_s and seconds, as
    /// `target/release/training-sim` does. Its figures are not the server's, and such a run
    /// leaves docs/benchmarks.md alone.
    #[arg(long, value_name = "COMMAND")]
    pub training_cmd: Option<String>,
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
        gpu_jobs,
        prebuilt,
        server_rounds,
        server_scenarios,
        server_from,
        gpu_from,
        colocation_from,
        server_seconds,
        server_online_rate,
        loader_workers,
        training_cmd,
    } = options;
    if let Some(path) = server_from {
        return report_saved_run(Section::Server, &path, &only, json, no_docs);
    }
    if let Some(path) = gpu_from {
        return report_saved_run(Section::Gpu, &path, &only, json, no_docs);
    }
    if let Some(path) = colocation_from {
        return report_saved_run(Section::Colocation, &path, &only, json, no_docs);
    }
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
    if !(window >= 1.0 && window.is_finite())
        || colocation_rounds == 0
        || gpu_rounds == 0
        || server_rounds == 0
        || gpu_jobs.is_empty()
    {
        anyhow::bail!(
            "--window must be at least 1 second, --colocation-rounds, --gpu-rounds and \
             --server-rounds at least 1, and --gpu-jobs must name a job (mlp, \
             resnet50-loader)"
        );
    }
    let server_seconds_valid = server_seconds >= 1.0 && server_seconds.is_finite();
    let server_rate_valid = server_online_rate > 0.0 && server_online_rate.is_finite();
    if !server_seconds_valid || !server_rate_valid || loader_workers == 0 {
        anyhow::bail!(
            "--server-seconds must be at least 1, --server-online-rate above 0 and \
             --loader-workers at least 1"
        );
    }
    let server_training = match &training_cmd {
        Some(command) => server::TrainingCommand::stand_in(command)?,
        None => server::TrainingCommand::resnet50(loader_workers),
    };
    if !(0.0..=100.0).contains(&max_steal) {
        anyhow::bail!("--max-steal is a share of the CPU: 0 to 100 (%), not {max_steal}");
    }
    let scenarios = colocation_scenarios(&scenarios)?;
    let server_scenarios = server_scenarios_named(&server_scenarios)?;
    let every_server_scenario = server_scenarios.len() == server::Scenario::ALL.len();
    let every_scenario = colocation::report::Scenario::ALL
        .iter()
        .all(|s| scenarios.contains(s));
    if (only.contains(&Section::Colocation) || only.contains(&Section::Server)) && !prebuilt {
        // The online inference there serves the PP-OCR classifier, on ONNX Runtime where its
        // library is in place.
        models::ensure_models()?;
        models::ensure_onnxruntime_library()?;
    }
    if prebuilt {
        // The server benchmark also runs the inference worker and the load generator.
        let bins: &[&str] = if only.contains(&Section::Server) {
            &["enforcer", "inference-worker", "load-gen"]
        } else {
            &["enforcer"]
        };
        cargo::check_release_bins(bins)?;
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
        (Section::Server, "server"),
    ]
    .iter()
    .filter(|(section, _)| only.contains(section))
    .map(|(_, name)| *name)
    .collect();
    if names.len() < 7 {
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
    // The default run's scenarios go unsaid; any other set (fewer, or more) is named.
    if !every_scenario || scenarios.len() != colocation::report::Scenario::ALL.len() {
        let names: Vec<&str> = scenarios.iter().map(|s| s.name()).collect();
        command.push_str(&format!(" --scenarios {}", names.join(",")));
    }
    if only.contains(&Section::Gpu) {
        if !quick {
            command.push_str(&format!(" --gpu-rounds {gpu_rounds}"));
        }
        let jobs: Vec<&str> = gpu_jobs.iter().map(|j| j.arg()).collect();
        command.push_str(&format!(" --gpu-jobs {}", jobs.join(",")));
        if gpu_jobs.contains(&gpu::TrainingJob::Resnet50Loader) && !only.contains(&Section::Server)
        {
            command.push_str(&format!(" --loader-workers {loader_workers}"));
        }
    }
    if only.contains(&Section::Server) {
        if !quick {
            command.push_str(&format!(
                " --server-rounds {server_rounds} --server-seconds {server_seconds} \
                 --server-online-rate {server_online_rate}"
            ));
        }
        if !every_server_scenario {
            let names: Vec<&str> = server_scenarios.iter().map(|s| s.name()).collect();
            command.push_str(&format!(" --server-scenarios {}", names.join(",")));
        }
        match &training_cmd {
            Some(training) => command.push_str(&format!(" --training-cmd '{training}'")),
            None => command.push_str(&format!(" --loader-workers {loader_workers}")),
        }
    }
    if !quick && (only.contains(&Section::Sensor) || only.contains(&Section::Colocation)) {
        command.push_str(&format!(" --max-steal {max_steal}"));
    }
    // Every section says when and from which build its figures came.
    let machine = format!("{} ({})", docs::machine_description(), docs::run_stamp());
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
        // Saved whole, so that its report and plots can be written again (--colocation-from).
        let saved = cargo::workspace_root().join("target/bench/colocation/run.json");
        saved::Saved {
            about: saved::About {
                command: command.clone(),
                machine: machine.clone(),
                quick,
            },
            planned_windows: measured.windows.len(),
            run: &measured,
        }
        .write(&saved)?;
        // The plots go beside benchmarks.md when the run updates it.
        colocation_plots(&figures, &machine, !(quick || no_docs || !every_scenario))?;
        sections.push((
            "colocation",
            colocation::report::markdown(&figures, &measured, &command, &machine),
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
                // Each job through every scenario; one section, a part per job.
                let about = saved::About {
                    command: command.clone(),
                    machine: machine.clone(),
                    quick,
                };
                let runs = gpu::run_jobs(
                    &gpu_jobs,
                    gpu_rounds,
                    gpu_train,
                    loader_workers,
                    &about,
                    &progress,
                )?;
                let (text, json) = gpu::report::section(&runs, &command, &machine);
                sections.push(("gpu", text));
                body["gpu"] = json;
            }
        }
    }
    if only.contains(&Section::Server) {
        match server_training.unavailable() {
            // Named alone, the section is what was asked for: say why it cannot run.
            Some(reason) if only.len() == 1 => anyhow::bail!("the server benchmark: {reason}"),
            Some(reason) => {
                eprintln!(
                    "[bench] server: skipped, docs/benchmarks.md keeps its server section: {reason}"
                );
                body["server"] = serde_json::json!({"skipped": reason});
            }
            None => {
                let (server_rounds, server_seconds, server_online_rate) = if quick {
                    (1, 4.0, 40.0)
                } else {
                    (server_rounds, server_seconds, server_online_rate)
                };
                let measured = server::run(
                    server::Options {
                        rounds: server_rounds,
                        scenarios: server_scenarios.clone(),
                        seconds: server_seconds,
                        training: server_training.clone(),
                        online_rate: server_online_rate,
                        about: saved::About {
                            command: command.clone(),
                            machine: machine.clone(),
                            quick,
                        },
                    },
                    &progress,
                )?;
                let figures = server::report::figures(&measured);
                let targets = server::report::targets(&figures);
                plots_written::write(
                    server::plot::tradeoff(&figures, &machine, measured.stand_in),
                    server::plot::TRADEOFF_FILE,
                    !quick && !no_docs && !server_training.stand_in,
                )?;
                sections.push((
                    "server",
                    server::report::markdown(&measured, &figures, &command, &machine),
                ));
                body["server"] = serde_json::json!({
                    "scenarios": figures,
                    "targets": targets,
                    "run": measured,
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
            if *name == "server" && server_training.stand_in {
                eprintln!(
                    "[bench] docs/benchmarks.md keeps its server section: a stand-in's figures \
                     are not the server's"
                );
                continue;
            }
            docs::replace_section(name, section)?;
        }
        eprintln!("[bench] docs/benchmarks.md updated");
    }
    Ok(())
}

/// `--server-from` and `--gpu-from`: `section` rendered from what a run saved at `path`;
/// nothing is run.
fn report_saved_run(
    section: Section,
    path: &std::path::Path,
    only: &[Section],
    json: Option<PathBuf>,
    no_docs: bool,
) -> anyhow::Result<()> {
    let name = match section {
        Section::Server => "server",
        Section::Gpu => "gpu",
        Section::Colocation => "colocation",
        _ => unreachable!("only the server, GPU and co-location benchmarks save their runs"),
    };
    if only != [section] {
        anyhow::bail!("--{name}-from reports the {name} benchmark only: give --only {name}");
    }
    let flag = format!("--{name}-from");
    // The section, its JSON, whether the run may replace the section of the docs.
    let (text, figures, updates_docs, machine) = match section {
        Section::Server => {
            let saved = saved::Saved::<server::Measured>::load(path, name)?;
            let measured = &saved.run;
            let figures = server::report::figures(measured);
            let text = server::report::markdown(
                measured,
                &figures,
                &saved.report_command(path, name, &flag),
                &saved.about.machine,
            );
            let json = serde_json::json!({
                "scenarios": figures,
                "targets": server::report::targets(&figures),
                "run": measured,
            });
            // A stand-in's figures are not the server's.
            let updates = saved.may_update_docs() && !measured.stand_in && !no_docs;
            plots_written::write(
                server::plot::tradeoff(&figures, &saved.about.machine, measured.stand_in),
                server::plot::TRADEOFF_FILE,
                updates,
            )?;
            (text, json, updates, saved.about.machine)
        }
        Section::Colocation => {
            let saved = saved::Saved::<colocation::Measured>::load(path, name)?;
            let measured = &saved.run;
            let figures = colocation::report::figures(measured);
            let text = colocation::report::markdown(
                &figures,
                measured,
                &saved.report_command(path, name, &flag),
                &saved.about.machine,
            );
            let json = colocation::report::scenarios_json(&figures);
            // A run of some scenarios only leaves the section as it is.
            let every_scenario = colocation::report::Scenario::ALL
                .iter()
                .all(|s| measured.scenarios.contains(s));
            let updates = saved.may_update_docs() && every_scenario && !no_docs;
            colocation_plots(&figures, &saved.about.machine, updates)?;
            (text, json, updates, saved.about.machine)
        }
        _ => {
            let saved = saved::Saved::<Vec<gpu::GpuRun>>::load(path, name)?;
            let command = saved.report_command(path, name, &flag);
            let (text, json) = gpu::report::section(&saved.run, &command, &saved.about.machine);
            (text, json, saved.may_update_docs(), saved.about.machine)
        }
    };
    println!("{text}");
    if let Some(json) = json {
        let body = serde_json::json!({"machine": machine, name: figures});
        std::fs::write(&json, serde_json::to_string_pretty(&body)?)
            .with_context(|| format!("writing {}", json.display()))?;
    }
    if no_docs || !updates_docs {
        eprintln!(
            "[bench] docs/benchmarks.md keeps its {name} section: --no-docs, a --quick run, a \
             stand-in's figures or some scenarios only"
        );
    } else {
        docs::replace_section(name, &text)?;
        eprintln!("[bench] docs/benchmarks.md updated");
    }
    Ok(())
}

/// The co-location run's plots: the trade-off and the bars, beside benchmarks.md where
/// `into_docs`.
fn colocation_plots(
    figures: &[(colocation::report::Scenario, colocation::report::Figures)],
    machine: &str,
    into_docs: bool,
) -> anyhow::Result<()> {
    plots_written::write(
        colocation::plot::tradeoff(figures, machine),
        colocation::plot::TRADEOFF_FILE,
        into_docs,
    )?;
    plots_written::write(
        colocation::plot::bars(figures, machine),
        colocation::plot::BARS_FILE,
        into_docs,
    )?;
    Ok(())
}

/// The scenario `flag` names `name`, out of `all`, each known by `name_of`; the error lists
/// the known names.
fn scenario_named<S: Copy>(
    flag: &str,
    name: &str,
    all: &[S],
    name_of: fn(S) -> &'static str,
) -> anyhow::Result<S> {
    all.iter()
        .copied()
        .find(|&s| name_of(s) == name)
        .ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|&s| name_of(s)).collect();
            anyhow::anyhow!(
                "{flag}: no scenario {name:?}; the scenarios are {}",
                known.join(", ")
            )
        })
}

/// The server scenarios `--server-scenarios` names, training alone first among them (every
/// ratio is to it); every one where it names none.
fn server_scenarios_named(names: &[String]) -> anyhow::Result<Vec<server::Scenario>> {
    use server::Scenario;
    if names.is_empty() {
        return Ok(Scenario::ALL.to_vec());
    }
    let mut scenarios = vec![Scenario::Alone];
    for name in names {
        let scenario = scenario_named("--server-scenarios", name, &Scenario::ALL, Scenario::name)?;
        if !scenarios.contains(&scenario) {
            scenarios.push(scenario);
        }
    }
    Ok(scenarios)
}

/// The co-location scenarios `--scenarios` names; every one where it names none.
fn colocation_scenarios(names: &[String]) -> anyhow::Result<Vec<colocation::report::Scenario>> {
    use colocation::report::Scenario;
    if names.is_empty() {
        return Ok(Scenario::ALL.to_vec());
    }
    let known: Vec<Scenario> = Scenario::known().collect();
    names
        .iter()
        .map(|name| scenario_named("--scenarios", name, &known, Scenario::name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_scenarios_named_put_training_alone_first_once_and_name_the_known_ones_on_error() {
        use server::Scenario;
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(server_scenarios_named(&[]).unwrap(), Scenario::ALL.to_vec());
        assert_eq!(
            server_scenarios_named(&names(&[
                "reamer",
                "alone_observed_10hz",
                "alone",
                "reamer"
            ]))
            .unwrap(),
            [Scenario::Alone, Scenario::Reamer, Scenario::AloneObserved]
        );
        let err = server_scenarios_named(&names(&["reamr"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"reamr\"") && err.contains("alone_observed_10hz"),
            "{err}"
        );
    }

    #[test]
    fn the_pace_scenario_is_named_but_not_in_the_default_run() {
        use colocation::report::Scenario;
        let default = colocation_scenarios(&[]).unwrap();
        assert!(!default.contains(&Scenario::ReamerByPace));
        let named = colocation_scenarios(&["reamer_by_pace".to_owned()]).unwrap();
        assert_eq!(named, [Scenario::ReamerByPace]);
        // A saved run that had it reads back.
        let read: Scenario = serde_json::from_str("\"reamer_by_pace\"").unwrap();
        assert_eq!(read, Scenario::ReamerByPace);
    }
}
