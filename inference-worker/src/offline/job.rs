//! The offline job's input lines: `{"id": ..., "data": [...]}`, one item per line, the data
//! flat or nested, row-major, exactly the model's input item size.

use serde::Deserialize;
use serde_json::Value;

use crate::kserve::{BadData, flatten_numbers};

/// Why an input line is rejected (recorded as its result; the job goes on).
#[derive(Debug, thiserror::Error)]
pub enum BadLine {
    #[error("not a job line: {0}")]
    NotJson(serde_json::Error),
    #[error("\"data\": {0}")]
    Data(BadData),
    #[error("{given} values; the model's input item has {item_len}")]
    Length { given: usize, item_len: usize },
}

#[derive(Deserialize)]
struct RawLine {
    #[serde(default)]
    id: Value,
    data: Value,
}

/// One parsed input line.
#[derive(Debug)]
pub struct Item {
    pub id: Value,
    pub data: Vec<f32>,
}

/// Parses one input line for an item of `item_len` values; the error says what is wrong.
pub fn parse_line(line: &str, item_len: usize) -> Result<Item, BadLine> {
    let raw: RawLine = serde_json::from_str(line).map_err(BadLine::NotJson)?;
    let mut data = Vec::with_capacity(item_len);
    flatten_numbers(&raw.data, &mut data, item_len).map_err(BadLine::Data)?;
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
}
