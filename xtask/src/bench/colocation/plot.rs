//! The co-location scenarios side by side, as an SVG: one panel per figure, one horizontal
//! bar per scenario, the slowdown with its 95% interval. Written by hand: four panels of bars
//! do not need a plotting crate.

use crate::bench::colocation::report::{Figures, Scenario};

const LABEL_WIDTH: f64 = 130.0;
const PANEL_WIDTH: f64 = 210.0;
const GAP: f64 = 20.0;
const ROW: f64 = 26.0;
const TOP: f64 = 48.0;

struct Panel {
    title: &'static str,
    unit: &'static str,
    value: fn(&Figures) -> Option<f64>,
    interval: fn(&Figures) -> Option<[f64; 2]>,
    /// Log scale (reaction times span µs to seconds).
    log: bool,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "training slowdown, % (95% CI)",
        unit: "%",
        value: |f| Some(f.training_slowdown_pct),
        interval: |f| Some(f.training_slowdown_ci95_pct),
        log: false,
    },
    Panel {
        title: "online requests within SLO, %",
        unit: "%",
        value: |f| f.online_slo_attainment_pct,
        interval: |_| None,
        log: false,
    },
    Panel {
        title: "offline, % of idle CPU",
        unit: "%",
        value: |f| f.offline_idle_capacity_pct,
        interval: |_| None,
        log: false,
    },
    Panel {
        title: "reaction p99, µs (log)",
        unit: " µs",
        value: |f| f.reaction_us_p99,
        interval: |_| None,
        log: true,
    },
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;")
}

pub fn svg(figures: &[(Scenario, Figures)], title: &str) -> String {
    let width = LABEL_WIDTH + PANELS.len() as f64 * (PANEL_WIDTH + GAP);
    let height = TOP + figures.len() as f64 * ROW + 20.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"8\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
        escape(title)
    );
    for (row, (scenario, _)) in figures.iter().enumerate() {
        let y = TOP + row as f64 * ROW + ROW / 2.0 + 4.0;
        out.push_str(&format!(
            "<text x=\"8\" y=\"{y}\">{}</text>\n",
            escape(scenario.label())
        ));
    }
    for (index, panel) in PANELS.iter().enumerate() {
        let x0 = LABEL_WIDTH + index as f64 * (PANEL_WIDTH + GAP);
        out.push_str(&format!(
            "<text x=\"{x0}\" y=\"{}\" font-weight=\"bold\">{}</text>\n",
            TOP - 10.0,
            escape(panel.title)
        ));
        let scale = |v: f64| if panel.log { v.max(1.0).log10() } else { v };
        let values: Vec<f64> = figures
            .iter()
            .flat_map(|(_, f)| {
                let interval = (panel.interval)(f).unwrap_or([f64::NAN; 2]);
                [
                    (panel.value)(f).unwrap_or(f64::NAN),
                    interval[0],
                    interval[1],
                ]
            })
            .filter(|v| v.is_finite())
            .map(scale)
            .collect();
        let low = values.iter().copied().fold(0.0, f64::min);
        let high = values.iter().copied().fold(0.0, f64::max).max(low + 1e-9);
        let (usable, text_room) = (PANEL_WIDTH - 50.0, 50.0);
        let at = |v: f64| x0 + (scale(v) - low) / (high - low) * usable;
        let zero = x0 + (0.0 - low) / (high - low) * usable;
        out.push_str(&format!(
            "<line x1=\"{zero}\" y1=\"{TOP}\" x2=\"{zero}\" y2=\"{}\" stroke=\"#888\"/>\n",
            TOP + figures.len() as f64 * ROW
        ));
        for (row, (scenario, f)) in figures.iter().enumerate() {
            let y = TOP + row as f64 * ROW + 5.0;
            let Some(value) = (panel.value)(f).filter(|v| v.is_finite()) else {
                out.push_str(&format!(
                    "<text x=\"{}\" y=\"{}\" fill=\"#888\">n/a</text>\n",
                    zero + 4.0,
                    y + 12.0
                ));
                continue;
            };
            let (a, b) = (zero.min(at(value)), zero.max(at(value)));
            let colour = if scenario.setup() == Scenario::Reamer {
                "#d9534f"
            } else {
                "#5b8def"
            };
            out.push_str(&format!(
                "<rect x=\"{a:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"{colour}\"/>\n",
                (b - a).max(1.0),
                ROW - 10.0
            ));
            if let Some([lo, hi]) = (panel.interval)(f).filter(|i| i.iter().all(|v| v.is_finite()))
            {
                let mid = y + (ROW - 10.0) / 2.0;
                out.push_str(&format!(
                    "<line x1=\"{:.1}\" y1=\"{mid}\" x2=\"{:.1}\" y2=\"{mid}\" stroke=\"black\"/>\n",
                    at(lo),
                    at(hi)
                ));
            }
            let digits = if value.abs() >= 100.0 { 0 } else { 1 };
            out.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{}\">{value:.digits$}{}</text>\n",
                (b + 3.0).min(x0 + usable + text_room - 45.0),
                y + 12.0,
                panel.unit
            ));
        }
    }
    out.push_str("</svg>\n");
    out
}
