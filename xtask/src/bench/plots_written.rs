//! Where the benchmarks' plots go: beside docs/benchmarks.md when the run updates it (the
//! section links them by file name), under target/bench/ otherwise.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::{bench::plot::canvas::Canvas, cargo::workspace_root};

/// Writes `canvas` as `file`, into docs/ where `into_docs`; says where, and what in its text
/// could not be laid out (the committed plots' test fails on that too).
pub fn write(canvas: Canvas, file: &str, into_docs: bool) -> anyhow::Result<PathBuf> {
    let dir = workspace_root().join(if into_docs { "docs" } else { "target/bench" });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(file);
    for problem in canvas.problems() {
        eprintln!("[bench] {file}: the text could not be laid out: {problem}");
    }
    std::fs::write(&path, canvas.finish())
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("[bench] plot written to {}", path.display());
    Ok(path)
}
