//! The service manager's watchdog (`WatchdogSec` in the unit), fed only while the event path
//! is alive: the event thread came back from poll(2) recently, and the enforcement lock it
//! takes for every event can be taken. A daemon whose event thread is stuck or gone, or whose
//! enforcement lock is held forever, stops feeding it, and systemd kills and restarts it.
//! `READY=1` is sent once the daemon serves, which a `Type=notify` unit waits for.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tracing::{info, warn};

use super::{
    enforcement::Enforcement,
    heartbeat::{Heartbeat, POLL_TIMEOUT_MS},
};
use crate::host::systemd::Notifier;

/// The event path is alive: its thread beat within a few of its poll timeouts, and the
/// enforcement lock was free within `wait`.
fn event_path_alive(
    heartbeat: &Heartbeat,
    enforcement: &Mutex<Enforcement>,
    wait: Duration,
) -> bool {
    event_path_problem(heartbeat, enforcement, wait).is_none()
}

/// What is wrong with the event path, if anything (`event_path_alive`): for the watchdog, and
/// for `enforcer health` and the Kubernetes probes (`Request::Health`).
pub(crate) fn event_path_problem<T>(
    heartbeat: &Heartbeat,
    enforcement: &Mutex<T>,
    wait: Duration,
) -> Option<String> {
    let poll = Duration::from_millis(POLL_TIMEOUT_MS as u64);
    let age = heartbeat.age();
    if age > poll * 5 {
        return Some(format!(
            "the event thread has not come back from poll(2) for {:.1} s (it does every {} ms)",
            age.as_secs_f64(),
            poll.as_millis()
        ));
    }
    let deadline = std::time::Instant::now() + wait;
    loop {
        match enforcement.try_lock() {
            Ok(_) => return None,
            // A poisoned lock is one a panic left: the panic hook ends the daemon anyway.
            Err(std::sync::TryLockError::Poisoned(_)) => {
                return Some("the enforcement lock was poisoned by a panic".to_owned());
            }
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        if std::time::Instant::now() >= deadline {
            return Some(format!(
                "the enforcement lock, which every event takes, was held for over {} ms",
                wait.as_millis()
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Tells the manager the daemon serves, and, where it set a watchdog period, starts the thread
/// that feeds it at half that period while the event path is alive. Returns that thread.
pub(crate) fn start(
    notifier: Option<Notifier>,
    period: Option<Duration>,
    heartbeat: Arc<Heartbeat>,
    enforcement: Arc<Mutex<Enforcement>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let Some(notifier) = notifier else {
        return Ok(None);
    };
    if let Err(err) = notifier.notify("READY=1") {
        warn!("telling the service manager the daemon is ready failed: {err}");
    }
    let Some(period) = period else {
        return Ok(None);
    };
    info!(
        ?period,
        "feeding the service manager's watchdog while the event path is alive"
    );
    let every = period / 2;
    std::thread::Builder::new()
        .name("reamer-watchdog".to_owned())
        .spawn(move || {
            let mut starving = false;
            while !stop.load(Ordering::Relaxed) {
                if event_path_alive(&heartbeat, &enforcement, every / 2) {
                    if std::mem::take(&mut starving) {
                        info!("the event path is alive again: feeding the watchdog");
                    }
                    let _ = notifier.notify("WATCHDOG=1");
                } else if !std::mem::replace(&mut starving, true) {
                    warn!(
                        "the event path did not answer: the watchdog is not fed, and the service \
                         manager restarts the daemon if it stays so"
                    );
                }
                std::thread::sleep(every);
            }
        })
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::clock::monotonic_ns;

    #[test]
    fn a_problem_names_what_is_stuck() {
        let heartbeat = Heartbeat::default();
        let lock = Mutex::new(());
        let wait = Duration::from_millis(20);
        let never_beat = event_path_problem(&heartbeat, &lock, wait).unwrap();
        assert!(
            never_beat.contains("has not come back from poll(2)"),
            "{never_beat}"
        );
        heartbeat.beat_at(monotonic_ns());
        assert_eq!(event_path_problem(&heartbeat, &lock, wait), None);
        let held = lock.lock().unwrap();
        let stuck = event_path_problem(&heartbeat, &lock, wait).unwrap();
        assert!(stuck.contains("was held for over 20 ms"), "{stuck}");
        drop(held);
    }
}
