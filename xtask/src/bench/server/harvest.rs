//! The server section's paragraph on the pace controller (`reamer_by_pace`), window by
//! window (`common::harvest` reads what it did). The job the server bench starts reports its
//! steps to each window's daemon, so the controller follows them; the signal it followed is
//! named, since a job that did not report would be followed by its GPU's busy share, and
//! without either the controller holds the core policy's level.

use super::report::Window;
use crate::bench::common::harvest::HarvestStep;

/// A paragraph under the table, per window of the pace controller: empty where none ran.
pub(super) fn markdown(windows: &[Window], lead_s: f64) -> String {
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
                    .map(HarvestStep::words)
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
         and when (s from the timed part's start). Where it judged a level, the step names the \
         level judged and gives training's pace there over its pace with offline held back \
         (the mean of the cycles, and its 95% interval); at a new phase, how far the held \
         pace moved. Its daemon started {:.0} s before the timed part, and its first \
         comparison waits for 10 s of signal (docs/enforcer.md, \"Offline's share, set by \
         training's pace\"):\n\n{}\n",
        lead_s,
        lines.join("\n")
    )
}
