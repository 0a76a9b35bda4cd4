//! The offline job's checkpoint: how far the inputs were processed and how long the results
//! file was at that point, written atomically (temporary file, fsync, rename, fsync of the
//! directory) only after the results it counts are on disk.
//!
//! Restarting from it truncates the results file to the recorded length, so results written
//! after the last checkpoint are discarded and computed again: each input line ends up with
//! exactly one result line, whether the worker was frozen, throttled or killed in between.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{
    CHECKPOINT,
    job_dir::{JobDir, JobDirError},
};

pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub format: u32,
    /// Input lines with a result on disk.
    pub lines_done: u64,
    /// Byte offset in inputs.jsonl of the first line not done.
    pub input_offset: u64,
    /// Length of results.jsonl that holds exactly those results.
    pub results_len: u64,
    /// Lines among them that were rejected as bad input.
    pub rejected: u64,
    /// Every line is done.
    pub complete: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(
        "corrupt checkpoint {path}: {reason}. Nothing was changed; to start the job over, \
         delete it together with the results file"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot read the checkpoint: {0}")]
    Unreadable(#[from] JobDirError),
}

impl Checkpoint {
    pub fn fresh() -> Self {
        Self {
            format: FORMAT,
            ..Self::default()
        }
    }

    /// Reads the job's checkpoint; a fresh one when there is none. It is checked against
    /// the lengths of the inputs and results files it describes.
    pub fn load(dir: &JobDir, inputs_len: u64, results_len: u64) -> Result<Self, CheckpointError> {
        let Some(text) = dir.read_optional(CHECKPOINT)? else {
            return Ok(Self::fresh());
        };
        let corrupt = |reason: String| CheckpointError::Corrupt {
            path: dir.file_path(CHECKPOINT),
            reason,
        };
        let checkpoint: Self =
            serde_json::from_str(&text).map_err(|e| corrupt(format!("not a checkpoint: {e}")))?;
        if checkpoint.format != FORMAT {
            return Err(corrupt(format!(
                "format {} (this worker writes format {FORMAT})",
                checkpoint.format
            )));
        }
        if checkpoint.input_offset > inputs_len {
            return Err(corrupt(format!(
                "it is at byte {} of the inputs, which have only {inputs_len}",
                checkpoint.input_offset
            )));
        }
        if checkpoint.results_len > results_len {
            return Err(corrupt(format!(
                "it counts {} bytes of results, the results file has only {results_len}: \
                 results were lost",
                checkpoint.results_len
            )));
        }
        if checkpoint.rejected > checkpoint.lines_done {
            return Err(corrupt(format!(
                "{} rejected lines out of {} done",
                checkpoint.rejected, checkpoint.lines_done
            )));
        }
        Ok(checkpoint)
    }

    /// Replaces the job's checkpoint atomically and durably (`JobDir::replace`: never
    /// through a link).
    pub fn store(&self, dir: &JobDir) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(self).expect("a checkpoint serializes");
        bytes.push(b'\n');
        dir.replace(CHECKPOINT, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_what_does_not_fit_the_files() {
        let dir = std::env::temp_dir().join(format!("reamer-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("checkpoint.json");
        let job = JobDir::open(&dir).unwrap();
        assert_eq!(Checkpoint::load(&job, 0, 0).unwrap(), Checkpoint::fresh());
        let checkpoint = Checkpoint {
            format: FORMAT,
            lines_done: 3,
            input_offset: 30,
            results_len: 90,
            rejected: 1,
            complete: false,
        };
        checkpoint.store(&job).unwrap();
        assert_eq!(Checkpoint::load(&job, 30, 100).unwrap(), checkpoint);
        let err = Checkpoint::load(&job, 30, 80).unwrap_err().to_string();
        assert!(err.contains("results were lost"), "{err}");
        let err = Checkpoint::load(&job, 20, 100).unwrap_err().to_string();
        assert!(err.contains("only 20"), "{err}");
        std::fs::write(&path, b"{\"format\":1,\"lines_d").unwrap();
        let err = Checkpoint::load(&job, 30, 100).unwrap_err().to_string();
        assert!(
            err.contains("corrupt checkpoint") && err.contains("not a checkpoint"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn storing_never_writes_through_a_link_planted_at_the_temporary_name() {
        let dir = std::env::temp_dir().join(format!("reamer-ckpt-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("checkpoint.json");
        let victim = dir.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let planted = path.with_extension(format!("json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let checkpoint = Checkpoint {
            lines_done: 4,
            ..Checkpoint::fresh()
        };
        let job = JobDir::open(&dir).unwrap();
        checkpoint.store(&job).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(Checkpoint::load(&job, 0, 0).unwrap().lines_done, 4);
        assert!(
            !planted.exists(),
            "the temporary file was renamed into place"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
