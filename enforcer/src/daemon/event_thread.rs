//! The event thread: consumes the sensor's ring buffer and hands each event to enforcement's
//! fast path. It sleeps in poll(2) and the sensor wakes it (BPF_RB_FORCE_WAKEUP), so an event
//! costs nothing until one arrives.

use std::sync::{Arc, Mutex};

use aya::maps::{MapData, RingBuf};
use enforcer_common::{
    EVENT_ENQUEUED_BEHIND_INFERENCE, EVENT_LONG_WAIT, EVENT_PREEMPTED_BY_INFERENCE, MAX_CPUS,
    MAX_JOBS, SensorEvent,
};
use tracing::debug;

use super::{
    enforcement::Enforcement,
    heartbeat::{Heartbeat, POLL_TIMEOUT_MS},
};
use crate::{actuate::thread_policy, host::clock::monotonic_ns};

/// Events received per training job, for `observe`'s events per second, and contention
/// reports per CPU, which `observe --json` records for `enforcer replay`.
#[derive(Debug)]
pub(crate) struct EventTally {
    per_job: Vec<u64>,
    contentions_per_cpu: Vec<u64>,
}

impl Default for EventTally {
    fn default() -> Self {
        Self {
            per_job: vec![0; MAX_JOBS as usize],
            contentions_per_cpu: vec![0; MAX_CPUS as usize],
        }
    }
}

impl EventTally {
    pub(crate) fn record(&mut self, event: &SensorEvent) {
        if let Some(count) = self.per_job.get_mut(event.job as usize) {
            *count += 1;
        }
        let contention = matches!(
            event.kind,
            EVENT_ENQUEUED_BEHIND_INFERENCE | EVENT_PREEMPTED_BY_INFERENCE
        );
        if let Some(count) = self
            .contentions_per_cpu
            .get_mut(event.cpu as usize)
            .filter(|_| contention)
        {
            *count += 1;
        }
    }

    /// Events received so far for job `id`.
    pub(crate) fn of_job(&self, id: u32) -> u64 {
        self.per_job.get(id as usize).copied().unwrap_or(0)
    }

    /// Contention reports received so far from each of the first `cpus` CPUs.
    pub(crate) fn contentions_by_cpu(&self, cpus: usize) -> Vec<u64> {
        self.contentions_per_cpu
            .iter()
            .take(cpus)
            .copied()
            .collect()
    }
}

/// The name of an event's kind, for the log.
fn kind_name(kind: u32) -> &'static str {
    match kind {
        EVENT_ENQUEUED_BEHIND_INFERENCE => "enqueued_behind_inference",
        EVENT_PREEMPTED_BY_INFERENCE => "preempted_by_inference",
        EVENT_LONG_WAIT => "long_wait",
        _ => "unknown",
    }
}

/// The event thread's name (its `comm`), by which `enforcer status` finds it.
pub(crate) const THREAD_NAME: &str = "reamer-events";

/// Reads events on the calling (dedicated) thread until `stop` is set, counting each and
/// handing it to enforcement's fast path on the spot. Returns the error where poll(2) fails:
/// without its events the daemon cannot protect training, and its caller ends it.
///
/// A thread of its own, blocked in poll(2) on the ring buffer: no async runtime between the
/// kernel's wakeup and the cgroup write. With `rt_priority` > 0 it runs SCHED_FIFO, so that a
/// machine busy with training does not delay it behind a CFS time slice; its work per event is
/// a few microseconds, and the kernel's RT throttling bounds it anyway. Measured here: as a
/// CFS task on the async runtime, event-to-write p50 was 1.3 ms with both CPUs busy.
pub(crate) fn consume_blocking(
    mut ring: RingBuf<MapData>,
    tally: Arc<Mutex<EventTally>>,
    enforcement: Arc<Mutex<Enforcement>>,
    rt_priority: i32,
    heartbeat: Arc<Heartbeat>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    thread_policy::run_as_fifo(rt_priority, "event thread");
    let fd = ring.as_raw_fd();
    heartbeat.beat_at(monotonic_ns());
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
            return Err(err);
        }
        let now = monotonic_ns();
        heartbeat.beat_at(now);
        while let Some(item) = ring.next() {
            if item.len() < size_of::<SensorEvent>() {
                continue;
            }
            // SAFETY: the sensor writes whole SensorEvents; read_unaligned copes with any
            // alignment of the ring's data.
            let event: SensorEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            enforcement
                .lock()
                .expect("enforcement poisoned")
                .on_event(&event, now);
            debug!(
                kind = kind_name(event.kind),
                job = event.job,
                tid = event.tid,
                cpu = event.cpu,
                "sensor event"
            );
            tally.lock().expect("event tally poisoned").record(&event);
        }
    }
    Ok(())
}
