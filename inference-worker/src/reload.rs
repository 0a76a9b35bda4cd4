//! Hot reload: a new model file, written in place the way a training job exports a checkpoint,
//! is loaded beside the serving one and swapped in between batches. Requests in flight finish
//! on the old model, queued ones run on the new; none is dropped.
//!
//! A writer may be caught half-way: the file is loaded only once its size and modification
//! time have held still for one poll, and a file that does not load (or changes the inputs or
//! outputs the queued requests were checked against) is logged and skipped, the old model serving on.

use std::{
    path::PathBuf,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, SystemTime},
};

use crate::{executor::Executor, metrics::Metrics, model::Model};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: SystemTime,
}

fn stamp(path: &PathBuf) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok()?,
    })
}

pub struct Watch {
    pub path: PathBuf,
    pub item_shape: Option<Vec<usize>>,
    pub max_batch: usize,
    pub poll: Duration,
}

/// Polls the model file on a thread of its own and swaps each new, loadable version in.
pub fn spawn(watch: Watch, executor: Arc<Executor>, metrics: Arc<Metrics>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("model-reload".into())
        .spawn(move || {
            let mut loaded = stamp(&watch.path);
            let mut pending: Option<Stamp> = None;
            loop {
                std::thread::sleep(watch.poll);
                let now = stamp(&watch.path);
                if now.is_none() || now == loaded {
                    pending = None;
                    continue;
                }
                // Changed: wait until it holds still for one poll.
                if pending != now {
                    pending = now;
                    continue;
                }
                pending = None;
                loaded = now;
                let current = executor.model();
                match Model::load(
                    &current.name,
                    current.version + 1,
                    &watch.path,
                    watch.item_shape.as_deref(),
                    watch.max_batch,
                    current.engine(),
                ) {
                    Ok(model) if model.signature != current.signature => {
                        metrics.reload_failures.fetch_add(1, Relaxed);
                        tracing::error!(
                            "the new model file {} has signature {:?}, the serving one {:?}; \
                         keeping version {} (restart the worker to change inputs or outputs)",
                            watch.path.display(),
                            model.signature,
                            current.signature,
                            current.version
                        );
                    }
                    Ok(model) => {
                        let version = model.version;
                        executor.swap_model(Arc::new(model));
                        metrics.reloads.fetch_add(1, Relaxed);
                        tracing::info!(
                            "model reloaded from {}: version {version}",
                            watch.path.display()
                        );
                    }
                    Err(err) => {
                        metrics.reload_failures.fetch_add(1, Relaxed);
                        tracing::error!("{err}; keeping version {}", current.version);
                    }
                }
            }
        })?;
    Ok(())
}
