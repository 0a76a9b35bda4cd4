//! A model on tract: fixed input facts, one optimized plan per batch size, shared by every
//! worker thread.
//!
//! tract cannot optimize the shipped PP-OCR models with a symbolic batch dimension (a Reshape
//! whose shape input depends on it stays variable: "shape input is variable"), so the batch is
//! fixed per plan. Plans exist for the powers of two up to the maximum batch; a batch of any
//! other size runs as its binary decomposition (5 = 4 + 1), so no work is padded.

use std::{path::Path, sync::Arc};

use tract_onnx::{prelude::*, tract_hir::infer::Factoid as _};

use crate::model::{ModelError, OutputSignature, Signature};

/// An optimized, runnable plan for one batch size.
pub type Plan = Arc<TypedRunnableModel>;

/// Plans ascending by batch size.
pub(crate) struct TractModel {
    plans: Vec<(usize, Plan)>,
}

impl TractModel {
    pub(crate) fn batch_sizes(&self) -> Vec<usize> {
        self.plans.iter().map(|(b, _)| *b).collect()
    }

    /// The plans a batch of `items` runs through, largest first (its binary decomposition
    /// over the available batch sizes).
    pub(crate) fn split(&self, mut items: usize) -> Vec<(usize, Plan)> {
        let mut parts = Vec::new();
        for (batch, plan) in self.plans.iter().rev() {
            while items >= *batch {
                parts.push((*batch, plan.clone()));
                items -= batch;
            }
        }
        parts
    }

    pub(crate) fn plan(&self, batch: usize) -> Option<Plan> {
        self.plans
            .iter()
            .find(|(b, _)| *b == batch)
            .map(|(_, plan)| plan.clone())
    }
}

/// Reads the model at `path` (already read into `bytes`) with tract, and optimizes one plan per
/// power of two up to `max_batch`.
pub(crate) fn load(
    path: &Path,
    bytes: &[u8],
    item_shape: Option<&[usize]>,
    max_batch: usize,
) -> Result<(Signature, TractModel), ModelError> {
    let (corrupt, unsupported) = (ModelError::corrupt(path), ModelError::unsupported(path));
    let model = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .map_err(|e| corrupt(format!("{e:#}")))?;
    let inputs = model
        .input_outlets()
        .map_err(|e| corrupt(format!("{e:#}")))?;
    if inputs.len() != 1 {
        return Err(unsupported(format!(
            "it has {} inputs; the worker serves single-input models",
            inputs.len()
        )));
    }
    let input_name = model.node(inputs[0].node).name.clone();
    let fact = model.input_fact(0).map_err(|e| corrupt(format!("{e:#}")))?;
    if let Some(dt) = fact.datum_type.concretize()
        && dt != f32::datum_type()
    {
        return Err(unsupported(format!(
            "input {input_name} is {dt:?}; the worker feeds FP32 tensors"
        )));
    }
    let item_shape =
        crate::model::item_shape(path, &input_name, item_shape, || declared_item_shape(fact))?;
    let mut plans = Vec::new();
    let mut batch = 1;
    while batch <= max_batch.max(1) {
        let mut shape = vec![batch];
        shape.extend_from_slice(&item_shape);
        let plan = model
            .clone()
            .with_input_fact(0, f32::fact(&shape).into())
            .and_then(|m| m.into_optimized())
            .and_then(|m| m.into_runnable())
            .map_err(|e| {
                unsupported(format!(
                    "tract cannot build a plan for input shape {shape:?}: {e:#}"
                ))
            })?;
        plans.push((batch, plan));
        batch *= 2;
    }
    let signature = Signature {
        input_name,
        input_item_shape: item_shape,
        outputs: output_signatures(&plans[0].1).map_err(unsupported)?,
    };
    Ok((signature, TractModel { plans }))
}

/// The input's declared shape without its first (batch) dimension, when every one of those
/// dimensions is a number.
fn declared_item_shape(fact: &InferenceFact) -> Result<Vec<usize>, String> {
    let dims: Vec<_> = fact.shape.dims().collect();
    if fact.shape.is_open() || dims.is_empty() {
        return Err("its rank is not declared".to_owned());
    }
    dims[1..]
        .iter()
        .enumerate()
        .map(|(i, dim)| {
            dim.concretize()
                .and_then(|d| d.as_i64())
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| format!("dimension {} is not fixed ({dim:?})", i + 1))
        })
        .collect()
}

/// Output names and per-item shapes, read from the batch-1 plan.
fn output_signatures(plan: &Plan) -> Result<Vec<OutputSignature>, String> {
    let model = plan.model();
    model
        .output_outlets()
        .map_err(|e| format!("{e:#}"))?
        .iter()
        .map(|outlet| {
            let fact = model.outlet_fact(*outlet).map_err(|e| format!("{e:#}"))?;
            if fact.datum_type != f32::datum_type() {
                return Err(format!(
                    "output {} is {:?}; the worker returns FP32 tensors",
                    model.node(outlet.node).name,
                    fact.datum_type
                ));
            }
            let shape = fact
                .shape
                .as_concrete()
                .ok_or_else(|| format!("output shape {:?} is not fixed", fact.shape))?;
            if shape.first() != Some(&1) {
                return Err(format!(
                    "output {} has shape {shape:?}: its first dimension is not the batch",
                    model.node(outlet.node).name
                ));
            }
            Ok(OutputSignature {
                name: model
                    .outlet_label(*outlet)
                    .map_or_else(|| model.node(outlet.node).name.clone(), str::to_owned),
                item_shape: shape[1..].to_vec(),
            })
        })
        .collect()
}
