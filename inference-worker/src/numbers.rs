//! Tensor data written as JSON numbers (`"data": [1, 2, [3, 4]]`, flat or nested, row-major),
//! read straight into the `f32`s the model takes. Parsed through a `serde_json::Value` tree
//! first, each number cost about 32 bytes before any shape was checked: a request of 2-byte
//! numbers (`1,`) built 16 times its size in memory. Here the text is visited once, every
//! number goes to the output as it comes, and more than `limit` of them (what the request's
//! declared shape allows) stop the parse: memory follows the declared shape, not the body.

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};

/// Why tensor data is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadData {
    #[error("more values than the shape's {0}")]
    TooMany(usize),
    #[error("a number out of range")]
    OutOfRange,
    #[error("expected numbers, found {0}")]
    NotANumber(&'static str),
    #[error("not JSON: {0}")]
    Malformed(String),
}

/// Parses `json` (a number, or arrays of numbers nested any way) into at most `limit` values.
pub fn parse_numbers(json: &str, limit: usize) -> Result<Vec<f32>, BadData> {
    let mut values = Vec::with_capacity(limit.min(1 << 20));
    let mut refused = None;
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let seed = Flatten {
        out: &mut values,
        limit,
        refused: &mut refused,
    };
    let parsed = seed
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    match (refused, parsed) {
        (Some(bad), _) => Err(bad),
        (None, Err(err)) => Err(BadData::Malformed(err.to_string())),
        (None, Ok(())) => Ok(values),
    }
}

/// Appends every number it visits to `out`; the first refusal is kept in `refused` (serde's
/// error type cannot carry it) and ends the parse.
struct Flatten<'a> {
    out: &'a mut Vec<f32>,
    limit: usize,
    refused: &'a mut Option<BadData>,
}

impl Flatten<'_> {
    fn refuse<E: serde::de::Error>(self, bad: BadData) -> Result<(), E> {
        let message = bad.to_string();
        *self.refused = Some(bad);
        Err(E::custom(message))
    }

    fn push<E: serde::de::Error>(self, value: f64) -> Result<(), E> {
        if self.out.len() >= self.limit {
            let limit = self.limit;
            return self.refuse(BadData::TooMany(limit));
        }
        let value = value as f32;
        if !value.is_finite() {
            return self.refuse(BadData::OutOfRange);
        }
        self.out.push(value);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("numbers, or arrays of them")
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.push(v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.push(v as f64)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.push(v as f64)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Flatten {
            out,
            limit,
            refused,
        } = self;
        loop {
            let element = Flatten {
                out: &mut *out,
                limit,
                refused: &mut *refused,
            };
            if seq.next_element_seed(element)?.is_none() {
                return Ok(());
            }
        }
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.refuse(BadData::NotANumber("a string"))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.refuse(BadData::NotANumber("a boolean"))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.refuse(BadData::NotANumber("null"))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.refuse(BadData::NotANumber("an object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_and_nested_numbers_read_in_row_major_order() {
        assert_eq!(parse_numbers("[1, 2.5, -3]", 3).unwrap(), [1.0, 2.5, -3.0]);
        assert_eq!(
            parse_numbers("[[1, 2], [3, [4]]]", 4).unwrap(),
            [1.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(parse_numbers("7", 1).unwrap(), [7.0]);
        assert_eq!(parse_numbers("[]", 4).unwrap(), Vec::<f32>::new());
    }

    #[test]
    fn what_is_not_numbers_within_the_limit_is_named() {
        assert_eq!(parse_numbers("[1, 2, 3]", 2), Err(BadData::TooMany(2)));
        assert_eq!(
            parse_numbers("[1, \"2\"]", 4),
            Err(BadData::NotANumber("a string"))
        );
        assert_eq!(
            parse_numbers("[[1], {\"a\": 1}]", 4),
            Err(BadData::NotANumber("an object"))
        );
        assert_eq!(parse_numbers("[null]", 4), Err(BadData::NotANumber("null")));
        assert_eq!(parse_numbers("[1e300]", 4), Err(BadData::OutOfRange));
        assert!(matches!(
            parse_numbers("[1, 2", 4),
            Err(BadData::Malformed(_))
        ));
    }

    #[test]
    fn a_body_of_many_numbers_stops_at_the_limit_without_reading_on() {
        // A million numbers for a shape of four: refused after the fifth, holding four.
        let json = format!("[{}1]", "1,".repeat(1_000_000));
        assert_eq!(parse_numbers(&json, 4), Err(BadData::TooMany(4)));
    }
}
