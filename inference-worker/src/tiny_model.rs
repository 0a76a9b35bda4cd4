//! A tiny ONNX model the tests and the demo generate themselves: y = relu(x · W + b), with
//! x of shape [N, 4] and y of shape [N, 3].
//!
//! The weights follow a formula, so a test can compute the expected answer on its own:
//! W[i][j] = version · (3i + j + 1) / 10 and b[j] = −j / 2. A new `version` gives new weights
//! with the same signature: the hot-reload tests write one over the other.

use tract_onnx::pb::GraphProto;

use crate::onnx_build::{batch_dim, dim, encode_model, initializer, node, value_info};

pub const INPUTS: usize = 4;
pub const OUTPUTS: usize = 3;

/// W[i][j] of the model of `version`.
pub fn weight(version: u32, i: usize, j: usize) -> f32 {
    version as f32 * (3 * i + j + 1) as f32 / 10.0
}

/// b[j].
pub fn bias(j: usize) -> f32 {
    -(j as f32) / 2.0
}

/// The answer the model of `version` gives for one item, computed without tract.
pub fn expected(version: u32, x: &[f32; INPUTS]) -> [f32; OUTPUTS] {
    std::array::from_fn(|j| {
        let sum: f32 = (0..INPUTS).map(|i| x[i] * weight(version, i, j)).sum();
        (sum + bias(j)).max(0.0)
    })
}

/// The model of `version`, encoded as an ONNX file's bytes.
pub fn encode(version: u32) -> Vec<u8> {
    let weights = (0..INPUTS)
        .flat_map(|i| (0..OUTPUTS).map(move |j| weight(version, i, j)))
        .collect();
    let graph = GraphProto {
        name: "reamer-tiny".to_owned(),
        node: vec![
            node("MatMul", &["x", "W"], "xW"),
            node("Add", &["xW", "b"], "xW_b"),
            node("Relu", &["xW_b"], "y"),
        ],
        initializer: vec![
            initializer("W", &[INPUTS as i64, OUTPUTS as i64], weights),
            initializer("b", &[OUTPUTS as i64], (0..OUTPUTS).map(bias).collect()),
        ],
        input: vec![value_info("x", &[batch_dim(), dim(INPUTS as i64)])],
        output: vec![value_info("y", &[batch_dim(), dim(OUTPUTS as i64)])],
        ..Default::default()
    };
    encode_model(
        graph,
        "reamer inference-worker tiny-model",
        i64::from(version),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{engine::Engine, model::Model, session::Session};
    use std::sync::Arc;

    #[test]
    fn tract_runs_the_tiny_model_and_agrees_with_the_formula() {
        let dir = std::env::temp_dir().join(format!("reamer-tiny-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.onnx");
        std::fs::write(&path, encode(2)).unwrap();
        let model = Arc::new(Model::load("tiny", 1, &path, None, 4, Engine::Tract).unwrap());
        assert_eq!(model.signature.input_item_shape, vec![INPUTS]);
        assert_eq!(model.signature.outputs[0].item_shape, vec![OUTPUTS]);
        assert_eq!(model.batch_sizes(), vec![1, 2, 4]);
        let items: Vec<[f32; INPUTS]> = (0..7)
            .map(|k| std::array::from_fn(|i| (k as f32 - 3.0) * 0.5 + i as f32))
            .collect();
        let flat: Vec<f32> = items.iter().flatten().copied().collect();
        // 7 items run as 4 + 2 + 1.
        let outputs = Session::new(model).run(&flat, items.len()).unwrap();
        for (item, out) in items.iter().zip(&outputs) {
            let want = expected(2, item);
            for (got, want) in out[0].iter().zip(want) {
                assert!((got - want).abs() < 1e-4, "{out:?} vs {want:?}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
