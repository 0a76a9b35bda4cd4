//! The KServe v2 (Open Inference Protocol) JSON messages: parsing and checking an infer
//! request against the model's signature, and building the response. Pure functions; the HTTP
//! routes live in `http`.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{model::Signature, session::ItemOutputs};

/// A checked request: `items` items of the model's input, back to back.
#[derive(Debug)]
pub struct InferRequest {
    pub id: Option<String>,
    pub items: usize,
    pub input: Vec<f32>,
    /// Outputs asked for, as indices into the signature's outputs (all when not asked).
    pub outputs: Vec<usize>,
}

#[derive(Deserialize)]
struct RawRequest {
    #[serde(default)]
    id: Option<Value>,
    inputs: Vec<RawInput>,
    #[serde(default)]
    outputs: Option<Vec<RawOutput>>,
}

#[derive(Deserialize)]
struct RawInput {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    data: Value,
}

#[derive(Deserialize)]
struct RawOutput {
    name: String,
}

/// Parses and checks an infer request body. The error is the message for a 400 answer.
pub fn parse_infer(body: &[u8], signature: &Signature) -> Result<InferRequest, String> {
    let raw: RawRequest =
        serde_json::from_slice(body).map_err(|e| format!("malformed infer request: {e}"))?;
    let [input] = raw.inputs.as_slice() else {
        return Err(format!(
            "the request has {} inputs; the model takes exactly one, '{}'",
            raw.inputs.len(),
            signature.input_name
        ));
    };
    if input.name != signature.input_name {
        return Err(format!(
            "unknown input '{}'; the model's input is '{}'",
            input.name, signature.input_name
        ));
    }
    if input.datatype != "FP32" {
        return Err(format!(
            "input '{}' has datatype {}; the model takes FP32",
            input.name, input.datatype
        ));
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
        return Err(format!(
            "input '{}' has shape {:?}; the model takes {}",
            input.name,
            input.shape,
            expected()
        ));
    }
    let items = input.shape[0] as usize;
    let want = items * signature.input_item_len();
    let mut values = Vec::with_capacity(want.min(1 << 24));
    flatten_numbers(&input.data, &mut values, want)
        .map_err(|e| format!("input '{}' data: {e}", input.name))?;
    if values.len() != want {
        return Err(format!(
            "input '{}' has {} values; shape {:?} needs {want}",
            input.name,
            values.len(),
            input.shape
        ));
    }
    let outputs = match raw.outputs {
        None => (0..signature.outputs.len()).collect(),
        Some(asked) => asked
            .iter()
            .map(|o| {
                signature
                    .outputs
                    .iter()
                    .position(|s| s.name == o.name)
                    .ok_or_else(|| {
                        let names: Vec<&str> =
                            signature.outputs.iter().map(|s| s.name.as_str()).collect();
                        format!("unknown output '{}'; the model has {names:?}", o.name)
                    })
            })
            .collect::<Result<_, _>>()?,
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

/// Appends the numbers of `data` (flat or nested arrays, row-major) to `out`, stopping with
/// an error once more than `limit` arrive. Offline job lines use it too.
pub fn flatten_numbers(data: &Value, out: &mut Vec<f32>, limit: usize) -> Result<(), String> {
    match data {
        Value::Number(n) => {
            if out.len() >= limit {
                return Err(format!("more values than the shape's {limit}"));
            }
            out.push(n.as_f64().ok_or("a number out of range")? as f32);
            Ok(())
        }
        Value::Array(values) => values
            .iter()
            .try_for_each(|v| flatten_numbers(v, out, limit)),
        other => Err(format!("expected numbers, found {}", kind(other))),
    }
}

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

/// The response body for `request`, answered by model `name` at `version`.
pub fn infer_response(
    name: &str,
    version: u64,
    signature: &Signature,
    request: &InferRequest,
    items: &[ItemOutputs],
) -> Value {
    let outputs: Vec<Value> = request
        .outputs
        .iter()
        .map(|&o| {
            let output = &signature.outputs[o];
            let mut shape = vec![items.len()];
            shape.extend_from_slice(&output.item_shape);
            let data: Vec<f32> = items
                .iter()
                .flat_map(|item| item[o].iter().copied())
                .collect();
            json!({"name": output.name, "datatype": "FP32", "shape": shape, "data": data})
        })
        .collect();
    let mut body = json!({
        "model_name": name,
        "model_version": version.to_string(),
        "outputs": outputs,
    });
    if let Some(id) = &request.id {
        body["id"] = json!(id);
    }
    body
}

/// Model metadata (GET /v2/models/{name}).
pub fn model_metadata(name: &str, version: u64, signature: &Signature) -> Value {
    let with_batch = |item: &[usize]| {
        let mut shape = vec![-1i64];
        shape.extend(item.iter().map(|&d| d as i64));
        shape
    };
    json!({
        "name": name,
        "versions": [version.to_string()],
        "platform": "onnx_tract",
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
            let request = parse_infer(body, &signature()).unwrap();
            assert_eq!(request.items, 2);
            assert_eq!(request.input, vec![1., 2., 3., 4., 5., 6., 7., 8.]);
            assert_eq!(request.id.as_deref(), Some(id));
        }
    }

    #[test]
    fn names_what_is_wrong() {
        let cases: [(&[u8], &str); 9] = [
            (b"{not json", "malformed infer request"),
            (br#"{"inputs":[]}"#, "has 0 inputs"),
            (br#"{"inputs":[{"name":"z","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}]}"#, "unknown input 'z'"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"INT64","data":[1,2,3,4]}]}"#, "datatype INT64"),
            (br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#, "takes [N, 2, 2]"),
            (br#"{"inputs":[{"name":"x","shape":[0,2,2],"datatype":"FP32","data":[]}]}"#, "N >= 1"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3]}]}"#, "has 3 values"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,"4"]}]}"#, "found a string"),
            (br#"{"inputs":[{"name":"x","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"q"}]}"#, "unknown output 'q'"),
        ];
        for (body, want) in cases {
            let err = parse_infer(body, &signature()).unwrap_err();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }

    #[test]
    fn response_stacks_items_in_order() {
        let request = parse_infer(
            br#"{"id":"r","inputs":[{"name":"x","shape":[2,2,2],"datatype":"FP32","data":[0,0,0,0,0,0,0,0]}]}"#,
            &signature(),
        )
        .unwrap();
        let items = vec![vec![vec![1.0, 2.0, 3.0]], vec![vec![4.0, 5.0, 6.0]]];
        let body = infer_response("m", 3, &signature(), &request, &items);
        assert_eq!(body["model_version"], "3");
        assert_eq!(body["id"], "r");
        assert_eq!(body["outputs"][0]["shape"], json!([2, 3]));
        assert_eq!(
            body["outputs"][0]["data"],
            json!([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
    }
}
