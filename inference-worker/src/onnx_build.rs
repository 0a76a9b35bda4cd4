//! Building small ONNX models in code (tract's protobuf types, encoded with prost), for the
//! models the tests and the benchmark generate themselves.

use prost::Message as _;
use tract_onnx::pb::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_shape_proto::Dimension, tensor_shape_proto::dimension,
    type_proto,
};

/// ONNX TensorProto.DataType for float32.
const FLOAT: i32 = 1;

pub fn value_info(name: &str, dims: &[Dimension]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.to_owned(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto { dim: dims.to_vec() }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn dim(value: i64) -> Dimension {
    Dimension {
        value: Some(dimension::Value::DimValue(value)),
        ..Default::default()
    }
}

pub fn batch_dim() -> Dimension {
    Dimension {
        value: Some(dimension::Value::DimParam("N".to_owned())),
        ..Default::default()
    }
}

pub fn initializer(name: &str, dims: &[i64], values: Vec<f32>) -> TensorProto {
    TensorProto {
        name: name.to_owned(),
        dims: dims.to_vec(),
        data_type: FLOAT,
        float_data: values,
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        op_type: op.to_owned(),
        name: output.to_owned(),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: vec![output.to_owned()],
        ..Default::default()
    }
}

/// A model file's bytes around `graph`: IR 8, opset 17.
pub fn encode_model(graph: GraphProto, producer: &str, version: i64) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: producer.to_owned(),
        model_version: version,
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}
