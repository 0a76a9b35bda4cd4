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

/// How long the event thread sleeps in poll(2) before it looks at the stop flag.
const POLL_TIMEOUT_MS: i32 = 200;

/// The event thread's name (its `comm`), by which `enforcer status` finds it.
pub const THREAD_NAME: &str = "reamer-events";

/// Reads events on the calling (dedicated) thread until `stop` is set, counting each and
/// handing it to the enforcer's fast path on the spot.
///
/// A thread of its own, blocked in poll(2) on the ring buffer: no async runtime between the
/// kernel's wakeup and the cgroup write. With `rt_priority` > 0 it runs SCHED_FIFO, so that a
/// machine busy with training does not delay it behind a CFS time slice; its work per event is
/// a few microseconds, and the kernel's RT throttling bounds it anyway. Measured here: as a
/// CFS task on the async runtime, event-to-write p50 was 1.3 ms with both CPUs busy.
pub fn consume_blocking(
    mut ring: RingBuf<MapData>,
    tally: Arc<Mutex<EventTally>>,
    enforcer: Arc<Mutex<crate::enforce::Enforcer>>,
    rt_priority: i32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::os::fd::AsRawFd as _;
    crate::thread_policy::run_as_fifo(rt_priority, "event thread");
    let fd = ring.as_raw_fd();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pollfd, 1, POLL_TIMEOUT_MS) };
        if ready < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            error!("polling the event ring buffer failed: {err}; no events will be handled");
            return;
        }
        let now = crate::sensor::snapshot::monotonic_ns();
        while let Some(item) = ring.next() {
            if item.len() < size_of::<SensorEvent>() {
                continue;
            }
            // SAFETY: the sensor writes whole SensorEvents; read_unaligned copes with any
            // alignment of the ring's data.
            let event: SensorEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            enforcer
                .lock()
                .expect("enforcer poisoned")
                .on_event(&event, now);
            debug!(
                kind = kind_name(event.kind),
                job = event.job,
                tid = event.tid,
                cpu = event.cpu,
                "sensor event"
            );
            tally
                .lock()
                .expect("event tally poisoned")
                .record(&event, now);
        }
    }
}
