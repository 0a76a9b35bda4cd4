//! A daemon running: the event thread, the periodic loops, the watchdog, the control socket,
//! /metrics and the pod watch, started from a built daemon; and the shutdown that stops them
//! and leaves nothing starved or frozen.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use tokio::task::JoinHandle as TaskHandle;
use tracing::info;

use super::{
    DaemonError, built::Daemon, event_thread, fatal, loops, metrics, pods, release, server,
    state::Shared, watchdog,
};
use crate::{
    actuate::decision_log::DecisionLogWriter,
    gpu::service::GpuService,
    host::{
        paths,
        systemd::{self, Notifier},
    },
};

/// The daemon's threads and tasks, until `shutdown`.
pub struct Running {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    tasks: Vec<TaskHandle<()>>,
    socket_path: PathBuf,
    log_writer: DecisionLogWriter,
}

impl Daemon {
    /// Starts enforcing: the event thread first (the fast path), then the periodic loops, the
    /// control socket, /metrics, the pod watch and the watchdog. Needs a Tokio runtime.
    pub fn spawn(self) -> Result<Running, DaemonError> {
        let Daemon {
            settings,
            shared,
            ring,
            log_writer,
            socket_path,
            listener,
            metrics_listener,
            control,
        } = self;
        let instance = shared.instance.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let mut running = Running {
            shared,
            stop,
            threads: Vec::new(),
            tasks: Vec::new(),
            socket_path,
            log_writer,
        };
        let thread_error = |what| move |error| DaemonError::Thread { what, error };
        let consumer = {
            let shared = &running.shared;
            let (tally, enforcement, heartbeat, stop) = (
                shared.tally.clone(),
                shared.enforcement.clone(),
                shared.heartbeat.clone(),
                running.stop.clone(),
            );
            let priority = settings.event_thread_rt_priority;
            let instance = instance.clone();
            std::thread::Builder::new()
                .name(event_thread::THREAD_NAME.to_owned())
                .spawn(move || {
                    let consumed = event_thread::consume_blocking(
                        ring,
                        tally,
                        enforcement,
                        priority,
                        heartbeat,
                        stop,
                    );
                    if let Err(err) = consumed {
                        fatal::exit(
                            &instance,
                            &format!("polling the event ring buffer failed: {err}"),
                        );
                    }
                })
        };
        // A part that cannot start stops those already started, and releases the pools.
        let started = (|| {
            running
                .threads
                .push(consumer.map_err(thread_error("event thread"))?);
            let shared = &running.shared;
            let stop = &running.stop;
            running.threads.push(
                loops::spawn_periodic(
                    "reamer-tick",
                    settings.tick,
                    stop.clone(),
                    loops::tick(shared),
                )
                .map_err(thread_error("tick thread"))?,
            );
            running.threads.push(
                loops::spawn_periodic(
                    "reamer-reconcile",
                    loops::RECONCILE_INTERVAL,
                    stop.clone(),
                    loops::reconcile(shared),
                )
                .map_err(thread_error("reconcile thread"))?,
            );
            if shared.gpu.get().is_some_and(GpuService::gates) {
                running.threads.push(
                    loops::spawn_periodic(
                        "reamer-gpu-rise",
                        loops::GPU_RISE_PERIOD,
                        stop.clone(),
                        loops::gpu_rise(shared),
                    )
                    .map_err(thread_error("GPU signal thread"))?,
                );
            }
            running.tasks.push(tokio::spawn(server::serve(
                listener,
                shared.clone(),
                control,
            )));
            if let Some(kubernetes) = settings.kubernetes.clone() {
                running
                    .tasks
                    .push(pods::start(shared.clone(), kubernetes, &settings.pools));
            }
            if let Some(listener) = metrics_listener {
                running.tasks.push(tokio::spawn(metrics::serve(
                    listener,
                    metrics::router(shared.clone()),
                )));
            }
            if let Some(addr) = &shared.metrics_addr {
                info!("metrics on http://{addr}/metrics");
            }
            let watchdog = watchdog::start(
                Notifier::from_env(),
                systemd::watchdog_period(),
                shared.heartbeat.clone(),
                shared.enforcement.clone(),
                stop.clone(),
            )
            .map_err(thread_error("watchdog thread"))?;
            running.threads.extend(watchdog);
            Ok(())
        })();
        if let Err(err) = started {
            // Not async: a runtime may not be at hand where this fails. Tasks are aborted.
            running.stop_parts();
            release::release(running.shared, &running.socket_path, running.log_writer);
            return Err(err);
        }
        info!(
            instance,
            socket = %running.socket_path.display(),
            pins = %paths::pin_dir(&instance).display(),
            "enforcer running"
        );
        Ok(running)
    }
}

impl Running {
    /// Stops every thread and task, then leaves every inference process runnable, removes
    /// the pins and detaches the sensor. Every decision logged before is in the file when it
    /// returns.
    pub async fn shutdown(mut self) {
        let tasks = self.stop_parts();
        for task in tasks {
            let _ = task.await;
        }
        release::release(self.shared, &self.socket_path, self.log_writer);
        info!("sensor detached, pins removed");
    }

    /// Tells the threads to stop and joins them, stops the GPU side, and aborts the tasks
    /// (returned, to be awaited where a runtime runs).
    fn stop_parts(&mut self) -> Vec<TaskHandle<()>> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        if let Some(gpu) = self.shared.gpu.get() {
            gpu.shutdown();
        }
        let tasks: Vec<TaskHandle<()>> = self.tasks.drain(..).collect();
        for task in &tasks {
            task.abort();
        }
        tasks
    }
}
