//! An SVG drawn by hand that knows where its text is: every text element is recorded with the
//! box it takes (from the font's widths), so that a plot can place labels where nothing else
//! is, and a test can check that no two texts overlap and none leaves the canvas.

use std::fmt::Write as _;

use super::text::{ASCENT_EM, DESCENT_EM, width};

/// The font every plot names: DejaVu Sans first, whose widths size the boxes (`text.rs`).
pub(crate) const FONT_FAMILY: &str = "DejaVu Sans, Arial, Helvetica, sans-serif";

/// An axis-aligned box in the canvas's pixels, y down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rect {
    pub(crate) left: f64,
    pub(crate) top: f64,
    pub(crate) right: f64,
    pub(crate) bottom: f64,
}

impl Rect {
    pub(crate) fn around(x: f64, y: f64, radius: f64) -> Self {
        Self {
            left: x - radius,
            top: y - radius,
            right: x + radius,
            bottom: y + radius,
        }
    }

    /// Whether the two share any area (touching edges do not).
    pub(crate) fn overlaps(&self, other: &Rect) -> bool {
        self.left < other.right
            && other.left < self.right
            && self.top < other.bottom
            && other.top < self.bottom
    }

    pub(crate) fn within(&self, outer: &Rect) -> bool {
        self.left >= outer.left
            && self.top >= outer.top
            && self.right <= outer.right
            && self.bottom <= outer.bottom
    }

    pub(crate) fn grown(&self, margin: f64) -> Self {
        Self {
            left: self.left - margin,
            top: self.top - margin,
            right: self.right + margin,
            bottom: self.bottom + margin,
        }
    }

    pub(crate) fn holds(&self, (x, y): (f64, f64)) -> bool {
        x >= self.left && x <= self.right && y >= self.top && y <= self.bottom
    }

    /// Whether the segment from `a` to `b` passes through the box (sampled every pixel: the
    /// segments here are leader lines a few tens of pixels long).
    pub(crate) fn crossed_by(&self, a: (f64, f64), b: (f64, f64)) -> bool {
        let steps = ((b.0 - a.0).hypot(b.1 - a.1)).ceil().max(1.0) as usize;
        (0..=steps).any(|i| {
            let t = i as f64 / steps as f64;
            let (x, y) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
            x > self.left && x < self.right && y > self.top && y < self.bottom
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn svg(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }

    /// The anchor an SVG's `text-anchor` names (the committed plots' test reads them back).
    #[cfg(test)]
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "start" => Some(Anchor::Start),
            "middle" => Some(Anchor::Middle),
            "end" => Some(Anchor::End),
            _ => None,
        }
    }
}

/// How a text is set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    pub(crate) size: f64,
    pub(crate) bold: bool,
    pub(crate) anchor: Anchor,
    pub(crate) fill: &'static str,
}

impl Style {
    pub(crate) const fn plain(size: f64) -> Self {
        Self {
            size,
            bold: false,
            anchor: Anchor::Start,
            fill: "black",
        }
    }

    pub(crate) const fn bold(self) -> Self {
        Self { bold: true, ..self }
    }

    pub(crate) const fn anchored(self, anchor: Anchor) -> Self {
        Self { anchor, ..self }
    }

    pub(crate) const fn filled(self, fill: &'static str) -> Self {
        Self { fill, ..self }
    }
}

/// The box `text` takes with its baseline's anchor point at (`x`, `y`).
pub(crate) fn text_box(x: f64, y: f64, text: &str, style: Style) -> Rect {
    let w = width(text, style.size, style.bold);
    let left = match style.anchor {
        Anchor::Start => x,
        Anchor::Middle => x - w / 2.0,
        Anchor::End => x - w,
    };
    Rect {
        left,
        top: y - ASCENT_EM * style.size,
        right: left + w,
        bottom: y + DESCENT_EM * style.size,
    }
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A text the canvas holds, and where.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) text: String,
    pub(crate) bounds: Rect,
}

/// Layout problems among `texts` on a canvas of `width` × `height`: pairs that overlap, and
/// texts that leave the canvas. Empty when every text can be read.
pub(crate) fn layout_problems(texts: &[Placed], width: f64, height: f64) -> Vec<String> {
    let canvas = Rect {
        left: 0.0,
        top: 0.0,
        right: width,
        bottom: height,
    };
    let mut problems = Vec::new();
    for (i, a) in texts.iter().enumerate() {
        if !a.bounds.within(&canvas) {
            problems.push(format!(
                "{:?} leaves the {width}×{height} canvas: {:?}",
                a.text, a.bounds
            ));
        }
        for b in &texts[i + 1..] {
            if a.bounds.overlaps(&b.bounds) {
                problems.push(format!("{:?} overlaps {:?}", a.text, b.text));
            }
        }
    }
    problems
}

/// An SVG being drawn.
pub(crate) struct Canvas {
    pub(crate) width: f64,
    pub(crate) height: f64,
    body: String,
    texts: Vec<Placed>,
}

impl Canvas {
    pub(crate) fn new(width: f64, height: f64) -> Self {
        Self {
            width,
            height,
            body: String::new(),
            texts: Vec::new(),
        }
    }

    /// Draws `text` and returns its box.
    pub(crate) fn text(&mut self, x: f64, y: f64, text: &str, style: Style) -> Rect {
        let bounds = text_box(x, y, text, style);
        let _ = writeln!(
            self.body,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{}\"{}{}{}>{}</text>",
            style.size,
            if style.bold {
                " font-weight=\"bold\""
            } else {
                ""
            },
            if style.anchor == Anchor::Start {
                String::new()
            } else {
                format!(" text-anchor=\"{}\"", style.anchor.svg())
            },
            if style.fill == "black" {
                String::new()
            } else {
                format!(" fill=\"{}\"", style.fill)
            },
            escape(text)
        );
        self.texts.push(Placed {
            text: text.to_owned(),
            bounds,
        });
        bounds
    }

    /// Any other element, written as given.
    pub(crate) fn element(&mut self, element: &str) {
        self.body.push_str(element);
        self.body.push('\n');
    }

    pub(crate) fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64) {
        self.element(&format!(
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{stroke}\" \
             stroke-width=\"{width}\"/>",
            from.0, from.1, to.0, to.1
        ));
    }

    pub(crate) fn rect(&mut self, rect: Rect, fill: &str) {
        self.element(&format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>",
            rect.left,
            rect.top,
            (rect.right - rect.left).max(0.0),
            (rect.bottom - rect.top).max(0.0)
        ));
    }

    #[cfg(test)]
    pub(crate) fn texts(&self) -> &[Placed] {
        &self.texts
    }

    pub(crate) fn problems(&self) -> Vec<String> {
        layout_problems(&self.texts, self.width, self.height)
    }

    /// The whole SVG.
    pub(crate) fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" \
             viewBox=\"0 0 {} {}\" font-family=\"{FONT_FAMILY}\" font-size=\"11\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{}</svg>\n",
            self.width, self.height, self.width, self.height, self.body
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_box_follows_its_anchor_and_the_checks_find_overlaps_and_escapes() {
        let style = Style::plain(10.0);
        let start = text_box(100.0, 50.0, "ab", style);
        let end = text_box(100.0, 50.0, "ab", style.anchored(Anchor::End));
        let middle = text_box(100.0, 50.0, "ab", style.anchored(Anchor::Middle));
        assert_eq!(start.left, 100.0);
        assert_eq!(end.right, 100.0);
        assert!((middle.left + middle.right - 200.0).abs() < 1e-9);
        assert!(start.top < 50.0 && start.bottom > 50.0);

        let mut canvas = Canvas::new(200.0, 100.0);
        canvas.text(10.0, 20.0, "first", style);
        assert!(canvas.problems().is_empty());
        canvas.text(12.0, 22.0, "second", style);
        canvas.text(190.0, 90.0, "off the edge", style);
        let problems = canvas.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("\"first\" overlaps \"second\""));
        assert!(problems[1].contains("leaves the 200×100 canvas"));
        assert!(canvas.finish().contains(">off the edge</text>"));
    }

    #[test]
    fn a_segment_crosses_a_box_only_through_its_inside() {
        let rect = Rect::around(50.0, 50.0, 10.0);
        assert!(rect.crossed_by((0.0, 50.0), (100.0, 50.0)));
        assert!(!rect.crossed_by((0.0, 0.0), (100.0, 0.0)));
        assert!(
            !rect.crossed_by((0.0, 60.0), (100.0, 60.0)),
            "along an edge"
        );
    }
}
