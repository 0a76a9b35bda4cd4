//! When an online worker tells the enforcer its latency (`SloReporter::report_latency`): once a
//! second, and at once where the requests since the last report already miss the SLO.
//!
//! Why the early report: the enforcer raises the pool's CPU weight on a report whose tail is
//! near the SLO, one doubling per report (docs/enforcer.md, "The online weight, steered by the latency tail").
//! With a report only once a second, a pool whose weight had come down to its floor while it
//! served alone took three seconds to climb back (10, 20, 40, 50) once a training job arrived,
//! missing the SLO meanwhile. Looked at every 100 ms, requests that miss raise it by a step
//! within a tenth of a second of the miss (in one test run the whole climb from 10 to 50
//! took 1.4 s, docs/experiments/2026-11-23-steered-weight.md). A report sent early holds a p99 above the SLO, or a
//! refusal, so it can only raise the weight, never lower it early.

use std::time::{Duration, Instant};

use crate::{
    grants::SloReporter,
    metrics::{LatencyWindow, Metrics, WindowLatency},
};

/// A report at least this often while there are requests.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How often the requests of the period so far are looked at for a miss.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Whether the period that began `elapsed` ago, with `so_far` of it, is to be reported now.
pub fn due(elapsed: Duration, so_far: &WindowLatency, slo: Duration) -> bool {
    elapsed >= REPORT_EVERY || so_far.missed > 0 || so_far.p99.is_some_and(|p99| p99 > slo)
}

/// Reports for ever, on the calling thread.
pub fn run(metrics: &Metrics, reporter: &SloReporter) {
    let mut window = LatencyWindow::new(metrics);
    let mut since = Instant::now();
    loop {
        std::thread::sleep(CHECK_EVERY);
        if due(since.elapsed(), &window.peek(metrics), metrics.slo()) {
            reporter.report_latency(&window.next(metrics), metrics.slo());
            since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO: Duration = Duration::from_millis(50);

    fn so_far(p99_ms: u64, missed: u64) -> WindowLatency {
        WindowLatency {
            requests: 10,
            missed,
            p99: Some(Duration::from_millis(p99_ms)),
        }
    }

    #[test]
    fn a_period_is_reported_each_second_and_early_only_when_it_misses_the_slo() {
        let early = Duration::from_millis(300);
        assert!(due(REPORT_EVERY, &so_far(10, 0), SLO), "a second is up");
        assert!(
            !due(early, &so_far(10, 0), SLO),
            "room left: wait for the second"
        );
        // Near the SLO but within it: the once-a-second report will tell it.
        assert!(!due(early, &so_far(45, 0), SLO));
        assert!(due(early, &so_far(60, 0), SLO), "p99 over the SLO");
        assert!(
            due(early, &so_far(10, 1), SLO),
            "a refused or failed request"
        );
        let nothing = WindowLatency {
            requests: 0,
            missed: 0,
            p99: None,
        };
        assert!(!due(early, &nothing, SLO));
    }
}
