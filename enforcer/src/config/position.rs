//! Where in a config's text an error is: the line of a span, the key written there, and a
//! section's field.

use std::{ops::Range, path::Path};

use super::ConfigError;

/// Where `field` is set inside the `[section]` table, for the error's line number (the table's
/// header when the field takes its default).
pub(super) fn section_key_offset(text: &str, section: &str, field: &str) -> usize {
    let header = format!("[{section}]");
    let Some(table) = text.find(&header) else {
        return 0;
    };
    let body = table + header.len();
    let section_end = text[body..].find("\n[").map_or(text.len(), |i| body + i);
    let mut offset = table;
    for line in text[table..section_end].split_inclusive('\n') {
        let key = line.trim_start().strip_prefix(field);
        if key.is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return offset;
        }
        offset += line.len();
    }
    table
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The key written on the line where an error's span starts, e.g. `pids` in `pids = ["x"]`.
pub(super) fn key_at(text: &str, span: &Range<usize>) -> Option<String> {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[line_start..line_end];
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('[')).then(|| key.trim_matches('"').to_owned())
}

/// Field `field` of the config at `path`, whose text is `text`, is invalid at `span`.
pub(super) fn invalid_field(
    path: &Path,
    text: &str,
    span: Range<usize>,
    field: &str,
    message: String,
) -> ConfigError {
    ConfigError::Invalid {
        path: path.to_owned(),
        line: line_of(text, span.start),
        field: field.to_owned(),
        message,
    }
}
