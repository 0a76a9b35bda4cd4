//! The benchmarks' plots, as SVG drawn by hand:
//!
//! - `tradeoff`: offline inference harvested against training's pace, one point per scenario,
//!   the fixed settings' frontier and the target band: whether a scenario beats every fixed
//!   setting, at a glance;
//! - `bars`: figures side by side as bars, one row per scenario.
//!
//! Both lay out their text on a `canvas` that knows each text's box (from the font's widths,
//! `text`), so that labels go where nothing else is and a test can check, on every committed
//! plot, that no two texts overlap and none leaves the canvas.

pub(crate) mod bars;
pub(crate) mod canvas;
pub(crate) mod text;
pub(crate) mod tradeoff;

#[cfg(test)]
mod committed;
