//! A training job timed on request, and what its stdout says (each timed part's start, then
//! its report): the server benchmark's job (the shipped PyTorch ResNet-50 or a stand-in), the
//! co-location benchmark's `training-sim` and the demo's.
//!
//! The job runs with `--serve --json`: after its warm-up it trains until its stdin closes,
//! and each line `{"seconds": S}` written there starts a timed part of S seconds at its next
//! step, announced by a line `{"timed_start": true}` and ended by one JSON line of figures.
//! On the server one process serves every window: starting Python, CUDA and the loader
//! workers, then the 8 s warm-up, cost about 25 s of each 37.6 s window when every window
//! started its own job. In the co-location benchmark a job runs untimed first where the run
//! asks (`--settle`), for the enforcer's pace controller to find its level.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{ChildStdin, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use enforcer_common::protocol::{PROGRESS_RETRY_ENV, SOCKET_ENV};
use reamer_tests::harness::Reaped;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::cargo::{release_bin, workspace_root};

/// How long the job may take to reach its first timed part: Python's imports, CUDA's start,
/// the loader workers' start and the script's warm-up.
const FIRST_TIMED_PART_LIMIT: Duration = Duration::from_secs(300);
/// How long a later timed part may take to start: the step in progress when it is asked for
/// (0.6 s at the p99 of the server's ResNet-50 beside inference), with room for a stall.
const NEXT_TIMED_PART_LIMIT: Duration = Duration::from_secs(60);
/// How long past its timed part the job may take to report.
const REPORT_LIMIT: Duration = Duration::from_secs(120);
/// How long the job may take to exit once its stdin closes, before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// The training job, and whether it is the real one.
#[derive(Debug, Clone)]
pub struct TrainingCommand {
    pub program: String,
    pub args: Vec<String>,
    /// A stand-in (`--training-cmd`): its figures are not the server's.
    pub stand_in: bool,
    /// What it is, for the report.
    pub description: String,
    /// Environment variables set for it.
    pub env: Vec<(String, String)>,
}

impl TrainingCommand {
    /// The shipped PyTorch job with `loader_workers` DataLoader workers.
    pub fn resnet50(loader_workers: usize) -> Self {
        let script = workspace_root().join("xtask/scripts/train_resnet50.py");
        Self {
            program: "python3".to_owned(),
            args: vec![
                script.display().to_string(),
                "--workers".to_owned(),
                loader_workers.to_string(),
            ],
            stand_in: false,
            env: Vec::new(),
            description: format!(
                "torchvision ResNet-50, bf16 autocast, channels_last, SGD, batch 128, fed by a \
                 DataLoader with {loader_workers} worker processes augmenting generated images \
                 on the CPU (xtask/scripts/train_resnet50.py, 8 s warm-up)"
            ),
        }
    }

    /// A stand-in from `--training-cmd`: words split at whitespace, a relative program
    /// found from the repository's root.
    pub fn stand_in(command_line: &str) -> anyhow::Result<Self> {
        let mut words = command_line.split_whitespace().map(str::to_owned);
        let program = words
            .next()
            .context("--training-cmd is empty: give a program and its arguments")?;
        let rooted = workspace_root().join(&program);
        let program = if program.contains('/') && !Path::new(&program).is_absolute() {
            rooted.display().to_string()
        } else {
            program
        };
        Ok(Self {
            program,
            args: words.collect(),
            stand_in: true,
            env: Vec::new(),
            description: format!("stand-in `{command_line}` (not the server's training job)"),
        })
    }

    /// The training simulator (`training-sim`) with `args`: a stand-in.
    pub fn training_sim(args: &[&str]) -> anyhow::Result<Self> {
        Ok(Self {
            program: utf8(&release_bin("training-sim"))?,
            args: args.iter().map(|&arg| arg.to_owned()).collect(),
            stand_in: true,
            env: Vec::new(),
            description: "training-sim".to_owned(),
        })
    }

    /// This command started through `enforcer launch --training JOB --instance INSTANCE`: the
    /// daemon's training job, whose progress reports reach the daemon.
    pub fn launched_as_training(self, job: &str, instance: &str) -> anyhow::Result<Self> {
        let launch = ["launch", "--training", job, "--instance", instance, "--"];
        Ok(Self {
            program: utf8(&release_bin("enforcer"))?,
            args: launch
                .iter()
                .map(|&arg| arg.to_owned())
                .chain([self.program])
                .chain(self.args)
                .collect(),
            ..self
        })
    }

    /// This command with its progress reports sent to the daemon at `socket`, whenever one
    /// runs there: the job outlives the daemons a benchmark starts for its windows, so its
    /// reporter tries again a second after a failure, not 30 s.
    pub fn reporting_progress_to(mut self, socket: &Path) -> Self {
        self.env.extend([
            (SOCKET_ENV.to_owned(), socket.display().to_string()),
            (PROGRESS_RETRY_ENV.to_owned(), "1".to_owned()),
        ]);
        self.description += "; its steps reported to each window's enforcer, once a second";
        self
    }

    /// Why the shipped job cannot run here, if it cannot.
    pub fn unavailable(&self) -> Option<String> {
        if self.stand_in {
            return None;
        }
        let probe = Command::new(&self.program)
            .args([
                "-c",
                "import torch, torchvision; assert torch.cuda.is_available(), 'no CUDA device'",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        match probe {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "the training job needs PyTorch, torchvision and a CUDA GPU ({}); pass \
                 --training-cmd to run the harness with a stand-in, such as \
                 --training-cmd target/release/training-sim",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("python3 failed")
                    .trim()
            )),
            Err(err) => Some(format!(
                "cannot run {}: {err}; pass --training-cmd to run the harness with a stand-in",
                self.program
            )),
        }
    }
}

fn utf8(path: &Path) -> anyhow::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// The training command's report (the fields the benchmark uses).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TrainingReport {
    /// Images a second, where the job counts images (the PyTorch job); else steps count.
    #[serde(default)]
    pub images_per_s: Option<f64>,
    pub steps_per_s: f64,
    pub step_ms_p50: f64,
    pub step_ms_p99: f64,
    /// Each step's time, ms, in order, where the job gives them.
    #[serde(default)]
    pub step_ms: Vec<f64>,
    pub cpu_s: f64,
    pub seconds: f64,
}

impl TrainingReport {
    pub fn throughput(&self) -> f64 {
        self.images_per_s.unwrap_or(self.steps_per_s)
    }
}

/// A training job serving timed parts, whose reports read as `R`.
pub(crate) struct ServingTraining<R = TrainingReport> {
    child: Reaped,
    stdin: ChildStdin,
    lines: mpsc::Receiver<TrainingLine<R>>,
    /// Whether a timed part has started: the first waits for the job's start and warm-up.
    warm: bool,
}

impl<R: DeserializeOwned + Send + 'static> ServingTraining<R> {
    pub(crate) fn start(command: &TrainingCommand) -> anyhow::Result<Self> {
        let mut child = Reaped(
            Command::new(&command.program)
                .args(&command.args)
                .args(["--serve", "--json"])
                .envs(command.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("spawning the training command {}", command.program))?,
        );
        let stdin = child.0.stdin.take().context("training's stdin")?;
        let lines = read_training_lines(child.0.stdout.take().context("training's stdout")?);
        Ok(Self {
            child,
            stdin,
            lines,
            warm: false,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks for a timed part of `seconds` and returns once it has started.
    pub(crate) fn begin(&mut self, seconds: f64) -> anyhow::Result<()> {
        writeln!(self.stdin, "{}", serde_json::json!({ "seconds": seconds }))
            .context("asking the training command for a timed part (it has exited?)")?;
        let limit = match self.warm {
            true => NEXT_TIMED_PART_LIMIT,
            false => FIRST_TIMED_PART_LIMIT,
        };
        match next_training_line(&self.lines, limit, "its timed part")? {
            TrainingLine::TimedStart => {
                self.warm = true;
                Ok(())
            }
            TrainingLine::Report(_) => {
                bail!("the training command reported before announcing its timed part")
            }
            TrainingLine::Closed => unreachable!("next_training_line refuses Closed"),
        }
    }

    /// The report of the timed part of `seconds` begun last.
    pub(crate) fn report(&mut self, seconds: f64) -> anyhow::Result<R> {
        let limit = Duration::from_secs_f64(seconds) + REPORT_LIMIT;
        match next_training_line(&self.lines, limit, "its report")? {
            TrainingLine::Report(report) => Ok(report),
            TrainingLine::TimedStart => {
                bail!("the training command announced a timed part it was not asked for")
            }
            TrainingLine::Closed => unreachable!("next_training_line refuses Closed"),
        }
    }

    /// Closes its stdin, which ends the job; kills it if it has not ended within
    /// `STOP_LIMIT`.
    pub(crate) fn stop(self) {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let deadline = Instant::now() + STOP_LIMIT;
        while Instant::now() < deadline {
            if !matches!(child.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "[bench] the training command had not exited {STOP_LIMIT:?} after its stdin \
             closed: killed"
        );
    }
}

/// What a training command's stdout says, line by line.
#[derive(Debug)]
enum TrainingLine<R> {
    TimedStart,
    Report(R),
    /// Its stdout closed.
    Closed,
}

/// Reads `stdout` on a thread of its own: the timed part's start, then the report; other
/// lines are left alone.
fn read_training_lines<R: DeserializeOwned + Send + 'static>(
    stdout: impl std::io::Read + Send + 'static,
) -> mpsc::Receiver<TrainingLine<R>> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let event = if value.get("timed_start").is_some() {
                TrainingLine::TimedStart
            } else if let Ok(report) = serde_json::from_value::<R>(value) {
                TrainingLine::Report(report)
            } else {
                continue;
            };
            if send.send(event).is_err() {
                return;
            }
        }
        let _ = send.send(TrainingLine::Closed);
    });
    receive
}

/// Waits up to `limit` for the next line of `lines` that is not `Closed` (a closed stdout is
/// an error naming `what`).
fn next_training_line<R>(
    lines: &mpsc::Receiver<TrainingLine<R>>,
    limit: Duration,
    what: &str,
) -> anyhow::Result<TrainingLine<R>> {
    match lines.recv_timeout(limit) {
        Ok(TrainingLine::Closed) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            bail!("the training command ended before {what}: its output is above")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            bail!("the training command did not reach {what} within {limit:?}")
        }
        Ok(line) => Ok(line),
    }
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;

    use super::*;

    #[test]
    fn the_training_protocol_is_read_from_a_real_process() {
        let mut child = Command::new("sh")
            .args([
                "-c",
                "echo 'warming up'; echo '{\"timed_start\": true}'; \
                 echo '{\"images_per_s\": 900.5, \"steps_per_s\": 7.0, \"step_ms_p50\": 140, \
                 \"step_ms_p99\": 180, \"cpu_s\": 30, \"seconds\": 10}'",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = read_training_lines::<TrainingReport>(child.stdout.take().unwrap());
        let limit = Duration::from_secs(5);
        assert!(matches!(
            next_training_line(&lines, limit, "its timed part").unwrap(),
            TrainingLine::TimedStart
        ));
        match next_training_line(&lines, limit, "its report").unwrap() {
            TrainingLine::Report(report) => {
                assert_eq!(report.throughput(), 900.5);
                assert_eq!(report.cpu_s / report.seconds, 3.0);
            }
            other => panic!("{other:?}"),
        }
        let err = next_training_line(&lines, limit, "another report").unwrap_err();
        assert!(
            err.to_string().contains("ended before another report"),
            "{err}"
        );
        child.wait().unwrap();
    }

    /// A job speaking the serving protocol: each request read is announced and answered.
    fn serving_shell(report: &str) -> TrainingCommand {
        TrainingCommand {
            program: "sh".to_owned(),
            args: vec![
                "-c".to_owned(),
                format!(
                    "echo 'warming up'; while read request; do echo '{{\"timed_start\": true}}'; \
                     echo '{report}'; done"
                ),
                "training".to_owned(),
            ],
            stand_in: true,
            env: Vec::new(),
            description: "a shell".to_owned(),
        }
    }

    #[test]
    fn one_serving_job_times_a_part_per_request_and_ends_when_its_stdin_closes() {
        let mut training: ServingTraining = ServingTraining::start(&serving_shell(
            "{\"steps_per_s\": 7.0, \"step_ms_p50\": 140, \"step_ms_p99\": 180, \
             \"cpu_s\": 30, \"seconds\": 10}",
        ))
        .unwrap();
        for _ in 0..2 {
            training.begin(10.0).unwrap();
            assert_eq!(training.report(10.0).unwrap().throughput(), 7.0);
        }
        let pid = training.pid();
        let started = Instant::now();
        training.stop();
        assert!(started.elapsed() < STOP_LIMIT);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_serving_job_that_ends_is_an_error_naming_what_was_awaited() {
        let mut training: ServingTraining = ServingTraining::start(&TrainingCommand {
            program: "true".to_owned(),
            args: vec![],
            stand_in: true,
            env: Vec::new(),
            description: "exits at once".to_owned(),
        })
        .unwrap();
        let err = training.begin(1.0).unwrap_err();
        assert!(
            format!("{err:#}").contains("ended before its timed part")
                || format!("{err:#}").contains("has exited"),
            "{err:#}"
        );
    }

    #[test]
    fn the_simulator_launched_as_training_runs_through_the_enforcers_launcher() {
        let command = TrainingCommand::training_sim(&["--seed", "3"])
            .unwrap()
            .launched_as_training("train", "bench-colo")
            .unwrap();
        assert!(command.program.ends_with("/target/release/enforcer"));
        let args: Vec<&str> = command.args.iter().map(String::as_str).collect();
        assert_eq!(
            args[..6],
            [
                "launch",
                "--training",
                "train",
                "--instance",
                "bench-colo",
                "--"
            ]
        );
        assert!(args[6].ends_with("/target/release/training-sim"));
        assert_eq!(args[7..], ["--seed", "3"]);
        assert!(command.stand_in);
    }

    #[test]
    fn a_stand_in_counts_steps_and_is_found_from_the_repository_root() {
        let command = TrainingCommand::stand_in("target/release/training-sim --loaders 3").unwrap();
        assert!(command.stand_in);
        assert!(command.program.ends_with("/target/release/training-sim"));
        assert!(Path::new(&command.program).is_absolute());
        assert_eq!(command.args, ["--loaders", "3"]);
        assert!(command.unavailable().is_none());
        let report: TrainingReport = serde_json::from_str(
            "{\"steps_per_s\": 50, \"step_ms_p50\": 20, \"step_ms_p99\": 30, \"cpu_s\": 8, \
             \"seconds\": 4, \"runqueue_wait_s\": 0.1}",
        )
        .unwrap();
        assert_eq!(report.throughput(), 50.0);
        assert!(TrainingCommand::stand_in("  ").is_err());
    }
}
