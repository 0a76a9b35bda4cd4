//! Every plot committed under docs/, checked as a reader gets it: rendered by a real renderer
//! (librsvg's `rsvg-convert`, which `cargo xtask bootstrap` installs), and its text laid out
//! with no two boxes overlapping and none leaving the canvas.

use std::path::{Path, PathBuf};

use super::canvas::{Anchor, Placed, Style, layout_problems, text_box};
use crate::cargo::workspace_root;

fn svgs_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read docs/").flatten() {
        let path = entry.path();
        if path.is_dir() {
            svgs_under(&path, found);
        } else if path.extension().is_some_and(|e| e == "svg") {
            found.push(path);
        }
    }
}

/// The texts of an SVG the plots wrote, with their boxes: `x`, `y`, `font-size` (its own or
/// the root's), `font-weight` and `text-anchor`, as `Canvas::text` writes them.
fn texts_of(svg: &roxmltree::Document) -> Vec<Placed> {
    let root = svg.root_element();
    let number = |node: roxmltree::Node, name: &str| {
        node.attribute(name)
            .map(|v| v.parse::<f64>().unwrap_or_else(|_| panic!("{name}={v:?}")))
    };
    let default_size = number(root, "font-size").unwrap_or(16.0);
    svg.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            assert!(
                n.attribute("transform").is_none(),
                "a rotated text's box is not checked: write it level"
            );
            let text: String = n
                .descendants()
                .filter(|d| d.is_text())
                .map(|d| d.text().unwrap_or(""))
                .collect();
            let style = Style {
                size: number(n, "font-size").unwrap_or(default_size),
                bold: n.attribute("font-weight") == Some("bold"),
                anchor: n
                    .attribute("text-anchor")
                    .map_or(Anchor::Start, |a| Anchor::parse(a).expect("text-anchor")),
                fill: "black",
            };
            let bounds = text_box(
                number(n, "x").unwrap_or(0.0),
                number(n, "y").unwrap_or(0.0),
                &text,
                style,
            );
            Placed { text, bounds }
        })
        .collect()
}

#[test]
fn every_committed_plot_renders_and_no_text_overlaps_another_or_leaves_the_canvas() {
    let mut svgs = Vec::new();
    svgs_under(&workspace_root().join("docs"), &mut svgs);
    assert!(!svgs.is_empty(), "docs/ has no plot");
    for path in &svgs {
        let source = std::fs::read_to_string(path).unwrap();
        let svg = roxmltree::Document::parse(&source)
            .unwrap_or_else(|e| panic!("{}: not well-formed: {e}", path.display()));
        let root = svg.root_element();
        let size = |name: &str| -> f64 {
            root.attribute(name)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{}: no numeric {name}", path.display()))
        };
        let texts = texts_of(&svg);
        assert!(!texts.is_empty(), "{}: no text", path.display());
        let problems = layout_problems(&texts, size("width"), size("height"));
        assert!(problems.is_empty(), "{}: {problems:#?}", path.display());

        // 1400 px wide: a reader's screen, where the old plot's labels ran into its bars.
        let image = rendered(path, &["-w", "1400"]);
        assert_eq!(image.width, 1400, "{}", path.display());
        let expected = (1400.0 * size("height") / size("width")).round() as usize;
        let h = image.rows.len();
        assert!(
            h.abs_diff(expected) <= 1,
            "{}: {h} px high, not {expected}",
            path.display()
        );
    }
}

#[test]
fn a_text_box_read_back_from_an_svg_is_the_one_the_canvas_gave() {
    use super::canvas::Canvas;
    let mut canvas = Canvas::new(300.0, 100.0);
    let style = Style::plain(13.0).bold().anchored(Anchor::Middle);
    let written = canvas.text(150.0, 40.0, "reamer & <co-location>", style);
    canvas.text(10.0, 80.0, "a plain one", Style::plain(11.0));
    let source = canvas.finish();
    let svg = roxmltree::Document::parse(&source).unwrap();
    let texts = texts_of(&svg);
    assert_eq!(texts.len(), 2);
    assert_eq!(texts[0].text, "reamer & <co-location>");
    assert_eq!(texts[0].bounds, written);
    assert_eq!(texts[1].bounds.left, 10.0);
}

/// A rendered plot: its width in pixels, and its rows of RGBA.
struct Image {
    width: u32,
    rows: Vec<Vec<[u8; 4]>>,
}

/// Renders the SVG at `path` with `rsvg-convert` and `size` (its `-w` or `-z` options), as a
/// reader's viewer would.
fn rendered(path: &Path, size: &[&str]) -> Image {
    let output = std::env::temp_dir().join(format!(
        "reamer-plot-{}-{}.png",
        std::process::id(),
        path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot")
    ));
    let run = std::process::Command::new("rsvg-convert")
        .args(size)
        .arg("-o")
        .arg(&output)
        .arg(path)
        .output()
        .expect("rsvg-convert (`cargo xtask bootstrap` installs it: Debian's librsvg2-bin)");
    assert!(
        run.status.success(),
        "{}: rsvg-convert failed: {}",
        path.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&output).unwrap(),
    ));
    let mut reader = decoder
        .read_info()
        .unwrap_or_else(|e| panic!("{}: no PNG came out: {e}", path.display()));
    let mut buffer = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buffer).unwrap();
    assert_eq!(
        info.color_type,
        png::ColorType::Rgba,
        "rsvg-convert writes RGBA"
    );
    let rows = buffer[..info.buffer_size()]
        .chunks(info.line_size)
        .map(|row| row.chunks(4).map(|p| [p[0], p[1], p[2], p[3]]).collect())
        .collect();
    let _ = std::fs::remove_file(&output);
    Image {
        width: info.width,
        rows,
    }
}

/// The layout's boxes are only as good as its widths: each text, rendered alone, draws its
/// ink inside the box the layout gave it, and fills most of its width (a renderer that fell
/// back to another font would not).
#[test]
fn the_renderer_draws_each_text_within_the_box_the_layout_gives_it() {
    use super::canvas::Canvas;
    let zoom = 4;
    for (text, style) in [
        ("reamer, offline on training's cores", Style::plain(11.0)),
        (
            "training's pace, % of alone (median of the rounds, 95% interval)",
            Style::plain(11.0),
        ),
        (
            "online requests within the SLO, %",
            Style::plain(11.0).bold(),
        ),
        ("0123456789 µs – ≥ 99% × 2", Style::plain(10.0)),
        ("WQ@%&mw{|}", Style::plain(13.0).bold()),
    ] {
        let mut canvas = Canvas::new(20.0 + super::text::width(text, 13.0, true), 30.0);
        let bounds = canvas.text(10.0, 20.0, text, style);
        let input = std::env::temp_dir().join(format!("reamer-width-{}.svg", std::process::id()));
        std::fs::write(&input, canvas.finish()).unwrap();
        let rows = rendered(&input, &["-z", &zoom.to_string()]).rows;
        let _ = std::fs::remove_file(&input);
        let inked: Vec<usize> = rows
            .iter()
            .flat_map(|row| {
                row.iter()
                    .enumerate()
                    .filter(|(_, p)| p[..3].iter().any(|&c| c < 160))
                    .map(|(x, _)| x)
            })
            .collect();
        let left = *inked.iter().min().expect("some ink") as f64 / f64::from(zoom);
        let right = (*inked.iter().max().unwrap() + 1) as f64 / f64::from(zoom);
        assert!(
            left >= bounds.left - 0.5 && right <= bounds.right + 0.5,
            "{text:?}: ink {left:.1} to {right:.1}, box {:.1} to {:.1}",
            bounds.left,
            bounds.right
        );
        let filled = (right - left) / (bounds.right - bounds.left);
        assert!(
            filled > 0.9,
            "{text:?}: the ink fills {:.0}% of its box: not the font the widths are of?",
            filled * 100.0
        );
    }
}
