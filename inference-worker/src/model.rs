//! Loading an ONNX model with tract: fixed input facts, one optimized plan per batch size,
//! shared by every worker thread.
//!
//! tract cannot optimize the shipped PP-OCR models with a symbolic batch dimension (a Reshape
//! whose shape input depends on it stays variable: "shape input is variable"), so the batch is
//! fixed per plan. Plans exist for the powers of two up to the maximum batch; a batch of any
//! other size runs as its binary decomposition (5 = 4 + 1), so no work is padded.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use tract_onnx::{prelude::*, tract_hir::infer::Factoid as _};

/// An optimized, runnable plan for one batch size.
pub type Plan = Arc<TypedRunnableModel>;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read model file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("model file {path} is not a valid ONNX model: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("model file {path} is not supported: {reason}")]
    Unsupported { path: PathBuf, reason: String },
}

/// What the model takes and returns, per item (without the batch dimension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub input_name: String,
    pub input_item_shape: Vec<usize>,
    pub outputs: Vec<OutputSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSignature {
    pub name: String,
    pub item_shape: Vec<usize>,
}

impl Signature {
    pub fn input_item_len(&self) -> usize {
        self.input_item_shape.iter().product()
    }
}

/// A loaded model: its signature and its plans, ascending by batch size.
pub struct Model {
    pub name: String,
    /// 1 for the model loaded at start-up, then one more per hot reload.
    pub version: u64,
    pub path: PathBuf,
    pub signature: Signature,
    plans: Vec<(usize, Plan)>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("signature", &self.signature)
            .field("batch_sizes", &self.batch_sizes())
            .finish()
    }
}

impl Model {
    /// Loads `path`, fixing the input's item shape to `item_shape` (needed where the model
    /// leaves dimensions other than the batch open), and optimizes one plan per power of two
    /// up to `max_batch`.
    pub fn load(
        name: &str,
        version: u64,
        path: &Path,
        item_shape: Option<&[usize]>,
        max_batch: usize,
    ) -> Result<Self, ModelError> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Read {
            path: path.to_owned(),
            source,
        })?;
        let corrupt = |reason: String| ModelError::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let unsupported = |reason: String| ModelError::Unsupported {
            path: path.to_owned(),
            reason,
        };
        let model = tract_onnx::onnx()
            .model_for_read(&mut bytes.as_slice())
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
        let item_shape = match item_shape {
            Some(shape) => shape.to_vec(),
            None => declared_item_shape(fact).map_err(|reason| {
                unsupported(format!(
                    "input {input_name}: {reason}; give the item shape with --input-shape \
                     (for the PP-OCR classifier: --input-shape 3,48,192)"
                ))
            })?,
        };
        if item_shape.is_empty() || item_shape.contains(&0) {
            return Err(unsupported(format!(
                "input item shape {item_shape:?} is empty"
            )));
        }
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
        Ok(Self {
            name: name.to_owned(),
            version,
            path: path.to_owned(),
            signature,
            plans,
        })
    }

    pub fn batch_sizes(&self) -> Vec<usize> {
        self.plans.iter().map(|(b, _)| *b).collect()
    }

    pub fn max_batch(&self) -> usize {
        self.plans.last().map_or(1, |(b, _)| *b)
    }

    /// The plans a batch of `items` runs through, largest first (its binary decomposition
    /// over the available batch sizes).
    pub fn split(&self, mut items: usize) -> Vec<(usize, Plan)> {
        let mut parts = Vec::new();
        for (batch, plan) in self.plans.iter().rev() {
            while items >= *batch {
                parts.push((*batch, plan.clone()));
                items -= batch;
            }
        }
        parts
    }
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
