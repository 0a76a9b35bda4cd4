//! The server benchmark's windows, saved one by one as each ends, so that a run cut short (a
//! lease of the GPU server ending mid-run) still gives its report:
//! `cargo xtask bench --only server --server-from target/bench/server/windows.jsonl`.
//!
//! JSON lines: first the run (its command, machine and scenarios, and `Measured` without its
//! windows), then one `Window` per line, written whole and flushed as the window ends.

use std::{
    collections::BTreeSet,
    fs::File,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::{Measured, Scenario, report::Window};

/// The file's name in the benchmark's directory.
pub const FILE: &str = "windows.jsonl";

/// The file's first line.
#[derive(Serialize, Deserialize)]
struct Header {
    command: String,
    machine: String,
    /// A smoke run (`--quick`): its report never goes into docs/benchmarks.md.
    quick: bool,
    scenarios: Vec<Scenario>,
    run: Measured,
}

/// How a run was made, for its report.
#[derive(Debug, Clone)]
pub struct About {
    pub command: String,
    pub machine: String,
    pub quick: bool,
}

/// Appends each window to the file as it ends.
pub struct Saver {
    file: File,
    path: PathBuf,
}

impl Saver {
    /// Starts the file afresh with the run's header (`run` without windows).
    pub fn create(
        path: &Path,
        about: &About,
        scenarios: &[Scenario],
        run: Measured,
    ) -> anyhow::Result<Self> {
        let header = Header {
            command: about.command.clone(),
            machine: about.machine.clone(),
            quick: about.quick,
            scenarios: scenarios.to_vec(),
            run,
        };
        let mut saver = Self {
            file: File::create(path).with_context(|| format!("creating {}", path.display()))?,
            path: path.to_owned(),
        };
        saver.write_line(&serde_json::to_string(&header)?)?;
        Ok(saver)
    }

    pub fn append(&mut self, window: &Window) -> anyhow::Result<()> {
        self.write_line(&serde_json::to_string(window)?)
    }

    /// One write per line: a run killed between two windows leaves whole lines only.
    fn write_line(&mut self, line: &str) -> anyhow::Result<()> {
        self.file
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.file.flush())
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// A saved run, read back.
pub struct Saved {
    pub command: String,
    pub machine: String,
    pub quick: bool,
    /// The windows the run was to measure: its rounds times its scenarios.
    pub planned_windows: usize,
    /// The run with the windows it saved; `rounds` counts the rounds it began.
    pub measured: Measured,
}

impl Saved {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, first)) = lines.next() else {
            bail!("{} is empty: no server run was saved there", path.display());
        };
        let header: Header = serde_json::from_str(first).with_context(|| {
            format!(
                "{}: line 1 is not a server run's header (was it written by `cargo xtask bench \
                 --only server`?)",
                path.display()
            )
        })?;
        let lines: Vec<(usize, &str)> = lines.collect();
        let mut windows = Vec::new();
        for (k, &(number, line)) in lines.iter().enumerate() {
            match serde_json::from_str::<Window>(line) {
                Ok(window) => windows.push(window),
                // A run killed as it wrote its last line: that window is lost, not the run.
                Err(err) if k + 1 == lines.len() && !text.ends_with('\n') => {
                    eprintln!(
                        "[bench] {}: the last line is cut short ({err}); left out",
                        path.display()
                    );
                }
                Err(err) => bail!(
                    "{}: line {} is not a window: {err}",
                    path.display(),
                    number + 1
                ),
            }
        }
        let planned_windows = header.run.rounds * header.scenarios.len();
        let mut measured = header.run;
        measured.rounds = windows
            .iter()
            .map(|w| w.round)
            .collect::<BTreeSet<_>>()
            .len();
        measured.windows = windows;
        Ok(Self {
            command: header.command,
            machine: header.machine,
            quick: header.quick,
            planned_windows,
            measured,
        })
    }

    /// The command for the report: the run's own, and how it was cut short, if it was.
    pub fn report_command(&self, path: &Path) -> String {
        let saved = self.measured.windows.len();
        if saved >= self.planned_windows {
            return self.command.clone();
        }
        format!(
            "{}`, cut short after {saved} of its {} windows and reported from the windows it \
             saved by `cargo xtask bench --only server --server-from {}",
            self.command,
            self.planned_windows,
            path.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(scenario: Scenario, round: usize) -> Window {
        Window {
            scenario,
            round,
            throughput: 1000.0,
            counts_images: true,
            step_ms_p50: 120.0,
            step_ms_p99: 160.0,
            training_cpus: 2.6,
            online: None,
            offline_items_per_s: None,
            cpus_left_idle: 13.0,
            steal_pct: 0.0,
            reserved_cores_p50: None,
            offline_paused_pct: None,
            enforcer_cpu_pct: None,
            enforcer_rss_mib: None,
            sensor_running_cpus: Some(2.61),
            replay: None,
        }
    }

    fn run() -> Measured {
        Measured {
            training: "ResNet-50".to_owned(),
            stand_in: false,
            rounds: 2,
            seconds: 15.0,
            online_rate: 150.0,
            cpus: 16,
            windows: Vec::new(),
        }
    }

    #[test]
    fn a_run_cut_short_is_read_back_with_the_windows_it_saved_and_says_so() {
        let path = std::env::temp_dir().join(format!("reamer-saved-{}.jsonl", std::process::id()));
        let scenarios = [Scenario::Alone, Scenario::AloneObserved];
        let about = About {
            command: "xtask bench --only server".to_owned(),
            machine: "16 CPUs".to_owned(),
            quick: false,
        };
        let mut saver = Saver::create(&path, &about, &scenarios, run()).unwrap();
        saver.append(&window(Scenario::Alone, 0)).unwrap();
        saver.append(&window(Scenario::AloneObserved, 0)).unwrap();
        saver.append(&window(Scenario::AloneObserved, 1)).unwrap();
        // Killed while writing the fourth window.
        drop(saver);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"scenario\":\"alone\",\"rou").unwrap();

        let saved = Saved::load(&path).unwrap();
        assert_eq!(saved.planned_windows, 4);
        assert_eq!(saved.measured.windows.len(), 3);
        assert_eq!(saved.measured.rounds, 2, "the rounds it began");
        assert_eq!(saved.measured.windows[1].scenario, Scenario::AloneObserved);
        assert_eq!(saved.measured.windows[2].sensor_running_cpus, Some(2.61));
        assert_eq!(saved.machine, "16 CPUs");
        let command = saved.report_command(&path);
        assert!(
            command.starts_with("xtask bench --only server`, cut short after 3 of its 4 windows"),
            "{command}"
        );

        // A bad line that is not the last is an error naming it.
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(2, "not json");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let err = Saved::load(&path).err().unwrap().to_string();
        assert!(err.contains("line 3 is not a window"), "{err}");
        std::fs::write(&path, "").unwrap();
        let err = Saved::load(&path).err().unwrap().to_string();
        assert!(err.contains("is empty"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_whole_run_reports_its_own_command() {
        let path = std::env::temp_dir().join(format!("reamer-whole-{}.jsonl", std::process::id()));
        let about = About {
            command: "xtask bench --only server".to_owned(),
            machine: "m".to_owned(),
            quick: true,
        };
        let mut saver = Saver::create(&path, &about, &[Scenario::Alone], run()).unwrap();
        saver.append(&window(Scenario::Alone, 0)).unwrap();
        saver.append(&window(Scenario::Alone, 1)).unwrap();
        let saved = Saved::load(&path).unwrap();
        assert_eq!(saved.report_command(&path), "xtask bench --only server");
        assert!(saved.quick);
        std::fs::remove_file(&path).unwrap();
    }
}
