//! Training's pace against itself: from the step times of the windows where training ran
//! alone, how far its pace over one stretch of time differs from its pace over the next, by
//! the stretch's length. A pace controller's cycle compares two such stretches (the level's
//! half and the held half), so this is what its cycles read with nothing changing: on the
//! server the ResNet-50 job's reported steps gave cycles of about 2 s halves that spread by 9
//! to 20%, and whether longer halves narrow that, and how fast, decides how long a comparison
//! that can judge 1% must be (docs/experiments/2026-11-27-pace-steps-server.md).

use super::{Scenario, report::Window};

/// The stretches the paragraph gives, s.
const STRETCHES_S: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 16.0];
/// Fewer pairs than this give no spread worth a figure.
const MIN_PAIRS: usize = 3;

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

/// A paragraph under the table: the spread for each of `STRETCHES_S`, from the alone windows
/// that kept their step times; empty where none did (runs saved before they were kept).
pub(super) fn markdown(windows: &[Window]) -> String {
    let alone: Vec<&[f64]> = windows
        .iter()
        .filter(|w| w.scenario == Scenario::Alone && !w.step_ms.is_empty())
        .map(|w| w.step_ms.as_slice())
        .collect();
    if alone.is_empty() {
        return String::new();
    }
    let figures: Vec<String> = STRETCHES_S
        .iter()
        .map(|&stretch| match adjacent_ratio_spread(&alone, stretch) {
            Some((spread, pairs)) => {
                format!("{stretch:.0} s, {:.1}% ({pairs} pairs)", spread * 100.0)
            }
            None => format!("{stretch:.0} s, too few pairs"),
        })
        .collect();
    format!(
        "\nTraining's pace against itself, from the step times of its {} alone window{}: the \
         pace over one stretch (the steps that ended in it) over the pace over the next, its \
         spread (standard deviation) by the stretches' length: {}. A pace controller's cycle \
         compares two such stretches, so this is the spread of its cycles with nothing \
         changing, by the length of their halves.\n",
        alone.len(),
        if alone.len() == 1 { "" } else { "s" },
        figures.join("; ")
    )
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

    #[test]
    fn too_few_pairs_give_no_figure_and_no_windows_no_paragraph() {
        let steps = vec![100.0; 30];
        // 3 s: three stretches of 1 s, two pairs.
        assert_eq!(adjacent_ratio_spread(&[&steps], 1.0), None);
        assert_eq!(markdown(&[]), "");
    }
}
