//! Which engine runs the model: tract (built in) or ONNX Runtime (loaded at run time), and how
//! the default is chosen.
//!
//! Which is faster depends on the model and the host. `cargo xtask bench --only worker` found
//! ONNX Runtime 1.2x to 7.2x faster per core on the shipped PP-OCR CNNs, and the two within
//! 15% of each other on the co-location benchmark's MLP, either ahead by batch size. So `auto`
//! measures, the way that benchmark does, on the model at hand: where ONNX Runtime's library
//! loads, it loads the model on both engines, times a few batches of the size the worker will
//! run on one thread, engines interleaved, and keeps the faster. Where the library does not
//! load, tract runs the model: the worker always starts.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    model::{Model, ModelError},
    ort_library::{self, LibraryError},
    session::{RunError, Session},
};

/// The engine a model is loaded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Tract,
    OnnxRuntime,
}

impl Engine {
    /// Its name in logs, status, metrics and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tract => "tract",
            Self::OnnxRuntime => "onnxruntime",
        }
    }

    /// Its KServe v2 `platform` (Triton's names).
    pub fn platform(self) -> &'static str {
        match self {
            Self::Tract => "onnx_tract",
            Self::OnnxRuntime => "onnxruntime_onnx",
        }
    }
}

/// What the operator asked for with `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EngineChoice {
    /// The faster of the two on the model at hand, timed at start; tract where ONNX Runtime's
    /// library does not load.
    #[default]
    Auto,
    /// tract, built into the worker.
    Tract,
    /// ONNX Runtime: an error when its library cannot be loaded.
    #[value(name = "onnxruntime", alias = "ort")]
    OnnxRuntime,
}

/// Why the model could not be loaded on an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Library(#[from] LibraryError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("timing the model to choose its engine: {0}")]
    Timing(#[from] RunError),
}

/// What to load, and for which batch size the engines are compared.
#[derive(Debug, Clone)]
pub struct ModelSpec<'a> {
    pub name: &'a str,
    pub path: &'a Path,
    pub item_shape: Option<&'a [usize]>,
    pub max_batch: usize,
    /// The batch the worker will mostly run: `auto` compares the engines at it.
    pub typical_batch: usize,
}

/// Loads the model on the engine `choice` settles on (`library`: the ONNX Runtime the
/// operator named, if any).
pub fn load_model(
    choice: EngineChoice,
    library: Option<&PathBuf>,
    spec: &ModelSpec<'_>,
) -> Result<Model, EngineError> {
    let load = |engine| {
        Model::load(
            spec.name,
            1,
            spec.path,
            spec.item_shape,
            spec.max_batch,
            engine,
        )
    };
    let engine = resolve(choice, library)?;
    if choice != EngineChoice::Auto || engine == Engine::Tract {
        return Ok(load(engine)?);
    }
    // A model one engine cannot load (an operator it lacks, a shape it cannot plan) runs on
    // the other; one neither loads gets ONNX Runtime's reason.
    let (ort, tract) = match (load(Engine::OnnxRuntime), load(Engine::Tract)) {
        (Ok(ort), Ok(tract)) => (Arc::new(ort), Arc::new(tract)),
        (Ok(ort), Err(err)) => {
            tracing::info!("engine: onnxruntime (auto: tract cannot run the model: {err})");
            return Ok(ort);
        }
        (Err(err), Ok(tract)) => {
            tracing::info!("engine: tract (auto: ONNX Runtime cannot run the model: {err})");
            return Ok(tract);
        }
        (Err(err), Err(_)) => return Err(err.into()),
    };
    let batch = spec.typical_batch.clamp(1, ort.max_batch());
    let (ort_time, tract_time) = time_both(&ort, &tract, batch)?;
    let (kept, dropped) = if ort_time <= tract_time {
        (ort, tract)
    } else {
        (tract, ort)
    };
    tracing::info!(
        "engine: {} (auto: a batch of {batch} took {ort_time:.2?} on ONNX Runtime, \
         {tract_time:.2?} on tract, on one thread here)",
        kept.engine().name()
    );
    drop(dropped);
    Ok(Arc::into_inner(kept).expect("no session holds the model any more"))
}

/// Timed runs per engine in `auto`'s comparison, after one warm-up run each.
const COMPARISON_RUNS: usize = 3;

/// The median time of a batch of `batch` items on each engine (ONNX Runtime's, tract's), on
/// the calling thread, runs interleaved so that drift hits both.
fn time_both(
    ort: &Arc<Model>,
    tract: &Arc<Model>,
    batch: usize,
) -> Result<(Duration, Duration), RunError> {
    let input = crate::bench::sample_input(batch * ort.signature.input_item_len());
    let mut sessions = [Session::new(ort.clone()), Session::new(tract.clone())];
    let mut times = [Vec::new(), Vec::new()];
    for run in 0..=COMPARISON_RUNS {
        for (session, times) in sessions.iter_mut().zip(&mut times) {
            let started = Instant::now();
            session.run(&input, batch)?;
            if run > 0 {
                times.push(started.elapsed());
            }
        }
    }
    let [ort_times, tract_times] = times.map(|mut t| {
        t.sort();
        t[t.len() / 2]
    });
    Ok((ort_times, tract_times))
}

/// Settles `choice` into an engine, loading ONNX Runtime where it is wanted. `library` is the
/// path the operator gave; without one, the default places are tried. `auto` gives ONNX
/// Runtime where it loads: `load_model` then compares the two.
pub fn resolve(choice: EngineChoice, library: Option<&PathBuf>) -> Result<Engine, LibraryError> {
    if choice == EngineChoice::Tract {
        return Ok(Engine::Tract);
    }
    let found = match library {
        Some(path) => Ok(path.clone()),
        None => ort_library::find(&ort_library::default_candidates()),
    };
    let loaded = found.and_then(|path| ort_library::load(&path));
    match loaded {
        Ok(loaded) => {
            tracing::info!(
                "ONNX Runtime {} loaded from {}",
                loaded.version,
                loaded.path.display()
            );
            Ok(Engine::OnnxRuntime)
        }
        // A library the operator asked for must load: falling back would hide the mistake.
        Err(err) if choice == EngineChoice::OnnxRuntime || library.is_some() => Err(err),
        Err(err) => {
            tracing::info!("engine: tract, since {err}");
            Ok(Engine::Tract)
        }
    }
}
