//! The inference threads: plain OS threads (never the async runtime's), each with its own
//! session, pinned to the granted CPUs, pulling batches from the shared queue.
//!
//! A new configuration (threads, CPUs, batch size, batching delay) takes effect at each
//! thread's next batch: a batch in flight finishes as it started, requests waiting in the
//! queue stay there, and nothing is dropped. Surplus threads exit after their current batch;
//! missing ones are started at once.

use std::{
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{
    affinity,
    metrics::Metrics,
    model::Model,
    queue::{Job, JobQueue},
    session::{InferenceFailed, Session},
};

/// How the threads run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub threads: usize,
    pub cpus: Vec<u32>,
    pub max_batch: usize,
    pub batch_delay: Duration,
}

struct Control {
    config: Config,
    /// alive[i]: thread i runs. Read and written under the same lock as `config`, so a thread
    /// that decides to exit and a reconfiguration that wants it back cannot miss each other.
    alive: Vec<bool>,
    handles: Vec<JoinHandle<()>>,
}

struct Shared {
    queue: Arc<JobQueue>,
    model: RwLock<Arc<Model>>,
    control: Mutex<Control>,
    generation: AtomicU64,
    metrics: Arc<Metrics>,
}

pub struct Executor {
    shared: Arc<Shared>,
}

/// How long an idle thread waits for work before it looks at its configuration again.
const IDLE_RECHECK: Duration = Duration::from_millis(100);

impl Executor {
    pub fn start(
        model: Arc<Model>,
        queue: Arc<JobQueue>,
        config: Config,
        metrics: Arc<Metrics>,
    ) -> Self {
        let executor = Self {
            shared: Arc::new(Shared {
                queue,
                model: RwLock::new(model),
                control: Mutex::new(Control {
                    config: config.clone(),
                    alive: Vec::new(),
                    handles: Vec::new(),
                }),
                generation: AtomicU64::new(0),
                metrics,
            }),
        };
        executor.reconfigure(config);
        executor
    }

    pub fn queue(&self) -> &Arc<JobQueue> {
        &self.shared.queue
    }

    pub fn model(&self) -> Arc<Model> {
        self.shared.model.read().expect("model lock").clone()
    }

    /// Swaps in a new model: every thread moves to it at its next batch; batches in flight
    /// finish on the old one.
    pub fn swap_model(&self, model: Arc<Model>) {
        *self.shared.model.write().expect("model lock") = model;
    }

    pub fn config(&self) -> Config {
        self.shared
            .control
            .lock()
            .expect("control lock")
            .config
            .clone()
    }

    /// Threads alive now.
    pub fn threads(&self) -> usize {
        let control = self.shared.control.lock().expect("control lock");
        control.alive.iter().filter(|a| **a).count()
    }

    pub fn reconfigure(&self, mut config: Config) {
        config.threads = config.threads.max(1);
        config.max_batch = config.max_batch.max(1);
        let mut control = self.shared.control.lock().expect("control lock");
        control.config = config.clone();
        self.shared.generation.fetch_add(1, Relaxed);
        if control.alive.len() < config.threads {
            control.alive.resize(config.threads, false);
        }
        for index in 0..config.threads {
            if !control.alive[index] {
                control.alive[index] = true;
                let shared = self.shared.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("infer-{index}"))
                    .spawn(move || worker(shared, index))
                    .expect("spawn an inference thread");
                control.handles.push(handle);
            }
        }
        control.handles.retain(|h| !h.is_finished());
    }

    /// Closes the queue, lets the threads serve what it holds, and waits for them.
    pub fn shutdown(&self) {
        self.shared.queue.close();
        let handles =
            std::mem::take(&mut self.shared.control.lock().expect("control lock").handles);
        for handle in handles {
            let _ = handle.join();
        }
    }
}

fn worker(shared: Arc<Shared>, index: usize) {
    let mut session = Session::new(shared.model.read().expect("model lock").clone());
    if let Err(err) = session.prepare() {
        // The first batch tries again, and answers its requests with the error if it fails.
        tracing::warn!(thread = index, "cannot prepare the model's session: {err}");
    }
    let mut seen = u64::MAX;
    let mut config = None::<Config>;
    loop {
        let generation = shared.generation.load(Relaxed);
        if generation != seen {
            let mut control = shared.control.lock().expect("control lock");
            if index >= control.config.threads {
                control.alive[index] = false;
                return;
            }
            let new = control.config.clone();
            drop(control);
            if config.as_ref().is_none_or(|old| old.cpus != new.cpus)
                && let Err(err) = affinity::pin_current_thread(&new.cpus)
            {
                tracing::warn!(thread = index, cpus = ?new.cpus, "cannot pin to the granted CPUs: {err}");
            }
            config = Some(new);
            seen = generation;
        }
        let current = config.as_ref().expect("configured above");
        let Some(batch) =
            shared
                .queue
                .pop_batch(current.max_batch, current.batch_delay, IDLE_RECHECK)
        else {
            if shared.queue.is_closed_and_empty() {
                let mut control = shared.control.lock().expect("control lock");
                control.alive[index] = false;
                return;
            }
            continue;
        };
        session.follow(&shared.model.read().expect("model lock").clone());
        run_batch(&mut session, batch, &shared.metrics);
    }
}

fn run_batch(session: &mut Session, batch: Vec<Job>, metrics: &Metrics) {
    let items: usize = batch.iter().map(|j| j.items).sum();
    let mut input = Vec::with_capacity(items * session.model().signature.input_item_len());
    for job in &batch {
        input.extend_from_slice(&job.input);
    }
    let version = session.model().version;
    let started = Instant::now();
    let result = session.run(&input, items);
    tracing::trace!(items, elapsed = ?started.elapsed(), "batch");
    metrics.batches.fetch_add(1, Relaxed);
    metrics.batch_items.fetch_add(items as u64, Relaxed);
    match result {
        Ok(mut outputs) => {
            for job in batch.into_iter().rev() {
                let mine = outputs.split_off(outputs.len() - job.items);
                let _ = job.reply.send(Ok((version, mine)));
            }
        }
        Err(err) => {
            let failed = InferenceFailed(Arc::new(err));
            for job in batch {
                let _ = job.reply.send(Err(failed.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{engine::Engine, tiny_model};

    #[test]
    fn reconfiguring_under_load_drops_and_corrupts_no_request() {
        let dir = std::env::temp_dir().join(format!("reamer-executor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.onnx");
        std::fs::write(&path, tiny_model::encode(1)).unwrap();
        let model = Arc::new(Model::load("tiny", 1, &path, None, 4, Engine::Tract).unwrap());
        let cpus = affinity::allowed_cpus().unwrap();
        let config = |threads, max_batch| Config {
            threads,
            cpus: cpus.clone(),
            max_batch,
            batch_delay: Duration::from_micros(200),
        };
        let executor = Executor::start(
            model,
            Arc::new(JobQueue::new(10_000)),
            config(1, 1),
            Arc::new(Metrics::new(Duration::from_secs(1))),
        );
        let mut answers = Vec::new();
        for k in 0..600 {
            // Threads 1 -> 3 -> 2 -> 1 and batches 1 -> 4 -> 2 while requests keep coming.
            if k % 150 == 0 {
                let step = k / 150;
                executor.reconfigure(config([1, 3, 2, 1][step], [1, 4, 2, 4][step]));
            }
            let x: [f32; 4] = std::array::from_fn(|i| (k * 4 + i) as f32 / 100.0 - 1.0);
            let (reply, answer) = tokio::sync::oneshot::channel();
            executor
                .queue()
                .push(Job {
                    input: x.to_vec(),
                    items: 1,
                    enqueued: Instant::now(),
                    reply,
                })
                .unwrap();
            answers.push((x, answer));
        }
        executor.shutdown();
        for (x, answer) in answers {
            let (version, items) = answer
                .blocking_recv()
                .expect("a request was dropped")
                .unwrap();
            assert_eq!(version, 1);
            let want = tiny_model::expected(1, &x);
            for (got, want) in items[0][0].iter().zip(want) {
                assert!((got - want).abs() < 1e-4, "{x:?}: {got} != {want}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
