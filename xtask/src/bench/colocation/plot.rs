//! The co-location run's two plots:
//!
//! - the trade-off: offline inference's share of the idle CPU against training's pace, the
//!   fixed settings joined as the frontier and reamer's points marked;
//! - the figures the trade-off leaves out, as bars: online requests within the SLO and the
//!   reaction's p99.

use crate::bench::colocation::{report::Figures, scenario::Scenario};
use crate::bench::plot::{
    bars::{self, Bar, Panel, Row},
    canvas::Canvas,
    tradeoff::{self, Kind, Point, Tradeoff},
};

/// The file names the plots are written to, beside benchmarks.md.
pub const TRADEOFF_FILE: &str = "colocation-tradeoff.svg";
pub const BARS_FILE: &str = "colocation-online-reaction.svg";

/// Every scenario named, so that a new one gets its kind chosen, not defaulted.
fn kind(scenario: Scenario) -> Kind {
    match scenario {
        Scenario::Alone => Kind::Reference,
        Scenario::PlainCfs
        | Scenario::StaticPartition
        | Scenario::LowShares
        | Scenario::StaticPartitionHeavyOnline => Kind::Fixed,
        Scenario::UtilizationPoller | Scenario::PsiTrigger => Kind::Controller,
        Scenario::Reamer
        | Scenario::ReamerOfflineNotPaused
        | Scenario::ReamerOfflineOnTrainingCores
        | Scenario::ReamerTrainingCoresQuarter
        | Scenario::ReamerTrainingCoresHalf
        | Scenario::ReamerByPace
        | Scenario::ReamerTract
        | Scenario::ReamerObserved
        | Scenario::ReamerHeavyOnline => Kind::Reamer,
    }
}

/// Training's pace in % of alone, from the paired slowdown: `100 − slowdown`, its interval
/// turned over with it.
fn pace(scenario: Scenario, f: &Figures) -> (f64, Option<[f64; 2]>) {
    if scenario == Scenario::Alone {
        return (100.0, None);
    }
    let [low, high] = f.training_slowdown_ci95_pct;
    (
        100.0 - f.training_slowdown_pct,
        Some([100.0 - high, 100.0 - low]),
    )
}

pub fn tradeoff(figures: &[(Scenario, Figures)], machine: &str) -> Canvas {
    let points = figures
        .iter()
        .map(|&(scenario, ref f)| {
            let (y, y_interval) = pace(scenario, f);
            Point {
                label: scenario.label().to_owned(),
                kind: kind(scenario),
                // Training alone runs no offline work.
                x: f.offline_idle_capacity_pct.unwrap_or(0.0),
                x_interval: None,
                y,
                y_interval,
                other_load: scenario.heavy_online(),
            }
        })
        .collect();
    tradeoff::draw(&Tradeoff {
        title: format!("reamer co-location, the trade-off: {machine}"),
        x_label: "offline inference, % of the idle CPU (median of the windows)".to_owned(),
        y_label: "training's pace, % of alone (median of the rounds, 95% interval)".to_owned(),
        target_y: 99.0,
        other_load: "heavy online load (off the frontier)".to_owned(),
        points,
    })
}

pub fn bars(figures: &[(Scenario, Figures)], machine: &str) -> Canvas {
    let rows: Vec<Row> = figures
        .iter()
        .map(|(scenario, _)| Row {
            label: scenario.label().to_owned(),
            highlight: scenario.setup() == Scenario::Reamer,
        })
        .collect();
    let bar = |value: Option<f64>| {
        value.map(|value| Bar {
            value,
            interval: None,
        })
    };
    let panels = vec![
        Panel {
            title: "online requests within the SLO, %".to_owned(),
            format: |v| format!("{v:.1}%"),
            bars: figures
                .iter()
                .map(|(_, f)| bar(f.online_slo_attainment_pct))
                .collect(),
            log: false,
        },
        Panel {
            title: "reaction p99, µs (log scale)".to_owned(),
            // The reactive baselines react in hundreds of milliseconds.
            format: |us| {
                if us >= 10_000.0 {
                    format!("{:.0} ms", us / 1e3)
                } else {
                    format!("{us:.0} µs")
                }
            },
            bars: figures
                .iter()
                .map(|(_, f)| bar(f.reaction_us_p99))
                .collect(),
            log: true,
        },
    ];
    bars::draw(
        &format!("reamer co-location, online and reaction: {machine}"),
        &rows,
        &panels,
    )
}
