//! One worker thread's inference state, owned by that thread alone and rebuilt when the model
//! is swapped: a tract run state per plan, or an ONNX Runtime session.

use std::{collections::HashMap, sync::Arc};

use tract_onnx::prelude::*;

use crate::model::{Model, Runner};

/// Per output, one item's values.
pub type ItemOutputs = Vec<Vec<f32>>;

/// Why a batch could not be inferred.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{values} input values for {items} items of {item_len}")]
    InputLength {
        values: usize,
        items: usize,
        item_len: usize,
    },
    /// tract's own error (an `anyhow::Error`), with its chain.
    #[error("{0:#}")]
    Tract(TractError),
    #[error("ONNX Runtime: {0}")]
    OnnxRuntime(#[from] ort::Error),
}

impl From<TractError> for RunError {
    fn from(error: TractError) -> Self {
        Self::Tract(error)
    }
}

/// A batch's failure as each of its requests gets it: the same failure for all of them.
#[derive(Debug, Clone, thiserror::Error)]
#[error("inference failed: {0}")]
pub struct InferenceFailed(pub Arc<RunError>);

pub struct Session {
    model: Arc<Model>,
    /// tract: a run state per batch size, made on first use.
    states: HashMap<usize, TypedSimpleState>,
    /// ONNX Runtime: this thread's session, made on first use.
    ort: Option<ort::session::Session>,
}

impl Session {
    pub fn new(model: Arc<Model>) -> Self {
        Self {
            model,
            states: HashMap::new(),
            ort: None,
        }
    }

    /// Builds what the first batch would otherwise build (ONNX Runtime's session takes tens of
    /// milliseconds), so that no request waits for it.
    pub fn prepare(&mut self) -> Result<(), RunError> {
        if let Runner::OnnxRuntime(model) = &self.model.runner
            && self.ort.is_none()
        {
            self.ort = Some(model.session()?);
        }
        Ok(())
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Switches to `model` when it is not the one this session runs already.
    pub fn follow(&mut self, model: &Arc<Model>) {
        if !Arc::ptr_eq(&self.model, model) {
            self.model = model.clone();
            self.states.clear();
            self.ort = None;
        }
    }

    /// Runs `items` items laid out back to back in `input` (each `input_item_len` values) and
    /// returns, per item, its outputs.
    pub fn run(&mut self, input: &[f32], items: usize) -> Result<Vec<ItemOutputs>, RunError> {
        let signature = &self.model.signature;
        let item_len = signature.input_item_len();
        if input.len() != items * item_len {
            return Err(RunError::InputLength {
                values: input.len(),
                items,
                item_len,
            });
        }
        let tract = match &self.model.runner {
            Runner::Tract(tract) => tract,
            Runner::OnnxRuntime(model) => {
                let session = match &mut self.ort {
                    Some(session) => session,
                    empty => empty.insert(model.session()?),
                };
                return Ok(crate::ort_model::run(
                    model, session, signature, input, items,
                )?);
            }
        };
        let mut results = Vec::with_capacity(items);
        let mut offset = 0;
        for (batch, plan) in tract.split(items) {
            let state = match self.states.entry(batch) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(plan.spawn()?),
            };
            let mut shape = vec![batch];
            shape.extend_from_slice(&signature.input_item_shape);
            let tensor = Tensor::from_shape(
                &shape,
                &input[offset * item_len..(offset + batch) * item_len],
            )?;
            let outputs = state.run(tvec!(tensor.into()))?;
            for item in 0..batch {
                let mut per_output = Vec::with_capacity(outputs.len());
                for output in outputs.iter() {
                    let view = output.try_as_plain_ram()?;
                    let values = view.as_slice::<f32>()?;
                    let per_item = values.len() / batch;
                    per_output.push(values[item * per_item..(item + 1) * per_item].to_vec());
                }
                results.push(per_output);
            }
            offset += batch;
        }
        Ok(results)
    }
}
