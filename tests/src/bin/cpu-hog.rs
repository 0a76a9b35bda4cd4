//! A CPU-hungry competitor: N threads spinning for a while. Stands in for inference (when
//! launched into a pool) or for an unrelated process (when not).

use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Spins N threads for a number of seconds")]
struct Args {
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
}

fn main() {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let spinners: Vec<_> = (0..args.threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut x = 1u64;
                while Instant::now() < deadline {
                    for i in 0..1024 {
                        x = std::hint::black_box(
                            x.wrapping_mul(2862933555777941757).wrapping_add(i),
                        );
                    }
                }
            })
        })
        .collect();
    for spinner in spinners {
        spinner.join().expect("spinner panicked");
    }
}
