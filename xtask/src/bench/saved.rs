//! A long benchmark run saved whole after each of its windows, so that a run cut short (a lease
//! of the GPU server that ends mid-run) still gives its report: `--server-from FILE` and
//! `--gpu-from FILE` render the section from what the run had measured, nothing run again.
//!
//! The file is written beside and renamed into place, so a run killed at any instant leaves
//! the last whole snapshot.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// How a run was made, for its report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct About {
    pub command: String,
    pub machine: String,
    /// A smoke run (`--quick`): its report never goes into docs/benchmarks.md.
    pub quick: bool,
}

/// A run as far as it went.
#[derive(Debug, Serialize, Deserialize)]
pub struct Saved<T> {
    pub about: About,
    /// The windows the run was to measure.
    pub planned_windows: usize,
    pub run: T,
}

/// A run that counts the windows it measured.
pub trait Windows {
    fn windows_measured(&self) -> usize;
}

impl<T: Serialize> Saved<T> {
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, serde_json::to_string(self)?)
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path)
            .with_context(|| format!("renaming {} to {}", partial.display(), path.display()))
    }
}

impl<T: DeserializeOwned + Windows> Saved<T> {
    /// Reads a saved run; `what` names the benchmark that writes such files.
    pub fn load(path: &Path, what: &str) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let saved: Self = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a saved run of the {what} (`cargo xtask bench --only {what}` writes \
                 one as it goes)",
                path.display()
            )
        })?;
        if saved.run.windows_measured() == 0 {
            bail!(
                "{}: the run saved no window, so there is nothing to report",
                path.display()
            );
        }
        Ok(saved)
    }
}

impl<T: Windows> Saved<T> {
    /// The command for the report: the run's own, and, where it was cut short, how many of its
    /// windows it had and the command that reported them (`flag`: `--server-from`, ...). The
    /// report prints it between backticks, which the added words close and reopen.
    pub fn report_command(&self, path: &Path, what: &str, flag: &str) -> String {
        let measured = self.run.windows_measured();
        if measured >= self.planned_windows {
            return self.about.command.clone();
        }
        format!(
            "{}`, cut short after {} of its {} windows and reported from what it saved by \
             `cargo xtask bench --only {what} {flag} {}",
            self.about.command,
            measured,
            self.planned_windows,
            path.display()
        )
    }

    /// Whether the report may replace the section of docs/benchmarks.md: not for a smoke run.
    pub fn may_update_docs(&self) -> bool {
        !self.about.quick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Windows for Vec<u32> {
        fn windows_measured(&self) -> usize {
            self.len()
        }
    }

    fn saved(windows_done: usize, quick: bool) -> Saved<Vec<u32>> {
        Saved {
            about: About {
                command: "xtask bench --only server".to_owned(),
                machine: "16 CPUs".to_owned(),
                quick,
            },
            planned_windows: 4,
            run: (0..windows_done as u32).collect(),
        }
    }

    #[test]
    fn a_run_is_read_back_as_saved_and_a_run_cut_short_says_so() {
        let path = std::env::temp_dir().join(format!("reamer-saved-{}.json", std::process::id()));
        saved(1, false).write(&path).unwrap();
        // Each save replaces the last whole.
        saved(3, false).write(&path).unwrap();
        assert!(!path.with_extension("json.partial").exists());
        let back = Saved::<Vec<u32>>::load(&path, "server").unwrap();
        assert_eq!(back.run, [0, 1, 2]);
        assert_eq!(back.about.machine, "16 CPUs");
        assert!(back.may_update_docs());
        let command = back.report_command(&path, "server", "--server-from");
        assert!(
            command.starts_with("xtask bench --only server`, cut short after 3 of its 4 windows"),
            "{command}"
        );
        assert!(command.ends_with(&format!("--server-from {}", path.display())));

        saved(4, true).write(&path).unwrap();
        let whole = Saved::<Vec<u32>>::load(&path, "server").unwrap();
        assert_eq!(
            whole.report_command(&path, "server", "--server-from"),
            "xtask bench --only server"
        );
        assert!(!whole.may_update_docs(), "a --quick run's");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_file_that_is_no_saved_run_or_saved_no_window_is_refused_saying_why() {
        let path = std::env::temp_dir().join(format!("reamer-unsaved-{}.json", std::process::id()));
        std::fs::write(&path, "{\"x\": 1}").unwrap();
        let err = Saved::<Vec<u32>>::load(&path, "gpu")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a saved run of the gpu"), "{err}");
        saved(0, false).write(&path).unwrap();
        let err = Saved::<Vec<u32>>::load(&path, "gpu")
            .unwrap_err()
            .to_string();
        assert!(err.contains("saved no window"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = Saved::<Vec<u32>>::load(&path, "gpu")
            .unwrap_err()
            .to_string();
        assert!(err.contains("reading"), "{err}");
    }
}
