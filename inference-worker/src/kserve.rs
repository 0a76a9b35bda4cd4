//! The KServe v2 (Open Inference Protocol) infer messages: parsing and checking a request
//! against the model's signature, and building the response. Both plain JSON and the binary
//! tensor data extension: a JSON header of `Inference-Header-Content-Length` bytes followed by
//! the tensors as raw little-endian values, which spares the text (a 3×48×192 FP32 image is
//! 544 KB as JSON numbers and 110 KB as bytes). Pure functions; the HTTP routes live in `http`.

use serde::Deserialize;
use serde_json::{Map, Value, json, value::RawValue};

use crate::{
    model::Signature,
    numbers::{BadData, parse_numbers},
    session::ItemOutputs,
};

/// The HTTP header giving the length of the JSON part of a body with binary tensors, in a
/// request and in a response.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// The name this extension goes by in the server metadata's `extensions`.
pub const BINARY_EXTENSION: &str = "binary_tensor_data";

/// What is wrong with a request, as its 400 answer says it.
#[derive(Debug, thiserror::Error)]
pub enum BadRequest {
    #[error("header Inference-Header-Content-Length is not text; it must be a byte count")]
    HeaderNotText,
    #[error("header Inference-Header-Content-Length is {0:?}; it must be a byte count")]
    HeaderLength(String),
    #[error(
        "header Inference-Header-Content-Length says the JSON part is {length} bytes; the body \
         is only {body}"
    )]
    HeaderPastBody { length: usize, body: usize },
    #[error("malformed infer request: {0}")]
    Malformed(serde_json::Error),
    #[error("the request has {given} inputs; the model takes exactly one, '{expected}'")]
    InputCount { given: usize, expected: String },
    #[error("unknown input '{given}'; the model's input is '{expected}'")]
    UnknownInput { given: String, expected: String },
    #[error("input '{input}' has datatype {datatype}; the model takes FP32")]
    Datatype { input: String, datatype: String },
    #[error("input '{input}' has shape {shape:?}; the model takes {expected}")]
    Shape {
        input: String,
        shape: Vec<i64>,
        expected: String,
    },
    #[error("input '{input}' has shape {shape:?}: more values than this machine can address")]
    TooLarge { input: String, shape: Vec<i64> },
    #[error(
        "the body has {0} bytes after its JSON header, and no input has 'binary_data_size' to \
         claim them"
    )]
    UnclaimedBinary(usize),
    #[error("input '{input}' has {given} values; shape {shape:?} needs {want}")]
    ValueCount {
        input: String,
        given: usize,
        shape: Vec<i64>,
        want: usize,
    },
    #[error("{owner} parameter '{name}' is {kind}; it must be true or false")]
    NotABool {
        owner: String,
        name: String,
        kind: &'static str,
    },
    #[error("unknown output '{given}'; the model has {known:?}")]
    UnknownOutput { given: String, known: Vec<String> },
    /// Each output at most once: the answer is then bounded by what the shapes allow, where
    /// one name repeated a million times in a small request built gigabytes of answer.
    #[error("output '{0}' is asked for more than once")]
    RepeatedOutput(String),
    #[error("input '{input}' parameter 'binary_data_size' is {value}; it must be a byte count")]
    BinarySize { input: String, value: Value },
    #[error("input '{0}' has neither 'data' nor the 'binary_data_size' parameter")]
    NoData(String),
    #[error("input '{input}' data: {error}")]
    Data { input: String, error: BadData },
    #[error(
        "input '{0}' has 'binary_data_size' but the request has no \
         Inference-Header-Content-Length header saying where its JSON ends"
    )]
    BinaryWithoutHeader(String),
    #[error("input '{0}' has both 'data' and 'binary_data_size'; send one")]
    DataAndBinary(String),
    #[error(
        "input '{input}' has binary_data_size {size}; its shape needs {want} FP32 values, {} \
         bytes",
        want * 4
    )]
    BinarySizeMismatch {
        input: String,
        size: usize,
        want: usize,
    },
    #[error("the body has {given} bytes after its JSON header; input '{input}' says {size}")]
    BinaryLength {
        given: usize,
        input: String,
        size: usize,
    },
}

/// A checked request: `items` items of the model's input, back to back.
#[derive(Debug)]
pub struct InferRequest {
    pub id: Option<String>,
    pub items: usize,
    pub input: Vec<f32>,
    /// Outputs asked for, in the order asked (all, in the model's order, when not asked).
    pub outputs: Vec<RequestedOutput>,
}

/// One output to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestedOutput {
    /// Index into the signature's outputs.
    pub index: usize,
    /// Answer it as binary data after the JSON header rather than as JSON numbers.
    pub binary: bool,
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(borrow)]
    inputs: Vec<RawInput<'a>>,
    #[serde(default)]
    outputs: Option<Vec<RawOutput>>,
}

#[derive(Deserialize)]
struct RawInput<'a> {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    /// Kept as the request's own text until the shape is checked, then read straight into
    /// numbers (`numbers`): no value tree of it is ever built.
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawOutput {
    name: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// Reads parameter `name` of `parameters` as a boolean; absent is None.
fn bool_parameter(
    parameters: &Option<Map<String, Value>>,
    name: &str,
    owner: &str,
) -> Result<Option<bool>, BadRequest> {
    match parameters.as_ref().and_then(|p| p.get(name)) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(BadRequest::NotABool {
            owner: owner.to_owned(),
            name: name.to_owned(),
            kind: kind(other),
        }),
    }
}

/// What a JSON value is, for an error that says what was found instead.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Splits a body into its JSON header and the binary data after it, given the
/// `Inference-Header-Content-Length` header's value (None: all of the body is JSON).
fn split_body<'a>(
    body: &'a [u8],
    header_length: Option<&str>,
) -> Result<(&'a [u8], &'a [u8]), BadRequest> {
    let Some(text) = header_length else {
        return Ok((body, &[]));
    };
    let length: usize = text
        .trim()
        .parse()
        .map_err(|_| BadRequest::HeaderLength(text.to_owned()))?;
    if length > body.len() {
        return Err(BadRequest::HeaderPastBody {
            length,
            body: body.len(),
        });
    }
    Ok(body.split_at(length))
}

/// Parses and checks an infer request body; `header_length` is the request's
/// `Inference-Header-Content-Length` header, when it has one. The error is the message for a
/// 400 answer.
pub fn parse_infer(
    body: &[u8],
    header_length: Option<&str>,
    signature: &Signature,
) -> Result<InferRequest, BadRequest> {
    let (header, binary) = split_body(body, header_length)?;
    let raw: RawRequest = serde_json::from_slice(header).map_err(BadRequest::Malformed)?;
    let [input] = raw.inputs.as_slice() else {
        return Err(BadRequest::InputCount {
            given: raw.inputs.len(),
            expected: signature.input_name.clone(),
        });
    };
    if input.name != signature.input_name {
        return Err(BadRequest::UnknownInput {
            given: input.name.clone(),
            expected: signature.input_name.clone(),
        });
    }
    if input.datatype != "FP32" {
        return Err(BadRequest::Datatype {
            input: input.name.clone(),
            datatype: input.datatype.clone(),
        });
    }
    let item_shape: Vec<i64> = signature
        .input_item_shape
        .iter()
        .map(|&d| d as i64)
        .collect();
    let expected = || {
        let dims: Vec<String> = item_shape.iter().map(i64::to_string).collect();
        format!("[N, {}] with N >= 1", dims.join(", "))
    };
    if input.shape.len() != item_shape.len() + 1
        || input.shape[0] < 1
        || input.shape[1..] != item_shape[..]
    {
        return Err(BadRequest::Shape {
            input: input.name.clone(),
            shape: input.shape.clone(),
            expected: expected(),
        });
    }
    let items = input.shape[0] as usize;
    // As FP32 bytes too, so that a binary body's size can be checked against it.
    let want = items
        .checked_mul(signature.input_item_len())
        .filter(|values| values.checked_mul(4).is_some())
        .ok_or_else(|| BadRequest::TooLarge {
            input: input.name.clone(),
            shape: input.shape.clone(),
        })?;
    let values = match binary_data_size(input)? {
        Some(size) => binary_values(input, size, binary, want, header_length.is_some())?,
        None if !binary.is_empty() => {
            return Err(BadRequest::UnclaimedBinary(binary.len()));
        }
        None => json_values(input, want)?,
    };
    if values.len() != want {
        return Err(BadRequest::ValueCount {
            input: input.name.clone(),
            given: values.len(),
            shape: input.shape.clone(),
            want,
        });
    }
    // The request-wide default for binary outputs; each output may say otherwise.
    let binary_default =
        bool_parameter(&raw.parameters, "binary_data_output", "the request's")?.unwrap_or(false);
    let outputs = match raw.outputs {
        None => (0..signature.outputs.len())
            .map(|index| RequestedOutput {
                index,
                binary: binary_default,
            })
            .collect(),
        Some(asked) => asked
            .iter()
            .enumerate()
            .map(|(at, o)| {
                if asked[..at].iter().any(|earlier| earlier.name == o.name) {
                    return Err(BadRequest::RepeatedOutput(o.name.clone()));
                }
                let index = signature
                    .outputs
                    .iter()
                    .position(|s| s.name == o.name)
                    .ok_or_else(|| BadRequest::UnknownOutput {
                        given: o.name.clone(),
                        known: signature.outputs.iter().map(|s| s.name.clone()).collect(),
                    })?;
                let owner = format!("output '{}'", o.name);
                let binary =
                    bool_parameter(&o.parameters, "binary_data", &owner)?.unwrap_or(binary_default);
                Ok(RequestedOutput { index, binary })
            })
            .collect::<Result<_, BadRequest>>()?,
    };
    Ok(InferRequest {
        id: raw.id.map(|id| match id {
            Value::String(s) => s,
            other => other.to_string(),
        }),
        items,
        input: values,
        outputs,
    })
}

/// The input's `binary_data_size` parameter, when it has one.
fn binary_data_size(input: &RawInput<'_>) -> Result<Option<usize>, BadRequest> {
    match input
        .parameters
        .as_ref()
        .and_then(|p| p.get("binary_data_size"))
    {
        None => Ok(None),
        Some(value) => {
            value
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| BadRequest::BinarySize {
                    input: input.name.clone(),
                    value: value.clone(),
                })
        }
    }
}

/// An input's values from its JSON `data`.
fn json_values(input: &RawInput<'_>, want: usize) -> Result<Vec<f32>, BadRequest> {
    let Some(data) = &input.data else {
        return Err(BadRequest::NoData(input.name.clone()));
    };
    parse_numbers(data.get(), want).map_err(|error| BadRequest::Data {
        input: input.name.clone(),
        error,
    })
}

/// An input's values from the binary data after the JSON header: `size` bytes of
/// little-endian FP32, which must be all of it (the model takes one input).
fn binary_values(
    input: &RawInput<'_>,
    size: usize,
    binary: &[u8],
    want: usize,
    has_header_length: bool,
) -> Result<Vec<f32>, BadRequest> {
    let name = &input.name;
    if !has_header_length {
        return Err(BadRequest::BinaryWithoutHeader(name.clone()));
    }
    if input.data.is_some() {
        return Err(BadRequest::DataAndBinary(name.clone()));
    }
    if size != want * 4 {
        return Err(BadRequest::BinarySizeMismatch {
            input: name.clone(),
            size,
            want,
        });
    }
    if binary.len() != size {
        return Err(BadRequest::BinaryLength {
            given: binary.len(),
            input: name.clone(),
            size,
        });
    }
    Ok(binary
        .chunks_exact(4)
        .map(|v| f32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        .collect())
}

/// An infer response: the JSON, and the bytes of the binary outputs that follow it, in the
/// order of the outputs (None when every output is JSON).
#[derive(Debug)]
pub struct InferResponse {
    pub header: Value,
    pub binary: Option<Vec<u8>>,
}

impl InferResponse {
    /// The HTTP body, and the value of its `Inference-Header-Content-Length` header when it
    /// has binary outputs.
    pub fn into_body(self) -> (Vec<u8>, Option<usize>) {
        let mut body = serde_json::to_vec(&self.header).expect("JSON values serialize");
        let Some(binary) = self.binary else {
            return (body, None);
        };
        let header_length = body.len();
        body.extend_from_slice(&binary);
        (body, Some(header_length))
    }
}

/// The response for `request`, answered by model `name` at `version`.
pub fn infer_response(
    name: &str,
    version: u64,
    signature: &Signature,
    request: &InferRequest,
    items: &[ItemOutputs],
) -> InferResponse {
    let mut binary = Vec::new();
    let outputs: Vec<Value> = request
        .outputs
        .iter()
        .map(|o| {
            let output = &signature.outputs[o.index];
            let mut shape = vec![items.len()];
            shape.extend_from_slice(&output.item_shape);
            let data = items.iter().flat_map(|item| item[o.index].iter().copied());
            if o.binary {
                let start = binary.len();
                data.for_each(|v| binary.extend_from_slice(&v.to_le_bytes()));
                json!({"name": output.name, "datatype": "FP32", "shape": shape,
                       "parameters": {"binary_data_size": binary.len() - start}})
            } else {
                let data: Vec<f32> = data.collect();
                json!({"name": output.name, "datatype": "FP32", "shape": shape, "data": data})
            }
        })
        .collect();
    let mut header = json!({
        "model_name": name,
        "model_version": version.to_string(),
        "outputs": outputs,
    });
    if let Some(id) = &request.id {
        header["id"] = json!(id);
    }
    let any_binary = request.outputs.iter().any(|o| o.binary);
    InferResponse {
        header,
        binary: any_binary.then_some(binary),
    }
}

/// Model metadata (GET /v2/models/{name}).
pub fn model_metadata(name: &str, version: u64, platform: &str, signature: &Signature) -> Value {
    let with_batch = |item: &[usize]| {
        let mut shape = vec![-1i64];
        shape.extend(item.iter().map(|&d| d as i64));
        shape
    };
    json!({
        "name": name,
        "versions": [version.to_string()],
        "platform": platform,
        "inputs": [{"name": signature.input_name, "datatype": "FP32",
                    "shape": with_batch(&signature.input_item_shape)}],
        "outputs": signature.outputs.iter().map(|o| json!({
            "name": o.name, "datatype": "FP32", "shape": with_batch(&o.item_shape)})).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OutputSignature;

    fn signature() -> Signature {
        Signature {
            input_name: "x".into(),
            input_item_shape: vec![2, 2],
            outputs: vec![OutputSignature {
                name: "y".into(),
                item_shape: vec![3],
            }],
        }
    }

    #[test]
    fn accepts_flat_and_nested_data() {
        let flat = br#"{"id":"a","inputs":[{"name":"x","shape":[2,2,2],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}"#;
        let nested = br#"{"id":7,"inputs":[{"name":"x","shape":[2,2,2],"datatype":"FP32","data":[[[1,2],[3,4]],[[5,6],[7,8]]]}]}"#;
        for (body, id) in [(&flat[..], "a"), (&nested[..], "7")] {
            let request = parse_infer(body, None, &signature()).unwrap();
            assert_eq!(request.items, 2);
            assert_eq!(request.input, vec![1., 2., 3., 4., 5., 6., 7., 8.]);
            assert_eq!(request.id.as_deref(), Some(id));
        }
    }

    #[test]
    fn names_what_is_wrong() {
        let cases: [(&[u8], &str); 13] = [
            (b"{not json", "malformed infer request"),
            (br#"{"inputs":[]}"#, "has 0 inputs"),
            (br#"{"inputs":[{"name":"z","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}]}"#, "unknown input 'z'"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"INT64","data":[1,2,3,4]}]}"#, "datatype INT64"),
            (br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#, "takes [N, 2, 2]"),
            (br#"{"inputs":[{"name":"x","shape":[0,2,2],"datatype":"FP32","data":[]}]}"#, "N >= 1"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3]}]}"#, "has 3 values"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,"4"]}]}"#, "found a string"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"q"}]}"#, "unknown output 'q'"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"y"},{"name":"y"}]}"#, "output 'y' is asked for more than once"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32"}]}"#, "neither 'data' nor"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#, "no Inference-Header-Content-Length"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}],"parameters":{"binary_data_output":1}}"#, "must be true or false"),
        ];
        for (body, want) in cases {
            let err = parse_infer(body, None, &signature())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }

    #[test]
    fn response_stacks_items_in_order() {
        let request = parse_infer(
            br#"{"id":"r","inputs":[{"name":"x","shape":[2,2,2],"datatype":"FP32","data":[0,0,0,0,0,0,0,0]}]}"#,
            None,
            &signature(),
        )
        .unwrap();
        let items = vec![vec![vec![1.0, 2.0, 3.0]], vec![vec![4.0, 5.0, 6.0]]];
        let response = infer_response("m", 3, &signature(), &request, &items);
        assert!(response.binary.is_none());
        let (bytes, header_length) = response.into_body();
        assert_eq!(header_length, None);
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["model_version"], "3");
        assert_eq!(body["id"], "r");
        assert_eq!(body["outputs"][0]["shape"], json!([2, 3]));
        assert_eq!(
            body["outputs"][0]["data"],
            json!([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
    }

    /// A body in the binary tensor data extension: `header` JSON, then `values` as
    /// little-endian FP32. Returns the body and its header length, as text.
    fn binary_body(header: &str, values: &[f32]) -> (Vec<u8>, String) {
        let mut body = header.as_bytes().to_vec();
        values
            .iter()
            .for_each(|v| body.extend_from_slice(&v.to_le_bytes()));
        (body, header.len().to_string())
    }

    const BINARY_INPUT: &str = r#"{"inputs":[{"name":"x","shape":[2,2,2],"datatype":"FP32","parameters":{"binary_data_size":32}}]}"#;

    #[test]
    fn accepts_binary_input_after_the_json_header() {
        let values = [1., -2.5, 3., 4., 5., 6., 7., f32::MAX];
        let (body, length) = binary_body(BINARY_INPUT, &values);
        let request = parse_infer(&body, Some(&length), &signature()).unwrap();
        assert_eq!(request.items, 2);
        assert_eq!(request.input, values);
        // A JSON-only body may still come with the header: its binary part is empty.
        let json =
            br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}]}"#;
        let length = json.len().to_string();
        let request = parse_infer(json, Some(&length), &signature()).unwrap();
        assert_eq!(request.input, vec![1., 2., 3., 4.]);
    }

    #[test]
    fn names_what_is_wrong_with_a_binary_body() {
        let eight = [0.0f32; 8];
        let (good, length) = binary_body(BINARY_INPUT, &eight);
        let short = &good[..good.len() - 4];
        let (long, _) = binary_body(BINARY_INPUT, &[0.0; 9]);
        let both = r#"{"inputs":[{"name":"x","shape":[2,2,2],"datatype":"FP32","data":[0,0,0,0,0,0,0,0],"parameters":{"binary_data_size":32}}]}"#;
        let (both, both_length) = binary_body(both, &eight);
        let wrong_size = BINARY_INPUT.replace("size\":32", "size\":28");
        let (wrong_size, wrong_size_length) = binary_body(&wrong_size, &[0.0; 7]);
        let not_a_count = BINARY_INPUT.replace("size\":32", "size\":\"32\"");
        let (not_a_count, not_a_count_length) = binary_body(&not_a_count, &eight);
        let json =
            r#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}]}"#;
        let (unclaimed, unclaimed_length) = binary_body(json, &[1.0]);
        let huge = BINARY_INPUT.replace("[2,2,2]", "[4611686018427387904,2,2]");
        let (huge, huge_length) = binary_body(&huge, &eight);
        let cases: [(&[u8], &str, &str); 9] = [
            (
                &unclaimed,
                &unclaimed_length,
                "4 bytes after its JSON header, and no input",
            ),
            (
                &huge,
                &huge_length,
                "more values than this machine can address",
            ),
            (
                short,
                &length,
                "28 bytes after its JSON header; input 'x' says 32",
            ),
            (&long, &length, "36 bytes after its JSON header"),
            (&good, "lots", "it must be a byte count"),
            (&good, "100000", "the body is only"),
            (&both, &both_length, "both 'data' and 'binary_data_size'"),
            (
                &wrong_size,
                &wrong_size_length,
                "its shape needs 8 FP32 values, 32 bytes",
            ),
            (&not_a_count, &not_a_count_length, "it must be a byte count"),
        ];
        for (body, length, want) in cases {
            let err = parse_infer(body, Some(length), &signature())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }

    fn two_output_signature() -> Signature {
        let mut signature = signature();
        signature.outputs.push(OutputSignature {
            name: "z".into(),
            item_shape: vec![1],
        });
        signature
    }

    #[test]
    fn binary_outputs_follow_the_json_in_the_order_asked() {
        let signature = two_output_signature();
        let items = vec![vec![vec![1.0, 2.0, 3.0], vec![9.0]]];
        let body = |parameters: &str, outputs: &str| {
            format!(
                r#"{{"parameters":{parameters},"outputs":{outputs},"inputs":[{{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}}]}}"#
            )
        };
        // Every output binary by the request's default, z first as asked.
        let all = body(
            r#"{"binary_data_output":true}"#,
            r#"[{"name":"z"},{"name":"y"}]"#,
        );
        let request = parse_infer(all.as_bytes(), None, &signature).unwrap();
        let (bytes, header_length) =
            infer_response("m", 1, &signature, &request, &items).into_body();
        let header_length = header_length.expect("binary outputs need the header length");
        let header: Value = serde_json::from_slice(&bytes[..header_length]).unwrap();
        assert_eq!(header["outputs"][0]["name"], "z");
        assert_eq!(header["outputs"][0]["parameters"]["binary_data_size"], 4);
        assert_eq!(header["outputs"][1]["parameters"]["binary_data_size"], 12);
        assert!(header["outputs"][1].get("data").is_none());
        let floats: Vec<f32> = bytes[header_length..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(floats, vec![9.0, 1.0, 2.0, 3.0]);

        // One output overrides the default: y stays JSON, z alone is binary.
        let mixed = body(
            r#"{"binary_data_output":true}"#,
            r#"[{"name":"y","parameters":{"binary_data":false}},{"name":"z"}]"#,
        );
        let request = parse_infer(mixed.as_bytes(), None, &signature).unwrap();
        let (bytes, header_length) =
            infer_response("m", 1, &signature, &request, &items).into_body();
        let header_length = header_length.unwrap();
        let header: Value = serde_json::from_slice(&bytes[..header_length]).unwrap();
        assert_eq!(header["outputs"][0]["data"], json!([1.0, 2.0, 3.0]));
        assert_eq!(&bytes[header_length..], &9.0f32.to_le_bytes());
    }
}
