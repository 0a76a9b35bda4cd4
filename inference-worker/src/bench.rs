//! `inference-worker bench`: the engine's latency per batch size on one pinned thread, the
//! figure compared against ONNX Runtime's Python binding (also single-threaded) in
//! docs/benchmarks.md; and, with `--ops` on tract, where that time goes, per operator type.

use std::{collections::BTreeMap, sync::Arc, time::Instant};

use tract_onnx::{prelude::*, tract_core::plan::eval};

use serde::Serialize;

use crate::{
    affinity,
    model::Model,
    session::{RunError, Session},
};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("pinning the benchmark thread: {0}")]
    Pin(#[from] std::io::Error),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(
        "no tract plan for batch {0}: the per-operator profile is tract's (--engine tract), \
         at a power of two up to the maximum batch"
    )]
    NoPlan(usize),
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

impl From<TractError> for BenchError {
    fn from(error: TractError) -> Self {
        Self::Run(RunError::Tract(error))
    }
}

/// `len` input values in [0, 1), the same on every call: the models are image CNNs fed
/// normalized pixels. What every timing of the worker feeds (this benchmark, `auto`'s engine
/// comparison).
pub(crate) fn sample_input(len: usize) -> Vec<f32> {
    (0..len).map(|i| (i % 251) as f32 / 251.0).collect()
}

#[derive(Debug, Serialize)]
pub struct BatchLatency {
    pub batch: usize,
    pub runs: usize,
    pub p50_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

/// Runs each batch size `warmup` times unmeasured, then `runs` times measured, on one thread
/// pinned to `cpu`.
pub fn measure(
    model: &Arc<Model>,
    batches: &[usize],
    runs: usize,
    warmup: usize,
    cpu: u32,
) -> Result<Vec<BatchLatency>, BenchError> {
    let model = model.clone();
    let batches = batches.to_vec();
    std::thread::spawn(move || {
        affinity::pin_current_thread(&[cpu])?;
        let mut session = Session::new(model.clone());
        batches
            .iter()
            .map(|&batch| {
                let input = sample_input(batch * model.signature.input_item_len());
                for _ in 0..warmup {
                    session.run(&input, batch)?;
                }
                let mut ms: Vec<f64> = (0..runs.max(1))
                    .map(|_| {
                        let started = Instant::now();
                        session
                            .run(&input, batch)
                            .map(|_| started.elapsed().as_secs_f64() * 1e3)
                    })
                    .collect::<Result<_, RunError>>()?;
                ms.sort_by(f64::total_cmp);
                Ok(BatchLatency {
                    batch,
                    runs: ms.len(),
                    p50_ms: ms[ms.len() / 2],
                    min_ms: ms[0],
                    max_ms: ms[ms.len() - 1],
                })
            })
            .collect()
    })
    .join()
    .map_err(|_| BenchError::Panicked("benchmark"))?
}

/// Time spent in one operator type over the profiled runs.
#[derive(Debug, Serialize)]
pub struct OpTime {
    pub op: String,
    pub nodes: usize,
    pub ms_per_run: f64,
    pub share_pct: f64,
}

/// Times every node of the batch-`batch` plan over `runs` runs (after one warm-up) on a
/// thread pinned to `cpu`, and sums the times per operator type, largest first.
pub fn op_profile(
    model: &Arc<Model>,
    batch: usize,
    runs: usize,
    cpu: u32,
) -> Result<Vec<OpTime>, BenchError> {
    let plan = model.tract_plan(batch).ok_or(BenchError::NoPlan(batch))?;
    let item_shape = model.signature.input_item_shape.clone();
    std::thread::spawn(move || -> Result<Vec<OpTime>, BenchError> {
        affinity::pin_current_thread(&[cpu])?;
        let mut shape = vec![batch];
        shape.extend_from_slice(&item_shape);
        let len: usize = shape.iter().product();
        let input = sample_input(len);
        let tensor = Tensor::from_shape(&shape, &input)?;
        let mut state = plan.spawn()?;
        state.run(tvec!(tensor.clone().into()))?;
        let mut per_op: BTreeMap<String, (std::collections::BTreeSet<usize>, f64)> =
            BTreeMap::new();
        for _ in 0..runs.max(1) {
            state.run_plan_with_eval(
                tvec!(tensor.clone().into()),
                |ctx, op_state, node, inputs| {
                    let started = Instant::now();
                    let outputs = eval(ctx, op_state, node, inputs);
                    let entry = per_op.entry(node.op().name().to_string()).or_default();
                    entry.0.insert(node.id);
                    entry.1 += started.elapsed().as_secs_f64() * 1e3;
                    outputs
                },
            )?;
        }
        let total: f64 = per_op.values().map(|(_, ms)| ms).sum();
        let mut ops: Vec<OpTime> = per_op
            .into_iter()
            .map(|(op, (nodes, ms))| OpTime {
                op,
                nodes: nodes.len(),
                ms_per_run: ms / runs.max(1) as f64,
                share_pct: 100.0 * ms / total.max(1e-12),
            })
            .collect();
        ops.sort_by(|a, b| b.ms_per_run.total_cmp(&a.ms_per_run));
        Ok(ops)
    })
    .join()
    .map_err(|_| BenchError::Panicked("profiling"))?
}
