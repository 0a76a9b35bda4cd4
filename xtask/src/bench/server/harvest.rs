//! What the pace controller did in a server window (`reamer_by_pace`): the signal it followed
//! at the window's end, and every level it moved to, read back from the daemon's decision log.
//! The job the server bench starts reports no progress (the bench, not the enforcer, started
//! it), so on the GPU server the controller follows the job's GPU busy share from NVML; on a
//! machine without a GPU it has no signal and holds the core policy's level.

use std::{path::Path, process::Command};

use serde::{Deserialize, Serialize};

use super::report::Window;

/// The controller's window: its signal at the end, and its steps in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestSteps {
    /// `progress` or `gpu_busy`; None where it had no signal at the end.
    pub signal: Option<String>,
    /// Each step: the level it moved to and why (`probe`, `trial`, `kept`, ...).
    pub steps: Vec<(String, String)>,
}

/// Reads the steps from `decision_log` and the signal from `enforcer status --json`.
pub(super) fn read(enforcer: &Path, instance: &str, decision_log: &Path) -> HarvestSteps {
    let steps = std::fs::read_to_string(decision_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|record| {
            let step = &record["harvest"];
            Some((
                step["level"].as_str()?.to_owned(),
                step["reason"].as_str()?.to_owned(),
            ))
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

/// A paragraph under the table, per window of the pace controller: empty where none ran.
pub(super) fn markdown(windows: &[Window]) -> String {
    let lines: Vec<String> = windows
        .iter()
        .filter_map(|w| Some((w.round, w.harvest.as_ref()?)))
        .map(|(round, harvest)| {
            let signal = harvest
                .signal
                .as_deref()
                .map_or("no signal at the end".to_owned(), |s| {
                    format!("signal `{s}`")
                });
            let steps = match harvest.steps.is_empty() {
                true => "no step (the core policy's level throughout)".to_owned(),
                false => harvest
                    .steps
                    .iter()
                    .map(|(level, reason)| format!("{level} ({})", reason.replace('_', " ")))
                    .collect::<Vec<_>>()
                    .join(" → "),
            };
            format!("- round {}: {signal}; {steps}", round + 1)
        })
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\nThe pace controller (`harvest_by_pace = true`), window by window: the signal it \
         followed at the window's end, and each level it moved to over the window, with why \
         (its first probe waits for 10 s of signal; docs/enforcer.md, \"Offline's share, set by \
         training's pace\"):\n\n{}\n",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_read_from_the_decision_log_in_order_and_others_left_out() {
        let dir = std::env::temp_dir().join(format!("reamer-harvest-steps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("decisions.jsonl");
        std::fs::write(
            &log,
            "{\"at_ns\":1,\"harvest\":{\"level\":\"held\",\"reason\":\"probe\"}}\n\
             {\"trigger\":\"demand_rose\"}\n\
             not json\n\
             {\"at_ns\":2,\"harvest\":{\"level\":\"policy\",\"reason\":\"trial\",\"reference\":{}}}\n",
        )
        .unwrap();
        // No daemon of this instance: no signal, the steps all the same.
        let harvest = read(Path::new("/nonexistent/enforcer"), "none", &log);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(harvest.signal, None);
        assert_eq!(
            harvest.steps,
            vec![
                ("held".to_owned(), "probe".to_owned()),
                ("policy".to_owned(), "trial".to_owned())
            ]
        );
    }
}
