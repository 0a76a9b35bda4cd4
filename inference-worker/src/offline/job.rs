//! The offline job's input lines: `{"id": ..., "data": [...]}`, one item per line, the data
//! flat or nested, row-major, exactly the model's input item size.

use serde::Deserialize;
use serde_json::Value;

use crate::kserve::flatten_numbers;

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
pub fn parse_line(line: &str, item_len: usize) -> Result<Item, String> {
    let raw: RawLine = serde_json::from_str(line).map_err(|e| format!("not a job line: {e}"))?;
    let mut data = Vec::with_capacity(item_len);
    flatten_numbers(&raw.data, &mut data, item_len).map_err(|e| format!("\"data\": {e}"))?;
    if data.len() != item_len {
        return Err(format!(
            "{} values; the model's input item has {item_len}",
            data.len()
        ));
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
                .contains("3 values")
        );
        assert!(
            parse_line(r#"{"id":1,"data":[1,2,3,4,5]}"#, 4)
                .unwrap_err()
                .contains("more values")
        );
        assert!(
            parse_line(r#"{"id":1,"data":[1,"x",3,4]}"#, 4)
                .unwrap_err()
                .contains("found a string")
        );
        assert!(
            parse_line("garbage", 4)
                .unwrap_err()
                .contains("not a job line")
        );
    }
}
