//! Figures side by side as horizontal bars: one row per scenario, one panel per figure. The
//! label column is as wide as the longest label, and each figure is written past the end of
//! its bar and of its interval, in room the panel keeps for the widest one.

use super::canvas::{Anchor, Canvas, Rect, Style};
use super::text::width;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bar {
    pub(crate) value: f64,
    pub(crate) interval: Option<[f64; 2]>,
}

pub(crate) struct Panel {
    pub(crate) title: String,
    /// A figure as it is written past its bar.
    pub(crate) format: fn(f64) -> String,
    /// One per row; None where the figure does not apply.
    pub(crate) bars: Vec<Option<Bar>>,
    /// Log scale (reaction times span µs to seconds).
    pub(crate) log: bool,
}

pub(crate) struct Row {
    pub(crate) label: String,
    /// Drawn in reamer's colour.
    pub(crate) highlight: bool,
}

const ROW: f64 = 24.0;
const TOP: f64 = 52.0;
const BAR_AREA: f64 = 160.0;
const GAP: f64 = 28.0;
const TEXT: Style = Style::plain(11.0);

pub(crate) fn draw(title: &str, rows: &[Row], panels: &[Panel]) -> Canvas {
    let label_width = rows
        .iter()
        .map(|r| width(&r.label, TEXT.size, false))
        .fold(0.0, f64::max)
        + 16.0;
    // Each panel: its bars, then room for its widest figure, at least its title's width.
    let widths: Vec<(f64, f64)> = panels
        .iter()
        .map(|panel| {
            let widest = panel
                .bars
                .iter()
                .map(|b| match b {
                    Some(b) => width(&(panel.format)(b.value), TEXT.size, false),
                    None => width("n/a", TEXT.size, false),
                })
                .fold(0.0, f64::max)
                + 6.0;
            let title = width(&panel.title, TEXT.size, true);
            (BAR_AREA.max(title - widest), widest)
        })
        .collect();
    let panels_width: f64 = widths.iter().map(|(bars, text)| bars + text + GAP).sum();
    let canvas_width = (8.0 + label_width + panels_width)
        .max(width(title, 13.0, true) + 16.0)
        .ceil();
    let height = TOP + rows.len() as f64 * ROW + 12.0;
    let mut canvas = Canvas::new(canvas_width, height);
    canvas.text(8.0, 20.0, title, Style::plain(13.0).bold());
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW + ROW / 2.0 + 4.0;
        canvas.text(8.0, y, &row.label, TEXT);
    }
    let mut x0 = 8.0 + label_width;
    for (panel, &(usable, text_room)) in panels.iter().zip(&widths) {
        canvas.text(x0, TOP - 12.0, &panel.title, TEXT.bold());
        let scale = |v: f64| if panel.log { v.max(1.0).log10() } else { v };
        let values: Vec<f64> = panel
            .bars
            .iter()
            .flatten()
            .flat_map(|b| {
                let [low, high] = b.interval.unwrap_or([b.value, b.value]);
                [b.value, low, high]
            })
            .filter(|v| v.is_finite())
            .map(scale)
            .collect();
        let low = values.iter().copied().fold(0.0, f64::min);
        let high = values.iter().copied().fold(0.0, f64::max).max(low + 1e-9);
        let at = |v: f64| x0 + (scale(v) - low) / (high - low) * usable;
        let zero = at(if panel.log { 1.0 } else { 0.0 });
        canvas.line(
            (zero, TOP),
            (zero, TOP + rows.len() as f64 * ROW),
            "#888888",
            1.0,
        );
        for (i, (row, bar)) in rows.iter().zip(&panel.bars).enumerate() {
            let top = TOP + i as f64 * ROW + 5.0;
            let baseline = top + 11.0;
            let Some(bar) = bar.filter(|b| b.value.is_finite()) else {
                canvas.text(zero + 4.0, baseline, "n/a", TEXT.filled("#888888"));
                continue;
            };
            let (a, b) = (zero.min(at(bar.value)), zero.max(at(bar.value)));
            let colour = if row.highlight { "#d62f2a" } else { "#5b8def" };
            canvas.rect(
                Rect {
                    left: a,
                    top,
                    right: a + (b - a).max(1.0),
                    bottom: top + ROW - 10.0,
                },
                colour,
            );
            let mut end = b.max(a + 1.0);
            if let Some([lo, hi]) = bar.interval.filter(|i| i.iter().all(|v| v.is_finite())) {
                let mid = top + (ROW - 10.0) / 2.0;
                canvas.line((at(lo), mid), (at(hi), mid), "black", 1.0);
                canvas.line((at(lo), mid - 3.0), (at(lo), mid + 3.0), "black", 1.0);
                canvas.line((at(hi), mid - 3.0), (at(hi), mid + 3.0), "black", 1.0);
                end = end.max(at(hi)).max(at(lo));
            }
            canvas.text(
                end + 4.0,
                baseline,
                &(panel.format)(bar.value),
                TEXT.anchored(Anchor::Start),
            );
        }
        x0 += usable + text_room + GAP;
    }
    canvas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_and_figures_past_wide_intervals_overlap_nothing() {
        let rows: Vec<Row> = [
            "training alone",
            "reamer, offline on training's cores",
            "static partition, heavy online",
        ]
        .iter()
        .map(|l| Row {
            label: l.to_string(),
            highlight: l.starts_with("reamer"),
        })
        .collect();
        let panels = vec![
            Panel {
                title: "training slowdown, % (95% interval)".to_owned(),
                format: |v| format!("{v:.1}%"),
                bars: vec![
                    None,
                    Some(Bar {
                        value: -0.8,
                        interval: Some([-3.0, 27.0]),
                    }),
                    Some(Bar {
                        value: 27.1,
                        interval: Some([25.1, 27.9]),
                    }),
                ],
                log: false,
            },
            Panel {
                title: "reaction p99, µs (log)".to_owned(),
                format: |v| format!("{v:.0} µs"),
                bars: vec![
                    None,
                    Some(Bar {
                        value: 220.0,
                        interval: None,
                    }),
                    Some(Bar {
                        value: 537_000.0,
                        interval: None,
                    }),
                ],
                log: true,
            },
        ];
        let canvas = draw("reamer co-location: a machine", &rows, &panels);
        assert_eq!(canvas.problems(), Vec::<String>::new());
        let svg = canvas.finish();
        assert!(svg.contains(">537000 µs</text>") && svg.contains(">-0.8%</text>"));
    }
}
