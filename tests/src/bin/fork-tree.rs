//! Creates threads and a child process with threads of its own, then keeps them all alive for
//! a while: the shape the sensor's fork inheritance must follow. Prints one JSON line with
//! every pid and tid it created once they all exist.

use std::{
    io::Write as _,
    time::{Duration, Instant},
};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Spawns threads and a child with threads, then sleeps")]
struct Args {
    #[arg(long, default_value_t = 3)]
    threads: usize,
    #[arg(long, default_value_t = 2)]
    child_threads: usize,
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Spawns `n` threads that each send their tid, then live until `deadline`.
fn spawn_threads(n: usize, deadline: Instant) -> (Vec<u32>, Vec<std::thread::JoinHandle<()>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let handles = (0..n)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                tx.send(gettid()).expect("send tid");
                while Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let tids = (0..n).map(|_| rx.recv().expect("tid")).collect();
    (tids, handles)
}

fn main() {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut fds = [0i32; 2];
    // SAFETY: valid array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: the child only spawns threads, writes to a pipe and sleeps.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let (tids, handles) = spawn_threads(args.child_threads, deadline);
        let line = format!(
            "{}\n",
            serde_json::json!({"pid": std::process::id(), "tids": tids})
        );
        // SAFETY: writing a buffer to our pipe end.
        unsafe { libc::write(fds[1], line.as_ptr().cast(), line.len()) };
        for handle in handles {
            let _ = handle.join();
        }
        std::process::exit(0);
    }
    let (tids, handles) = spawn_threads(args.threads, deadline);
    let mut buffer = vec![0u8; 4096];
    // SAFETY: reading into our buffer from our pipe end.
    let n = unsafe { libc::read(fds[0], buffer.as_mut_ptr().cast(), buffer.len()) };
    let child_report: serde_json::Value =
        serde_json::from_slice(&buffer[..n.max(0) as usize]).expect("child report");
    let report =
        serde_json::json!({"pid": std::process::id(), "tids": tids, "child": child_report});
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{report}").expect("print report");
    stdout.flush().expect("flush");
    drop(stdout);
    for handle in handles {
        let _ = handle.join();
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
}
