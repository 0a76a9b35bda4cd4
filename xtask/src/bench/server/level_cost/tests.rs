//! Unit tests of `level_cost`.

use super::*;

/// The controller's changes and the job's step times (ms) for `stretches` of (level, seconds,
/// steps a second) laid end to end from `start_s` (before the timed part where negative); the
/// step times begin at the timed part's start.
fn run(start_s: f64, stretches: &[(&str, f64, f64)]) -> (Vec<HarvestStep>, Vec<f64>) {
    let (mut steps, mut step_ms) = (Vec::new(), Vec::new());
    let mut at = start_s;
    for &(level, seconds, pace) in stretches {
        steps.push(HarvestStep::to(at, level, "probe"));
        let end = at + seconds;
        // The job's steps at this pace over the part of the stretch in the timed part.
        let mut t = at.max(0.0);
        while t + 1.0 / pace <= end + 1e-9 {
            t += 1.0 / pace;
            step_ms.push(1000.0 / pace);
        }
        at = end;
    }
    (steps, step_ms)
}

#[test]
fn a_levels_halves_are_read_against_the_held_half_before_each() {
    // Held at 10 steps a second, `policy` at 9: 0.9 in every cycle.
    let mut stretches = Vec::new();
    for _ in 0..5 {
        stretches.push(("held", 4.0, 10.0));
        stretches.push(("policy", 4.0, 9.0));
    }
    stretches.push(("held", 4.0, 10.0));
    let (steps, step_ms) = run(0.0, &stretches);
    let halves = halves(&steps, &step_ms);
    // The last held half is the one the window's end cut.
    assert_eq!(halves.len(), 10, "{halves:?}");
    let by_level = ratios_by_level(&halves);
    assert_eq!(by_level.len(), 1);
    let (level, ratios) = &by_level[0];
    assert_eq!(level, "policy");
    assert_eq!(ratios.len(), 5);
    for ratio in ratios {
        assert!((ratio - 0.9).abs() < 0.04, "{ratios:?}");
    }
}

#[test]
fn each_level_half_is_read_against_the_held_half_just_before_it_alone() {
    // Held, policy, held, policy, training_cores (no held half before it), held, quarter.
    let halves: Vec<Half> = [
        ("held", 10.0),
        ("policy", 9.0),
        ("held", 12.0),
        ("policy", 6.0),
        ("training_cores", 5.0),
        ("held", 8.0),
        ("quarter", 8.0),
    ]
    .into_iter()
    .map(|(level, pace)| Half {
        level: level.to_owned(),
        pace,
    })
    .collect();
    let by_level = ratios_by_level(&halves);
    assert_eq!(
        by_level,
        [
            ("policy".to_owned(), vec![0.9, 0.5]),
            ("quarter".to_owned(), vec![1.0]),
        ]
    );
}

#[test]
fn halves_before_the_timed_part_and_the_last_one_are_left_out() {
    let (steps, step_ms) = run(
        -8.0,
        &[
            ("training_cores", 4.0, 10.0),
            ("held", 4.0, 10.0),
            ("policy", 4.0, 10.0),
            ("held", 4.0, 10.0),
            ("policy", 20.0, 10.0),
        ],
    );
    let halves = halves(&steps, &step_ms);
    let levels: Vec<&str> = halves.iter().map(|h| h.level.as_str()).collect();
    assert_eq!(levels, ["policy", "held"]);
}

#[test]
fn an_interval_needs_three_halves_and_takes_students_t() {
    assert_eq!(
        mean_and_interval(&[0.9, 1.0]),
        "0.950 over 2 halves, too few for an interval"
    );
    // Standard deviation 0.05, t(2) 4.30 from the tables: ±0.124.
    assert_eq!(
        mean_and_interval(&[0.9, 0.95, 1.0]),
        "0.950 [0.826, 1.074] over 3 halves"
    );
    let ratios = [0.9, 0.95, 1.0, 0.9, 0.95, 1.0, 0.9, 0.95, 1.0, 0.95];
    // Standard deviation 0.0408, t(9) 2.26: ±0.029.
    assert_eq!(
        mean_and_interval(&ratios),
        "0.950 [0.921, 0.979] over 10 halves"
    );
}
