//! How long a woken thread waits for its CPU when normal-class work of another session keeps
//! every CPU busy: with the kernel's default time slice, and with the shortest one, which the
//! daemon's event and GPU gating threads ask for where the kernel refuses them SCHED_FIFO
//! (`thread_policy::run_as_fifo`).
//!
//! Method: a thread pinned to `--to` blocks on a pipe; a thread pinned to `--from` writes a
//! timestamp into it every few milliseconds; the woken thread times the moment it runs. Meanwhile
//! `--spinners` threads of a child process in a session of its own (another autogroup, as a
//! training job started elsewhere is another group) spin on every CPU. The two slices
//! alternate, round by round. Prints JSON.
//!
//! `cargo run --release -p enforcer --example slice_probe`

use std::{
    os::unix::process::CommandExt as _,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use clap::Parser;
use enforcer::actuate::thread_policy::ask_shortest_slice;
use enforcer_common::stats::{quantile, sorted};
use reamer_tests::workloads::cpu_work::pin_to;

#[derive(Parser)]
#[command(
    about = "Wake-to-run latency beside busy normal-class work: default slice vs the shortest"
)]
struct Args {
    /// Wakeups per slice and round.
    #[arg(long, default_value_t = 1500)]
    wakeups: usize,
    /// Rounds; each measures both slices, in an order that alternates.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Spinning threads of the competing session.
    #[arg(long, default_value_t = 2)]
    spinners: usize,
    #[arg(long, default_value_t = 0)]
    from: usize,
    #[arg(long, default_value_t = 1)]
    to: usize,
    /// Internal: be the competing session's spinners for this many seconds.
    #[arg(long, hide = true)]
    spin_for_s: Option<f64>,
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn spin(threads: usize, seconds: f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let spinners: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for spinner in spinners {
        let _ = spinner.join();
    }
}

/// Wake-to-run latencies (µs) of `wakeups` wakeups of a thread on `to`, its slice the
/// shortest or the default.
fn measure(args: &Args, shortest: bool) -> Vec<f64> {
    let mut fds = [0i32; 2];
    // SAFETY: a valid array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let [read_fd, write_fd] = fds;
    let (to, wakeups) = (args.to, args.wakeups);
    let woken = std::thread::spawn(move || {
        pin_to(&[to]).expect("pin the woken thread");
        if shortest {
            ask_shortest_slice().expect("the shortest slice (Linux 6.12+)");
        }
        let mut latencies = Vec::with_capacity(wakeups);
        for _ in 0..wakeups {
            let mut sent = 0u64;
            // SAFETY: reads 8 bytes into a local from our own pipe.
            let n = unsafe { libc::read(read_fd, (&raw mut sent).cast(), 8) };
            assert_eq!(n, 8, "the pipe closed");
            latencies.push((monotonic_ns() - sent) as f64 / 1e3);
        }
        latencies
    });
    pin_to(&[args.from]).expect("pin the waker");
    for i in 0..wakeups {
        // 3 to 4 ms apart: the woken thread sleeps long enough to be placed as a sleeper.
        std::thread::sleep(Duration::from_micros(3000 + (i as u64 * 7919) % 1000));
        let sent = monotonic_ns();
        // SAFETY: writes 8 bytes from a local into our own pipe.
        unsafe { libc::write(write_fd, (&raw const sent).cast(), 8) };
    }
    let latencies = woken.join().expect("the woken thread");
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(read_fd);
        libc::close(write_fd);
    }
    latencies
}

fn summary(us: Vec<f64>) -> serde_json::Value {
    let us = sorted(us);
    let at = |q: f64| quantile(&us, q);
    serde_json::json!({
        "wakeups": us.len(),
        "p50_us": at(0.5),
        "p99_us": at(0.99),
        "p999_us": at(0.999),
        "max_us": at(1.0),
        "over_1ms": us.iter().filter(|&&v| v > 1000.0).count(),
    })
}

fn main() {
    let args = Args::parse();
    if let Some(seconds) = args.spin_for_s {
        spin(args.spinners, seconds);
        return;
    }
    // Enough for every round, with room: the spinners stop on their own if this process dies.
    let seconds = (args.rounds * args.wakeups * 2) as f64 * 0.004 + 5.0;
    let mut spinners = Command::new(std::env::current_exe().expect("own path"));
    spinners
        .args(["--spinners", &args.spinners.to_string()])
        .args(["--spin-for-s", &seconds.to_string()])
        .stdout(Stdio::null());
    // SAFETY: setsid is async-signal-safe; a session of its own is a new autogroup.
    unsafe {
        spinners.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut spinners = spinners.spawn().expect("spawn the spinners");
    std::thread::sleep(Duration::from_millis(200));
    let (mut default_slice, mut shortest) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        for short in [round % 2 == 1, round % 2 == 0] {
            let latencies = measure(&args, short);
            match short {
                true => shortest.extend(latencies),
                false => default_slice.extend(latencies),
            }
        }
    }
    let _ = spinners.kill();
    let _ = spinners.wait();
    println!(
        "{}",
        serde_json::json!({
            "spinners": args.spinners,
            "default_slice": summary(default_slice),
            "shortest_slice": summary(shortest),
        })
    );
}
