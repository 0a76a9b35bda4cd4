//! `inference-worker bench`: tract's latency per batch size on one pinned thread, the figure
//! compared against ONNX Runtime (also single-threaded) in docs/benchmarks.md.

use std::{sync::Arc, time::Instant};

use serde::Serialize;

use crate::{affinity, model::Model, session::Session};

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
pub fn measure(model: &Arc<Model>, batches: &[usize], runs: usize, warmup: usize, cpu: u32) -> anyhow::Result<Vec<BatchLatency>> {
    let model = model.clone();
    let batches = batches.to_vec();
    std::thread::spawn(move || {
        affinity::pin_current_thread(&[cpu])?;
        let mut session = Session::new(model.clone());
        batches
            .iter()
            .map(|&batch| {
                // Values in [0, 1): the models are image CNNs fed normalized pixels.
                let input: Vec<f32> = (0..batch * model.signature.input_item_len())
                    .map(|i| (i % 251) as f32 / 251.0)
                    .collect();
                for _ in 0..warmup {
                    session.run(&input, batch)?;
                }
                let mut ms: Vec<f64> = (0..runs.max(1))
                    .map(|_| {
                        let started = Instant::now();
                        session.run(&input, batch).map(|_| started.elapsed().as_secs_f64() * 1e3)
                    })
                    .collect::<anyhow::Result<_>>()?;
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
    .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))?
}
