//! A CPU-hungry competitor: N threads spinning for a while. Stands in for inference (when
//! launched into a pool) or for an unrelated process (when not). With `--sleepers`, also
//! threads that wake every millisecond for a short burst: a training job's mix of threads
//! that run for seconds and threads that switch all the time.

use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Spins N threads for a number of seconds")]
struct Args {
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Threads that sleep 1 ms, then spin 200 µs, until the end.
    #[arg(long, default_value_t = 0)]
    sleepers: usize,
}

/// Spins until `deadline`.
fn spin_until(deadline: Instant) {
    let mut x = 1u64;
    while Instant::now() < deadline {
        for i in 0..1024 {
            x = std::hint::black_box(x.wrapping_mul(2862933555777941757).wrapping_add(i));
        }
    }
}

fn main() {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let spinners = (0..args.threads).map(|_| std::thread::spawn(move || spin_until(deadline)));
    let sleepers = (0..args.sleepers).map(|_| {
        std::thread::spawn(move || {
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
                spin_until((Instant::now() + Duration::from_micros(200)).min(deadline));
            }
        })
    });
    let threads: Vec<_> = spinners.chain(sleepers).collect();
    for thread in threads {
        thread.join().expect("thread panicked");
    }
}
