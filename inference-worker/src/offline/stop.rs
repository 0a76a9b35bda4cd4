//! SIGTERM and SIGINT end an offline run at its next batch: the batches in flight finish,
//! their results and a checkpoint are written, and the worker exits with the job resumable.
//! Killed outright instead, the next run redoes what was done since the last checkpoint.
//! A relaunch (`enforcer launch --relaunch`), an eviction and `systemctl stop` all send
//! SIGTERM first.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // A store to an atomic is async-signal-safe.
    REQUESTED.store(true, Ordering::Relaxed);
}

/// A stop signal whose handler the kernel refused.
#[derive(Debug, thiserror::Error)]
#[error("cannot handle signal {signal}: {error}")]
pub struct HandlerRefused {
    pub signal: libc::c_int,
    pub error: std::io::Error,
}

/// Installs the handlers; from then on `requested` says whether a stop was asked.
pub fn install() -> Result<(), HandlerRefused> {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a plain sigaction with a handler that only stores to an atomic.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(signal, &raw const action, std::ptr::null_mut())
        };
        if installed != 0 {
            return Err(HandlerRefused {
                signal,
                error: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}
