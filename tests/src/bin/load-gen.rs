//! An open-loop Poisson load on a KServe v2 infer endpoint, on loopback: the online inference
//! traffic of the co-location benchmark.
//!
//! Arrivals are drawn from a fixed seed and do not wait for answers: a slow server does not
//! slow the offered load. Each request's latency runs from its scheduled arrival, not from
//! when a sender got to it, so time spent queued in this client counts too (no coordinated
//! omission). A request that fails, is refused (429) or times out counts as outside the SLO.

use std::{
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use clap::Parser;
use enforcer_common::{
    rng::SplitMix64,
    stats::{quantile, sorted},
};

#[derive(Parser, Debug)]
#[command(
    about = "Sends an open-loop Poisson load to a KServe v2 infer URL and reports SLO \
                   attainment and latency percentiles as JSON"
)]
struct Args {
    /// The infer URL, e.g. http://127.0.0.1:8000/v2/models/cls/infer (loopback only).
    #[arg(long)]
    url: String,
    /// A file holding the request body sent every time: JSON, or with
    /// --inference-header-length a JSON header followed by binary tensors.
    #[arg(long)]
    body: std::path::PathBuf,
    /// The body uses KServe's binary tensor data extension: its first BYTES bytes are the JSON
    /// header, the tensors' raw values follow. Sent as the Inference-Header-Content-Length
    /// header.
    #[arg(long, value_name = "BYTES")]
    inference_header_length: Option<usize>,
    /// Mean arrivals per second.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// The latency SLO, ms.
    #[arg(long, default_value_t = 50.0)]
    slo_ms: f64,
    /// Seed of the arrival times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Concurrent connections: the most requests in flight at once.
    #[arg(long, default_value_t = 16)]
    senders: usize,
    /// A request not answered in this time is abandoned (and missed).
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

#[derive(serde::Serialize)]
struct Report {
    sent: usize,
    ok: usize,
    refused: usize,
    failed: usize,
    within_slo: usize,
    attainment_pct: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// One answered or failed request: latency from its scheduled arrival, and whether it was
/// answered 200, refused with 429, or failed otherwise.
enum Outcome {
    Ok(f64),
    Refused,
    Failed,
}

fn is_loopback(url: &str) -> bool {
    let rest = url.strip_prefix("http://").unwrap_or("");
    ["127.0.0.1:", "localhost:", "[::1]:"]
        .iter()
        .any(|host| rest.starts_with(host))
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if !is_loopback(&args.url) {
        eprintln!(
            "load-gen: {} is not a loopback URL (http://127.0.0.1:PORT/...)",
            args.url
        );
        return std::process::ExitCode::from(2);
    }
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        eprintln!("load-gen: --rate must be a positive number of requests per second");
        return std::process::ExitCode::from(2);
    }
    let body = match std::fs::read(&args.body) {
        Ok(body) => Arc::new(body),
        Err(e) => {
            eprintln!("load-gen: cannot read --body {}: {e}", args.body.display());
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(length) = args.inference_header_length
        && length > body.len()
    {
        eprintln!(
            "load-gen: --inference-header-length {length} is longer than the {}-byte body",
            body.len()
        );
        return std::process::ExitCode::from(2);
    }
    let content_type = match args.inference_header_length {
        None => "application/json",
        Some(_) => "application/octet-stream",
    };
    let header_length = args.inference_header_length.map(|n| n.to_string());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_millis(args.timeout_ms)))
        .build()
        .into();

    let (arrivals, inbox) = mpsc::channel::<Instant>();
    let inbox = Arc::new(Mutex::new(inbox));
    let (outcomes, results) = mpsc::channel::<Outcome>();
    let senders: Vec<_> = (0..args.senders.max(1))
        .map(|_| {
            let (inbox, outcomes, agent, body, url, header_length) = (
                inbox.clone(),
                outcomes.clone(),
                agent.clone(),
                body.clone(),
                args.url.clone(),
                header_length.clone(),
            );
            std::thread::spawn(move || {
                loop {
                    let Ok(scheduled) = inbox.lock().expect("inbox").recv() else {
                        return;
                    };
                    let mut post = agent.post(&url).header("content-type", content_type);
                    if let Some(length) = &header_length {
                        post = post.header("inference-header-content-length", length);
                    }
                    let answer = post.send(&body[..]);
                    let outcome = match answer {
                        Ok(mut response) => {
                            // Read the whole answer: the request is done when it has arrived.
                            let read = response.body_mut().read_to_vec();
                            match (response.status().as_u16(), read) {
                                (200, Ok(_)) => {
                                    Outcome::Ok(scheduled.elapsed().as_secs_f64() * 1e3)
                                }
                                (429, _) => Outcome::Refused,
                                _ => Outcome::Failed,
                            }
                        }
                        Err(_) => Outcome::Failed,
                    };
                    let _ = outcomes.send(outcome);
                }
            })
        })
        .collect();
    drop(outcomes);

    let mut rng = SplitMix64::new(args.seed);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.seconds);
    let mut next = start;
    let mut sent = 0;
    loop {
        next += Duration::from_secs_f64(rng.exponential(1.0 / args.rate));
        if next >= end {
            break;
        }
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        arrivals.send(next).expect("senders alive");
        sent += 1;
    }
    drop(arrivals);
    for sender in senders {
        sender.join().expect("sender panicked");
    }

    let (mut latencies, mut refused, mut failed) = (Vec::new(), 0, 0);
    for outcome in results.iter() {
        match outcome {
            Outcome::Ok(ms) => latencies.push(ms),
            Outcome::Refused => refused += 1,
            Outcome::Failed => failed += 1,
        }
    }
    let latencies = sorted(latencies);
    let within_slo = latencies.iter().filter(|&&ms| ms <= args.slo_ms).count();
    let report = Report {
        sent,
        ok: latencies.len(),
        refused,
        failed,
        within_slo,
        attainment_pct: if sent == 0 {
            f64::NAN
        } else {
            within_slo as f64 * 100.0 / sent as f64
        },
        p50_ms: quantile(&latencies, 0.5),
        p99_ms: quantile(&latencies, 0.99),
        max_ms: latencies.last().copied().unwrap_or(f64::NAN),
    };
    println!("{}", serde_json::to_string(&report).expect("serialize"));
    std::process::ExitCode::SUCCESS
}
