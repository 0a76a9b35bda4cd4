//! The trade-off at a glance: one point per scenario, offline inference harvested (x) against
//! training's pace (y, % of alone, with its interval), the fixed settings' frontier joined, and
//! the band where training keeps its target. A point above and to the right of the frontier
//! beats every fixed setting; one inside the band keeps training whole.

use super::canvas::{Anchor, Canvas, Rect, Style, text_box};
use super::text::{ASCENT_EM, DESCENT_EM};

/// What kind of setting a point is: the marker it gets, and whether it joins the frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Training alone: the pace every other point is a share of, and no offline work.
    Reference,
    /// A setting fixed in advance (plain CFS, a partition, a weight): the frontier's points.
    Fixed,
    /// A controller that reacts to what it measures (a poller, a PSI trigger).
    Controller,
    Reamer,
}

impl Kind {
    fn colour(self) -> &'static str {
        match self {
            Kind::Reference => "#222222",
            Kind::Fixed => "#3b6fd8",
            Kind::Controller => "#7a7a7a",
            Kind::Reamer => "#d62f2a",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) label: String,
    pub(crate) kind: Kind,
    pub(crate) x: f64,
    pub(crate) x_interval: Option<[f64; 2]>,
    pub(crate) y: f64,
    pub(crate) y_interval: Option<[f64; 2]>,
    /// Measured under another load than the rest: drawn hollow, and never on the frontier.
    pub(crate) other_load: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Tradeoff {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    /// Training's target, % of alone: the band above it is shaded.
    pub(crate) target_y: f64,
    /// What the hollow markers' other load is, for the legend.
    pub(crate) other_load: String,
    pub(crate) points: Vec<Point>,
}

const WIDTH: f64 = 760.0;
const PLOT_HEIGHT: f64 = 380.0;
const TOP: f64 = 56.0;
const RIGHT_MARGIN: f64 = 24.0;
const TICK: Style = Style::plain(10.0).filled("#444444");
const LABEL: Style = Style::plain(11.0);
const MARKER_RADIUS: f64 = 5.0;
const BAND_FILL: &str = "#e2f3e2";
/// Distances from a point at which its label is tried, px: the first ring touches the
/// marker, the others need a leader line back to it.
const RINGS: [f64; 10] = [
    7.0, 16.0, 28.0, 44.0, 64.0, 90.0, 120.0, 160.0, 210.0, 270.0,
];

/// The indices of the points on the frontier of the fixed settings (training alone among
/// them): those no other fixed setting beats on both axes, by offline harvest.
pub(crate) fn frontier(points: &[Point]) -> Vec<usize> {
    let fixed = |p: &Point| matches!(p.kind, Kind::Reference | Kind::Fixed) && !p.other_load;
    let mut on: Vec<usize> = (0..points.len())
        .filter(|&i| fixed(&points[i]))
        .filter(|&i| {
            let p = &points[i];
            !points
                .iter()
                .any(|q| fixed(q) && q.x >= p.x && q.y >= p.y && (q.x > p.x || q.y > p.y))
        })
        .collect();
    on.sort_by(|&a, &b| points[a].x.total_cmp(&points[b].x));
    on
}

/// A step of 1, 2, 2.5 or 5 times a power of ten that cuts `span` into about `count` parts.
fn nice_step(span: f64, count: f64) -> f64 {
    let raw = (span / count).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// An axis: its range in data units, rounded out to whole steps, and its ticks.
struct Axis {
    low: f64,
    high: f64,
    step: f64,
}

impl Axis {
    fn covering(low: f64, high: f64, count: f64) -> Self {
        let step = nice_step(high - low, count);
        Self {
            low: (low / step).floor() * step,
            high: (high / step).ceil() * step,
            step,
        }
    }

    fn ticks(&self) -> Vec<f64> {
        let count = ((self.high - self.low) / self.step).round() as usize;
        (0..=count)
            .map(|i| self.low + i as f64 * self.step)
            .collect()
    }

    fn format(&self, value: f64) -> String {
        let digits = if self.step.fract().abs() < 1e-9 {
            0
        } else if (self.step * 10.0).fract().abs() < 1e-9 {
            1
        } else {
            2
        };
        format!("{value:.digits$}")
    }
}

/// A line from a point to its label, set away from it.
type Segment = ((f64, f64), (f64, f64));

/// Where a label goes: its baseline's anchor point, its style, and its leader line.
struct Placement {
    at: (f64, f64),
    style: Style,
    leader: Option<Segment>,
}

/// What a legend entry shows before its text.
enum Symbol {
    Marker { kind: Kind, hollow: bool },
    Frontier,
    Band,
}

/// Places labels where nothing else is: markers, error bars, other labels, the leader lines
/// already drawn, and the frontier where it can.
struct Placer {
    area: Rect,
    obstacles: Vec<Rect>,
    leaders: Vec<Segment>,
    frontier: Vec<(f64, f64)>,
}

impl Placer {
    /// The box and baseline point of `text` set at `ring` px from (`cx`, `cy`), towards
    /// `angle` (radians, y down).
    fn candidate(cx: f64, cy: f64, ring: f64, angle: f64, text: &str) -> (Rect, (f64, f64), Style) {
        let (dx, dy) = (angle.cos(), angle.sin());
        let (px, py) = (cx + ring * dx, cy + ring * dy);
        let anchor = if dx > 0.3 {
            Anchor::Start
        } else if dx < -0.3 {
            Anchor::End
        } else {
            Anchor::Middle
        };
        let style = LABEL.anchored(anchor);
        let size = style.size;
        let baseline = if dy < -0.3 {
            py - DESCENT_EM * size
        } else if dy > 0.3 {
            py + ASCENT_EM * size
        } else {
            py + (ASCENT_EM - DESCENT_EM) * size / 2.0
        };
        (text_box(px, baseline, text, style), (px, baseline), style)
    }

    /// The point of `rect` nearest to (`x`, `y`).
    fn nearest(rect: &Rect, x: f64, y: f64) -> (f64, f64) {
        (
            x.clamp(rect.left, rect.right),
            y.clamp(rect.top, rect.bottom),
        )
    }

    fn crosses_frontier(&self, rect: &Rect) -> bool {
        self.frontier
            .windows(2)
            .any(|pair| rect.crossed_by(pair[0], pair[1]))
    }

    /// Where `text` goes for the marker at (`cx`, `cy`), whose own boxes are `own`; None
    /// where nothing fits.
    fn place(&mut self, cx: f64, cy: f64, own: &[Rect], text: &str) -> Option<Placement> {
        // Right, left, and the diagonals first: a label beside its point reads best.
        let degrees = [
            0.0, 180.0, -35.0, 35.0, -145.0, 145.0, -90.0, 90.0, -60.0, 60.0, -120.0, 120.0, -15.0,
            15.0, -165.0, 165.0,
        ];
        for avoid_frontier in [true, false] {
            for ring in RINGS {
                for degree in degrees {
                    let angle = f64::to_radians(degree);
                    let (rect, at, style) = Self::candidate(cx, cy, ring, angle, text);
                    let padded = rect.grown(2.0);
                    if !rect.within(&self.area)
                        || self.obstacles.iter().any(|o| o.overlaps(&padded))
                        || self.leaders.iter().any(|&(a, b)| padded.crossed_by(a, b))
                        || (avoid_frontier && self.crosses_frontier(&rect))
                    {
                        continue;
                    }
                    let leader = (ring > RINGS[0]).then(|| {
                        let end = Self::nearest(&rect, cx, cy);
                        let length = (end.0 - cx).hypot(end.1 - cy).max(1e-9);
                        let start = (
                            cx + (end.0 - cx) / length * (MARKER_RADIUS + 1.0),
                            cy + (end.1 - cy) / length * (MARKER_RADIUS + 1.0),
                        );
                        (start, end)
                    });
                    // A leader must not run through another point or label; a point drawn
                    // over this one (the leader starts inside it) cannot be gone around.
                    if let Some((a, b)) = leader
                        && self
                            .obstacles
                            .iter()
                            .filter(|o| !own.contains(o) && !o.holds(a))
                            .any(|o| o.crossed_by(a, b))
                    {
                        continue;
                    }
                    self.obstacles.push(padded);
                    if let Some(segment) = leader {
                        self.leaders.push(segment);
                    }
                    return Some(Placement { at, style, leader });
                }
            }
        }
        None
    }
}

fn marker(canvas: &mut Canvas, kind: Kind, hollow: bool, x: f64, y: f64) {
    let colour = kind.colour();
    let fill = if hollow { "white" } else { colour };
    let r = MARKER_RADIUS;
    let shape = match kind {
        Kind::Reference => format!(
            "<polygon points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"",
            x,
            y - r - 1.0,
            x + r + 1.0,
            y,
            x,
            y + r + 1.0,
            x - r - 1.0,
            y
        ),
        Kind::Controller => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"",
            x - r + 0.5,
            y - r + 0.5,
            2.0 * r - 1.0,
            2.0 * r - 1.0
        ),
        Kind::Fixed | Kind::Reamer => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\""),
    };
    canvas.element(&format!(
        "{shape} fill=\"{fill}\" stroke=\"{colour}\" stroke-width=\"1.5\"/>"
    ));
}

/// The plot, drawn; `Canvas::problems` says whether every text can be read.
pub(crate) fn draw(plot: &Tradeoff) -> Canvas {
    let title_style = Style::plain(13.0).bold();
    let width = WIDTH
        .max(super::text::width(&plot.title, 13.0, true) + 16.0)
        .max(super::text::width(&plot.x_label, LABEL.size, false) + 120.0)
        .ceil();
    let mut canvas = Canvas::new(width, 0.0);
    canvas.text(8.0, 20.0, &plot.title, title_style);

    let points = &plot.points;
    let lows = |f: fn(&Point) -> (f64, Option<[f64; 2]>)| {
        points
            .iter()
            .flat_map(|p| {
                let (v, interval) = f(p);
                let [a, b] = interval.unwrap_or([v, v]);
                [v, a, b]
            })
            .filter(|v| v.is_finite())
            .collect::<Vec<_>>()
    };
    let xs = lows(|p| (p.x, p.x_interval));
    let ys = lows(|p| (p.y, p.y_interval));
    let fold =
        |values: &[f64], start: f64, f: fn(f64, f64) -> f64| values.iter().copied().fold(start, f);
    // Room past the rightmost point, for its label.
    let (x_low, x_high) = (fold(&xs, 0.0, f64::min), fold(&xs, 100.0, f64::max));
    let x_axis = Axis::covering(x_low, x_high + (x_high - x_low) * 0.05, 8.0);
    let (y_low, y_high) = (
        fold(&ys, plot.target_y, f64::min),
        fold(&ys, 100.0, f64::max),
    );
    let pad = ((y_high - y_low) * 0.06).max(0.5);
    let y_axis = Axis::covering(y_low - pad, y_high + pad, 7.0);

    let tick_width = y_axis
        .ticks()
        .iter()
        .map(|&t| super::text::width(&y_axis.format(t), TICK.size, false))
        .fold(0.0, f64::max);
    let area = Rect {
        left: 16.0 + tick_width,
        top: TOP,
        right: width - RIGHT_MARGIN,
        bottom: TOP + PLOT_HEIGHT,
    };
    let px = |x: f64| {
        area.left + (x - x_axis.low) / (x_axis.high - x_axis.low) * (area.right - area.left)
    };
    let py = |y: f64| {
        area.bottom - (y - y_axis.low) / (y_axis.high - y_axis.low) * (area.bottom - area.top)
    };
    canvas.text(area.left, TOP - 12.0, &plot.y_label, LABEL);

    // The band where training keeps its target.
    let band_top = py(y_axis.high);
    let band_bottom = py(plot.target_y).min(area.bottom);
    canvas.rect(
        Rect {
            left: area.left,
            top: band_top,
            right: area.right,
            bottom: band_bottom,
        },
        BAND_FILL,
    );
    for tick in y_axis.ticks() {
        let y = py(tick);
        canvas.line((area.left, y), (area.right, y), "#e4e4e4", 1.0);
        canvas.text(
            area.left - 6.0,
            y + 3.5,
            &y_axis.format(tick),
            TICK.anchored(Anchor::End),
        );
    }
    for tick in x_axis.ticks() {
        let x = px(tick);
        canvas.line((x, area.top), (x, area.bottom), "#e4e4e4", 1.0);
        canvas.text(
            x,
            area.bottom + 15.0,
            &x_axis.format(tick),
            TICK.anchored(Anchor::Middle),
        );
    }
    canvas.line(
        (area.left, area.top),
        (area.left, area.bottom),
        "#444444",
        1.0,
    );
    canvas.line(
        (area.left, area.bottom),
        (area.right, area.bottom),
        "#444444",
        1.0,
    );
    canvas.text(
        (area.left + area.right) / 2.0,
        area.bottom + 33.0,
        &plot.x_label,
        LABEL.anchored(Anchor::Middle),
    );

    // The frontier, then the intervals, then the points over them.
    let on_frontier = frontier(points);
    let frontier_line: Vec<(f64, f64)> = on_frontier
        .iter()
        .map(|&i| (px(points[i].x), py(points[i].y)))
        .collect();
    if frontier_line.len() >= 2 {
        let path: Vec<String> = frontier_line
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        canvas.element(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" \
             stroke-dasharray=\"5 3\"/>",
            path.join(" "),
            Kind::Fixed.colour()
        ));
    }
    let mut placer = Placer {
        area: area.grown(-2.0),
        obstacles: Vec::new(),
        leaders: Vec::new(),
        frontier: frontier_line,
    };
    // Each point's own boxes: its marker and its bars, which its leader may start in.
    let mut own: Vec<Vec<Rect>> = Vec::new();
    for p in points {
        let (x, y) = (px(p.x), py(p.y));
        let mut boxes = vec![Rect::around(x, y, MARKER_RADIUS + 2.0)];
        let colour = if p.kind == Kind::Reamer {
            "#a02020"
        } else {
            "#555555"
        };
        if let Some([low, high]) = p.y_interval {
            let (top, bottom) = (py(high), py(low));
            canvas.line((x, top), (x, bottom), colour, 1.2);
            canvas.line((x - 4.0, top), (x + 4.0, top), colour, 1.2);
            canvas.line((x - 4.0, bottom), (x + 4.0, bottom), colour, 1.2);
            boxes.push(Rect {
                left: x - 4.0,
                top,
                right: x + 4.0,
                bottom,
            });
        }
        if let Some([low, high]) = p.x_interval {
            let (left, right) = (px(low), px(high));
            canvas.line((left, y), (right, y), colour, 1.2);
            canvas.line((left, y - 4.0), (left, y + 4.0), colour, 1.2);
            canvas.line((right, y - 4.0), (right, y + 4.0), colour, 1.2);
            boxes.push(Rect {
                left,
                top: y - 4.0,
                right,
                bottom: y + 4.0,
            });
        }
        placer.obstacles.extend(boxes.iter().copied());
        own.push(boxes);
    }
    // reamer's points are drawn last, over the others.
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&i| points[i].kind == Kind::Reamer);
    for &i in &order {
        let p = &points[i];
        marker(&mut canvas, p.kind, p.other_load, px(p.x), py(p.y));
    }
    // reamer's labels are placed first, nearest their points; a label that fits nowhere
    // becomes a number beside its point and a line under the plot.
    let mut footnotes = Vec::new();
    order.reverse();
    for &i in &order {
        let p = &points[i];
        let (x, y) = (px(p.x), py(p.y));
        let label = match placer.place(x, y, &own[i], &p.label) {
            Some(found) => Some((found, p.label.clone())),
            None => {
                let number = format!("{}", footnotes.len() + 1);
                footnotes.push(format!("{number}: {}", p.label));
                placer
                    .place(x, y, &own[i], &number)
                    .map(|found| (found, number))
            }
        };
        if let Some((placement, text)) = label {
            if let Some((from, to)) = placement.leader {
                canvas.line(from, to, "#999999", 0.8);
            }
            canvas.text(placement.at.0, placement.at.1, &text, placement.style);
        }
    }

    // The legend, in rows under the axis's title.
    let mut entries: Vec<(Symbol, String)> = Vec::new();
    let has = |kind: Kind| points.iter().any(|p| p.kind == kind && !p.other_load);
    let solid = |kind| Symbol::Marker {
        kind,
        hollow: false,
    };
    if has(Kind::Reference) {
        entries.push((solid(Kind::Reference), "training alone".to_owned()));
    }
    if has(Kind::Fixed) {
        entries.push((solid(Kind::Fixed), "fixed setting".to_owned()));
    }
    if on_frontier.len() >= 2 {
        entries.push((
            Symbol::Frontier,
            "frontier of the fixed settings".to_owned(),
        ));
    }
    if has(Kind::Controller) {
        entries.push((solid(Kind::Controller), "controller".to_owned()));
    }
    if has(Kind::Reamer) {
        entries.push((solid(Kind::Reamer), "reamer".to_owned()));
    }
    if let Some(p) = points.iter().find(|p| p.other_load) {
        let hollow = Symbol::Marker {
            kind: p.kind,
            hollow: true,
        };
        entries.push((hollow, plot.other_load.clone()));
    }
    entries.push((
        Symbol::Band,
        format!("target: training ≥ {}% of alone", plot.target_y),
    ));
    let (mut x, mut y) = (area.left, area.bottom + 58.0);
    for (symbol, text) in entries {
        let needed = 22.0 + super::text::width(&text, LABEL.size, false) + 18.0;
        if x + needed > width - 8.0 {
            x = area.left;
            y += 20.0;
        }
        match symbol {
            Symbol::Marker { kind, hollow } => marker(&mut canvas, kind, hollow, x + 7.0, y - 4.0),
            Symbol::Frontier => canvas.element(&format!(
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" \
                 stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>",
                x,
                y - 4.0,
                x + 16.0,
                y - 4.0,
                Kind::Fixed.colour()
            )),
            Symbol::Band => canvas.rect(
                Rect {
                    left: x,
                    top: y - 10.0,
                    right: x + 16.0,
                    bottom: y + 2.0,
                },
                BAND_FILL,
            ),
        }
        canvas.text(x + 22.0, y, &text, LABEL);
        x += needed;
    }
    for note in footnotes {
        y += 18.0;
        canvas.text(area.left, y, &note, LABEL);
    }
    canvas.height = y + 16.0;
    canvas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(label: &str, kind: Kind, x: f64, y: f64) -> Point {
        Point {
            label: label.to_owned(),
            kind,
            x,
            x_interval: None,
            y,
            y_interval: Some([y - 1.0, y + 1.5]),
            other_load: false,
        }
    }

    fn plot(points: Vec<Point>) -> Tradeoff {
        Tradeoff {
            title: "reamer co-location: Linux 6.18, 2 × AMD EPYC, 24 GiB".to_owned(),
            x_label: "offline inference, % of the idle CPU".to_owned(),
            y_label: "training's pace, % of alone (median, 95% interval)".to_owned(),
            target_y: 99.0,
            other_load: "heavy online load".to_owned(),
            points,
        }
    }

    #[test]
    fn the_frontier_joins_the_fixed_settings_no_other_fixed_setting_beats_on_both_axes() {
        let mut heavy = point("static, heavy", Kind::Fixed, 95.0, 99.5);
        heavy.other_load = true;
        let points = vec![
            point("alone", Kind::Reference, 0.0, 100.0),
            point("plain CFS", Kind::Fixed, 94.0, 90.0),
            point("static partition", Kind::Fixed, 84.0, 74.0),
            point("low shares", Kind::Fixed, 95.0, 92.0),
            point("PSI", Kind::Controller, 99.0, 99.9),
            point("reamer", Kind::Reamer, 98.0, 99.9),
            heavy,
        ];
        // Plain CFS and the partition are beaten by low shares; controllers, reamer and the
        // other load are not fixed settings of this load.
        assert_eq!(frontier(&points), [0, 3]);
    }

    #[test]
    fn ticks_fall_on_round_steps_covering_the_data() {
        let axis = Axis::covering(71.3, 102.4, 7.0);
        assert_eq!(axis.step, 5.0);
        assert_eq!((axis.low, axis.high), (70.0, 105.0));
        assert_eq!(axis.ticks().len(), 8);
        assert_eq!(Axis::covering(98.6, 101.2, 7.0).format(99.5), "99.5");
    }

    /// The co-location run's twelve scenarios as they fell in one recorded run, crowded at
    /// the top: every label is placed, none overlaps another or leaves the canvas.
    #[test]
    fn crowded_points_each_get_a_label_that_overlaps_nothing() {
        let mut heavy_static = point("static partition, heavy online", Kind::Fixed, 71.0, 72.9);
        heavy_static.other_load = true;
        let mut heavy_reamer = point("reamer, heavy online", Kind::Reamer, 16.0, 94.9);
        heavy_reamer.other_load = true;
        let points = vec![
            point("training alone", Kind::Reference, 0.0, 100.0),
            point("plain CFS", Kind::Fixed, 94.0, 90.3),
            point("static partition", Kind::Fixed, 84.0, 73.9),
            point("low shares", Kind::Fixed, 95.0, 92.7),
            point("1 s util. poller", Kind::Controller, 51.0, 91.1),
            point("PSI 500 ms", Kind::Controller, 13.0, 95.3),
            point("reamer", Kind::Reamer, 28.0, 99.2),
            point("reamer, offline not paused", Kind::Reamer, 57.0, 98.1),
            point(
                "reamer, offline on training's cores",
                Kind::Reamer,
                91.0,
                99.4,
            ),
            point("reamer, observed at 10 Hz", Kind::Reamer, 27.0, 99.5),
            heavy_static,
            heavy_reamer,
        ];
        let canvas = draw(&plot(points.clone()));
        assert_eq!(canvas.problems(), Vec::<String>::new());
        for p in &points {
            assert!(
                canvas.texts().iter().any(|t| t.text == p.label),
                "{} has no label",
                p.label
            );
        }
        let svg = canvas.finish();
        assert!(svg.contains("<polyline"), "the frontier is drawn");
        assert!(svg.contains("target: training ≥ 99% of alone"));
    }

    /// Points piled on one spot still get labels, or numbers and lines under the plot.
    #[test]
    fn a_pile_of_points_is_labelled_or_numbered_without_overlaps() {
        let points: Vec<Point> = (0..24)
            .map(|i| {
                point(
                    &format!("scenario number {i} with a long name"),
                    Kind::Fixed,
                    50.0 + (i % 3) as f64 * 0.1,
                    95.0,
                )
            })
            .collect();
        let canvas = draw(&plot(points));
        assert_eq!(canvas.problems(), Vec::<String>::new());
        let labelled = (0..24)
            .filter(|i| {
                canvas
                    .texts()
                    .iter()
                    .any(|t| t.text.ends_with(&format!("number {i} with a long name")))
            })
            .count();
        assert_eq!(labelled, 24);
    }
}
