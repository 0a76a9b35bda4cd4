//! `cargo xtask bench`'s command line: the options every section reads, then each
//! benchmark's own group (its heading in `--help`). Each group checks itself, knows its smoke
//! values (`--quick`), and writes the flags that reproduce its run into the report's command.

use std::{path::PathBuf, time::Duration};

use anyhow::bail;

use super::{colocation::scenario::Scenario as ColocationScenario, gpu, server};

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Section {
    Sensor,
    Reaction,
    Worker,
    Replay,
    Colocation,
    Gpu,
    Server,
}

impl Section {
    pub const ALL: [Self; 7] = [
        Self::Sensor,
        Self::Reaction,
        Self::Worker,
        Self::Replay,
        Self::Colocation,
        Self::Gpu,
        Self::Server,
    ];

    /// Its name on the command line and in docs/benchmarks.md's markers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sensor => "sensor",
            Self::Reaction => "reaction",
            Self::Worker => "worker",
            Self::Replay => "replay",
            Self::Colocation => "colocation",
            Self::Gpu => "gpu",
            Self::Server => "server",
        }
    }
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
    /// Sensor and co-location rounds are kept only if the hypervisor stole at most
    /// this share of the CPU (%) while they ran; others are run again, up to three
    /// attempts per one asked for. On this kind of VM steal moves a result more than the
    /// effects measured.
    #[arg(long, default_value_t = 3.0, value_name = "PERCENT")]
    pub max_steal: f64,
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
    #[command(flatten)]
    pub sensor: SensorOptions,
    #[command(flatten)]
    pub reaction: ReactionOptions,
    #[command(flatten)]
    pub worker: WorkerOptions,
    #[command(flatten)]
    pub colocation: ColocationOptions,
    #[command(flatten)]
    pub gpu: GpuOptions,
    #[command(flatten)]
    pub server: ServerOptions,
}

/// The sensor benchmark's options.
#[derive(clap::Args)]
#[command(next_help_heading = "Sensor (--only sensor)")]
pub struct SensorOptions {
    /// Rounds of the sensor's throughput measurement (each runs the workloads without
    /// programs, with the sensor, and with a no-op on each of its tracepoints).
    #[arg(long, default_value_t = 30)]
    pub rounds: usize,
    /// Seconds per ping-pong measurement (hackbench runs a fixed amount of work).
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
}

impl SensorOptions {
    /// hackbench's loops: a fixed amount of work, less of it in a smoke run.
    pub fn hackbench_loops(&self, quick: bool) -> u32 {
        if quick { 200 } else { 500 }
    }

    fn smoke(self) -> Self {
        Self {
            rounds: 3,
            seconds: 1.0,
        }
    }

    fn flags(&self) -> String {
        format!(" --rounds {} --seconds {}", self.rounds, self.seconds)
    }
}

/// The reaction benchmark's options.
#[derive(clap::Args)]
#[command(next_help_heading = "Reaction (--only reaction)")]
pub struct ReactionOptions {
    /// Training bursts for the reaction measurement.
    #[arg(long, default_value_t = 60)]
    pub bursts: usize,
}

/// The worker benchmark's options.
#[derive(clap::Args)]
#[command(next_help_heading = "Worker (--only worker)")]
pub struct WorkerOptions {
    /// Interleaved repetitions per engine in the worker section.
    #[arg(long, default_value_t = 3)]
    pub worker_reps: usize,
    /// Timed runs per batch size and repetition in the worker section.
    #[arg(long, default_value_t = 20)]
    pub worker_runs: usize,
}

/// The co-location benchmark's options.
#[derive(clap::Args)]
#[command(next_help_heading = "Co-location (--only colocation)")]
pub struct ColocationOptions {
    /// Rounds of the co-location benchmark (each runs every scenario once).
    #[arg(long, default_value_t = 12)]
    pub colocation_rounds: usize,
    /// Seconds of training per co-location window.
    #[arg(long, default_value_t = 4.0)]
    pub window: f64,
    /// Seconds each window's training runs before it is timed, with inference running: a job
    /// that has run a while, and the time for reamer_by_pace's controller to find its level
    /// (on the VM its search ended a median 71 s after training started, the slowest 120 s).
    /// Every scenario gets the same, training alone included.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    pub settle: f64,
    /// Only these co-location scenarios (comma-separated keys of the JSON report, such as
    /// reamer,reamer_offline_not_paused), each beside training alone; for a quicker look.
    /// Such a run leaves docs/benchmarks.md alone. Default: every scenario but
    /// reamer_by_pace (offline's share set by training's pace), which needs minutes: name it
    /// with --settle 150 --window 210 (timed once its search is over, through its rechecks
    /// a minute, then two and four minutes apart), as the runs in docs/enforcer.md were.
    #[arg(long, value_delimiter = ',', value_name = "SCENARIOS")]
    pub scenarios: Vec<String>,
    /// Report the co-location benchmark from what a run saved (target/bench/colocation/run.json,
    /// written at its end), with its plots; nothing is run. With --only colocation; updates
    /// docs/benchmarks.md and its plots as the run would have.
    #[arg(long, value_name = "FILE")]
    pub colocation_from: Option<PathBuf>,
}

impl ColocationOptions {
    /// The scenarios `--scenarios` names; the default run's where it names none.
    pub fn scenarios(&self) -> anyhow::Result<Vec<ColocationScenario>> {
        if self.scenarios.is_empty() {
            return Ok(ColocationScenario::ALL.to_vec());
        }
        let known: Vec<ColocationScenario> = ColocationScenario::known().collect();
        self.scenarios
            .iter()
            .map(|name| scenario_named("--scenarios", name, &known, ColocationScenario::name))
            .collect()
    }

    /// Whether the run has every scenario of the default run, so that its section may
    /// replace docs/benchmarks.md's.
    pub fn every_scenario(&self) -> bool {
        self.scenarios()
            .is_ok_and(|named| ColocationScenario::cover_the_default_run(&named))
    }

    /// Whether the run has exactly the default run's scenarios, which its command leaves
    /// unsaid.
    fn default_scenarios(&self) -> bool {
        self.scenarios().is_ok_and(|named| {
            ColocationScenario::cover_the_default_run(&named)
                && named.len() == ColocationScenario::ALL.len()
        })
    }

    fn smoke(self) -> Self {
        Self {
            colocation_rounds: 3,
            window: 1.5,
            ..self
        }
    }
}

/// The GPU benchmark's options.
#[derive(clap::Args)]
#[command(next_help_heading = "GPU (--only gpu)")]
pub struct GpuOptions {
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
    /// DataLoader worker processes of the server benchmark's PyTorch job, and of the GPU
    /// benchmark's ResNet-50: 6 leaves most of a 16-CPU server's cores idle.
    #[arg(long, default_value_t = 6)]
    pub loader_workers: usize,
}

impl GpuOptions {
    /// Seconds of training timed per window.
    pub fn train(&self, quick: bool) -> Duration {
        Duration::from_secs(if quick { 4 } else { 8 })
    }
}

/// `--server-pace-settle`'s default, and its bound: the lead's online load runs at most 600 s
/// (`server::LEAD_LOAD_MAX`).
const DEFAULT_PACE_SETTLE_S: f64 = 45.0;
const PACE_SETTLE_MAX_S: f64 = 590.0;

/// The server benchmark's options (`--loader-workers` is the GPU group's).
#[derive(clap::Args)]
#[command(next_help_heading = "Server (--only server)")]
pub struct ServerOptions {
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
    /// Seconds the pace controller's daemon (`reamer_by_pace`) runs before its window's timed
    /// part, on top of the 3.5 s every window's inference leads by: its daemon starts with
    /// each window, and its search comes first (on the H200 it ended about 75 and 90 s after
    /// the daemon's start, on the VM a median 71 s, the slowest 120 s). The default times the
    /// window in its search; `record-server --part 3` gives 120, to time it settled.
    #[arg(long, default_value_t = DEFAULT_PACE_SETTLE_S, value_name = "SECONDS")]
    pub server_pace_settle: f64,
    /// The docs/benchmarks.md section the server benchmark writes (`<!-- NAME:begin -->`),
    /// and its plot, docs/NAME-tradeoff.svg: `server`, the frontier; `server-pace`, the pace
    /// controller in longer windows (`record-server --part 3`). Give it with --server-from too.
    #[arg(long, default_value = "server", value_name = "NAME",
          value_parser = ["server", "server-pace"])]
    pub server_section: String,
    /// The server benchmark's online load, requests a second (40 with --quick).
    #[arg(long, default_value_t = 150.0)]
    pub server_online_rate: f64,
    /// A stand-in for the server benchmark's PyTorch job, for a machine without a GPU: a
    /// command (words split at whitespace) that takes `--serve --json`, trains until its stdin
    /// closes, and for each line `{"seconds": S}` on stdin prints `{"timed_start": true}`, then
    /// after S seconds a JSON line with steps_per_s, step_ms_p50, step_ms_p99, cpu_s and
    /// seconds, as `target/release/training-sim` does. Its figures are not the server's, and
    /// such a run leaves docs/benchmarks.md alone.
    #[arg(long, value_name = "COMMAND")]
    pub training_cmd: Option<String>,
}

impl ServerOptions {
    /// The server scenarios `--server-scenarios` names, training alone first among them
    /// (every ratio is to it); every one where it names none.
    pub fn scenarios(&self) -> anyhow::Result<Vec<server::Scenario>> {
        use server::Scenario;
        if self.server_scenarios.is_empty() {
            return Ok(Scenario::ALL.to_vec());
        }
        let mut scenarios = vec![Scenario::Alone];
        for name in &self.server_scenarios {
            let scenario =
                scenario_named("--server-scenarios", name, &Scenario::ALL, Scenario::name)?;
            if !scenarios.contains(&scenario) {
                scenarios.push(scenario);
            }
        }
        Ok(scenarios)
    }

    /// The training job: the shipped ResNet-50 with `loader_workers`, or the stand-in.
    pub fn training(&self, loader_workers: usize) -> anyhow::Result<server::TrainingCommand> {
        match &self.training_cmd {
            Some(command) => server::TrainingCommand::stand_in(command),
            None => Ok(server::TrainingCommand::resnet50(loader_workers)),
        }
    }

    fn smoke(self) -> Self {
        Self {
            server_rounds: 1,
            server_seconds: 4.0,
            server_online_rate: 40.0,
            ..self
        }
    }
}

impl Options {
    /// The saved run to report instead of running (`--colocation-from`, `--gpu-from`,
    /// `--server-from`), with its section.
    pub fn saved_run(&self) -> Option<(Section, PathBuf)> {
        [
            (Section::Server, &self.server.server_from),
            (Section::Gpu, &self.gpu.gpu_from),
            (Section::Colocation, &self.colocation.colocation_from),
        ]
        .into_iter()
        .find_map(|(section, path)| Some((section, path.clone()?)))
    }

    pub fn runs(&self, section: Section) -> bool {
        self.only.contains(&section)
    }

    /// Refuses values no benchmark can run with, naming the flag.
    pub fn check(&self) -> anyhow::Result<()> {
        let (colocation, gpu, server) = (&self.colocation, &self.gpu, &self.server);
        let window_valid = colocation.window >= 1.0 && colocation.window.is_finite();
        let settle_valid = colocation.settle >= 0.0 && colocation.settle.is_finite();
        if !window_valid
            || !settle_valid
            || colocation.colocation_rounds == 0
            || gpu.gpu_rounds == 0
            || server.server_rounds == 0
            || gpu.gpu_jobs.is_empty()
        {
            bail!(
                "--window must be at least 1 second, --settle 0 or more, --colocation-rounds, \
                 --gpu-rounds and --server-rounds at least 1, and --gpu-jobs must name a job \
                 (mlp, resnet50-loader)"
            );
        }
        let seconds_valid = server.server_seconds >= 1.0 && server.server_seconds.is_finite();
        let rate_valid = server.server_online_rate > 0.0 && server.server_online_rate.is_finite();
        let settle_valid =
            server.server_pace_settle >= 0.0 && server.server_pace_settle <= PACE_SETTLE_MAX_S;
        if !seconds_valid || !rate_valid || !settle_valid || gpu.loader_workers == 0 {
            bail!(
                "--server-seconds must be at least 1, --server-online-rate above 0, \
                 --server-pace-settle 0 to {PACE_SETTLE_MAX_S} and --loader-workers at least 1"
            );
        }
        if !(0.0..=100.0).contains(&self.max_steal) {
            bail!(
                "--max-steal is a share of the CPU: 0 to 100 (%), not {}",
                self.max_steal
            );
        }
        self.colocation.scenarios()?;
        self.server.scenarios()?;
        server.training(gpu.loader_workers)?;
        Ok(())
    }

    /// The options a `--quick` run measures with: each group's smoke values, and every round
    /// kept, whatever the host's steal (a smoke run checks the mechanics).
    pub fn smoke(self) -> Self {
        Self {
            max_steal: 100.0,
            sensor: self.sensor.smoke(),
            reaction: ReactionOptions { bursts: 10 },
            worker: WorkerOptions {
                worker_reps: 1,
                worker_runs: 3,
            },
            colocation: self.colocation.smoke(),
            gpu: GpuOptions {
                gpu_rounds: 1,
                ..self.gpu
            },
            server: self.server.smoke(),
            ..self
        }
    }

    /// The command that reproduces this run, with only the options that mattered to it.
    /// With --prebuilt it ran as the copied binary, without cargo.
    pub fn command(&self) -> String {
        let mut command = if self.prebuilt {
            "target/release/xtask bench --prebuilt".to_owned()
        } else {
            "cargo xtask bench".to_owned()
        };
        let quick = self.quick;
        if quick {
            command.push_str(" --quick");
        }
        if self.only.len() < Section::ALL.len() {
            let names: Vec<&str> = Section::ALL
                .into_iter()
                .filter(|&s| self.runs(s))
                .map(Section::name)
                .collect();
            command.push_str(&format!(" --only {}", names.join(",")));
        }
        if !quick && self.runs(Section::Sensor) {
            command.push_str(&self.sensor.flags());
        }
        if !quick && self.runs(Section::Reaction) {
            command.push_str(&format!(" --bursts {}", self.reaction.bursts));
        }
        if !quick && self.runs(Section::Worker) {
            let WorkerOptions {
                worker_reps,
                worker_runs,
            } = self.worker;
            command.push_str(&format!(
                " --worker-reps {worker_reps} --worker-runs {worker_runs}"
            ));
        }
        let colocation = &self.colocation;
        if !quick && self.runs(Section::Colocation) {
            command.push_str(&format!(
                " --colocation-rounds {} --window {}",
                colocation.colocation_rounds, colocation.window
            ));
            if colocation.settle > 0.0 {
                command.push_str(&format!(" --settle {}", colocation.settle));
            }
        }
        // The default run's scenarios go unsaid; any other set (fewer, or more) is named.
        if !colocation.default_scenarios() {
            let named = colocation.scenarios().unwrap_or_default();
            let names: Vec<&str> = named.iter().map(|s| s.name()).collect();
            command.push_str(&format!(" --scenarios {}", names.join(",")));
        }
        let (gpu, server) = (&self.gpu, &self.server);
        if self.runs(Section::Gpu) {
            if !quick {
                command.push_str(&format!(" --gpu-rounds {}", gpu.gpu_rounds));
            }
            let jobs: Vec<&str> = gpu.gpu_jobs.iter().map(|j| j.arg()).collect();
            command.push_str(&format!(" --gpu-jobs {}", jobs.join(",")));
            let loader_bound = gpu.gpu_jobs.contains(&gpu::TrainingJob::Resnet50Loader);
            if loader_bound && !self.runs(Section::Server) {
                command.push_str(&format!(" --loader-workers {}", gpu.loader_workers));
            }
        }
        if self.runs(Section::Server) {
            if !quick {
                command.push_str(&format!(
                    " --server-rounds {} --server-seconds {} --server-online-rate {}",
                    server.server_rounds, server.server_seconds, server.server_online_rate
                ));
            }
            if server.server_pace_settle != DEFAULT_PACE_SETTLE_S {
                command.push_str(&format!(
                    " --server-pace-settle {}",
                    server.server_pace_settle
                ));
            }
            if !server.server_scenarios.is_empty() {
                let named = server.scenarios().unwrap_or_default();
                let names: Vec<&str> = named.iter().map(|s| s.name()).collect();
                command.push_str(&format!(" --server-scenarios {}", names.join(",")));
            }
            if server.server_section != "server" {
                command.push_str(&format!(" --server-section {}", server.server_section));
            }
            match &server.training_cmd {
                Some(training) => command.push_str(&format!(" --training-cmd '{training}'")),
                None => command.push_str(&format!(" --loader-workers {}", gpu.loader_workers)),
            }
        }
        if !quick && (self.runs(Section::Sensor) || self.runs(Section::Colocation)) {
            command.push_str(&format!(" --max-steal {}", self.max_steal));
        }
        command
    }
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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        options: Options,
    }

    fn parse(args: &[&str]) -> Options {
        Command::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .unwrap()
            .options
    }

    #[test]
    fn server_scenarios_put_training_alone_first_once_and_name_the_known_ones_on_error() {
        use server::Scenario;
        assert_eq!(
            parse(&[]).server.scenarios().unwrap(),
            Scenario::ALL.to_vec()
        );
        let named = parse(&[
            "--server-scenarios",
            "reamer,alone_observed_10hz,alone,reamer",
        ]);
        assert_eq!(
            named.server.scenarios().unwrap(),
            [Scenario::Alone, Scenario::Reamer, Scenario::AloneObserved]
        );
        let err = parse(&["--server-scenarios", "reamr"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"reamr\"") && err.contains("alone_observed_10hz"),
            "{err}"
        );
    }

    #[test]
    fn the_pace_scenario_is_named_but_not_in_the_default_run() {
        use ColocationScenario as Scenario;
        let default = parse(&[]).colocation.scenarios().unwrap();
        assert!(!default.contains(&Scenario::ReamerByPace));
        let named = parse(&["--scenarios", "reamer_by_pace"]);
        assert_eq!(
            named.colocation.scenarios().unwrap(),
            [Scenario::ReamerByPace]
        );
        // A saved run that had it reads back.
        let read: Scenario = serde_json::from_str("\"reamer_by_pace\"").unwrap();
        assert_eq!(read, Scenario::ReamerByPace);
    }

    #[test]
    fn the_command_names_only_what_the_run_used() {
        assert_eq!(
            parse(&["--only", "colocation,sensor", "--window", "60"]).command(),
            "cargo xtask bench --only sensor,colocation --rounds 30 --seconds 1 \
             --colocation-rounds 12 --window 60 --max-steal 3"
        );
        assert_eq!(
            parse(&["--only", "colocation", "--window", "60", "--settle", "45"]).command(),
            "cargo xtask bench --only colocation --colocation-rounds 12 --window 60 --settle 45 \
             --max-steal 3"
        );
        assert!(
            parse(&["--only", "colocation", "--settle=-1"])
                .check()
                .is_err()
        );
        assert_eq!(
            parse(&[
                "--only",
                "colocation",
                "--quick",
                "--scenarios",
                "reamer,alone"
            ])
            .command(),
            "cargo xtask bench --quick --only colocation --scenarios reamer,alone"
        );
        let every_and_more = ColocationScenario::ALL
            .iter()
            .map(|s| s.name())
            .chain(["reamer_tract"])
            .collect::<Vec<_>>()
            .join(",");
        let more = parse(&["--only", "colocation", "--scenarios", &every_and_more]);
        assert!(more.colocation.every_scenario());
        assert!(
            more.command()
                .ends_with(&format!("--scenarios {every_and_more} --max-steal 3"))
        );
        assert_eq!(
            parse(&[
                "--only",
                "server",
                "--prebuilt",
                "--server-scenarios",
                "reamer"
            ])
            .command(),
            "target/release/xtask bench --prebuilt --only server --server-rounds 3 \
             --server-seconds 25 --server-online-rate 150 --server-scenarios alone,reamer \
             --loader-workers 6"
        );
        assert!(
            parse(&["--only", "server", "--server-pace-settle", "120"])
                .command()
                .contains(" --server-online-rate 150 --server-pace-settle 120 --loader-workers")
        );
        for settle in ["--server-pace-settle=-1", "--server-pace-settle=600"] {
            let options = parse(&["--only", "server", settle]);
            let err = options.check().unwrap_err().to_string();
            assert!(err.contains("--server-pace-settle 0 to 590"), "{err}");
        }
    }

    #[test]
    fn each_benchmarks_flags_sit_under_its_heading_in_help() {
        use clap::CommandFactory as _;
        let help = Command::command().render_help().to_string();
        let heading = |name: &str| help.find(name).unwrap_or_else(|| panic!("{name}: {help}"));
        let flag = |name: &str| help.find(name).unwrap_or_else(|| panic!("{name}: {help}"));
        assert!(heading("Sensor (--only sensor)") < flag("--rounds <ROUNDS>"));
        assert!(flag("--rounds <ROUNDS>") < heading("Reaction (--only reaction)"));
        assert!(heading("Co-location (--only colocation)") < flag("--window <WINDOW>"));
        assert!(flag("--window <WINDOW>") < heading("GPU (--only gpu)"));
    }
}
