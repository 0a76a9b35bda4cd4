//! How long this machine takes to wake a thread on another CPU and be answered, when both CPUs
//! are idle and when idle-class spinners keep them busy.
//!
//! Why it matters here: on a VM an idle vCPU halts, which hands the physical CPU back to the
//! hypervisor; waking a thread there waits until the hypervisor runs that vCPU again, and on a
//! busy host that can take milliseconds. A vCPU kept busy, even by a SCHED_IDLE thread that the
//! guest preempts at once, is never halted. So a workload that leaves a vCPU idle (training
//! alone, say) can run slower than the same workload beside idle-class work, and the
//! co-location benchmark's reference moves with the host
//! (docs/experiments/2026-11-22-idle-vcpu-wake.md).
//!
//! Method: a thread on `--from` CPU sends a byte over a pipe to a thread blocked on `--to` CPU,
//! which sends it back (waking the sender, whose CPU idled meanwhile); each round trip is
//! timed, then the sender sleeps `--gap-us` so that both CPUs go idle again. The two cases
//! alternate, round by round, so that a change of the host's load hits both.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use enforcer_common::stats::{quantile, sorted};
use reamer_tests::workloads::cpu_work::pin_to;

#[derive(Parser)]
#[command(
    about = "Measures the round trip of waking a thread on another CPU and being answered, with \
             both CPUs idle and with both kept busy by idle-class spinners; prints both as JSON"
)]
struct Args {
    /// Round trips per case and round.
    #[arg(long, default_value_t = 500)]
    pings: usize,
    /// Rounds; each runs both cases, in an order that alternates.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Pause after each round trip, µs: time for the other CPU to go idle.
    #[arg(long, default_value_t = 500)]
    gap_us: u64,
    /// CPU of the sending thread.
    #[arg(long, default_value_t = 0)]
    from: usize,
    /// CPU of the thread that is woken.
    #[arg(long, default_value_t = 1)]
    to: usize,
}

/// A pipe's (read, write) descriptors.
fn pipe() -> anyhow::Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: a valid array for pipe(2).
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe");
    }
    Ok((fds[0], fds[1]))
}

fn send(fd: i32, byte: u8) {
    // SAFETY: writes one byte from a local to our own pipe.
    unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
}

/// The next byte, or None at end of file.
fn receive(fd: i32) -> Option<u8> {
    let mut byte = 0u8;
    // SAFETY: reads one byte into a local from our own pipe.
    (unsafe { libc::read(fd, (&raw mut byte).cast(), 1) } == 1).then_some(byte)
}

/// A thread on `cpu` in SCHED_IDLE that spins until dropped: the CPU never idles, and any
/// normal thread woken there preempts it at once.
struct IdleSpinner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl IdleSpinner {
    fn start(cpu: usize) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: 0 is the calling thread; any thread may lower itself to SCHED_IDLE.
                let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
                let ready = match (pin_to(&[cpu]), idle) {
                    (Err(err), _) => Err(format!("pinning the spinner to CPU {cpu}: {err}")),
                    (_, rc) if rc != 0 => Err(format!(
                        "SCHED_IDLE for the spinner: {}",
                        std::io::Error::last_os_error()
                    )),
                    _ => Ok(()),
                };
                let failed = ready.is_err();
                let _ = ready_tx.send(ready);
                while !failed && !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        });
        let ready = ready_rx.recv().context("the spinner thread died")?;
        let spinner = Self {
            stop,
            thread: Some(thread),
        };
        ready.map_err(anyhow::Error::msg)?;
        Ok(spinner)
    }
}

impl Drop for IdleSpinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Round-trip percentiles of one case, µs.
fn summary(round_trips_us: Vec<f64>) -> serde_json::Value {
    let sorted = sorted(round_trips_us);
    serde_json::json!({
        "p50_us": quantile(&sorted, 0.5),
        "p90_us": quantile(&sorted, 0.9),
        "p99_us": quantile(&sorted, 0.99),
        "max_us": sorted.last().copied().unwrap_or(f64::NAN),
        "round_trips": sorted.len(),
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if args.from == args.to {
        bail!(
            "--from and --to are both CPU {}: the probe needs two CPUs",
            args.to
        );
    }
    if args.from.max(args.to) >= cpus {
        bail!(
            "CPU {} is not available here ({cpus} CPUs): pick --from and --to below {cpus}",
            args.from.max(args.to)
        );
    }
    let ((ping_read, ping_write), (pong_read, pong_write)) = (pipe()?, pipe()?);
    let to = args.to;
    let echo = std::thread::spawn(move || -> anyhow::Result<()> {
        pin_to(&[to]).with_context(|| format!("pinning the woken thread to CPU {to}"))?;
        while let Some(byte) = receive(ping_read) {
            if byte == 0 {
                break;
            }
            send(pong_write, byte);
        }
        Ok(())
    });
    pin_to(&[args.from]).with_context(|| format!("pinning the sender to CPU {}", args.from))?;
    let gap = Duration::from_micros(args.gap_us);
    let (mut idle, mut busy) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        for kept_busy in [round % 2 == 1, round % 2 == 0] {
            // Both ends: the answer wakes the sender, whose CPU idled while it waited.
            let _spinners = match kept_busy {
                true => vec![IdleSpinner::start(args.from)?, IdleSpinner::start(args.to)?],
                false => Vec::new(),
            };
            let samples = if kept_busy { &mut busy } else { &mut idle };
            for _ in 0..args.pings {
                let start = Instant::now();
                send(ping_write, 1);
                if receive(pong_read).is_none() {
                    bail!("the woken thread stopped answering");
                }
                samples.push(start.elapsed().as_secs_f64() * 1e6);
                std::thread::sleep(gap);
            }
        }
    }
    send(ping_write, 0);
    echo.join()
        .map_err(|_| anyhow::anyhow!("the woken thread panicked"))??;
    println!(
        "{}",
        serde_json::json!({
            "from_cpu": args.from,
            "to_cpu": args.to,
            "gap_us": args.gap_us,
            "idle": summary(idle),
            "kept_busy": summary(busy),
        })
    );
    Ok(())
}
