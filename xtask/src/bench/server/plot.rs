//! The server run's trade-off: offline inference as a share of plain CFS's against training's
//! pace, both paired within a round, with their intervals; the fixed settings joined as the
//! frontier and reamer's points marked. Training alone under a daemon that does not enforce
//! runs no inference and measures the sensor's cost, not a trade: it is left out.

use super::{Scenario, report::ScenarioFigures};
use crate::bench::plot::{
    canvas::Canvas,
    tradeoff::{self, Kind, Point, Tradeoff},
};

/// The file name the plot of docs/benchmarks.md's `section` is written to, beside it:
/// `server-tradeoff.svg` for the frontier's section.
pub fn tradeoff_file(section: &str) -> String {
    format!("{section}-tradeoff.svg")
}

/// A scenario's place on the plot, from what runs in it: training alone is the reference,
/// reamer's scenarios are marked, every other one with inference is a fixed setting, and one
/// without inference (training alone under a daemon) is no trade.
fn kind(scenario: Scenario) -> Option<Kind> {
    if scenario == Scenario::Alone {
        Some(Kind::Reference)
    } else if !scenario.inference() {
        None
    } else if scenario.reamer() {
        Some(Kind::Reamer)
    } else {
        Some(Kind::Fixed)
    }
}

/// The plot of a run on `machine`; a run with a stand-in for the training job says that its
/// figures are not the server's.
pub fn tradeoff(figures: &[ScenarioFigures], machine: &str, stand_in: bool) -> Canvas {
    let points = figures
        .iter()
        .filter_map(|f| {
            let kind = kind(f.scenario)?;
            let (y, y_interval) = match (f.scenario, f.training_pct) {
                (Scenario::Alone, _) | (_, None) => (100.0, None),
                (_, Some(pct)) => (pct.median, pct.interval()),
            };
            let (x, x_interval) = match f.offline_pct_of_cfs {
                Some(pct) => (pct.median, pct.interval()),
                None => (0.0, None),
            };
            Some(Point {
                // The labels are Markdown in the table.
                label: f.label.replace('`', ""),
                kind,
                x,
                x_interval,
                y,
                y_interval,
                other_load: false,
            })
        })
        .collect();
    tradeoff::draw(&Tradeoff {
        title: if stand_in {
            format!(
                "the server benchmark with a stand-in for training, not the server's: {machine}"
            )
        } else {
            format!("reamer on the GPU server, the trade-off: {machine}")
        },
        x_label: "offline inference, % of its plain-CFS throughput (median of the rounds, 95% \
                  interval)"
            .to_owned(),
        y_label: "training's pace, % of alone (median of the rounds, 95% interval)".to_owned(),
        target_y: 99.0,
        other_load: String::new(),
        points,
    })
}
