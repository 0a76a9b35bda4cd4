//! What a daemon leaves behind when it stops, or when it fails to start after loading the
//! sensor: no control socket, every inference process runnable, no pins.

use std::{path::Path, sync::Arc};

use tracing::{info, warn};

use super::state::Shared;
use crate::actuate::{decision_log::DecisionLogWriter, thread_policy};

/// Removes the control socket, leaves every inference process runnable, removes the pins and
/// detaches the sensor, then closes the decision log. Connection tasks (a worker's grant
/// stream, say) may still hold the shared state, so this works through the locks, whatever
/// state a panicked holder left them in. The programs detach when the process's links close:
/// explicitly below when nothing else holds the sensor, at exit otherwise.
pub(super) fn release(shared: Arc<Shared>, socket_path: &Path, log_writer: DecisionLogWriter) {
    let _ = std::fs::remove_file(socket_path);
    let offline_threads = shared
        .registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .offline_threads();
    let normal = thread_policy::make_normal(offline_threads);
    if let Some(err) = normal.last_error {
        warn!(
            failed = normal.failed,
            "offline threads left SCHED_IDLE at shutdown (needs CAP_SYS_NICE): {err}"
        );
    }
    shared
        .enforcement
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .shutdown(&shared.instance);
    info!(
        offline_threads_made_normal = normal.changed,
        "inference pools released: every CPU, no idle class, thawed"
    );
    shared
        .journal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .close();
    shared
        .sensor
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unpin();
    if let Some(shared) = Arc::into_inner(shared) {
        drop(
            shared
                .sensor
                .into_inner()
                .unwrap_or_else(|e| e.into_inner()),
        );
    }
    // Every decision logged before the shutdown is in the file when the daemon exits.
    log_writer.close();
}
