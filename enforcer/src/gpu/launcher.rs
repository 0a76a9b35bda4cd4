//! Training's need for the GPU, read off the thread that feeds it: each training GPU process's
//! main thread, which launches its kernels and waits for them (PyTorch's training loop runs
//! there; its DataLoader workers are processes of their own, and they hold no GPU context).
//!
//! Where the step is GPU-bound, that thread is busy all the time: it launches, then waits for
//! the GPU in CUDA's synchronisation, which spins on the CPU by default (while a process has
//! fewer CUDA contexts than the machine has CPUs: `cudaDeviceScheduleAuto`). Where the step
//! waits on its input pipeline, the thread sleeps in the DataLoader's queue until the next
//! batch, whatever inference does on the GPU. So the share of the time it is on a CPU or
//! queued for one tells the two apart, and it does not depend on whether inference is gated:
//! the policy can act on it without probing.
//!
//! The figure comes from `/proc/<pid>/task/<pid>/schedstat` (the kernel's run time and run
//! queue wait of the thread), read once per NVML sample for each training process NVML shows
//! on a GPU: one small file per process, nothing on the kernel's hot paths. The
//! `raw_syscalls` tracepoints would tell a GPU wait in the driver from an input wait more
//! directly, but they fire on every system call of the machine.

use std::collections::HashMap;

/// The launching threads' run and run-queue times at the last reading.
#[derive(Debug, Default)]
pub(crate) struct LauncherWatch {
    /// pid → (CLOCK_MONOTONIC of the reading, run ns, run-queue wait ns).
    last: HashMap<u32, (u64, u64, u64)>,
}

impl LauncherWatch {
    /// The busiest launching thread's busy share since the last reading: run time and
    /// run-queue wait over the time between the readings, from 0 (asleep throughout) to 1.
    /// `pids` are training's processes on a GPU now. None where none of them was read twice
    /// (a new process, or none on a GPU).
    pub(crate) fn busy_share(&mut self, now_ns: u64, pids: &[u32]) -> Option<f64> {
        let mut busiest: Option<f64> = None;
        let mut seen = HashMap::new();
        for &pid in pids {
            let Some((run_ns, wait_ns)) = read_schedstat(pid) else {
                continue;
            };
            seen.insert(pid, (now_ns, run_ns, wait_ns));
            let Some(&(then_ns, run_then, wait_then)) = self.last.get(&pid) else {
                continue;
            };
            if let Some(share) =
                busy_between(then_ns, now_ns, run_then + wait_then, run_ns + wait_ns)
            {
                busiest = Some(busiest.map_or(share, |b: f64| b.max(share)));
            }
        }
        // Processes gone from the GPU are forgotten (a pid reused later starts afresh).
        self.last = seen;
        busiest
    }
}

/// Busy time gained over wall time, within 0..=1; None for a reading at the same instant or a
/// counter that went back (another thread took the pid).
fn busy_between(then_ns: u64, now_ns: u64, busy_then: u64, busy_now: u64) -> Option<f64> {
    let wall = now_ns.checked_sub(then_ns).filter(|&w| w > 0)?;
    let busy = busy_now.checked_sub(busy_then)?;
    Some((busy as f64 / wall as f64).clamp(0.0, 1.0))
}

/// The main thread of `pid`: its run time and run-queue wait, ns
/// (`/proc/PID/task/PID/schedstat`: "run_ns wait_ns timeslices").
fn read_schedstat(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat")).ok()?;
    parse_schedstat(&text)
}

fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_share_is_run_and_queue_time_over_wall_time() {
        assert_eq!(parse_schedstat("1500 500 7\n"), Some((1500, 500)));
        assert_eq!(parse_schedstat("x"), None);
        assert_eq!(busy_between(0, 1000, 0, 250), Some(0.25));
        assert_eq!(
            busy_between(0, 1000, 0, 5000),
            Some(1.0),
            "never above one CPU"
        );
        assert_eq!(busy_between(5, 5, 0, 1), None);
        assert_eq!(
            busy_between(0, 10, 100, 50),
            None,
            "another thread's counters"
        );
    }

    #[test]
    fn this_processs_spinning_main_thread_reads_busy_and_a_sleeping_one_idle() {
        let me = std::process::id();
        let mut watch = LauncherWatch::default();
        let clock = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec for the kernel to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        assert_eq!(
            watch.busy_share(clock(), &[me]),
            None,
            "one reading is no share"
        );
        // The test harness runs tests on threads of their own: the main thread, the one read,
        // sleeps in the harness meanwhile.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let share = watch.busy_share(clock(), &[me]).unwrap();
        assert!(share < 0.5, "the harness's main thread read busy: {share}");
        assert_eq!(watch.busy_share(clock(), &[]), None);
    }
}
