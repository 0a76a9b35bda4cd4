//! The two reactive baselines the co-location benchmark runs against reamer, each a thread
//! that throttles the offline (best-effort) group with a CFS quota; online inference is
//! latency-sensitive and left alone, as both designs do.
//!
//! - `utilization_poller`: Koordinator's CPU suppress. Every second it reads the node's CPU
//!   use and grants best effort `node CPUs × threshold − what everything else used`.
//! - `psi_trigger`: a PSI trigger on training's cgroup2 `cpu.pressure` ("some" stall over a
//!   500 ms window). A trigger throttles best effort to a floor; a calm period lifts it. Where
//!   the kernel refuses the trigger (see `StallSource`), the same test runs in userspace.
//!
//! Each records when it tightened the quota, so that the benchmark can measure how long after
//! training started it first reacted.

use std::{
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{
    harness::cgroups::Group,
    measure::proc_stats::{node_jiffies, process_jiffies},
};

/// What best effort keeps when throttled: a tenth of a CPU.
pub const FLOOR_CPUS: f64 = 0.1;

/// A controller thread, running until stopped.
pub struct Controller {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<Report>>,
}

/// What a controller did.
#[derive(Debug, Default)]
pub struct Report {
    /// When it tightened the quota.
    pub tightened_at: Vec<Instant>,
    /// Its thread's CPU time, s.
    pub cpu_s: f64,
    /// How it watched, where that varies (the PSI controller's source of stalls).
    pub note: Option<&'static str>,
}

impl Controller {
    /// Stops the controller, lifts its quota and says what it did.
    pub fn stop(self, offline: &Group) -> anyhow::Result<Report> {
        self.stop.store(true, Ordering::Relaxed);
        let report = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("controller thread panicked"))??;
        offline.set_quota(None)?;
        Ok(report)
    }
}

fn spawn(
    name: &str,
    body: impl FnOnce(&AtomicBool) -> anyhow::Result<(Vec<Instant>, Option<&'static str>)>
    + Send
    + 'static,
) -> Controller {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let (tightened_at, note) = body(&flag)?;
            Ok(Report {
                tightened_at,
                cpu_s: thread_cpu_seconds(),
                note,
            })
        })
        .expect("spawn controller thread");
    Controller { stop, thread }
}

/// The calling thread's CPU time, s.
fn thread_cpu_seconds() -> f64 {
    let mut time: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime fills the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
}

/// Koordinator-style CPU suppress: every `period`, best effort may use
/// `cpus × threshold − (node busy − best effort's own use)` CPUs, at least `FLOOR_CPUS`.
/// Koordinator's default threshold is 65%.
pub fn utilization_poller(
    offline: Group,
    offline_pid: u32,
    cpus: usize,
    threshold: f64,
    period: Duration,
) -> Controller {
    spawn("util-poller", move |stop| {
        let mut tightened = Vec::new();
        let mut node = node_jiffies()?;
        let mut best_effort = process_jiffies(offline_pid);
        let mut quota = f64::INFINITY;
        let mut next = Instant::now() + period;
        while !stop.load(Ordering::Relaxed) {
            // Sleep in short steps so that a stop is seen soon.
            if Instant::now() < next {
                std::thread::sleep(Duration::from_millis(20).min(next - Instant::now()));
                continue;
            }
            next += period;
            let now = node_jiffies()?;
            let now_best_effort = process_jiffies(offline_pid);
            let elapsed = (now.total - node.total).max(1) as f64 / cpus as f64;
            let others = (now.busy - node.busy).saturating_sub(now_best_effort - best_effort)
                as f64
                / elapsed;
            let allowed = (cpus as f64 * threshold - others).max(FLOOR_CPUS);
            offline.set_quota(Some(allowed))?;
            if allowed < quota {
                tightened.push(Instant::now());
            }
            quota = allowed;
            (node, best_effort) = (now, now_best_effort);
        }
        Ok((tightened, None))
    })
}

/// Where the PSI controller learns of stalls.
enum StallSource {
    /// The kernel's trigger: poll(2) wakes on POLLPRI.
    Trigger(std::fs::File),
    /// The same test in userspace, for when the kernel refuses the trigger: it accepts a
    /// window that is not a multiple of 2 s only from a writer with CAP_SYS_RESOURCE
    /// (kernel/sched/psi.c). Samples the file's `some total=` every 50 ms, the way the kernel
    /// polls a trigger at a tenth of its window, and fires at most once per window.
    Sampled {
        path: PathBuf,
        samples: std::collections::VecDeque<(Instant, u64)>,
        last_fired: Option<Instant>,
    },
}

/// Microseconds of "some" stall so far, from a pressure file's first line.
fn some_total_us(path: &std::path::Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .find(|l| l.starts_with("some "))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("total=")))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{} has no `some ... total=` line", path.display()))
}

impl StallSource {
    fn open(pressure: &std::path::Path, stall: Duration, window: Duration) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(pressure)
            .map_err(|e| anyhow::anyhow!("opening {}: {e}", pressure.display()))?;
        // The kernel takes the trigger in one write and overwrites its last byte with a NUL.
        let trigger = format!("some {} {}\0", stall.as_micros(), window.as_micros());
        // SAFETY: writing our own buffer to our own descriptor.
        let written =
            unsafe { libc::write(file.as_raw_fd(), trigger.as_ptr().cast(), trigger.len()) };
        if written >= 0 {
            return Ok(Self::Trigger(file));
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINVAL) {
            anyhow::bail!(
                "registering the PSI trigger on {}: {error}",
                pressure.display()
            );
        }
        Ok(Self::Sampled {
            path: pressure.to_owned(),
            samples: std::collections::VecDeque::new(),
            last_fired: None,
        })
    }

    /// Waits up to 50 ms; true when the group stalled `stall` within the last `window`.
    fn stalled(&mut self, stall: Duration, window: Duration) -> anyhow::Result<bool> {
        match self {
            Self::Trigger(file) => {
                let mut poll = libc::pollfd {
                    fd: file.as_raw_fd(),
                    events: libc::POLLPRI,
                    revents: 0,
                };
                // SAFETY: one pollfd we own.
                let ready = unsafe { libc::poll(&mut poll, 1, 50) };
                if ready > 0 && poll.revents & libc::POLLERR != 0 {
                    anyhow::bail!("the PSI trigger went away");
                }
                Ok(ready > 0 && poll.revents & libc::POLLPRI != 0)
            }
            Self::Sampled {
                path,
                samples,
                last_fired,
            } => {
                std::thread::sleep(Duration::from_millis(50));
                let now = Instant::now();
                samples.push_back((now, some_total_us(path)?));
                while samples.len() > 1 && now - samples[1].0 >= window {
                    samples.pop_front();
                }
                let (first, last) = (samples[0], samples[samples.len() - 1]);
                let over = last.1 - first.1 >= stall.as_micros() as u64
                    && last_fired.is_none_or(|t| now - t >= window);
                if over {
                    *last_fired = Some(now);
                }
                Ok(over)
            }
        }
    }

    /// How the stalls are watched, for the report.
    fn describe(&self) -> &'static str {
        match self {
            Self::Trigger(_) => "kernel PSI trigger",
            Self::Sampled { .. } => {
                "PSI sampled every 50 ms (the kernel refused the 500 ms trigger: no CAP_SYS_RESOURCE)"
            }
        }
    }
}

/// A PSI controller on `pressure` (a cgroup2 `cpu.pressure` file): when the group's tasks
/// stall for `stall` within `window`, best effort is throttled to `FLOOR_CPUS`; after `calm`
/// with no stall, the quota is lifted.
pub fn psi_trigger(
    pressure: PathBuf,
    offline: Group,
    stall: Duration,
    window: Duration,
    calm: Duration,
) -> Controller {
    spawn("psi-trigger", move |stop| {
        let mut source = StallSource::open(&pressure, stall, window)?;
        let mut tightened = Vec::new();
        let mut last_stall: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) {
            if source.stalled(stall, window)? {
                if last_stall.is_none() {
                    offline.set_quota(Some(FLOOR_CPUS))?;
                    tightened.push(Instant::now());
                }
                last_stall = Some(Instant::now());
            } else if last_stall.is_some_and(|t| t.elapsed() >= calm) {
                offline.set_quota(None)?;
                last_stall = None;
            }
        }
        Ok((tightened, Some(source.describe())))
    })
}
