//! The server section's paragraph on the pace controller (`reamer_by_pace`), window by
//! window (`common::harvest` reads what it did). The job the server bench starts reports no
//! progress (the bench, not the enforcer, started it), so on the GPU server the controller
//! follows the job's GPU busy share from NVML; on a machine without a GPU it has no signal and
//! holds the core policy's level.

use super::report::Window;

/// A paragraph under the table, per window of the pace controller: empty where none ran.
pub(super) fn markdown(windows: &[Window]) -> String {
    let lines: Vec<String> = windows
        .iter()
        .filter_map(|w| Some((w.round, w.harvest.as_ref()?)))
        .map(|(round, harvest)| {
            let signal = harvest.signal_words();
            let steps = match harvest.steps.is_empty() {
                true => "no step (the core policy's level throughout)".to_owned(),
                false => harvest
                    .steps
                    .iter()
                    .map(|step| {
                        format!(
                            "{} ({}, {:.0} s)",
                            step.level,
                            step.reason.replace('_', " "),
                            step.at_s
                        )
                    })
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
         and when (s from the timed part's start; its daemon started {:.0} s before it, and its \
         first comparison waits for 10 s of signal; docs/enforcer.md, \"Offline's share, set \
         by training's pace\"):\n\n{}\n",
        (super::INFERENCE_LEAD + super::PACE_SETTLE).as_secs_f64(),
        lines.join("\n")
    )
}
