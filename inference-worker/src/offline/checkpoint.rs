//! The offline job's checkpoint: how far the inputs were processed and how long the results
//! file was at that point, written atomically (temporary file, fsync, rename, fsync of the
//! directory) only after the results it counts are on disk.
//!
//! Restarting from it truncates the results file to the recorded length, so results written
//! after the last checkpoint are discarded and computed again: each input line ends up with
//! exactly one result line, whether the worker was frozen, throttled or killed in between.

use std::{
    fs::File,
    io::Write as _,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

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
    #[error("cannot read checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Checkpoint {
    pub fn fresh() -> Self {
        Self {
            format: FORMAT,
            ..Self::default()
        }
    }

    /// Reads the checkpoint at `path`; a fresh one when there is none. It is checked against
    /// the lengths of the inputs and results files it describes.
    pub fn load(path: &Path, inputs_len: u64, results_len: u64) -> Result<Self, CheckpointError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::fresh()),
            Err(source) => {
                return Err(CheckpointError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let corrupt = |reason: String| CheckpointError::Corrupt {
            path: path.to_owned(),
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

    /// Replaces the checkpoint at `path` atomically and durably. The new one is written to a
    /// file of this process's own, created afresh (`create_new`: never through a symlink or
    /// into a file someone left there), then renamed over the old.
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        // A leftover of this pid's earlier run, or a planted link: the link itself goes.
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(&serde_json::to_vec(self).expect("a checkpoint serializes"))?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
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
        assert_eq!(Checkpoint::load(&path, 0, 0).unwrap(), Checkpoint::fresh());
        let checkpoint = Checkpoint {
            format: FORMAT,
            lines_done: 3,
            input_offset: 30,
            results_len: 90,
            rejected: 1,
            complete: false,
        };
        checkpoint.store(&path).unwrap();
        assert_eq!(Checkpoint::load(&path, 30, 100).unwrap(), checkpoint);
        let err = Checkpoint::load(&path, 30, 80).unwrap_err().to_string();
        assert!(err.contains("results were lost"), "{err}");
        let err = Checkpoint::load(&path, 20, 100).unwrap_err().to_string();
        assert!(err.contains("only 20"), "{err}");
        std::fs::write(&path, b"{\"format\":1,\"lines_d").unwrap();
        let err = Checkpoint::load(&path, 30, 100).unwrap_err().to_string();
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
        checkpoint.store(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(Checkpoint::load(&path, 0, 0).unwrap().lines_done, 4);
        assert!(
            !planted.exists(),
            "the temporary file was renamed into place"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
