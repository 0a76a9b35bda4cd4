//! The offline job's input lines: `{"id": ..., "data": [...]}`, one item per line, the data
//! flat or nested, row-major, exactly the model's input item size.

use serde::Deserialize;
use serde_json::{Value, value::RawValue};

use crate::numbers::{BadData, parse_numbers};

/// Why an input line is rejected (recorded as its result; the job goes on).
#[derive(Debug, thiserror::Error)]
pub enum BadLine {
    #[error("not a job line: {0}")]
    NotJson(serde_json::Error),
    #[error("\"data\": {0}")]
    Data(BadData),
    #[error("{given} values; the model's input item has {item_len}")]
    Length { given: usize, item_len: usize },
    #[error("not UTF-8: an invalid byte after the line's first {valid_up_to} bytes")]
    NotUtf8 { valid_up_to: usize },
    #[error(
        "{bytes} bytes, more than the {limit} a line of this model's input item may take: \
         skipped unread"
    )]
    TooLong { bytes: u64, limit: usize },
}

/// The longest line an item of `item_len` values may take: a value written out in JSON takes
/// at most about 25 bytes (`-1.2345678901234567e-308,`), nesting a few more, and the id a
/// few kilobytes. Longer is no item of this model, however it goes on: it is not held in
/// memory.
pub fn max_line_bytes(item_len: usize) -> usize {
    item_len.saturating_mul(64).saturating_add(64 * 1024)
}

/// One line read from the inputs: its bytes (newline included) are in the caller's buffer,
/// unless it was longer than the limit.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    End,
    Line { consumed: u64 },
    TooLong { consumed: u64 },
}

/// Reads up to and including the next newline into `buffer`, holding at most `limit` bytes
/// of it: a longer line is consumed to its end but not kept, so an endless line costs no
/// memory and the next line is read from where it begins.
pub fn read_bounded(
    reader: &mut impl std::io::BufRead,
    buffer: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buffer.clear();
    let mut consumed = 0u64;
    let mut too_long = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            break;
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        if !too_long && buffer.len() + take <= limit {
            buffer.extend_from_slice(&available[..take]);
        } else {
            too_long = true;
            buffer.clear();
        }
        reader.consume(take);
        consumed += take as u64;
        if newline.is_some() {
            break;
        }
    }
    Ok(match (consumed, too_long) {
        (0, _) => LineRead::End,
        (_, true) => LineRead::TooLong { consumed },
        (_, false) => LineRead::Line { consumed },
    })
}

/// Parses the bytes of one line (newline included) for an item of `item_len` values.
pub fn parse_bytes(line: &[u8], item_len: usize) -> Result<Item, BadLine> {
    let text = std::str::from_utf8(line).map_err(|e| BadLine::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    parse_line(text.trim_end_matches(['\n', '\r']), item_len)
}

#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(default)]
    id: Value,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// One parsed input line.
#[derive(Debug)]
pub struct Item {
    pub id: Value,
    pub data: Vec<f32>,
}

/// Parses one input line for an item of `item_len` values; the error says what is wrong.
pub fn parse_line(line: &str, item_len: usize) -> Result<Item, BadLine> {
    let raw: RawLine<'_> = serde_json::from_str(line).map_err(BadLine::NotJson)?;
    let data = parse_numbers(raw.data.get(), item_len).map_err(BadLine::Data)?;
    if data.len() != item_len {
        return Err(BadLine::Length {
            given: data.len(),
            item_len,
        });
    }
    Ok(Item { id: raw.id, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_items_and_names_bad_lines() {
        let item = parse_line(r#"{"id":"a","data":[[1,2],[3,4]]}"#, 4).unwrap();
        assert_eq!(item.data, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(item.id, "a");
        assert!(
            parse_line(r#"{"id":1,"data":[1,2,3]}"#, 4)
                .unwrap_err()
                .to_string()
                .contains("3 values")
        );
        assert!(
            parse_line(r#"{"id":1,"data":[1,2,3,4,5]}"#, 4)
                .unwrap_err()
                .to_string()
                .contains("more values")
        );
        assert!(
            parse_line(r#"{"id":1,"data":[1,"x",3,4]}"#, 4)
                .unwrap_err()
                .to_string()
                .contains("found a string")
        );
        assert!(
            parse_line("garbage", 4)
                .unwrap_err()
                .to_string()
                .contains("not a job line")
        );
    }

    #[test]
    fn an_endless_or_broken_line_is_one_rejected_line_and_the_next_is_read() {
        let good = "{\"id\":1,\"data\":[1,2]}\n";
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"id\":0,\"data\":[");
        input.extend(std::iter::repeat_n(b'1', 10_000));
        input.extend_from_slice(b"]}\n");
        input.extend_from_slice(b"{\"id\":\"\xff\",\"data\":[1,2]}\n");
        input.extend_from_slice(good.as_bytes());
        input.extend_from_slice(b"{\"id\":2,\"data\":[3,4]}");
        // A small buffer: the long line spans many fills.
        let mut reader = std::io::BufReader::with_capacity(64, &input[..]);
        let mut buffer = Vec::new();
        let long = read_bounded(&mut reader, &mut buffer, 100).unwrap();
        assert_eq!(long, LineRead::TooLong { consumed: 10_019 });
        assert!(buffer.is_empty(), "the long line was not kept");
        let broken = read_bounded(&mut reader, &mut buffer, 100).unwrap();
        assert_eq!(broken, LineRead::Line { consumed: 24 });
        assert!(matches!(
            parse_bytes(&buffer, 2),
            Err(BadLine::NotUtf8 { valid_up_to: 7 })
        ));
        assert_eq!(
            read_bounded(&mut reader, &mut buffer, 100).unwrap(),
            LineRead::Line {
                consumed: good.len() as u64
            }
        );
        assert_eq!(parse_bytes(&buffer, 2).unwrap().data, [1.0, 2.0]);
        assert!(matches!(
            read_bounded(&mut reader, &mut buffer, 100).unwrap(),
            LineRead::Line { consumed: 21 }
        ));
        assert_eq!(
            parse_bytes(&buffer, 2).unwrap().data,
            [3.0, 4.0],
            "no newline at the end"
        );
        assert_eq!(
            read_bounded(&mut reader, &mut buffer, 100).unwrap(),
            LineRead::End
        );
    }
}
