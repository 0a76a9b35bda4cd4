//! A model on ONNX Runtime: its signature, read at load time, and one single-threaded session
//! per worker thread.
//!
//! Each session runs with one intra-op and one inter-op thread, so ONNX Runtime starts no
//! threads of its own: every operator runs on the worker thread that calls it, and that thread
//! is pinned to its granted CPU. A grant that shrinks moves ONNX Runtime's work with it, as it
//! does tract's. The sessions of one model share their pre-packed weights.
//!
//! Unlike tract, ONNX Runtime runs a symbolic batch dimension as it is, so a batch of any size
//! is one call.

use std::{path::Path, sync::Arc};

use ort::{
    session::{
        Session,
        builder::{GraphOptimizationLevel, PrepackedWeights},
    },
    value::{TensorElementType, TensorRef, ValueType},
};

use crate::{
    model::{ModelError, OutputSignature, Signature},
    ort_library,
    session::ItemOutputs,
};

/// What every thread's session is built from.
pub(crate) struct OrtModel {
    bytes: Arc<[u8]>,
    prepacked: PrepackedWeights,
    /// The model's batch dimension is fixed at 1.
    one_at_a_time: bool,
}

impl OrtModel {
    /// A new session for the calling thread.
    pub(crate) fn session(&self) -> ort::Result<Session> {
        let loaded = ort_library::loaded().ok_or_else(|| {
            ort::Error::new("ONNX Runtime is not loaded (the engine was not resolved first)")
        })?;
        Session::builder(&loaded.environment)?
            .with_optimization_level(GraphOptimizationLevel::All)?
            .with_intra_threads(1)?
            .with_inter_threads(1)?
            .with_parallel_execution(false)?
            .with_intra_op_spinning(false)?
            .with_prepacked_weights(&self.prepacked)?
            .commit_from_memory(&self.bytes)
    }
}

/// Reads the model at `path` (already read into `bytes`) with ONNX Runtime, and finds its
/// outputs' per-item shapes by running one item of zeros.
pub(crate) fn load(
    path: &Path,
    bytes: Vec<u8>,
    item_shape: Option<&[usize]>,
) -> Result<(Signature, OrtModel), ModelError> {
    let (corrupt, unsupported) = (ModelError::corrupt(path), ModelError::unsupported(path));
    let mut model = OrtModel {
        bytes: bytes.into(),
        prepacked: PrepackedWeights::new(),
        one_at_a_time: false,
    };
    let mut session = model.session().map_err(|e| corrupt(e.to_string()))?;
    if session.inputs().len() != 1 {
        return Err(unsupported(format!(
            "it has {} inputs; the worker serves single-input models",
            session.inputs().len()
        )));
    }
    let input = &session.inputs()[0];
    let input_name = input.name().to_owned();
    let ValueType::Tensor { ty, shape, .. } = input.dtype() else {
        return Err(unsupported(format!(
            "input {input_name} is not a tensor ({:?})",
            input.dtype()
        )));
    };
    if *ty != TensorElementType::Float32 {
        return Err(unsupported(format!(
            "input {input_name} is {ty:?}; the worker feeds FP32 tensors"
        )));
    }
    // ONNX Runtime runs the batch dimension as declared (tract's plans fix it instead): a model
    // exported with a batch of 1 runs a batch one item at a time.
    match shape.first() {
        Some(&1) => model.one_at_a_time = true,
        Some(&fixed) if fixed > 1 => {
            return Err(unsupported(format!(
                "input {input_name} has its batch dimension fixed at {fixed}; ONNX Runtime \
                 runs it as declared, so export it with a symbolic batch (or use --engine tract)"
            )));
        }
        _ => {}
    }
    let item_shape =
        crate::model::item_shape(path, &input_name, item_shape, || declared_item_shape(shape))?;
    let signature = Signature {
        input_name,
        input_item_shape: item_shape,
        outputs: Vec::new(),
    };
    let outputs = output_signatures(&mut session, &signature).map_err(unsupported)?;
    drop(session);
    Ok((
        Signature {
            outputs,
            ..signature
        },
        model,
    ))
}

/// The declared input shape without its first (batch) dimension, when every one of those
/// dimensions is a number (ONNX Runtime writes an open dimension as -1).
fn declared_item_shape(shape: &[i64]) -> Result<Vec<usize>, String> {
    if shape.is_empty() {
        return Err("its rank is not declared".to_owned());
    }
    shape[1..]
        .iter()
        .enumerate()
        .map(|(i, &dim)| {
            usize::try_from(dim).map_err(|_| format!("dimension {} is not fixed", i + 1))
        })
        .collect()
}

/// Output names and per-item shapes, from one item of zeros.
fn output_signatures(
    session: &mut Session,
    signature: &Signature,
) -> Result<Vec<OutputSignature>, String> {
    let names: Vec<String> = session
        .outputs()
        .iter()
        .map(|o| o.name().to_owned())
        .collect();
    let zeros = vec![0.0; signature.input_item_len()];
    let outputs = infer(session, signature, &zeros, 1)
        .map_err(|e| format!("ONNX Runtime cannot run one item of its input shape: {e}"))?;
    let shapes = outputs_of(&outputs, &names)?;
    Ok(names
        .into_iter()
        .zip(shapes)
        .map(|(name, shape)| OutputSignature {
            name,
            item_shape: shape[1..].to_vec(),
        })
        .collect())
}

/// Each output's shape, checked to be FP32 with the batch first.
fn outputs_of(
    outputs: &ort::session::SessionOutputs<'_>,
    names: &[String],
) -> Result<Vec<Vec<usize>>, String> {
    names
        .iter()
        .map(|name| {
            let (shape, _) = outputs[name.as_str()]
                .try_extract_tensor::<f32>()
                .map_err(|e| format!("output {name}: {e}; the worker returns FP32 tensors"))?;
            let shape: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
            if shape.first() != Some(&1) {
                return Err(format!(
                    "output {name} has shape {shape:?}: its first dimension is not the batch"
                ));
            }
            Ok(shape)
        })
        .collect()
}

fn infer<'s>(
    session: &'s mut Session,
    signature: &Signature,
    input: &[f32],
    items: usize,
) -> ort::Result<ort::session::SessionOutputs<'s>> {
    let mut shape = vec![items as i64];
    shape.extend(signature.input_item_shape.iter().map(|&d| d as i64));
    let tensor = TensorRef::from_array_view((shape, input))?;
    session.run(ort::inputs![signature.input_name.as_str() => tensor])
}

/// Runs `items` items laid out back to back in `input`, as one batch (or one by one, where the
/// model's batch is fixed at 1), and returns, per item, its outputs in the signature's order.
pub(crate) fn run(
    model: &OrtModel,
    session: &mut Session,
    signature: &Signature,
    input: &[f32],
    items: usize,
) -> ort::Result<Vec<ItemOutputs>> {
    if model.one_at_a_time && items > 1 {
        let item_len = signature.input_item_len();
        let mut results = Vec::with_capacity(items);
        for item in input.chunks(item_len) {
            results.extend(run_batch(session, signature, item, 1)?);
        }
        return Ok(results);
    }
    run_batch(session, signature, input, items)
}

fn run_batch(
    session: &mut Session,
    signature: &Signature,
    input: &[f32],
    items: usize,
) -> ort::Result<Vec<ItemOutputs>> {
    let outputs = infer(session, signature, input, items)?;
    let mut values = Vec::with_capacity(signature.outputs.len());
    for output in &signature.outputs {
        let (_, data) = outputs[output.name.as_str()].try_extract_tensor::<f32>()?;
        values.push(data);
    }
    Ok((0..items)
        .map(|item| {
            values
                .iter()
                .map(|data| {
                    let per_item = data.len() / items;
                    data[item * per_item..(item + 1) * per_item].to_vec()
                })
                .collect()
        })
        .collect())
}
