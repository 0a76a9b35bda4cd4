//! Training's pace against itself: from the step times of the windows where what ran beside
//! training stayed the same throughout (every scenario but the pace controller's), how far its
//! pace over one stretch of time differs from its pace over the next, by the stretch's length.
//! A pace controller's cycle compares two such stretches (the level's half and the held half),
//! so this is what its cycles read with nothing changing: on the server the ResNet-50 job's
//! reported steps gave cycles of about 2 s halves that spread by 9 to 20%, and whether longer
//! halves narrow that, and how fast, decides how long a comparison that can judge 1% must be
//! (docs/experiments/2026-11-27-pace-steps-server.md). Beside offline inference the same
//! figure says whether inference adds noise of its own to the pace the controller reads.

use super::{Scenario, report::Window};

/// The stretches the paragraph gives, s.
const STRETCHES_S: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 16.0];
/// Fewer pairs than this give no spread worth a figure.
const MIN_PAIRS: usize = 3;
/// The pace controller's default ε: a level may cost training 1% of its pace.
const EPSILON: f64 = 0.01;
/// Each half of the controller's cycles settles this long before it measures
/// (`policy::harvest::SETTLE_NS` in the enforcer).
pub(super) const HALF_SETTLE_S: f64 = 1.0;
/// The normal quantile of a two-sided 95% interval: Student's t for the many cycles a noisy
/// pace needs.
const Z95: f64 = 1.96;

/// The spread (sample standard deviation) of the ratios of each stretch's pace over the next
/// one's, stretches of `stretch_s` laid end to end from each window's start, over the step
/// times (ms, in order) of each of `windows`; with the number of ratios. A stretch's pace is
/// the steps that ended in it. None with fewer than `MIN_PAIRS` ratios.
fn adjacent_ratio_spread(windows: &[&[f64]], stretch_s: f64) -> Option<(f64, usize)> {
    let mut ratios = Vec::new();
    for steps in windows {
        let mut ends_s = steps.iter().scan(0.0, |at, ms| {
            *at += ms / 1e3;
            Some(*at)
        });
        let total_s = steps.iter().sum::<f64>() / 1e3;
        let mut counts = vec![0u32; (total_s / stretch_s) as usize];
        for end in ends_s.by_ref() {
            if let Some(count) = counts.get_mut((end / stretch_s) as usize) {
                *count += 1;
            }
        }
        ratios.extend(
            counts
                .windows(2)
                .filter(|pair| pair[1] > 0)
                .map(|pair| f64::from(pair[0]) / f64::from(pair[1])),
        );
    }
    let n = ratios.len();
    if n < MIN_PAIRS {
        return None;
    }
    let mean = ratios.iter().sum::<f64>() / n as f64;
    let variance = ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some((variance.sqrt(), n))
}

/// What a comparison of halves `stretch_s` long takes where its cycles spread by `spread`:
/// the cycles before its 95% interval narrows to ±`EPSILON` (so that a level costing nothing
/// can be shown within ε about half the time, and one costing 2ε shown costly), and the
/// minutes they run, both halves of each cycle and their settling included.
fn cycles_to_judge(spread: f64, stretch_s: f64) -> (usize, f64) {
    let cycles = ((Z95 * spread / EPSILON).powi(2).ceil() as usize).max(2);
    let minutes = cycles as f64 * 2.0 * (stretch_s + HALF_SETTLE_S) / 60.0;
    (cycles, minutes)
}

/// A line under the table: at training alone's spread (the job's own noise, which every
/// comparison has), the cycles and minutes a comparison of each stretch's halves needs to
/// judge ε. Empty without training alone's steps.
fn judging_line(alone: &[&[f64]]) -> String {
    let costs: Vec<String> = STRETCHES_S
        .iter()
        .filter_map(|&stretch| {
            let (spread, _) = adjacent_ratio_spread(alone, stretch)?;
            let (cycles, minutes) = cycles_to_judge(spread, stretch);
            Some(format!(
                "{stretch:.0} s halves, {cycles} cycles in {minutes:.1} min"
            ))
        })
        .collect();
    match costs.is_empty() {
        true => String::new(),
        false => format!(
            "\nAt training alone's spread, a comparison needs, before its 95% interval narrows \
             to ±{:.0}% (ε by default; half of its time holds offline back): {}.\n",
            EPSILON * 100.0,
            costs.join("; ")
        ),
    }
}

/// A paragraph and a table under the section's table: the spread for each of `STRETCHES_S`,
/// scenario by scenario, from the windows that kept their step times; empty where none did
/// (runs saved before they were kept: training alone's from 86cb0d0 on, every scenario's
/// from 086d8c4 on).
pub(super) fn markdown(windows: &[Window]) -> String {
    let kept = |scenario: Scenario| -> Vec<&[f64]> {
        windows
            .iter()
            .filter(|w| w.scenario == scenario && !w.step_ms.is_empty())
            .map(|w| w.step_ms.as_slice())
            .collect()
    };
    // The controller's level moves within its windows: their spread is not the job's alone.
    let rows: Vec<String> = Scenario::ALL
        .iter()
        .filter(|&&scenario| scenario != Scenario::ReamerByPace)
        .filter_map(|&scenario| {
            let steps = kept(scenario);
            (!steps.is_empty()).then(|| {
                let cells: Vec<String> = STRETCHES_S
                    .iter()
                    .map(|&stretch| match adjacent_ratio_spread(&steps, stretch) {
                        Some((spread, pairs)) => format!("{:.1}% ({pairs})", spread * 100.0),
                        None => "too few pairs".to_owned(),
                    })
                    .collect();
                format!(
                    "| {} | {} | {} |",
                    scenario.label(),
                    steps.len(),
                    cells.join(" | ")
                )
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let stretches: Vec<String> = STRETCHES_S.iter().map(|s| format!("{s:.0} s")).collect();
    format!(
        "\nTraining's pace against itself, from the step times of the windows where what ran \
         beside it stayed the same: the pace over one stretch (the steps that ended in it) over \
         the pace over the next, its spread (standard deviation) by the stretches' length, with \
         the number of pairs. A pace controller's cycle compares two such stretches, so this is \
         the spread of its cycles with nothing changing, by the length of their halves; beside \
         inference, it includes what inference adds to it.\n\n\
         | scenario | windows | {} |\n|---|---|{}\n{}\n{}",
        stretches.join(" | "),
        "---|".repeat(STRETCHES_S.len()),
        rows.join("\n"),
        judging_line(&kept(Scenario::Alone)),
    )
}

/// Each scenario's step times, its windows' one after another, as a JSON array of ms in
/// `dir`/`stem`-steps-`scenario`.json: the recordings `enforcer replay-pace` reads (training
/// alone's as the job with offline held back, another scenario's as the job beside it). The
/// files written.
pub(super) fn write_recordings(
    windows: &[Window],
    dir: &std::path::Path,
    stem: &str,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context as _;
    let mut written = Vec::new();
    for scenario in Scenario::ALL {
        let steps: Vec<f64> = windows
            .iter()
            .filter(|w| w.scenario == scenario)
            .flat_map(|w| w.step_ms.iter().copied())
            .collect();
        if steps.is_empty() {
            continue;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{stem}-steps-{}.json", scenario.name()));
        std::fs::write(&path, serde_json::to_string(&steps)?)
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_pace_has_no_spread_and_a_bursty_one_less_over_longer_stretches() {
        // 10 steps a second, evenly (the first shorter, so that no step ends on a stretch's
        // edge): every stretch holds the same count.
        let mut steady = vec![100.0; 600];
        steady[0] = 50.0;
        let (spread, pairs) = adjacent_ratio_spread(&[&steady], 2.0).unwrap();
        assert!(spread < 1e-9, "{spread}");
        // 59.95 s: 29 whole stretches, 28 pairs.
        assert_eq!(pairs, 28);
        // Bursts: five quick steps, then one that waits for the next batch (5 × 30 ms and
        // 450 ms), so a short stretch's count depends on how many bursts it caught.
        let bursty: Vec<f64> = (0..600)
            .map(|i| if i % 6 == 5 { 450.0 } else { 30.0 })
            .collect();
        let short = adjacent_ratio_spread(&[&bursty], 1.0).unwrap().0;
        let long = adjacent_ratio_spread(&[&bursty], 8.0).unwrap().0;
        assert!(short > 0.1, "{short}");
        assert!(long < short / 3.0, "{long} against {short}");
    }

    /// A window of `scenario` that kept `step_ms`; nothing else of it is read here.
    fn window(scenario: Scenario, step_ms: Vec<f64>) -> Window {
        let text = serde_json::json!({
            "scenario": scenario, "round": 0, "throughput": 10.0, "counts_images": false,
            "step_ms_p50": 100.0, "step_ms_p99": 100.0, "training_cpus": 1.0, "online": null,
            "offline_items_per_s": null, "cpus_left_idle": 1.0, "steal_pct": 0.0,
            "reserved_cores_p50": null, "offline_paused_pct": null, "enforcer_cpu_pct": null,
            "enforcer_rss_mib": null, "sensor_running_cpus": null, "replay": null,
            "step_ms": step_ms,
        });
        serde_json::from_value(text).unwrap()
    }

    #[test]
    fn every_scenario_that_kept_its_steps_gets_a_row_but_the_controllers() {
        let mut steady = vec![100.0; 600];
        steady[0] = 50.0;
        let bursty: Vec<f64> = (0..600)
            .map(|i| if i % 6 == 5 { 450.0 } else { 30.0 })
            .collect();
        let text = markdown(&[
            window(Scenario::Alone, steady.clone()),
            window(Scenario::Alone, steady.clone()),
            window(Scenario::Reamer, bursty),
            window(Scenario::ReamerByPace, steady),
            window(Scenario::PlainCfs, Vec::new()),
        ]);
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].starts_with("| scenario | windows | 1 s | 2 s |"),
            "{text}"
        );
        // Training alone, two windows at an even pace: no spread at any stretch.
        assert!(
            rows[1].starts_with("| training alone | 2 | 0.0% ("),
            "{text}"
        );
        assert!(rows[2].starts_with(&format!("| {} | 1 | ", Scenario::Reamer.label())));
        assert!(!text.contains(Scenario::ReamerByPace.label()), "{text}");
        assert!(!text.contains(Scenario::PlainCfs.label()), "{text}");
        // What judging ε takes comes from training alone's spread (none here: two cycles).
        assert!(
            text.contains("2 s halves, 2 cycles in 0.2 min; 4 s halves, 2 cycles"),
            "{text}"
        );
    }

    #[test]
    fn a_comparison_needs_cycles_as_the_square_of_its_spread_over_epsilon() {
        // The VM's cycles, about 2% at 2 s halves: 16 cycles of 6 s.
        let (cycles, minutes) = cycles_to_judge(0.02, 2.0);
        assert_eq!(cycles, 16);
        assert!((minutes - 1.6).abs() < 1e-9, "{minutes}");
        // The server job's, 15% at 2 s halves: 865 cycles, nearly an hour and a half.
        assert_eq!(cycles_to_judge(0.15, 2.0).0, 865);
        // Halves of 16 s that spread by 4%: 62 cycles of 34 s.
        let (cycles, minutes) = cycles_to_judge(0.04, 16.0);
        assert_eq!(cycles, 62);
        assert!((minutes - 62.0 * 34.0 / 60.0).abs() < 1e-9, "{minutes}");
        // No spread still takes the two cycles an interval needs.
        assert_eq!(cycles_to_judge(0.0, 1.0).0, 2);
    }

    #[test]
    fn each_scenarios_steps_are_written_as_one_recording_in_window_order() {
        let dir = std::env::temp_dir().join(format!("reamer-steps-{}", std::process::id()));
        let written = write_recordings(
            &[
                window(Scenario::Alone, vec![10.0, 20.0]),
                window(Scenario::ReamerByPace, vec![5.0]),
                window(Scenario::Alone, vec![30.0]),
                window(Scenario::PlainCfs, Vec::new()),
            ],
            &dir,
            "server-pace",
        )
        .unwrap();
        assert_eq!(written.len(), 2, "{written:?}");
        let alone = std::fs::read_to_string(dir.join("server-pace-steps-alone.json")).unwrap();
        assert_eq!(alone, "[10.0,20.0,30.0]");
        assert!(dir.join("server-pace-steps-reamer_by_pace.json").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn too_few_pairs_give_no_figure_and_no_windows_no_paragraph() {
        let steps = vec![100.0; 30];
        // 3 s: three stretches of 1 s, two pairs.
        assert_eq!(adjacent_ratio_spread(&[&steps], 1.0), None);
        assert_eq!(markdown(&[]), "");
    }
}
