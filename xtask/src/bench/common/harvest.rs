//! What the enforcer's pace controller (`harvest_by_pace`) did in a benchmark window: the
//! signal it followed at the window's end, and every level it moved to, when and why, read
//! back from the daemon's decision log. The co-location and server benchmarks both read it.

use std::{path::Path, process::Command};

use serde::{Deserialize, Serialize};

/// The controller's window: its signal at the end, and its steps in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestSteps {
    /// `progress` or `gpu_busy`; None where it had no signal at the end.
    pub signal: Option<String>,
    pub steps: Vec<HarvestStep>,
}

/// One change of level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestStep {
    /// Seconds from the timed window's start (negative: before it, while training settled).
    pub at_s: f64,
    /// The level it moved to (`held`, `quarter`, ..., `training_cores`).
    pub level: String,
    /// Why (`probe`, `trial`, `kept`, `too_costly`, ...).
    pub reason: String,
    /// Whether the search ended here: a level kept without trying the next one up, or
    /// offline held back because even the lowest share cost too much.
    pub settles: bool,
    /// Where the step judged a level: the level it judged (`level` is where it went next).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried: Option<String>,
    /// Where the step judged a level (`kept`, `too_costly`, `not_shown_free`, `undecided`): its
    /// pace over the pace with offline held back, the mean of its cycles, and that mean's 95%
    /// interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<StepRatio>,
    /// Where the step is a `phase_change` (or a `pace_moved`, `pace_moved_for`): the held pace
    /// (the settled level's) it was judged against, and the one that moved away from it, in the
    /// signal's units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_moved: Option<[f64; 2]>,
}

/// A judged level's ratio and interval, as the decision log gives it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRatio {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    /// The cycles it is the mean of: a comparison's own, or more where a too-noisy level's
    /// carried cycles showed it costly. None in runs saved before the bench read it (the
    /// server's of 2026-11-28 and before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,
}

/// The level without a step: the core policy's (`policy::harvest::Level::Policy`).
const POLICY: &str = "policy";
/// The level of a probe, and of a search that found every share too costly.
const HELD: &str = "held";

/// CLOCK_MONOTONIC now, ns: the clock of the decision log's `at_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(rc, 0, "CLOCK_MONOTONIC is always readable");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Reads the steps from `decision_log`, timed from `window_start_ns` (CLOCK_MONOTONIC), and
/// the signal from `enforcer status --json`.
pub(crate) fn read(
    enforcer: &Path,
    instance: &str,
    decision_log: &Path,
    window_start_ns: u64,
) -> HarvestSteps {
    let steps = std::fs::read_to_string(decision_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|record| {
            let step = &record["harvest"];
            let level = step["level"].as_str()?.to_owned();
            let reason = step["reason"].as_str()?.to_owned();
            let tried = step["tried"].as_str();
            let settles = step["settles"].as_bool().unwrap_or(false);
            let ratio = &step["ratio"];
            let ratio = (|| {
                Some(StepRatio {
                    ratio: ratio["ratio"].as_f64()?,
                    low: ratio["low"].as_f64()?,
                    high: ratio["high"].as_f64()?,
                    cycles: ratio["cycles"].as_u64(),
                })
            })();
            let held_moved = step["from"].as_f64().zip(step["to"].as_f64());
            Some(HarvestStep {
                at_s: (record["at_ns"].as_u64()? as f64 - window_start_ns as f64) / 1e9,
                level,
                reason,
                settles,
                tried: tried.map(str::to_owned),
                ratio,
                held_moved: held_moved.map(|(from, to)| [from, to]),
            })
        })
        .collect();
    let signal = Command::new(enforcer)
        .args(["status", "--json", "--instance", instance])
        .output()
        .ok()
        .and_then(|output| serde_json::from_slice::<serde_json::Value>(&output.stdout).ok())
        .and_then(|status| {
            status["enforcement"]["harvest"]["signal"]
                .as_str()
                .map(str::to_owned)
        });
    HarvestSteps { signal, steps }
}

impl HarvestStep {
    /// A step to `level` at `at_s` for `reason`, judging nothing and settling nothing: the
    /// tests' controller windows.
    #[cfg(test)]
    pub fn to(at_s: f64, level: &str, reason: &str) -> Self {
        Self {
            at_s,
            level: level.to_owned(),
            reason: reason.to_owned(),
            settles: false,
            tried: None,
            ratio: None,
            held_moved: None,
        }
    }

    /// The step for a report: the level it went to, why (with the level it judged and its
    /// ratio, or how far the held pace moved), and when:
    /// `unpaused (training_cores too costly, 0.962 [0.941, 0.983] over 6 cycles, -3 s)`.
    pub fn words(&self) -> String {
        let reason = self.reason.replace('_', " ");
        let why = match &self.tried {
            Some(tried) => format!("{tried} {reason}"),
            None => reason,
        };
        let detail = match (self.ratio, self.held_moved) {
            (Some(r), _) => format!(
                ", {:.3} [{:.3}, {:.3}]{}",
                r.ratio,
                r.low,
                r.high,
                r.cycles
                    .map_or(String::new(), |n| format!(" over {n} cycles"))
            ),
            (None, Some([from, to])) if from > 0.0 => {
                let pace = match self.reason.as_str() {
                    "pace_moved" | "pace_moved_for" => "pace",
                    _ => "held pace",
                };
                format!(", {pace} {:+.0}%", (to / from - 1.0) * 100.0)
            }
            _ => String::new(),
        };
        format!("{} ({why}{detail}, {:.0} s)", self.level, self.at_s)
    }
}

impl HarvestSteps {
    /// The signal at the window's end, in words for a report.
    pub fn signal_words(&self) -> String {
        self.signal
            .as_deref()
            .map_or("no signal at the end".to_owned(), |s| {
                format!("signal `{s}`")
            })
    }

    /// The level in force at `at_s`: the last step's before it, the core policy's before any.
    pub fn level_at(&self, at_s: f64) -> &str {
        self.steps
            .iter()
            .take_while(|step| step.at_s <= at_s)
            .last()
            .map_or(POLICY, |step| step.level.as_str())
    }

    /// The steps that judged a level, saw a new phase or resumed after a pause, in words
    /// (`HarvestStep::words`);
    /// "none" where there were none.
    pub fn judgments(&self) -> String {
        let judged: Vec<String> = self
            .steps
            .iter()
            .filter(|s| {
                matches!(
                    s.reason.as_str(),
                    "kept"
                        | "too_costly"
                        | "not_shown_free"
                        | "too_noisy"
                        | "phase_change"
                        | "pace_moved"
                        | "pace_moved_for"
                        | "resumed"
                        | "stops"
                )
            })
            .map(HarvestStep::words)
            .collect();
        match judged.is_empty() {
            true => "none".to_owned(),
            false => judged.join(", "),
        }
    }

    /// When the search first ended, s from the window's start.
    pub fn settled_at_s(&self) -> Option<f64> {
        self.steps
            .iter()
            .find(|step| step.settles)
            .map(|step| step.at_s)
    }

    /// Seconds of `[0, window_s]` during which offline was held back (probes, or a search that
    /// found even a quarter too costly): what the controller cost offline in the window.
    pub fn held_s(&self, window_s: f64) -> f64 {
        let mut held = 0.0;
        let mut from = 0.0;
        let mut holding = self.level_at(0.0) == HELD;
        for step in self
            .steps
            .iter()
            .filter(|s| s.at_s > 0.0 && s.at_s < window_s)
        {
            if holding {
                held += step.at_s - from;
            }
            from = step.at_s;
            holding = step.level == HELD;
        }
        if holding {
            held += window_s - from;
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at_s: f64, level: &str, reason: &str, settles: bool) -> HarvestStep {
        HarvestStep {
            settles,
            ..HarvestStep::to(at_s, level, reason)
        }
    }

    #[test]
    fn steps_are_read_from_the_decision_log_in_order_timed_from_the_window() {
        let dir = std::env::temp_dir().join(format!("reamer-harvest-steps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("decisions.jsonl");
        std::fs::write(
            &log,
            "{\"at_ns\":1000000000,\"harvest\":{\"level\":\"held\",\"settles\":false,\"reason\":\"probe\"}}\n\
             {\"trigger\":\"demand_rose\"}\n\
             not json\n\
             {\"at_ns\":6000000000,\"harvest\":{\"level\":\"policy\",\"settles\":false,\"reason\":\"trial\",\"reference\":{}}}\n\
             {\"at_ns\":15000000000,\"harvest\":{\"level\":\"policy\",\"settles\":true,\"reason\":\"kept\",\"tried\":\"policy\",\"ratio\":{\"ratio\":0.995,\"low\":0.991,\"high\":0.999,\"cycles\":6}}}\n\
             {\"at_ns\":20000000000,\"harvest\":{\"level\":\"held\",\"settles\":false,\"reason\":\"phase_change\",\"from\":200.0,\"to\":250.0}}\n\
             {\"at_ns\":30000000000,\"harvest\":{\"level\":\"policy\",\"settles\":false,\"reason\":\"pace_moved\",\"from\":200.0,\"to\":100.0}}\n",
        )
        .unwrap();
        // No daemon of this instance: no signal, the steps all the same.
        let harvest = read(
            Path::new("/nonexistent/enforcer"),
            "none",
            &log,
            5_000_000_000,
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(harvest.signal, None);
        assert_eq!(
            harvest.steps,
            vec![
                step(-4.0, "held", "probe", false),
                step(1.0, "policy", "trial", false),
                HarvestStep {
                    tried: Some("policy".to_owned()),
                    ratio: Some(StepRatio {
                        ratio: 0.995,
                        low: 0.991,
                        high: 0.999,
                        cycles: Some(6),
                    }),
                    ..step(10.0, "policy", "kept", true)
                },
                HarvestStep {
                    held_moved: Some([200.0, 250.0]),
                    ..step(15.0, "held", "phase_change", false)
                },
                HarvestStep {
                    held_moved: Some([200.0, 100.0]),
                    ..step(25.0, "policy", "pace_moved", false)
                },
            ]
        );
        assert_eq!(harvest.settled_at_s(), Some(10.0));
        let words: Vec<String> = harvest.steps.iter().map(HarvestStep::words).collect();
        assert_eq!(
            words,
            [
                "held (probe, -4 s)",
                "policy (trial, 1 s)",
                "policy (policy kept, 0.995 [0.991, 0.999] over 6 cycles, 10 s)",
                "held (phase change, held pace +25%, 15 s)",
                "policy (pace moved, pace -50%, 25 s)",
            ]
        );
    }

    #[test]
    fn offline_is_held_from_each_probe_to_the_next_step_within_the_window() {
        let harvest = HarvestSteps {
            signal: Some("progress".to_owned()),
            steps: vec![
                // Held when the window starts: 2 s of it count.
                step(-3.0, "held", "probe", false),
                step(2.0, "training_cores", "trial", false),
                step(11.0, "training_cores", "kept", true),
                // A recheck's probe running past the window's end: 4 s of it count.
                step(56.0, "held", "probe", false),
            ],
        };
        assert_eq!(harvest.level_at(0.0), "held");
        assert_eq!(harvest.level_at(30.0), "training_cores");
        assert_eq!(harvest.held_s(60.0), 6.0);
        let none = HarvestSteps {
            signal: None,
            steps: vec![],
        };
        assert_eq!(none.level_at(0.0), "policy");
        assert_eq!(none.held_s(60.0), 0.0);
        assert_eq!(none.settled_at_s(), None);
    }
}
