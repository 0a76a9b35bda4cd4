//! Sending events to userspace: rate-limited per CPU, woken at once.

use aya_ebpf::bindings::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
use enforcer_common::{
    COUNTER_EVENTS_RATE_LIMITED, COUNTER_EVENTS_RINGBUF_FULL, COUNTER_EVENTS_SENT, CpuState,
    SensorEvent,
};

use crate::maps::{EVENTS, SETTINGS, count};

/// Sends `event` unless this CPU sent one less than `event_min_interval_ns` ago; true if sent.
/// `wake`: wake the consumer at once (BPF_RB_FORCE_WAKEUP), for events the enforcer acts on;
/// otherwise the event waits for the next wakeup or the consumer's poll timeout
/// (BPF_RB_NO_WAKEUP), so that informational events never wake its real-time thread.
///
/// `this_cpu` is the state of the CPU running the program (the rate limit is per sending CPU,
/// so its slot is written only here). BPF_RB_FORCE_WAKEUP wakes the consumer at once instead
/// of leaving it to the kernel's batching heuristics: these events are the fast path.
#[inline(always)]
pub fn send(this_cpu: &mut CpuState, event: &SensorEvent, wake: bool) -> bool {
    let min_interval = SETTINGS.get(0).map_or(0, |s| s.event_min_interval_ns);
    if this_cpu.last_event_ns != 0
        && event.ts_ns >= this_cpu.last_event_ns
        && event.ts_ns - this_cpu.last_event_ns < min_interval
    {
        count(COUNTER_EVENTS_RATE_LIMITED);
        return false;
    }
    let flags = if wake {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    match EVENTS.output(event, u64::from(flags)) {
        Ok(()) => {
            this_cpu.last_event_ns = event.ts_ns;
            count(COUNTER_EVENTS_SENT);
            true
        }
        Err(_) => {
            count(COUNTER_EVENTS_RINGBUF_FULL);
            false
        }
    }
}
