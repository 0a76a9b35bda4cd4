//! The server benchmark's training job: the shipped PyTorch ResNet-50 or a stand-in, and
//! what its stdout says (the timed part's start, then its report).

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::cargo::workspace_root;

/// The training job, and whether it is the real one.
#[derive(Debug, Clone)]
pub struct TrainingCommand {
    pub program: String,
    pub args: Vec<String>,
    /// A stand-in (`--training-cmd`): its figures are not the server's.
    pub stand_in: bool,
    /// Whether it prints `{"timed_start": true}` when its timed part starts.
    pub announces_timed_start: bool,
    /// What it is, for the report.
    pub description: String,
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
            announces_timed_start: true,
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
            announces_timed_start: false,
            description: format!("stand-in `{command_line}` (not the server's training job)"),
        })
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

/// The training command's report (the fields the benchmark uses).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TrainingReport {
    /// Images a second, where the job counts images (the PyTorch job); else steps count.
    #[serde(default)]
    pub images_per_s: Option<f64>,
    pub steps_per_s: f64,
    pub step_ms_p50: f64,
    pub step_ms_p99: f64,
    pub cpu_s: f64,
    pub seconds: f64,
}

impl TrainingReport {
    pub fn throughput(&self) -> f64 {
        self.images_per_s.unwrap_or(self.steps_per_s)
    }
}

/// What a training command's stdout says, line by line.
#[derive(Debug)]
pub enum TrainingLine {
    TimedStart,
    Report(TrainingReport),
    /// Its stdout closed.
    Closed,
}

/// Reads `stdout` on a thread of its own: the timed part's start, then the report; other
/// lines are left alone.
pub fn read_training_lines(
    stdout: impl std::io::Read + Send + 'static,
) -> mpsc::Receiver<TrainingLine> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let event = if value.get("timed_start").is_some() {
                TrainingLine::TimedStart
            } else if let Ok(report) = serde_json::from_value::<TrainingReport>(value) {
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
pub(super) fn next_training_line(
    lines: &mpsc::Receiver<TrainingLine>,
    limit: Duration,
    what: &str,
) -> anyhow::Result<TrainingLine> {
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
        let lines = read_training_lines(child.stdout.take().unwrap());
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

    #[test]
    fn a_stand_in_counts_steps_and_is_found_from_the_repository_root() {
        let command = TrainingCommand::stand_in("target/release/training-sim --loaders 3").unwrap();
        assert!(command.stand_in && !command.announces_timed_start);
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
