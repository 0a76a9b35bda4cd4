//! A training job's CPU side, without the GPU: the workload reamer must protect.
//!
//! Each step, data-loader threads decode their share of the batch (bursty: item costs are
//! exponentially distributed), while the launch thread issues many short CPU bursts separated
//! by waits, the way a training loop launches kernels and waits on the GPU stream. Everyone
//! meets at a step barrier. Work is measured in thread CPU time, so step time grows exactly
//! when the threads are kept waiting for a CPU. Reports steps/s and step-time percentiles.
//!
//! Launched by the enforcer (`REAMER_SOCKET` set), it also reports its steps to the daemon
//! once a second, as a PyTorch job does with `python/reamer_progress.py`: the daemon's pace
//! signal for the job.
//!
//! With `--phase-gap-us G`, SIGUSR1 starts a new phase of the job: the launch thread's wait
//! after each burst becomes G µs (a slower stage of the model, an evaluation), so its pace
//! changes while the daemon watches it.
//!
//! With `--serve --json` it runs until stdin closes, and times a part of S seconds for each
//! line `{"seconds": S}` read there: `{"timed_start": true}` at its first step, its report at
//! its end. That is the server benchmark's protocol for one job serving every window
//! (`xtask/scripts/train_resnet50.py --serve` follows it too).

use std::{
    io::BufRead as _,
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use clap::Parser;
use enforcer_common::{
    rng::SplitMix64,
    stats::{quantile, sorted},
};
use reamer_tests::workloads::{cpu_work::burn, progress::ProgressReporter};

#[derive(Parser, Debug, Clone)]
#[command(about = "Simulates the CPU side of a GPU training job and reports its step rate")]
struct Args {
    /// Run for this many seconds (ignored when --steps is given).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Run exactly this many steps.
    #[arg(long)]
    steps: Option<u64>,
    /// Data-loader threads.
    #[arg(long, default_value_t = 2)]
    loaders: usize,
    /// Items each loader decodes per step.
    #[arg(long, default_value_t = 4)]
    items: u32,
    /// Mean CPU time to decode one item, µs (exponentially distributed).
    #[arg(long, default_value_t = 400)]
    decode_us: u64,
    /// Kernel-launch bursts per step on the launch thread.
    #[arg(long, default_value_t = 20)]
    bursts: u32,
    /// CPU time of one launch burst, µs.
    #[arg(long, default_value_t = 40)]
    burst_us: u64,
    /// Wait after each burst (the GPU working), µs.
    #[arg(long, default_value_t = 150)]
    gap_us: u64,
    /// The wait after each burst, µs, once SIGUSR1 has started a new phase of the job.
    #[arg(long)]
    phase_gap_us: Option<u64>,
    /// Seed of the work-size generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
    /// Run until stdin closes, timing S seconds for each line `{"seconds": S}` read there
    /// (instead of --seconds and --steps).
    #[arg(long, requires = "json", conflicts_with = "steps")]
    serve: bool,
}

#[derive(serde::Serialize)]
struct Report {
    steps: u64,
    seconds: f64,
    steps_per_s: f64,
    step_ms_p50: f64,
    step_ms_p99: f64,
    step_ms_max: f64,
    /// CPU time all its threads used, s: what training takes from the machine.
    cpu_s: f64,
    /// Time its threads spent runnable but waiting for a CPU, s (schedstat run_delay summed
    /// over the threads). Unlike step time, the hypervisor's steal does not enter it: it is
    /// the wait that co-located work on this kernel imposes, which the enforcer must prevent.
    runqueue_wait_s: f64,
    /// Per-step times, ms, for paired comparisons.
    step_ms: Vec<f64>,
}

fn process_cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The run-queue wait so far, s, of the thread whose schedstat this is (its field 2).
fn runqueue_wait_seconds(schedstat: &str) -> f64 {
    std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// The calling thread's run-queue wait so far, s.
fn thread_runqueue_wait_seconds() -> f64 {
    runqueue_wait_seconds("/proc/thread-self/schedstat")
}

/// The run-queue wait so far of all this process's threads, s.
fn process_runqueue_wait_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .map(|task| runqueue_wait_seconds(&format!("{}/schedstat", task.path().display())))
        .sum()
}

impl Report {
    fn new(step_ms: Vec<f64>, seconds: f64, cpu_s: f64, runqueue_wait_s: f64) -> Self {
        let sorted = sorted(step_ms.iter().copied());
        // A run too short for one step reports zeros, not NaN (which JSON cannot carry).
        let step_quantile = |q| match sorted.is_empty() {
            true => 0.0,
            false => quantile(&sorted, q),
        };
        Self {
            steps: step_ms.len() as u64,
            seconds,
            steps_per_s: step_ms.len() as f64 / seconds,
            step_ms_p50: step_quantile(0.5),
            step_ms_p99: step_quantile(0.99),
            step_ms_max: sorted.last().copied().unwrap_or(0.0),
            cpu_s,
            runqueue_wait_s,
            step_ms,
        }
    }
}

/// `--serve`: the timed parts stdin asks for, `None` once it closes.
fn read_requests() -> mpsc::Receiver<Option<f64>> {
    let (send, receive) = mpsc::channel();
    std::thread::Builder::new()
        .name("requests".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let seconds = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|request| request.get("seconds")?.as_f64())
                    .filter(|seconds| *seconds > 0.0);
                match seconds {
                    Some(seconds) => {
                        if send.send(Some(seconds)).is_err() {
                            return;
                        }
                    }
                    None => eprintln!(
                        "training-sim: ignoring the request {line:?}: expected {{\"seconds\": S}} \
                         with S > 0"
                    ),
                }
            }
            let _ = send.send(None);
        })
        .expect("spawn the request reader");
    receive
}

/// A timed part under `--serve`: its steps so far, and the counters at its start.
struct TimedPart {
    seconds: f64,
    started: Instant,
    cpu_s: f64,
    runqueue_wait_s: f64,
    step_ms: Vec<f64>,
}

impl TimedPart {
    fn start(seconds: f64) -> Self {
        println!("{}", serde_json::json!({ "timed_start": true }));
        Self {
            seconds,
            started: Instant::now(),
            cpu_s: process_cpu_seconds(),
            runqueue_wait_s: process_runqueue_wait_seconds(),
            step_ms: Vec::new(),
        }
    }

    /// Counts a step; its report once the part's time is up.
    fn step(&mut self, ms: f64) -> Option<Report> {
        self.step_ms.push(ms);
        let elapsed = self.started.elapsed().as_secs_f64();
        (elapsed >= self.seconds).then(|| {
            Report::new(
                std::mem::take(&mut self.step_ms),
                elapsed,
                process_cpu_seconds() - self.cpu_s,
                process_runqueue_wait_seconds() - self.runqueue_wait_s,
            )
        })
    }
}

/// Set by SIGUSR1: the job is in its new phase (`--phase-gap-us`).
static NEW_PHASE: AtomicBool = AtomicBool::new(false);

extern "C" fn start_new_phase(_signal: libc::c_int) {
    // An atomic store is all a signal handler may safely do here.
    NEW_PHASE.store(true, Ordering::Relaxed);
}

fn main() {
    let args = Args::parse();
    if args.phase_gap_us.is_some() {
        let handler: extern "C" fn(libc::c_int) = start_new_phase;
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(libc::SIGUSR1, handler as libc::sighandler_t) };
    }
    // The index of the last step, once the launch thread knows it. A flag would not do: a
    // loader descheduled just after step N's barrier could read a stop meant for step N + 1
    // and leave the others waiting at that barrier forever (seen here on the busy VM).
    let last_step = Arc::new(AtomicU64::new(u64::MAX));
    let barrier = Arc::new(Barrier::new(args.loaders + 1));

    let loaders: Vec<_> = (0..args.loaders)
        .map(|i| {
            let (args, last_step, barrier) = (args.clone(), last_step.clone(), barrier.clone());
            std::thread::Builder::new()
                .name(format!("loader-{i}"))
                .spawn(move || {
                    let mut rng = SplitMix64::new(args.seed.wrapping_add(i as u64 + 1));
                    for step in 0u64.. {
                        for _ in 0..args.items {
                            let us = rng.exponential(args.decode_us as f64);
                            burn(Duration::from_nanos((us * 1000.0) as u64));
                        }
                        // The launch thread publishes the last step before this barrier.
                        barrier.wait();
                        if last_step.load(Ordering::Acquire) == step {
                            return thread_runqueue_wait_seconds();
                        }
                    }
                    unreachable!("the step counter ran out")
                })
                .expect("spawn loader")
        })
        .collect();

    // The launch thread is this one: it measures the steps.
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.seconds);
    let mut step_ms = Vec::new();
    let mut progress = ProgressReporter::from_env();
    let requests = args.serve.then(read_requests);
    let mut timed: Option<TimedPart> = None;
    let mut stdin_closed = false;
    loop {
        if let Some(requests) = &requests
            && timed.is_none()
        {
            match requests.try_recv() {
                Ok(Some(seconds)) => timed = Some(TimedPart::start(seconds)),
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => stdin_closed = true,
                Err(mpsc::TryRecvError::Empty) => {}
            }
        }
        let step_start = Instant::now();
        let gap_us = match args.phase_gap_us {
            Some(phase_gap_us) if NEW_PHASE.load(Ordering::Relaxed) => phase_gap_us,
            _ => args.gap_us,
        };
        for _ in 0..args.bursts {
            burn(Duration::from_micros(args.burst_us));
            std::thread::sleep(Duration::from_micros(gap_us));
        }
        let done = match (args.serve, args.steps) {
            (true, _) => stdin_closed,
            (false, Some(n)) => step_ms.len() as u64 + 1 >= n,
            (false, None) => Instant::now() >= deadline,
        };
        if done {
            last_step.store(step_ms.len() as u64, Ordering::Release);
        }
        barrier.wait();
        let ms = step_start.elapsed().as_secs_f64() * 1e3;
        step_ms.push(ms);
        if let Some(progress) = &mut progress {
            progress.report(step_ms.len() as u64);
        }
        if let Some(report) = timed.as_mut().and_then(|part| part.step(ms)) {
            println!("{}", serde_json::to_string(&report).expect("serialize"));
            timed = None;
        }
        if done {
            break;
        }
    }
    if args.serve {
        for loader in loaders {
            loader.join().expect("loader panicked");
        }
        return;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut runqueue_wait_s = thread_runqueue_wait_seconds();
    for loader in loaders {
        runqueue_wait_s += loader.join().expect("loader panicked");
    }

    let report = Report::new(step_ms, elapsed, process_cpu_seconds(), runqueue_wait_s);
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("serialize"));
    } else {
        println!(
            "{} steps in {:.2} s: {:.1} steps/s, step time p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            report.steps,
            report.seconds,
            report.steps_per_s,
            report.step_ms_p50,
            report.step_ms_p99,
            report.step_ms_max
        );
    }
}
