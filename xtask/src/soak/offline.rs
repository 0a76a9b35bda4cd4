//! The soak's offline worker: a job in the `batch` pool that the soak restarts whenever it
//! stops (a kill, or the job done), and whose results are checked for every input line
//! exactly once, in order: nothing lost, nothing duplicated, whatever was done to it.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::cargo::release_bin;

/// Lines per job: a few minutes of the tiny model on two CPUs, so that several jobs start and
/// finish within a soak and each one is killed at least once.
pub const JOB_LINES: u64 = 2_000_000;

pub struct OfflineJobs {
    dir: PathBuf,
    model: PathBuf,
    instance: String,
    /// The job being run, its number, and the worker running it.
    job: u32,
    worker: Option<Child>,
    /// Jobs run to their end and checked.
    pub completed: u32,
    /// Lines checked, over every job.
    pub lines_checked: u64,
    pub restarts: u32,
}

impl OfflineJobs {
    pub fn start(dir: &Path, model: &Path, instance: &str) -> anyhow::Result<Self> {
        let mut jobs = Self {
            dir: dir.to_owned(),
            model: model.to_owned(),
            instance: instance.to_owned(),
            job: 0,
            worker: None,
            completed: 0,
            lines_checked: 0,
            restarts: 0,
        };
        jobs.new_job()?;
        Ok(jobs)
    }

    fn job_dir(&self) -> PathBuf {
        self.dir.join(format!("job-{}", self.job))
    }

    fn new_job(&mut self) -> anyhow::Result<()> {
        self.job += 1;
        let status = Command::new(release_bin("inference-worker"))
            .arg("make-job")
            .arg("--model")
            .arg(&self.model)
            .arg("--dir")
            .arg(self.job_dir())
            .args(["--lines", &JOB_LINES.to_string(), "--seed"])
            .arg(self.job.to_string())
            .status()
            .context("inference-worker make-job")?;
        if !status.success() {
            bail!("make-job failed ({status})");
        }
        self.spawn()
    }

    /// `enforcer launch --pool batch -- inference-worker offline --job DIR`.
    fn spawn(&mut self) -> anyhow::Result<()> {
        let child = Command::new(release_bin("enforcer"))
            .args([
                "launch",
                "--pool",
                "batch",
                "--instance",
                &self.instance,
                "--",
            ])
            .arg(release_bin("inference-worker"))
            .arg("offline")
            .arg("--model")
            .arg(&self.model)
            .arg("--job")
            .arg(self.job_dir())
            .args(["--batch", "8", "--checkpoint-ms", "200"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("launching the offline worker")?;
        self.worker = Some(child);
        Ok(())
    }

    /// What a service manager does: a worker that stopped is started again, on the same job
    /// if it was not done, else on a new one once the finished job is checked.
    pub fn keep_running(&mut self) -> anyhow::Result<()> {
        let Some(worker) = self.worker.as_mut() else {
            return self.spawn();
        };
        let Some(status) = worker.try_wait()? else {
            return Ok(());
        };
        self.worker = None;
        let checkpoint = read_checkpoint(&self.job_dir());
        if checkpoint["complete"] == true {
            self.lines_checked += check_results(&self.job_dir(), JOB_LINES)?;
            self.completed += 1;
            let _ = std::fs::remove_dir_all(self.job_dir());
            return self.new_job();
        }
        // Killed (or stopped by a signal meant for it): it resumes from its checkpoint.
        let _ = status;
        self.restarts += 1;
        self.spawn()
    }

    /// Stops the worker (SIGTERM: it checkpoints) and checks what the job holds so far.
    pub fn finish(&mut self) -> anyhow::Result<()> {
        if let Some(mut worker) = self.worker.take() {
            // SIGTERM through kill(1): xtask keeps free of libc.
            let _ = Command::new("kill")
                .args(["-TERM", &worker.id().to_string()])
                .status();
            worker.wait()?;
        }
        let done = read_checkpoint(&self.job_dir())["lines_done"]
            .as_u64()
            .unwrap_or(0);
        self.lines_checked += check_results(&self.job_dir(), done)?;
        Ok(())
    }

    pub fn kill(&mut self) {
        if let Some(worker) = self.worker.as_mut() {
            let _ = worker.kill();
        }
    }
}

fn read_checkpoint(job: &Path) -> serde_json::Value {
    std::fs::read_to_string(job.join("checkpoint.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The first `lines` results are lines 1 to `lines`, each once, in order; returns how many.
fn check_results(job: &Path, lines: u64) -> anyhow::Result<u64> {
    let path = job.join("results.jsonl");
    // A job stopped before its worker opened the results has done nothing yet.
    if lines == 0 && !path.exists() {
        return Ok(0);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the results of {}", job.display()))?;
    let mut expected = 1u64;
    for line in text.lines().take(lines as usize) {
        let record: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("a result of {} is not JSON: {line:?}", job.display()))?;
        let number = record["line"].as_u64().unwrap_or(0);
        if number != expected {
            bail!(
                "{}: result for line {number} where line {expected} was due: a line was lost or \
                 done twice",
                job.display()
            );
        }
        expected += 1;
    }
    if expected - 1 != lines {
        bail!(
            "{}: {} results for {lines} lines done",
            job.display(),
            expected - 1
        );
    }
    Ok(lines)
}
