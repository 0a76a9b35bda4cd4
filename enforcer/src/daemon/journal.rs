//! Training processes launched through the control socket, written down so that a restarted
//! daemon finds them again.
//!
//! A training job of the config is found again from the config, and an inference pool's
//! members from the pool's cgroup. A process started with `enforcer launch --training NAME`
//! is known only to the daemon that registered it. Each such registration is kept in
//! `/run/reamer/<instance>.launched.json` (on tmpfs: pids mean nothing after a reboot) with the
//! process's start time, so that a pid reused by an unrelated process is never taken for
//! training. The file is rewritten whole (temporary file, then rename), so a daemon killed in
//! the middle of a write leaves the previous version.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::host::procfs::start_time;

/// One launched training process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Launched {
    /// The training job's name.
    pub job: String,
    /// The job's id (its slot in the sensor's `job_stats`) when it was registered.
    pub id: u32,
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks after boot at which the process started.
    pub start_time: u64,
}

pub(crate) struct Journal {
    path: PathBuf,
    entries: Vec<Launched>,
}

impl Journal {
    /// Reads the journal a previous daemon left and keeps the processes that still run. An
    /// unreadable journal is moved aside (`.unreadable`) with a warning, never lost.
    pub(crate) fn open(path: &Path) -> Self {
        let entries = match std::fs::read(path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(err) => {
                warn!(path = %path.display(), "cannot read the launched-jobs journal: {err}");
                Vec::new()
            }
            Ok(bytes) => serde_json::from_slice::<Vec<Launched>>(&bytes).unwrap_or_else(|err| {
                let aside = path.with_extension("json.unreadable");
                let _ = std::fs::rename(path, &aside);
                warn!(
                    path = %path.display(),
                    moved_to = %aside.display(),
                    "the launched-jobs journal is not valid JSON ({err}); training processes \
                     launched before this daemon are not re-adopted"
                );
                Vec::new()
            }),
        };
        let mut journal = Self {
            path: path.to_owned(),
            entries,
        };
        journal.retain_running();
        journal
    }

    /// The launched processes that still run, by job id.
    pub(crate) fn entries(&self) -> Vec<Launched> {
        let mut entries = self.entries.clone();
        entries.sort_by_key(|e| (e.id, e.pid));
        entries
    }

    /// Records that `pid` was launched as part of training job `job` (id `id`).
    pub(crate) fn record(&mut self, job: &str, id: u32, pid: u32) {
        let Some(start_time) = start_time(pid) else {
            return;
        };
        let entry = Launched {
            job: job.to_owned(),
            id,
            pid,
            start_time,
        };
        if !self.entries.contains(&entry) {
            self.entries.push(entry);
            self.save();
        }
    }

    /// Forgets `pid` (its job could not be re-created).
    pub(crate) fn forget(&mut self, pid: u32) {
        let before = self.entries.len();
        self.entries.retain(|e| e.pid != pid);
        if self.entries.len() != before {
            self.save();
        }
    }

    /// Drops the processes that exited (or whose pid now names another process).
    pub(crate) fn retain_running(&mut self) {
        let before = self.entries.len();
        self.entries
            .retain(|e| start_time(e.pid) == Some(e.start_time));
        if self.entries.len() != before {
            self.save();
        }
    }

    /// At a clean stop: the file stays only while a launched process still runs, for the next
    /// daemon to re-adopt it.
    pub(crate) fn close(&mut self) {
        self.retain_running();
        if self.entries.is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn save(&self) {
        if self.entries.is_empty() {
            let _ = std::fs::remove_file(&self.path);
            return;
        }
        let temporary = self.path.with_extension("json.tmp");
        let written = serde_json::to_vec_pretty(&self.entries)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&temporary, bytes))
            .and_then(|()| std::fs::rename(&temporary, &self.path));
        if let Err(err) = written {
            warn!(
                path = %self.path.display(),
                "cannot write the launched-jobs journal: {err}; a restarted daemon would not \
                 re-adopt the training processes launched through this one"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("reamer-journal-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("launched.json")
    }

    #[test]
    fn a_running_process_is_found_again_by_the_next_reader() {
        let path = scratch("found");
        let me = std::process::id();
        let mut journal = Journal::open(&path);
        journal.record("train-a", 3, me);
        journal.record("train-a", 3, me);
        let mut again = Journal::open(&path);
        assert_eq!(again.entries().len(), 1);
        assert_eq!(again.entries()[0].job, "train-a");
        assert_eq!(again.entries()[0].id, 3);
        assert_eq!(again.entries()[0].start_time, start_time(me).unwrap());
        // A clean stop keeps the file while the process runs.
        again.close();
        assert!(path.exists());
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_exited_or_reused_pid_is_not_re_adopted() {
        let path = scratch("gone");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut journal = Journal::open(&path);
        journal.record("train-b", 0, pid);
        journal.record("train-c", 1, std::process::id());
        child.wait().unwrap();
        // The same pid with another start time is another process.
        let mut entries = Journal::open(&path).entries();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries.remove(0).job, "train-c");
        let mut written: Vec<Launched> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        written[0].start_time += 1;
        std::fs::write(&path, serde_json::to_vec(&written).unwrap()).unwrap();
        let mut journal = Journal::open(&path);
        assert!(journal.entries().is_empty());
        journal.close();
        assert!(
            !path.exists(),
            "an empty journal is removed at a clean stop"
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_unreadable_journal_is_moved_aside_not_lost() {
        let path = scratch("bad");
        std::fs::write(&path, "{not json").unwrap();
        let journal = Journal::open(&path);
        assert!(journal.entries().is_empty());
        let aside = path.with_extension("json.unreadable");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "{not json");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
