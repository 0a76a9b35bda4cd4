//! No source file outside tests is over `MAX_LINES` lines: a longer one holds more than one
//! job (docs/architecture.md, "Tests"). The enforcer's layering, and that no two of its files
//! use each other, are checked in `enforcer/tests/layering.rs`. Runs anywhere: it only reads
//! the workspace's files.

use std::fs;
use std::path::{Path, PathBuf};

/// A file longer than this holds more than one job.
const MAX_LINES: usize = 700;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, leaving out build output and hidden folders.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, found);
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// Test code: a crate's `tests/` folder, a `tests.rs` module, or a module under a `tests/`
/// folder. The `tests` crate's own `src/` (the workload generators and the harness) is not.
fn is_test_file(relative: &Path) -> bool {
    let parts: Vec<&str> = relative.iter().filter_map(|p| p.to_str()).collect();
    parts.last() == Some(&"tests.rs") || parts.iter().skip(1).any(|&p| p == "tests")
}

#[test]
fn no_source_file_outside_tests_is_over_the_limit() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut too_long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&root).expect("under the workspace");
            if is_test_file(relative) {
                return None;
            }
            let text = fs::read_to_string(path).expect("a source file");
            let lines = text.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", relative.display()))
        })
        .collect();
    too_long.sort();
    assert!(
        files.len() > 100,
        "found only {} source files under {}",
        files.len(),
        root.display()
    );
    assert!(
        too_long.is_empty(),
        "source files over {MAX_LINES} lines (split them by job): {too_long:?}"
    );
}
