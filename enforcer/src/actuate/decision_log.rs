//! The decision log: every decision of the CPU and GPU policies, one JSON line each, appended
//! to one file (`/run/reamer/<instance>.decisions.jsonl` by default) by one writer thread.
//!
//! Callers hand a line to the writer and go on: the fast path's decision is applied before it
//! is logged, and the file write happens off the thread that reacts to events. A full disk
//! must not stop enforcement: a line that cannot be written is dropped, and said so once.
//!
//! The default place is tmpfs, which is memory: past `ROTATE_AT_BYTES` the file becomes
//! `<path>.1` (replacing the one before) and a new file is started, so the log takes at most
//! twice that. A duty cycle that flips twice a second writes about 60 MB a day.

use std::{
    collections::VecDeque,
    io::Write as _,
    path::{Path, PathBuf},
    sync::{Arc, mpsc},
    thread::JoinHandle,
};

use serde::Serialize;
use tracing::warn;

/// A decision log that cannot be opened.
#[derive(Debug, thiserror::Error)]
#[error("opening decision log {}: {error}", path.display())]
pub struct OpenError {
    pub path: PathBuf,
    pub error: std::io::Error,
}

/// What the writer thread is handed.
enum Message {
    Line(String),
    /// Every line sent before this is written: the thread ends.
    Close,
}

/// Appends lines to the log; cheap to clone, one per decision maker.
#[derive(Clone)]
pub(crate) struct DecisionLog {
    lines: Option<mpsc::Sender<Message>>,
}

/// The writer thread; ended, every line sent before written, by `close`.
pub(crate) struct DecisionLogWriter {
    lines: mpsc::Sender<Message>,
    thread: JoinHandle<()>,
}

/// The size at which the log is rotated: about 60,000 decisions.
pub(crate) const ROTATE_AT_BYTES: u64 = 16 << 20;

/// The file the writer appends to, and its size so far.
struct RotatingFile {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    rotate_at: u64,
}

impl RotatingFile {
    fn open(path: &Path, rotate_at: u64) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            file,
            size,
            rotate_at,
        })
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        if self.size >= self.rotate_at {
            let mut previous = self.path.clone().into_os_string();
            previous.push(".1");
            std::fs::rename(&self.path, &previous)?;
            *self = Self::open(&self.path, self.rotate_at)?;
        }
        writeln!(self.file, "{line}")?;
        self.size += line.len() as u64 + 1;
        Ok(())
    }
}

impl DecisionLog {
    /// Opens (creates, or appends to) `path` and starts its writer thread.
    pub(crate) fn open(path: &Path) -> Result<(Self, DecisionLogWriter), OpenError> {
        Self::open_rotating_at(path, ROTATE_AT_BYTES)
    }

    /// `open`, rotating at `rotate_at` bytes.
    pub(crate) fn open_rotating_at(
        path: &Path,
        rotate_at: u64,
    ) -> Result<(Self, DecisionLogWriter), OpenError> {
        let mut file = RotatingFile::open(path, rotate_at).map_err(|error| OpenError {
            path: path.to_owned(),
            error,
        })?;
        let (sender, lines) = mpsc::channel::<Message>();
        let written_to = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("reamer-log".to_owned())
            .spawn(move || {
                let mut warned = false;
                for message in lines {
                    let Message::Line(line) = message else {
                        return;
                    };
                    if let Err(err) = file.write_line(&line)
                        && !std::mem::replace(&mut warned, true)
                    {
                        warn!(path = %written_to.display(), "decision log: lines are lost: {err}");
                    }
                }
            })
            .map_err(|error| OpenError {
                path: path.to_owned(),
                error,
            })?;
        Ok((
            Self {
                lines: Some(sender.clone()),
            },
            DecisionLogWriter {
                lines: sender,
                thread,
            },
        ))
    }

    /// A log that writes nothing, for the tests.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Self { lines: None }
    }

    /// Appends `record` as one JSON line.
    pub(crate) fn append(&self, record: &impl Serialize) {
        let (Some(lines), Ok(line)) = (&self.lines, serde_json::to_string(record)) else {
            return;
        };
        // The writer is gone only after shutdown: nothing is decided then.
        let _ = lines.send(Message::Line(line));
    }
}

impl DecisionLogWriter {
    /// Waits until every line sent before this call is written, and ends the writer: a line
    /// sent after it is dropped (a connection task still running at shutdown).
    pub(crate) fn close(self) {
        let _ = self.lines.send(Message::Close);
        let _ = self.thread.join();
    }
}

/// The latest decisions, for `status`: each as its log line holds it.
pub(crate) struct RecentDecisions {
    capacity: usize,
    /// Shared, so that a reader under the enforcement's lock copies pointers only: a copy of
    /// 32 decisions' JSON was the largest cost of a snapshot, with the event thread waiting.
    lines: VecDeque<Arc<serde_json::Value>>,
}

impl RecentDecisions {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            lines: VecDeque::with_capacity(capacity),
        }
    }

    pub(crate) fn push(&mut self, record: serde_json::Value) {
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(Arc::new(record));
    }

    /// Oldest first.
    pub(crate) fn to_vec(&self) -> Vec<Arc<serde_json::Value>> {
        self.lines.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_sent_is_written_by_close_and_the_recent_list_keeps_the_latest() {
        let path = std::env::temp_dir().join(format!("reamer-decisions-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let (log, writer) = DecisionLog::open(&path).unwrap();
        let gpu = log.clone();
        for i in 0..100 {
            log.append(&serde_json::json!({ "n": i }));
        }
        gpu.append(&serde_json::json!({ "gpu": 1 }));
        // Still held: closing does not wait for every clone to go.
        writer.close();
        log.append(&serde_json::json!({ "late": true }));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 101);
        assert_eq!(text.lines().next(), Some("{\"n\":0}"));
        drop(gpu);
        std::fs::remove_file(&path).unwrap();

        let mut recent = RecentDecisions::new(2);
        for i in 0..3 {
            recent.push(serde_json::json!(i));
        }
        let kept: Vec<serde_json::Value> = recent.to_vec().iter().map(|v| (**v).clone()).collect();
        assert_eq!(kept, [serde_json::json!(1), serde_json::json!(2)]);
    }

    #[test]
    fn a_log_past_its_size_moves_to_dot_one_and_a_new_file_starts() {
        let dir = std::env::temp_dir().join(format!("reamer-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("decisions.jsonl");
        // Each line is 11 bytes with its newline: a rotation every 10 lines (past 100 bytes).
        let (log, writer) = DecisionLog::open_rotating_at(&path, 100).unwrap();
        for i in 0..30 {
            log.append(&serde_json::json!({ "n": 1000 + i }));
        }
        writer.close();
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        let (current, previous) = (read("decisions.jsonl"), read("decisions.jsonl.1"));
        assert_eq!(previous.lines().count(), 10, "{previous}");
        assert_eq!(
            previous.lines().next(),
            Some("{\"n\":1010}"),
            "only one rotation kept"
        );
        assert_eq!(current.lines().count(), 10, "{current}");
        assert_eq!(current.lines().last(), Some("{\"n\":1029}"));
        // A restarted daemon goes on from the size it finds: full, so it rotates first.
        let (log, writer) = DecisionLog::open_rotating_at(&path, 100).unwrap();
        for i in 0..7 {
            log.append(&serde_json::json!({ "n": 2000 + i }));
        }
        writer.close();
        let (current, previous) = (read("decisions.jsonl"), read("decisions.jsonl.1"));
        assert_eq!(current.lines().count(), 7, "{current}");
        assert_eq!(previous.lines().next(), Some("{\"n\":1020}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
