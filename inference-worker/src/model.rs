//! A loaded model: what it takes and returns, and the engine that runs it (tract, built in, or
//! ONNX Runtime, loaded at run time), shared by every worker thread.

use std::path::{Path, PathBuf};

use crate::{engine::Engine, ort_model::OrtModel, tract_model::TractModel};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The I/O error is in the message, not the error's source: `{:#}` would print it twice.
    #[error("cannot read model file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("model file {path} is not a valid ONNX model: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("model file {path} is not supported: {reason}")]
    Unsupported { path: PathBuf, reason: String },
}

impl ModelError {
    /// `Corrupt` for the file at `path`, from a reason.
    pub(crate) fn corrupt(path: &Path) -> impl Fn(String) -> Self + Copy + '_ {
        move |reason| Self::Corrupt {
            path: path.to_owned(),
            reason,
        }
    }

    /// `Unsupported` for the file at `path`, from a reason.
    pub(crate) fn unsupported(path: &Path) -> impl Fn(String) -> Self + Copy + '_ {
        move |reason| Self::Unsupported {
            path: path.to_owned(),
            reason,
        }
    }
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

/// A loaded model: its signature and the engine's form of it.
pub struct Model {
    pub name: String,
    /// 1 for the model loaded at start-up, then one more per hot reload.
    pub version: u64,
    pub path: PathBuf,
    pub signature: Signature,
    max_batch: usize,
    pub(crate) runner: Runner,
}

/// The engine's form of the model.
pub(crate) enum Runner {
    Tract(TractModel),
    OnnxRuntime(OrtModel),
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("engine", &self.engine())
            .field("signature", &self.signature)
            .field("batch_sizes", &self.batch_sizes())
            .finish()
    }
}

impl Model {
    /// Loads `path` with `engine`, fixing the input's item shape to `item_shape` (needed where
    /// the model leaves dimensions other than the batch open), for batches of up to `max_batch`
    /// items (rounded down to a power of two).
    pub fn load(
        name: &str,
        version: u64,
        path: &Path,
        item_shape: Option<&[usize]>,
        max_batch: usize,
        engine: Engine,
    ) -> Result<Self, ModelError> {
        let bytes = std::fs::read(path).map_err(|error| ModelError::Read {
            path: path.to_owned(),
            error,
        })?;
        let max_batch = 1 << max_batch.max(1).ilog2();
        let (signature, runner) = match engine {
            Engine::Tract => {
                let (signature, model) =
                    crate::tract_model::load(path, &bytes, item_shape, max_batch)?;
                (signature, Runner::Tract(model))
            }
            Engine::OnnxRuntime => {
                let (signature, model) = crate::ort_model::load(path, bytes, item_shape)?;
                (signature, Runner::OnnxRuntime(model))
            }
        };
        Ok(Self {
            name: name.to_owned(),
            version,
            path: path.to_owned(),
            signature,
            max_batch,
            runner,
        })
    }

    pub fn engine(&self) -> Engine {
        match self.runner {
            Runner::Tract(_) => Engine::Tract,
            Runner::OnnxRuntime(_) => Engine::OnnxRuntime,
        }
    }

    /// The batch sizes the start-up profile measures: the powers of two up to the maximum
    /// (tract's plans; ONNX Runtime runs any size, and is profiled at the same points).
    pub fn batch_sizes(&self) -> Vec<usize> {
        match &self.runner {
            Runner::Tract(model) => model.batch_sizes(),
            Runner::OnnxRuntime(_) => std::iter::successors(Some(1), |b| Some(b * 2))
                .take_while(|b| *b <= self.max_batch)
                .collect(),
        }
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// tract's plan for `batch`, where tract runs the model and has one.
    pub fn tract_plan(&self, batch: usize) -> Option<crate::tract_model::Plan> {
        match &self.runner {
            Runner::Tract(model) => model.plan(batch),
            Runner::OnnxRuntime(_) => None,
        }
    }
}

/// The input's item shape: the one given (`--input-shape`), else the one the model declares
/// (`declared`, or why it declares none); never empty.
pub(crate) fn item_shape(
    path: &Path,
    input_name: &str,
    given: Option<&[usize]>,
    declared: impl FnOnce() -> Result<Vec<usize>, String>,
) -> Result<Vec<usize>, ModelError> {
    let unsupported = ModelError::unsupported(path);
    let shape = match given {
        Some(shape) => shape.to_vec(),
        None => declared().map_err(|reason| {
            unsupported(format!(
                "input {input_name}: {reason}; give the item shape with --input-shape \
                 (for the PP-OCR classifier: --input-shape 3,48,192)"
            ))
        })?,
    };
    if shape.is_empty() || shape.contains(&0) {
        return Err(unsupported(format!("input item shape {shape:?} is empty")));
    }
    Ok(shape)
}
