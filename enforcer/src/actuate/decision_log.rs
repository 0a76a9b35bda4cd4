//! The decision log: every decision of the CPU and GPU policies, one JSON line each, appended
//! to one file (`/run/reamer/<instance>.decisions.jsonl` by default) by one writer thread.
//!
//! Callers hand a line to the writer and go on: the fast path's decision is applied before it
//! is logged, and the file write happens off the thread that reacts to events. A full disk
//! must not stop enforcement: a line that cannot be written is dropped, and said so once.

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
pub struct DecisionLog {
    lines: Option<mpsc::Sender<Message>>,
}

/// The writer thread; ended, every line sent before written, by `close`.
pub struct DecisionLogWriter {
    lines: mpsc::Sender<Message>,
    thread: JoinHandle<()>,
}

impl DecisionLog {
    /// Opens (creates, or appends to) `path` and starts its writer thread.
    pub fn open(path: &Path) -> Result<(Self, DecisionLogWriter), OpenError> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|error| OpenError {
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
                    if let Err(err) = writeln!(file, "{line}")
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

    /// A log that writes nothing (tests, a daemon without one).
    pub fn none() -> Self {
        Self { lines: None }
    }

    /// Appends `record` as one JSON line.
    pub fn append(&self, record: &impl Serialize) {
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
    pub fn close(self) {
        let _ = self.lines.send(Message::Close);
        let _ = self.thread.join();
    }
}

/// The latest decisions, for `status`: each as its log line holds it.
pub struct RecentDecisions {
    capacity: usize,
    /// Shared, so that a reader under the enforcement's lock copies pointers only: a copy of
    /// 32 decisions' JSON was the largest cost of a snapshot, with the event thread waiting.
    lines: VecDeque<Arc<serde_json::Value>>,
}

impl RecentDecisions {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            lines: VecDeque::with_capacity(capacity),
        }
    }

    pub fn push(&mut self, record: serde_json::Value) {
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(Arc::new(record));
    }

    /// Oldest first.
    pub fn to_vec(&self) -> Vec<Arc<serde_json::Value>> {
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
}
