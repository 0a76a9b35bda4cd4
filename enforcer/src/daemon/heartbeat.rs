//! The event thread's heartbeat: when it last came back from poll(2), which it does at least
//! every `POLL_TIMEOUT_MS`. The event thread beats it; the watchdog and `enforcer health` read
//! it (`watchdog`).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use crate::host::clock::monotonic_ns;

/// How long the event thread sleeps in poll(2) before it looks at the stop flag (and beats its
/// heartbeat).
pub(crate) const POLL_TIMEOUT_MS: i32 = 200;

/// When the event thread last came back from poll(2) (CLOCK_MONOTONIC ns). It does at least
/// every `POLL_TIMEOUT_MS`, events or not.
#[derive(Debug, Default)]
pub(crate) struct Heartbeat(AtomicU64);

impl Heartbeat {
    /// The event thread is back from poll(2) at `now_ns`: the clock read it takes for its
    /// events anyway, so a wake-up costs no second one.
    pub(crate) fn beat_at(&self, now_ns: u64) {
        self.0.store(now_ns, Ordering::Relaxed);
    }

    /// How long ago it last beat.
    pub(crate) fn age(&self) -> Duration {
        Duration::from_nanos(monotonic_ns().saturating_sub(self.0.load(Ordering::Relaxed)))
    }
}
