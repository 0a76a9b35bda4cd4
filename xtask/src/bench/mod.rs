//! `cargo xtask bench`: the benchmarks, each in a module of its own, and the report they
//! write into docs/benchmarks.md. `options` is the command line, a group per benchmark;
//! `common` the parts they share (the steal rule's rounds, statistics, the inference
//! workers); `saved`, `docs`, `plot` and `plots_written` what a run leaves behind.
//!
//! - `sensor`: the sensor's cost per event and in throughput beside a no-op floor;
//! - `reaction`: the enforcer's time from kernel event to cgroup write;
//! - `worker`: the inference worker against ONNX Runtime;
//! - `replay`: the CPU policy over the trace recorded on the 16-CPU GPU server;
//! - `colocation`: training beside online and offline inference, scenario by scenario;
//! - `gpu`: a PyTorch training loop beside PyTorch inference on one GPU;
//! - `server`: a real PyTorch training job on the GPU server, inference on its spare cores.

pub mod colocation;
pub(crate) mod common;
pub mod docs;
pub mod gpu;
pub mod options;
pub(crate) mod plot;
pub mod plots_written;
pub mod reaction;
pub mod replay;
pub mod saved;
pub mod sensor;
pub mod server;
pub mod worker;

use anyhow::Context as _;

pub use self::options::{Options, Section};
use crate::{bootstrap, cargo, models};

/// Runs the sections `options.only` names and writes their report.
pub fn run(options: Options) -> anyhow::Result<()> {
    if let Some((section, path)) = options.saved_run() {
        return report_saved_run(section, &path, &options);
    }
    options.check()?;
    prepare(&options)?;
    let options = if options.quick {
        options.smoke()
    } else {
        options
    };
    let command = options.command();
    // Every section says when and from which build its figures came.
    let machine = format!("{} ({})", docs::machine_description(), docs::run_stamp());
    let about = saved::About {
        command: command.clone(),
        machine: machine.clone(),
        quick: options.quick,
    };
    let mut report = Report {
        body: serde_json::json!({"machine": machine}),
        sections: Vec::new(),
    };
    for section in Section::ALL.into_iter().filter(|&s| options.runs(s)) {
        run_section(section, &options, &about, &mut report)?;
    }
    for (_, section) in &report.sections {
        println!("{section}");
    }
    if let Some(path) = &options.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.body)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !options.quick && !options.no_docs {
        let mut updated = 0;
        for (section, text) in &report.sections {
            let name = docs_section(*section, &options);
            match keeps_its_section(*section, &options) {
                Some(why) => {
                    eprintln!("[bench] docs/benchmarks.md keeps its {name} section: {why}")
                }
                None => {
                    docs::replace_section(name, text)?;
                    updated += 1;
                }
            }
        }
        if updated > 0 {
            eprintln!("[bench] docs/benchmarks.md updated");
        }
    }
    Ok(())
}

/// What a run has written so far: its JSON, and each section's Markdown.
struct Report {
    body: serde_json::Value,
    sections: Vec<(Section, String)>,
}

/// The docs/benchmarks.md section `section` writes: its name, or the server's chosen one.
fn docs_section(section: Section, options: &Options) -> &str {
    match section {
        Section::Server => &options.server.server_section,
        _ => section.name(),
    }
}

/// Where docs/benchmarks.md keeps its section although the run measured it: why.
fn keeps_its_section(section: Section, options: &Options) -> Option<&'static str> {
    match section {
        Section::Colocation if !options.colocation.every_scenario() => Some("--scenarios"),
        Section::Server if options.server.training_cmd.is_some() => {
            Some("a stand-in's figures are not the server's")
        }
        _ => None,
    }
}

/// The toolchain, root, the models and the release binaries the sections need.
fn prepare(options: &Options) -> anyhow::Result<()> {
    if !options.prebuilt {
        bootstrap::ensure()?;
    }
    let privileged = options
        .only
        .iter()
        .any(|s| !matches!(s, Section::Worker | Section::Replay));
    if privileged && !cargo::is_root() {
        anyhow::bail!(
            "the sensor, reaction and co-location benchmarks load eBPF programs and \
             write cgroups: run them as root (sudo -E cargo xtask bench), or only the \
             worker's and the replay with --only worker,replay"
        );
    }
    let inference = options.runs(Section::Colocation) || options.runs(Section::Server);
    if options.prebuilt {
        // The server benchmark also runs the inference worker and the load generator.
        let bins: &[&str] = if options.runs(Section::Server) {
            &["enforcer", "inference-worker", "load-gen"]
        } else {
            &["enforcer"]
        };
        return cargo::check_release_bins(bins);
    }
    if inference {
        // The online inference there serves the PP-OCR classifier, on ONNX Runtime where its
        // library is in place.
        models::ensure_models()?;
        models::ensure_onnxruntime_library()?;
    }
    cargo::build_release()
}

/// Runs one section and adds its Markdown and JSON to `report`.
fn run_section(
    section: Section,
    options: &Options,
    about: &saved::About,
    report: &mut Report,
) -> anyhow::Result<()> {
    let progress = |step: &str| eprintln!("[bench] {step}");
    let (command, machine) = (&about.command, &about.machine);
    let (text, json) = match section {
        Section::Sensor => {
            let sensor = sensor::run(
                options.sensor.rounds,
                options.sensor.seconds,
                options.sensor.hackbench_loops(options.quick),
                options.max_steal,
                &progress,
            )?;
            let text = sensor::markdown(&sensor, command, machine);
            (text, serde_json::to_value(&sensor)?)
        }
        Section::Reaction => {
            let reaction = reaction::run(options.reaction.bursts, &progress)?;
            let text = reaction::markdown(&reaction, command, machine);
            (text, serde_json::to_value(&reaction)?)
        }
        Section::Worker => {
            let worker = worker::run(
                options.worker.worker_reps,
                options.worker.worker_runs,
                &progress,
            )?;
            let text = worker::markdown(&worker, command, machine);
            (text, serde_json::to_value(&worker)?)
        }
        Section::Replay => {
            let replay = replay::run(&progress)?;
            (replay::markdown(&replay), serde_json::to_value(&replay)?)
        }
        Section::Colocation => {
            let colocation = &options.colocation;
            let measured = colocation::run(
                colocation.colocation_rounds,
                colocation.window,
                colocation.settle,
                options.max_steal,
                &colocation.scenarios()?,
                &progress,
            )?;
            // Saved whole, so that its report and plots can be written again (--colocation-from).
            let saved = cargo::workspace_root().join("target/bench/colocation/run.json");
            saved::Saved {
                about: about.clone(),
                planned_windows: measured.windows.len(),
                run: &measured,
            }
            .write(&saved)?;
            // The plots go beside benchmarks.md when the run updates it.
            let into_docs = !(options.quick || options.no_docs || !colocation.every_scenario());
            let (text, scenarios) =
                colocation::report::section(&measured, command, machine, into_docs)?;
            // Every window too, for a second look at the figures.
            report.body["scenarios"] = scenarios;
            (text, serde_json::to_value(&measured)?)
        }
        Section::Gpu => match gpu::unavailable() {
            Some(reason) => {
                eprintln!(
                    "[bench] gpu: skipped, docs/benchmarks.md keeps its GPU section: {reason}"
                );
                report.body["gpu"] = serde_json::json!({"skipped": reason});
                return Ok(());
            }
            None => {
                // Each job through every scenario; one section, a part per job.
                let gpu = &options.gpu;
                let runs = gpu::run_jobs(
                    &gpu.gpu_jobs,
                    gpu.gpu_rounds,
                    gpu.train(options.quick),
                    gpu.loader_workers,
                    about,
                    &progress,
                )?;
                gpu::report::section(&runs, command, machine)
            }
        },
        Section::Server => {
            let training = options.server.training(options.gpu.loader_workers)?;
            match training.unavailable() {
                // Named alone, the section is what was asked for: say why it cannot run.
                Some(reason) if options.only.len() == 1 => {
                    anyhow::bail!("the server benchmark: {reason}")
                }
                Some(reason) => {
                    eprintln!(
                        "[bench] server: skipped, docs/benchmarks.md keeps its server section: \
                         {reason}"
                    );
                    report.body["server"] = serde_json::json!({"skipped": reason});
                    return Ok(());
                }
                None => run_server(options, training, about, &progress)?,
            }
        }
    };
    report.body[section.name()] = json;
    report.sections.push((section, text));
    Ok(())
}

/// The server benchmark, its plot, its section and its JSON.
fn run_server(
    options: &Options,
    training: server::TrainingCommand,
    about: &saved::About,
    progress: &dyn Fn(&str),
) -> anyhow::Result<(String, serde_json::Value)> {
    let server = &options.server;
    let stand_in = training.stand_in;
    let measured = server::run(
        server::Options {
            rounds: server.server_rounds,
            scenarios: server.scenarios()?,
            seconds: server.server_seconds,
            pace_settle: std::time::Duration::from_secs_f64(server.server_pace_settle),
            training,
            online_rate: server.server_online_rate,
            about: about.clone(),
        },
        progress,
    )?;
    server::report::section(
        &measured,
        &about.command,
        &about.machine,
        &server.server_section,
        !options.quick && !options.no_docs && !stand_in,
    )
}

/// `--server-from` and `--gpu-from`: `section` rendered from what a run saved at `path`;
/// nothing is run.
fn report_saved_run(
    section: Section,
    path: &std::path::Path,
    options: &Options,
) -> anyhow::Result<()> {
    let (json, no_docs) = (&options.json, options.no_docs);
    let name = section.name();
    if options.only != [section] {
        anyhow::bail!("--{name}-from reports the {name} benchmark only: give --only {name}");
    }
    let flag = format!("--{name}-from");
    // The section, its JSON, whether the run may replace the section of the docs.
    let (text, figures, updates_docs, machine) = match section {
        Section::Server => {
            let saved = saved::Saved::<server::Measured>::load(path, name)?;
            // A stand-in's figures are not the server's.
            let updates = saved.may_update_docs() && !saved.run.stand_in && !no_docs;
            let (text, json) = server::report::section(
                &saved.run,
                &saved.report_command(path, name, &flag),
                &saved.about.machine,
                &options.server.server_section,
                updates,
            )?;
            (text, json, updates, saved.about.machine)
        }
        Section::Colocation => {
            let saved = saved::Saved::<colocation::Measured>::load(path, name)?;
            let measured = &saved.run;
            // A run of some scenarios only leaves the section as it is.
            let every_scenario =
                colocation::scenario::Scenario::cover_the_default_run(&measured.scenarios);
            let updates = saved.may_update_docs() && every_scenario && !no_docs;
            let (text, json) = colocation::report::section(
                measured,
                &saved.report_command(path, name, &flag),
                &saved.about.machine,
                updates,
            )?;
            (text, json, updates, saved.about.machine)
        }
        Section::Gpu => {
            let saved = saved::Saved::<Vec<gpu::GpuRun>>::load(path, name)?;
            let command = saved.report_command(path, name, &flag);
            let (text, json) = gpu::report::section(&saved.run, &command, &saved.about.machine);
            (text, json, saved.may_update_docs(), saved.about.machine)
        }
        _ => unreachable!("only the server, GPU and co-location benchmarks save their runs"),
    };
    println!("{text}");
    if let Some(json) = json {
        let body = serde_json::json!({"machine": machine, name: figures});
        std::fs::write(json, serde_json::to_string_pretty(&body)?)
            .with_context(|| format!("writing {}", json.display()))?;
    }
    if no_docs || !updates_docs {
        eprintln!(
            "[bench] docs/benchmarks.md keeps its {} section: --no-docs, a --quick run, a \
             stand-in's figures or some scenarios only",
            docs_section(section, options)
        );
    } else {
        docs::replace_section(docs_section(section, options), &text)?;
        eprintln!("[bench] docs/benchmarks.md updated");
    }
    Ok(())
}
