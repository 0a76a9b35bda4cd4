//! Unit tests of `report`.

use super::*;
use crate::bench::common::{
    harvest::{HarvestStep, HarvestSteps},
    verdict::Target,
};

fn window(scenario: Scenario, round: usize, throughput: f64, offline: Option<f64>) -> Window {
    Window {
        scenario,
        round,
        throughput,
        counts_images: true,
        step_ms_p50: 100.0,
        step_ms_p99: 150.0,
        training_cpus: 2.6,
        online: offline.map(|_| LoadReport {
            sent: 1000,
            within_slo: 995,
            p50_ms: Some(8.0),
            p99_ms: Some(40.0),
        }),
        offline_items_per_s: offline,
        cpus_left_idle: 3.0,
        steal_pct: 0.0,
        reserved_cores_p50: scenario.reamer().then_some(4.0),
        offline_paused_pct: scenario.reamer().then_some(0.0),
        enforcer_cpu_pct: scenario.reamer().then_some(1.0),
        enforcer_rss_mib: scenario.reamer().then_some(20.0),
        sensor_running_cpus: None,
        replay: None,
        confined: None,
        harvest: None,
        step_ms: Vec::new(),
    }
}

fn replay_summary(running_p50: f64, reserved_p50: f64, paused_at_half: usize) -> ReplaySummary {
    ReplaySummary {
        intervals: 300,
        cpus: 16,
        running_cpus_p50: running_p50,
        running_cpus_p90: running_p50 * 3.0,
        demand_cpus_p50: running_p50,
        demand_cpus_p90: running_p50 * 3.0,
        reserved_cores_p50: reserved_p50,
        reserved_cores_p90: reserved_p50 + 1.0,
        offline_paused_pct: 0.0,
        paused_at_half_or_less: paused_at_half,
        short_pct: 20.0,
        decisions: 12,
    }
}

fn measured(windows: Vec<Window>) -> Measured {
    Measured {
        training: "test".to_owned(),
        stand_in: false,
        rounds: 3,
        seconds: 25.0,
        online_rate: 150.0,
        cpus: 16,
        engine: "tract".to_owned(),
        one_training_process: true,
        pace_lead_s: 48.5,
        windows,
    }
}

#[test]
fn ratios_are_paired_within_a_round_and_a_miss_is_never_hidden() {
    let mut windows = Vec::new();
    // Alone's pace drifts from round to round; each scenario keeps its ratio to it.
    for (round, alone) in [1000.0, 1100.0, 900.0].into_iter().enumerate() {
        windows.push(window(Scenario::Alone, round, alone, None));
        windows.push(window(Scenario::PlainCfs, round, alone * 0.7, Some(2600.0)));
        windows.push(window(
            Scenario::StaticPartition,
            round,
            alone * 0.995,
            Some(1500.0),
        ));
        windows.push(window(Scenario::Reamer, round, alone * 0.97, Some(2000.0)));
        // Training alone again, watched: no inference, so no rival of reamer's.
        windows.push(window(Scenario::AloneObserved, round, alone, None));
    }
    let figures = figures(&measured(windows));
    let reamer = figures
        .iter()
        .find(|f| f.scenario == Scenario::Reamer)
        .unwrap();
    let pct = reamer.training_pct.unwrap();
    assert!((pct.median - 97.0).abs() < 1e-9, "{pct:?}");
    assert!((pct.low - 97.0).abs() < 1e-9 && (pct.high - 97.0).abs() < 1e-9);
    let offline = reamer.offline_pct_of_cfs.unwrap();
    assert!((offline.median - 2000.0 / 2600.0 * 100.0).abs() < 1e-9);
    assert_eq!(reamer.online_within_slo_pct, Some(99.5));

    let targets = targets(&figures);
    // Reamer's four, then the observed scenario's three.
    assert_eq!(targets.len(), 7);
    assert!(!targets[0].met, "97% of alone misses 99%: {:?}", targets[0]);
    assert!(targets[1].met && targets[2].met);
    // The static partition keeps training at 99.5% but does less offline work: reamer is
    // ahead of it.
    assert!(targets[3].met, "{:?}", targets[3]);
    assert!(targets[3].result.contains("ahead of static partition"));
    assert!(!targets[3].result.contains("observed"), "{:?}", targets[3]);
    let text = markdown(
        &measured(Vec::new()),
        &figures,
        "cargo xtask bench",
        "test machine",
        "server-tradeoff.svg",
    );
    assert!(text.contains("**missed**"), "{text}");
}

/// The machine line of a server run, stamped with its date and build: the plot's title
/// must hold it.
const LONG_MACHINE: &str = "Linux 6.18.44-fc-v657-gpu, 16 × Intel(R) Xeon(R) Processor, \
                            126 GiB (run 2026-11-26, build bc6b052-dirty)";

#[test]
fn the_plot_has_a_point_for_each_scenario_with_inference_and_reads_cleanly() {
    let mut windows = Vec::new();
    for (round, alone) in [1000.0, 1100.0, 900.0].into_iter().enumerate() {
        windows.push(window(Scenario::Alone, round, alone, None));
        windows.push(window(
            Scenario::PlainCfs,
            round,
            alone * 0.82,
            Some(2600.0),
        ));
        windows.push(window(
            Scenario::OfflineCpuIdle,
            round,
            alone * 0.85,
            Some(2500.0),
        ));
        windows.push(window(
            Scenario::StaticPartition,
            round,
            alone * 0.99,
            Some(1200.0),
        ));
        // The frontier: less of the machine for inference, less of training's pace lost.
        for (scenario, cpus, pace, items) in [
            (Scenario::OfflineCpuIdleQuarter, "12-15", 0.97, 900.0),
            (Scenario::OfflineCpuIdleHalf, "8-15", 0.93, 1700.0),
            (Scenario::OfflineCpuIdleThreeQuarters, "4-15", 0.88, 2300.0),
        ] {
            let mut confined = window(scenario, round, alone * pace, Some(items));
            confined.confined = Some(Confined {
                cpus: cpus.to_owned(),
                smt: Some(false),
            });
            windows.push(confined);
        }
        windows.push(window(Scenario::Reamer, round, alone * 0.985, Some(1900.0)));
        windows.push(window(
            Scenario::ReamerOfflineNotPaused,
            round,
            alone * 0.95,
            Some(2300.0),
        ));
        windows.push(window(
            Scenario::ReamerByPace,
            round,
            alone * 0.99,
            Some(2100.0),
        ));
        windows.push(window(Scenario::AloneObserved, round, alone, None));
        windows.push(window(Scenario::AloneSensed, round, alone, None));
    }
    let measured = measured(windows);
    let figures = figures(&measured);
    let canvas = super::super::plot::tradeoff(&figures, LONG_MACHINE, false);
    assert_eq!(canvas.problems(), Vec::<String>::new());
    let labels: Vec<&str> = canvas.texts().iter().map(|t| t.text.as_str()).collect();
    let traded = Scenario::ALL
        .into_iter()
        .filter(|&s| s == Scenario::Alone || s.inference());
    for scenario in traded {
        let label = scenario.label().replace('`', "");
        assert!(labels.contains(&label.as_str()), "{label} in {labels:?}");
    }
    // Training alone under a daemon runs no inference: not a trade.
    assert!(!labels.iter().any(|l| l.contains("does not enforce")));

    // The table says where each confined scenario put inference, in the table's order.
    let text = markdown(
        &measured,
        &figures,
        "cargo xtask bench",
        "test machine",
        "server-tradeoff.svg",
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("Inference confined"))
        .unwrap_or_else(|| panic!("{text}"));
    let quarter =
        line.find("upper quarter of the cores, offline in a `cpu.idle` group: CPUs 12-15");
    let three = line.find("three quarters of the cores, offline in a `cpu.idle` group: CPUs 4-15");
    assert!(
        quarter.is_some() && three.is_some() && quarter < three,
        "{line}"
    );
    assert!(line.contains("no SMT siblings"), "{line}");
}

#[test]
fn a_run_saved_before_confinement_was_recorded_still_reads() {
    let mut value = serde_json::to_value(window(Scenario::StaticPartition, 0, 1.0, None)).unwrap();
    value.as_object_mut().unwrap().remove("confined");
    let read: Window = serde_json::from_value(value).unwrap();
    assert_eq!(read.confined, None);
    assert_eq!(confined_markdown(&[read]), "");
}

#[test]
fn an_interval_reaching_below_the_target_is_not_resolved() {
    let mut windows = Vec::new();
    for (round, ratio) in [0.995, 0.999, 0.97, 1.0, 0.992].into_iter().enumerate() {
        windows.push(window(Scenario::Alone, round, 1000.0, None));
        windows.push(window(Scenario::PlainCfs, round, 700.0, Some(2600.0)));
        windows.push(window(
            Scenario::Reamer,
            round,
            1000.0 * ratio,
            Some(2500.0),
        ));
    }
    let targets = targets(&figures(&measured(windows)));
    assert!(!targets[0].met, "{:?}", targets[0]);
    assert!(
        targets[0].result.contains("not resolved"),
        "{:?}",
        targets[0]
    );
}

#[test]
fn the_pace_controller_is_held_to_ninety_percent_of_the_best_scenario_that_keeps_training() {
    let run = |by_pace_offline: f64| {
        let mut windows = Vec::new();
        for (round, alone) in [1000.0, 1100.0].into_iter().enumerate() {
            windows.push(window(Scenario::Alone, round, alone, None));
            // Keeps training at 99.5%: the best of those that keep it.
            let quarter = Scenario::OfflineCpuIdleQuarter;
            windows.push(window(quarter, round, alone * 0.995, Some(2000.0)));
            // More offline, but training at 97%: no rival.
            windows.push(window(Scenario::Reamer, round, alone * 0.97, Some(2500.0)));
            let by_pace = Scenario::ReamerByPace;
            windows.push(window(by_pace, round, alone * 0.995, Some(by_pace_offline)));
        }
        let targets = targets(&figures(&measured(windows)));
        targets
            .into_iter()
            .find(|t| {
                t.target
                    .starts_with("reamer by pace: offline ≥ 90% of the most")
            })
            .unwrap_or_else(|| panic!("no such target"))
    };
    let near = run(1850.0);
    assert!(near.met, "{near:?}");
    assert!(
        near.result.contains("92% of the best: ") && near.result.contains("(2000 items/s)"),
        "{near:?}"
    );
    let short = run(1700.0);
    assert!(!short.met, "{short:?}");
    assert!(short.result.contains("85% of the best"), "{short:?}");
}

/// The server's part 3 of 2026-11-28, cut before round 2's `alone`: every ratio came from
/// round 1 alone, and its one-sample "interval" read as met.
#[test]
fn one_round_paired_has_no_interval_and_meets_no_target() {
    let mut windows = vec![window(Scenario::Alone, 0, 1000.0, None)];
    for round in 0..2 {
        windows.push(window(Scenario::Reamer, round, 977.0, Some(2200.0)));
        windows.push(window(Scenario::ReamerByPace, round, 1011.0, Some(1400.0)));
    }
    let run = measured(windows);
    let figures = figures(&run);
    let by_pace = figures
        .iter()
        .find(|f| f.scenario == Scenario::ReamerByPace)
        .unwrap();
    let pct = by_pace.training_pct.unwrap();
    assert_eq!((pct.pairs, pct.interval()), (1, None), "{pct:?}");
    let targets = targets(&figures);
    let by_pace: Vec<&Target> = targets
        .iter()
        .filter(|t| t.target.starts_with("reamer by pace:"))
        .collect();
    assert!(!by_pace[0].met, "101.1% of alone once: {:?}", by_pace[0]);
    assert_eq!(
        by_pace[0].result,
        "101.1% (one round paired, no interval): not resolved"
    );
    assert!(!by_pace[3].met, "{:?}", by_pace[3]);
    assert!(
        by_pace[3].result.ends_with("not resolved"),
        "{:?}",
        by_pace[3]
    );
    let text = markdown(&run, &figures, "c", "m", "server-pace-tradeoff.svg");
    assert!(
        text.contains("| 101.1% (one round paired, no interval) |"),
        "{text}"
    );
}

#[test]
fn the_observed_reservation_and_pause_come_from_the_observe_trace() {
    let path = std::env::temp_dir().join(format!("reamer-observed-{}.jsonl", std::process::id()));
    std::fs::write(
        &path,
        "{\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":2,\"offline_paused\":false}\n\
         {\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":4,\"offline_paused\":true}\n\
         {\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":3,\"offline_paused\":false}\n\
         {\"seconds\":0.2,\"jobs\":[],\"counters\":{},\"sensor_ns_per_run\":null,\"reserved_cpus\":3,\"offline_paused\":false}\n",
    )
    .unwrap();
    let observed = Observed::from_trace(&path, 0..4);
    assert_eq!(observed.reserved_cores_p50, Some(3.0));
    assert_eq!(observed.offline_paused_pct, Some(25.0));
    assert_eq!(
        observed.running_cpus_mean,
        Some(0.0),
        "no training job ran in these intervals"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_sensors_running_cpus_are_a_time_weighted_mean_over_the_timed_lines_only() {
    let path = std::env::temp_dir().join(format!("reamer-timed-{}.jsonl", std::process::id()));
    let line = |seconds: f64, running: &[f64]| {
        let jobs: Vec<String> = running
            .iter()
            .map(|r| format!("{{\"name\":\"train\",\"running_cpus\":{r}}}"))
            .collect();
        format!(
            "{{\"seconds\":{seconds},\"jobs\":[{}],\"counters\":{{}}}}\n",
            jobs.join(",")
        )
    };
    // Before the timed part (left out), then 0.1 s at 2+1 CPUs and 0.3 s at 1, then after.
    let text = [
        line(0.1, &[12.0]),
        line(0.1, &[2.0, 1.0]),
        line(0.3, &[1.0]),
        line(0.1, &[14.0]),
    ]
    .concat();
    std::fs::write(&path, text).unwrap();
    let observed = Observed::from_trace(&path, 1..3);
    let mean = observed.running_cpus_mean.unwrap();
    assert!(
        (mean - (0.1 * 3.0 + 0.3 * 1.0) / 0.4).abs() < 1e-9,
        "{mean}"
    );
    assert_eq!(
        observed.reserved_cores_p50, None,
        "an observe-only daemon reserves nothing"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn each_observed_round_is_paired_with_its_own_alone_and_every_replay_must_meet_the_targets() {
    let mut windows = Vec::new();
    for (round, (alone, ratio)) in [(1000.0, 0.99), (1100.0, 1.0), (900.0, 0.98)]
        .into_iter()
        .enumerate()
    {
        windows.push(window(Scenario::Alone, round, alone, None));
        let mut observed = window(Scenario::AloneObserved, round, alone * ratio, None);
        observed.sensor_running_cpus = Some(2.6 * 1.01);
        // The last round's replay reserves 6 cores where training ran on 2.8 at the median.
        observed.replay = Some(match round {
            2 => replay_summary(2.8, 6.0, 0),
            _ => replay_summary(2.6, 4.0, 0),
        });
        windows.push(observed);
        windows.push(window(Scenario::AloneSensed, round, alone * 0.995, None));
    }
    let figures = figures(&measured(windows));
    let observed = figures
        .iter()
        .find(|f| f.scenario == Scenario::AloneObserved)
        .unwrap();
    let ratios: Vec<f64> = observed
        .observed_rounds
        .iter()
        .map(|r| r.training_pct.unwrap())
        .collect();
    assert_eq!(ratios.len(), 3);
    for (got, want) in ratios.iter().zip([99.0, 100.0, 98.0]) {
        assert!((got - want).abs() < 1e-9, "{ratios:?}");
    }
    let targets = targets(&figures);
    // No reamer window: the sensed scenario's target, then the observed scenario's three.
    assert_eq!(targets.len(), 4, "{targets:?}");
    assert!(
        targets[0].met,
        "99.5% of alone in every round: {:?}",
        targets[0]
    );
    assert!(
        targets[0].target.starts_with("under a daemon"),
        "{:?}",
        targets[0]
    );
    let targets = &targets[1..];
    assert!(
        !targets[0].met,
        "98% in one round reaches below 99%: {:?}",
        targets[0]
    );
    assert!(
        !targets[1].met,
        "one round's replay misses: {:?}",
        targets[1]
    );
    assert!(
        targets[1].result.contains("round 3: 6 ≤ 4.80"),
        "{:?}",
        targets[1]
    );
    assert!(targets[2].met, "{:?}", targets[2]);
    let text = markdown(
        &measured(Vec::new()),
        &figures,
        "cargo xtask bench",
        "test",
        "server-tradeoff.svg",
    );
    assert!(
        text.contains("| 3 | 98.0% | 2.60 | 2.63 (1.010) | 2.80 / 8.40 | 6 / 7 |"),
        "{text}"
    );
}

#[test]
fn a_run_saved_before_one_process_served_every_window_says_its_job_started_afresh() {
    let mut value =
        serde_json::to_value(measured(vec![window(Scenario::Alone, 0, 1.0, None)])).unwrap();
    let report = |run: &Measured| markdown(run, &figures(run), "c", "m", "server-tradeoff.svg");
    let served = report(&serde_json::from_value(value.clone()).unwrap());
    assert!(
        served.contains("one training process through the whole run"),
        "{served}"
    );
    value
        .as_object_mut()
        .unwrap()
        .remove("one_training_process");
    let old: Measured = serde_json::from_value(value).unwrap();
    assert!(!old.one_training_process);
    assert!(report(&old).contains("the training job started afresh in each window"));
}

#[test]
fn a_run_saved_after_a_window_reads_back_to_the_same_report() {
    use crate::bench::saved::{About, Saved};
    let mut observed = window(Scenario::AloneObserved, 0, 990.0, None);
    observed.sensor_running_cpus = Some(2.6);
    observed.replay = Some(replay_summary(2.6, 4.0, 0));
    let windows = vec![
        window(Scenario::Alone, 0, 1000.0, None),
        window(Scenario::PlainCfs, 0, 700.0, Some(2600.0)),
        window(Scenario::Reamer, 0, 990.0, Some(2000.0)),
        observed,
    ];
    let path =
        std::env::temp_dir().join(format!("reamer-server-saved-{}.json", std::process::id()));
    Saved {
        about: About {
            command: "xtask bench --only server".to_owned(),
            machine: "16 CPUs".to_owned(),
            quick: false,
        },
        planned_windows: 8,
        run: measured(windows.clone()),
    }
    .write(&path)
    .unwrap();
    let back = Saved::<Measured>::load(&path, "server").unwrap();
    std::fs::remove_file(&path).unwrap();
    let report = |run: &Measured| markdown(run, &figures(run), "c", "m", "server-tradeoff.svg");
    assert_eq!(report(&back.run), report(&measured(windows)));
}

#[test]
fn a_round_without_its_replay_does_not_meet_the_replay_targets() {
    let mut windows = vec![window(Scenario::Alone, 0, 1000.0, None)];
    let mut observed = window(Scenario::AloneObserved, 0, 1000.0, None);
    observed.replay = Some(replay_summary(2.6, 3.0, 0));
    windows.push(observed);
    windows.push(window(Scenario::Alone, 1, 1000.0, None));
    windows.push(window(Scenario::AloneObserved, 1, 1000.0, None));
    let targets = targets(&figures(&measured(windows)));
    assert!(!targets[1].met && !targets[2].met, "{targets:?}");
}

#[test]
fn the_pace_controller_gets_its_own_targets_and_its_steps_under_the_table() {
    let mut windows = Vec::new();
    for (round, alone) in [1000.0, 1100.0].into_iter().enumerate() {
        windows.push(window(Scenario::Alone, round, alone, None));
        windows.push(window(Scenario::PlainCfs, round, alone * 0.8, Some(2600.0)));
        windows.push(window(Scenario::Reamer, round, alone * 0.97, Some(1500.0)));
        let mut by_pace = window(Scenario::ReamerByPace, round, alone * 0.995, Some(2000.0));
        let step = HarvestStep::to;
        by_pace.harvest = Some(HarvestSteps {
            signal: Some("gpu_busy".to_owned()),
            steps: vec![
                step(-3.0, "held", "probe"),
                step(2.0, "policy", "trial"),
                step(11.0, "unpaused", "kept"),
            ],
        });
        windows.push(by_pace);
    }
    let mut run = measured(windows);
    // Timed after `--server-pace-settle 120` and the 3.5 s lead.
    run.pace_lead_s = 123.5;
    let figures = figures(&run);
    let targets = targets(&figures);
    let by_pace: Vec<&Target> = targets
        .iter()
        .filter(|t| t.target.starts_with("reamer by pace:"))
        .collect();
    assert_eq!(by_pace.len(), 4, "{targets:?}");
    assert!(
        by_pace[0].met,
        "99.5% of alone in both rounds: {:?}",
        by_pace[0]
    );
    // Ahead of reamer's defaults, which do not keep training at 99%, so are no rival.
    assert!(
        by_pace[3].result.contains("no other scenario"),
        "{:?}",
        by_pace[3]
    );
    let text = markdown(&run, &figures, "c", "m", "server-pace-tradeoff.svg");
    assert!(
        text.contains(
            "- round 1: signal `gpu_busy`; held (probe, -3 s) → policy (trial, 2 s) → unpaused \
             (kept, 11 s)"
        ),
        "{text}"
    );
    assert!(
        text.contains("Its daemon started 124 s before the timed part"),
        "{text}"
    );
}

#[test]
fn a_run_saved_before_the_pace_settle_option_keeps_its_lead() {
    let mut value = serde_json::to_value(measured(Vec::new())).unwrap();
    value.as_object_mut().unwrap().remove("pace_lead_s");
    let read: Measured = serde_json::from_value(value).unwrap();
    assert_eq!(read.pace_lead_s, 48.5);
}

#[test]
fn the_controllers_own_halves_give_each_levels_cost_under_its_paragraph() {
    let mut windows = vec![window(Scenario::Alone, 0, 1000.0, None)];
    let mut by_pace = window(Scenario::ReamerByPace, 0, 1000.0, Some(2000.0));
    let steps = [
        (0.0, "held"),
        (4.0, "policy"),
        (8.0, "held"),
        (12.0, "policy"),
        (16.0, "held"),
    ]
    .into_iter()
    .map(|(at_s, level)| HarvestStep::to(at_s, level, "probe"))
    .collect();
    by_pace.harvest = Some(HarvestSteps {
        signal: Some("progress".to_owned()),
        steps,
    });
    // 10 steps a second throughout: every level as fast as held.
    by_pace.step_ms = vec![100.0; 200];
    windows.push(by_pace);
    let run = measured(windows);
    let text = markdown(&run, &figures(&run), "c", "m", "server-pace-tradeoff.svg");
    // A step ending on a half's edge falls in one half or the next: within a step of 1.
    let line = text
        .lines()
        .find(|l| l.starts_with("What each level cost training"))
        .expect(&text);
    let mean: f64 = line.split("`policy` ").nth(1).unwrap()[..5]
        .parse()
        .unwrap();
    assert!((mean - 1.0).abs() < 0.04, "{line}");
    assert!(
        line.contains("over 2 halves, too few for an interval"),
        "{line}"
    );
    assert!(line.contains("own halves in its timed window:"), "{line}");
}
