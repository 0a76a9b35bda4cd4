//! Consuming the sensor's ring buffer. The consumer sleeps in epoll and the sensor wakes it
//! (BPF_RB_FORCE_WAKEUP), so an event costs nothing until one arrives.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use aya::maps::{MapData, RingBuf};
use enforcer_common::{
    EVENT_ENQUEUED_BEHIND_INFERENCE, EVENT_LONG_WAIT, EVENT_PREEMPTED_BY_INFERENCE, MAX_JOBS,
    SensorEvent,
};
use serde::Serialize;
use tokio::io::unix::AsyncFd;
use tracing::{debug, error};

/// How many recent events are kept for `status`.
const RECENT_EVENTS: usize = 64;

/// Counts of received events, per job and in total, and the most recent ones.
#[derive(Debug)]
pub struct EventTally {
    pub per_job: Vec<u64>,
    pub total: u64,
    pub recent: VecDeque<ReceivedEvent>,
}

impl Default for EventTally {
    fn default() -> Self {
        Self {
            per_job: vec![0; MAX_JOBS as usize],
            total: 0,
            recent: VecDeque::new(),
        }
    }
}

/// An event with the moment userspace got it, for the kernel-to-user latency.
#[derive(Debug, Clone, Serialize)]
pub struct ReceivedEvent {
    pub kind: &'static str,
    pub job: u32,
    pub tid: u32,
    pub cpu: u32,
    pub wait_ns: u64,
    /// From the sensor's timestamp to userspace reading it.
    pub delivery_ns: u64,
}

pub fn kind_name(kind: u32) -> &'static str {
    match kind {
        EVENT_ENQUEUED_BEHIND_INFERENCE => "enqueued_behind_inference",
        EVENT_PREEMPTED_BY_INFERENCE => "preempted_by_inference",
        EVENT_LONG_WAIT => "long_wait",
        _ => "unknown",
    }
}

impl EventTally {
    pub fn record(&mut self, event: &SensorEvent, received_ns: u64) {
        self.total += 1;
        if let Some(count) = self.per_job.get_mut(event.job as usize) {
            *count += 1;
        }
        if self.recent.len() == RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent.push_back(ReceivedEvent {
            kind: kind_name(event.kind),
            job: event.job,
            tid: event.tid,
            cpu: event.cpu,
            wait_ns: event.wait_ns,
            delivery_ns: received_ns.saturating_sub(event.ts_ns),
        });
    }
}

/// Reads events until the task is dropped, counting each and handing it to the enforcer's
/// fast path on the spot.
pub async fn consume(
    ring: RingBuf<MapData>,
    tally: Arc<Mutex<EventTally>>,
    enforcer: Arc<Mutex<crate::enforce::Enforcer>>,
) {
    // SAFETY: the ring buffer owns its fd, and the AsyncFd owns the ring buffer, so the fd
    // stays open for as long as it is registered.
    let mut ring = match unsafe { AsyncFd::register(ring) } {
        Ok(fd) => fd,
        Err(err) => {
            error!("cannot watch the event ring buffer: {err}; no events will be handled");
            return;
        }
    };
    loop {
        let mut guard = match ring.readable_mut().await {
            Ok(guard) => guard,
            Err(err) => {
                error!("event ring buffer failed: {err}");
                return;
            }
        };
        let now = crate::sensor::snapshot::monotonic_ns();
        let ring = guard.get_inner_mut();
        while let Some(item) = ring.next() {
            if item.len() < size_of::<SensorEvent>() {
                continue;
            }
            // SAFETY: the sensor writes whole SensorEvents; read_unaligned copes with any
            // alignment of the ring's data.
            let event: SensorEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            debug!(
                kind = kind_name(event.kind),
                job = event.job,
                tid = event.tid,
                cpu = event.cpu,
                "sensor event"
            );
            enforcer.lock().expect("enforcer poisoned").on_event(&event);
            tally
                .lock()
                .expect("event tally poisoned")
                .record(&event, now);
        }
        guard.clear_ready();
    }
}
