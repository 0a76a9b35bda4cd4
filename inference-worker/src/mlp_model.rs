//! A synthetic multi-layer perceptron the benchmark generates itself: a CPU-bound model whose
//! cost per item is set by its width and depth, while its input stays small, so that a job
//! file of thousands of items, or a request body, costs next to nothing to read.
//!
//! x [N, inputs] → `layers` × (MatMul, Add, Relu) of `width` → MatMul, Add → y [N, outputs].
//! The weights follow a fixed formula (no randomness, the same file on every machine), scaled
//! by 1/√fan-in so that activations neither vanish nor explode through the layers.

use tract_onnx::pb::{GraphProto, NodeProto, TensorProto};

use crate::onnx_build::{batch_dim, dim, encode_model, initializer, node, value_info};

/// The MLP's shape.
#[derive(Debug, Clone, Copy)]
pub struct MlpShape {
    pub inputs: usize,
    pub width: usize,
    /// Hidden layers (each `width` wide, with a ReLU).
    pub layers: usize,
    pub outputs: usize,
}

/// A weight in [-1, 1) / √fan_in, from its layer and place: cheap, deterministic, varied.
fn weight(layer: usize, i: usize, j: usize, fan_in: usize) -> f32 {
    let k = (layer * 7919 + i * 31 + j * 17) % 97;
    (k as f32 / 48.5 - 1.0) / (fan_in as f32).sqrt()
}

fn dense(
    layer: usize,
    input: &str,
    fan_in: usize,
    fan_out: usize,
    relu: bool,
    nodes: &mut Vec<NodeProto>,
    initializers: &mut Vec<TensorProto>,
) -> String {
    let (w, b) = (format!("W{layer}"), format!("b{layer}"));
    let values = (0..fan_in)
        .flat_map(|i| (0..fan_out).map(move |j| weight(layer, i, j, fan_in)))
        .collect();
    initializers.push(initializer(&w, &[fan_in as i64, fan_out as i64], values));
    initializers.push(initializer(&b, &[fan_out as i64], vec![0.01; fan_out]));
    let (product, sum) = (format!("xW{layer}"), format!("h{layer}"));
    nodes.push(node("MatMul", &[input, &w], &product));
    nodes.push(node("Add", &[&product, &b], &sum));
    if relu {
        let out = format!("r{layer}");
        nodes.push(node("Relu", &[&sum], &out));
        out
    } else {
        sum
    }
}

/// The model of `shape`, encoded as an ONNX file's bytes. Its output is named `y`.
pub fn encode(shape: MlpShape) -> Vec<u8> {
    let (mut nodes, mut initializers) = (Vec::new(), Vec::new());
    let mut current = "x".to_owned();
    let mut fan_in = shape.inputs;
    for layer in 0..shape.layers {
        current = dense(
            layer,
            &current,
            fan_in,
            shape.width,
            true,
            &mut nodes,
            &mut initializers,
        );
        fan_in = shape.width;
    }
    let last = dense(
        shape.layers,
        &current,
        fan_in,
        shape.outputs,
        false,
        &mut nodes,
        &mut initializers,
    );
    nodes.push(node("Identity", &[&last], "y"));
    let graph = GraphProto {
        name: "reamer-mlp".to_owned(),
        node: nodes,
        initializer: initializers,
        input: vec![value_info("x", &[batch_dim(), dim(shape.inputs as i64)])],
        output: vec![value_info("y", &[batch_dim(), dim(shape.outputs as i64)])],
        ..Default::default()
    };
    encode_model(graph, "reamer inference-worker mlp-model", 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{engine::Engine, model::Model, session::Session};
    use std::sync::Arc;

    #[test]
    fn tract_runs_the_mlp_and_an_item_does_not_depend_on_its_batch() {
        let dir = std::env::temp_dir().join(format!("reamer-mlp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mlp.onnx");
        let shape = MlpShape {
            inputs: 8,
            width: 32,
            layers: 3,
            outputs: 5,
        };
        std::fs::write(&path, encode(shape)).unwrap();
        let model = Arc::new(Model::load("mlp", 1, &path, None, 4, Engine::Tract).unwrap());
        assert_eq!(model.signature.input_item_shape, vec![8]);
        assert_eq!(model.signature.outputs[0].item_shape, vec![5]);
        let items: Vec<f32> = (0..3 * 8).map(|k| (k % 11) as f32 / 11.0).collect();
        let mut session = Session::new(model);
        let together = session.run(&items, 3).unwrap();
        for (k, item) in items.chunks(8).enumerate() {
            let alone = session.run(item, 1).unwrap();
            assert_eq!(alone[0][0].len(), 5);
            for (a, b) in alone[0][0].iter().zip(&together[k][0]) {
                assert!(a.is_finite() && (a - b).abs() < 1e-4, "{a} vs {b}");
            }
        }
        // Different inputs give different answers: the weights are not degenerate.
        assert_ne!(together[0][0], together[1][0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
