//! The enforcer's modules import down the list docs/architecture.md draws ("Where each concern
//! lives"): a module uses only the modules below it, and no two files of one module use each
//! other. Read from the sources and the page themselves, so that either changing alone fails
//! here. Test code (`#[cfg(test)]` onwards in a file, and the unit tests' own `tests.rs` files)
//! is left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// The modules in the page's order, top first: the first column of its table, `cli/` and on.
fn documented_order(page: &str) -> Vec<String> {
    let table = page
        .split("## Where each concern lives")
        .nth(1)
        .expect("docs/architecture.md has \"Where each concern lives\"");
    table
        .lines()
        .skip_while(|line| !line.starts_with("| `"))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| {
            let cell = line.split('|').nth(1)?.trim();
            Some(cell.trim_matches('`').trim_end_matches('/').to_owned())
        })
        .collect()
}

/// Every `.rs` file under `dir` but the unit tests' `tests.rs`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The file's text before its tests.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    text.split("#[cfg(test)]").next().unwrap_or("").to_owned()
}

/// The names a path expression starting at `prefix` ("crate::", "super::") reaches first,
/// with those of a `use prefix{a::.., b}` group.
fn first_segments(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // One level of braces: the names at the group's top level.
            let mut depth = 0;
            let mut name = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_start = true,
                    c if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') => {
                        name.push(c)
                    }
                    _ if depth == 0 && !name.is_empty() => {
                        names.insert(std::mem::take(&mut name));
                        at_start = false;
                    }
                    _ => {}
                }
            }
            if !name.is_empty() {
                names.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn modules_import_down_the_documented_order_and_files_of_a_module_do_not_use_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("../docs/architecture.md")).unwrap();
    let order = documented_order(&page);
    assert!(order.len() >= 8, "the page's modules: {order:?}");
    let rank: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let src = root.join("src");

    let mut upward = Vec::new();
    // A module's files, by path without `.rs` (`mod.rs` as its directory), and what each
    // uses through `super::`.
    let mut uses: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for module in &order {
        let dir = src.join(module);
        assert!(
            dir.is_dir(),
            "the page names {module}/, which src/ does not have"
        );
        for file in sources(&dir) {
            let code = code(&file);
            for used in first_segments(&code, "crate::") {
                if rank
                    .get(used.as_str())
                    .is_some_and(|&r| r < rank[module.as_str()])
                {
                    upward.push(format!(
                        "{} uses crate::{used}",
                        file.strip_prefix(&src).unwrap().display()
                    ));
                }
            }
            let name = if file.ends_with("mod.rs") {
                file.parent().unwrap().to_owned()
            } else {
                file.with_extension("")
            };
            uses.insert(name, first_segments(&code, "super::"));
        }
    }
    let mut loops = BTreeSet::new();
    for (file, used) in &uses {
        let dir = file.parent().unwrap();
        for other in used {
            let other_file = dir.join(other);
            let back = file.file_name().unwrap().to_string_lossy().into_owned();
            if uses
                .get(&other_file)
                .is_some_and(|theirs| theirs.contains(&back))
            {
                let mut pair = [
                    file.strip_prefix(&src).unwrap().display().to_string(),
                    other_file.strip_prefix(&src).unwrap().display().to_string(),
                ];
                pair.sort();
                loops.insert(pair.join(" <-> "));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against docs/architecture.md's order: {upward:#?}"
    );
    assert!(
        loops.is_empty(),
        "files of one module using each other: {loops:#?}"
    );
}

#[test]
fn the_scan_finds_grouped_and_plain_uses() {
    let code = "use crate::{actuate::freezer, host::{paths, procfs}};\nlet x = crate::gpu::f();";
    assert_eq!(
        first_segments(code, "crate::"),
        ["actuate", "gpu", "host"].map(str::to_owned).into()
    );
    assert_eq!(
        first_segments("use super::{a::B, c};", "super::"),
        ["a", "c"].map(str::to_owned).into()
    );
}
