//! A context-switch-heavy benchmark: two threads pinned to one CPU pass a byte back and forth
//! over pipes, so every round trip is two wakeups and two context switches on that CPU. The
//! sensor's cost shows up here as lost round trips per second.

use std::time::{Duration, Instant};

use clap::Parser;
use reamer_tests::workloads::cpu_work::pin_to;

#[derive(Parser)]
#[command(about = "Pipe ping-pong between two threads on one CPU; prints round trips/s")]
struct Args {
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// CPU both threads are pinned to.
    #[arg(long, default_value_t = 0)]
    cpu: usize,
}

fn pipe() -> [i32; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: valid array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    fds
}

fn main() {
    let args = Args::parse();
    let (ping, pong) = (pipe(), pipe());
    let cpu = args.cpu;
    let echo = std::thread::spawn(move || {
        pin_to(&[cpu]).expect("pin echo thread");
        let mut byte = [0u8; 1];
        // SAFETY: reading and writing one byte on our pipes.
        while unsafe { libc::read(ping[0], byte.as_mut_ptr().cast(), 1) } == 1 {
            if byte[0] == 0 {
                return;
            }
            unsafe { libc::write(pong[1], byte.as_ptr().cast(), 1) };
        }
    });
    pin_to(&[cpu]).expect("pin main thread");
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut round_trips = 0u64;
    let mut byte = [1u8; 1];
    while Instant::now() < deadline {
        for _ in 0..256 {
            // SAFETY: as above.
            unsafe {
                libc::write(ping[1], byte.as_ptr().cast(), 1);
                libc::read(pong[0], byte.as_mut_ptr().cast(), 1);
            }
        }
        round_trips += 256;
    }
    let elapsed = start.elapsed().as_secs_f64();
    byte[0] = 0;
    // SAFETY: as above.
    unsafe { libc::write(ping[1], byte.as_ptr().cast(), 1) };
    echo.join().expect("echo thread");
    println!(
        "{}",
        serde_json::json!({"round_trips": round_trips, "seconds": elapsed, "round_trips_per_s": round_trips as f64 / elapsed})
    );
}
