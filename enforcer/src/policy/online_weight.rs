//! An online pool's CPU weight, steered by how close its workers' latency tail comes to their
//! SLO. Pure: the enforcer feeds it the workers' reports and writes the weight it returns.
//!
//! Why: where a training thread and an online worker want the same CPU (on a small machine,
//! the pool's guaranteed core, which training spills onto), the pool's weight decides how long
//! the training thread waits for an inference item to end, and at a fixed weight the pool's
//! tail often had room its SLO did not need (docs/experiments/2026-11-23-steered-weight.md).
//! So the weight goes down while the tail has room, to `min_cpu_weight`, and back up the
//! moment it has not, to `cpu_weight`: training first, the SLO kept.
//!
//! The rules, on the pool's tail (the highest of its workers' latest p99 over their SLO):
//! - a request refused or failed, or a tail above `RAISE_ABOVE`: the weight doubles at once
//!   (to at most the ceiling), and the pool stays calm for `HOLD_AFTER_RAISE_NS`;
//! - a tail below `LOWER_BELOW`: the weight halves (to at least the floor), at most once per
//!   `STEP_EVERY_NS`, and not within `HOLD_AFTER_RAISE_NS` of a raise, so that it does not
//!   flap between two weights with every wobble of the load;
//! - in between, it holds.
//!
//! A pool with no report (no requests, or workers that do not report) keeps its weight: an
//! idle pool's weight decides nothing, and a pool whose load returns is raised within one
//! report if its tail needs it.

use std::collections::BTreeMap;

use enforcer_common::protocol::LatencyReport;

/// A tail above this share of the SLO raises the weight: a margin for the report's own
/// noise (a p99 over a second of requests) before a request misses.
pub(crate) const RAISE_ABOVE: f64 = 0.75;
/// A tail below this share of the SLO lowers the weight: at half the weight an item can
/// take about twice as long when training contends, and the tail still fits.
pub(crate) const LOWER_BELOW: f64 = 0.5;
/// Lowered at most once in this time: once per report of a worker that reports each second.
/// A little under the second, so that a report that arrives a few milliseconds early (the
/// worker's tick, the socket, this daemon's own scheduling) does not skip its step and leave
/// the weight a second longer above where the tail allows.
pub(crate) const STEP_EVERY_NS: u64 = 900_000_000;
/// No lowering for this long after a raise.
pub(crate) const HOLD_AFTER_RAISE_NS: u64 = 3_000_000_000;
/// A worker's report older than this no longer counts (its load stopped).
pub(crate) const REPORT_LIFETIME_NS: u64 = 3_000_000_000;

/// A report's p99 over its SLO; a miss counts as the whole SLO. None where the period says
/// nothing.
pub(crate) fn tail_over_slo(report: &LatencyReport) -> Option<f64> {
    // The figures come from a pool member over the socket: any u64, so no sum that can wrap.
    if report.slo_us == 0 || (report.requests == 0 && report.missed == 0) {
        return None;
    }
    let tail = report.p99_us as f64 / report.slo_us as f64;
    Some(if report.missed > 0 {
        tail.max(1.0)
    } else {
        tail
    })
}

/// A change of the pool's weight, and the tail that made it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WeightChange {
    pub from: u32,
    pub to: u32,
    pub tail_over_slo: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct WeightSteering {
    ceiling: u32,
    floor: u32,
    weight: u32,
    /// Each worker's latest tail over its SLO, and when it came (CLOCK_MONOTONIC ns).
    tails: BTreeMap<u32, (f64, u64)>,
    last_lowered_ns: Option<u64>,
    last_raised_ns: Option<u64>,
}

impl WeightSteering {
    /// Starts at the ceiling: until a worker says its tail has room, the pool keeps the weight
    /// the operator configured.
    pub(crate) fn new(ceiling: u32, floor: u32) -> Self {
        let floor = floor.clamp(1, ceiling.max(1));
        Self {
            ceiling,
            floor,
            weight: ceiling,
            tails: BTreeMap::new(),
            last_lowered_ns: None,
            last_raised_ns: None,
        }
    }

    /// Goes on from `weight`, what a previous daemon of this instance left on the pool's group
    /// (a crash or a kill ends a daemon without releasing it), within the floor and the
    /// ceiling: a restart does not raise a weight its predecessor steered down, which would
    /// cost training the seconds the steering takes to come down again. Returns the weight to
    /// hold, which differs from `weight` where the configured range has moved since.
    pub(crate) fn resume_at(&mut self, weight: u32) -> u32 {
        self.weight = weight.clamp(self.floor, self.ceiling);
        self.weight
    }

    pub(crate) fn weight(&self) -> u32 {
        self.weight
    }

    pub(crate) fn floor(&self) -> u32 {
        self.floor
    }

    /// Whether the weight can move at all (`min_cpu_weight` below `cpu_weight`).
    pub(crate) fn steers(&self) -> bool {
        self.floor < self.ceiling
    }

    /// Worker `pid` reported `report` at `now_ns`; returns the new weight where it changed.
    pub(crate) fn report(
        &mut self,
        pid: u32,
        report: &LatencyReport,
        now_ns: u64,
    ) -> Option<WeightChange> {
        match tail_over_slo(report) {
            Some(tail) => self.tails.insert(pid, (tail, now_ns)),
            None => self.tails.remove(&pid),
        };
        self.tails
            .retain(|_, (_, at)| now_ns.saturating_sub(*at) <= REPORT_LIFETIME_NS);
        let tail = self
            .tails
            .values()
            .map(|(tail, _)| *tail)
            .reduce(f64::max)?;
        let from = self.weight;
        if tail > RAISE_ABOVE {
            self.last_raised_ns = Some(now_ns);
            self.weight = from.saturating_mul(2).min(self.ceiling);
        } else if tail < LOWER_BELOW
            && !within(self.last_lowered_ns, now_ns, STEP_EVERY_NS)
            && !within(self.last_raised_ns, now_ns, HOLD_AFTER_RAISE_NS)
        {
            self.weight = (from / 2).max(self.floor);
            if self.weight != from {
                self.last_lowered_ns = Some(now_ns);
            }
        }
        (self.weight != from).then_some(WeightChange {
            from,
            to: self.weight,
            tail_over_slo: tail,
        })
    }

    /// Worker `pid` went away: its tail no longer counts.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.tails.remove(&pid);
    }
}

fn within(since: Option<u64>, now_ns: u64, span_ns: u64) -> bool {
    since.is_some_and(|at| now_ns.saturating_sub(at) < span_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn tail(p99_ms: u64) -> LatencyReport {
        LatencyReport {
            requests: 40,
            missed: 0,
            p99_us: p99_ms * 1000,
            slo_us: 50_000,
        }
    }

    #[test]
    fn a_tail_with_room_halves_the_weight_once_a_second_down_to_the_floor() {
        let mut steering = WeightSteering::new(50, 10);
        // 18.7 ms against 50 ms: the co-location benchmark's reamer p99 at weight 50.
        let change = steering.report(7, &tail(19), S).expect("lowered");
        assert_eq!((change.from, change.to), (50, 25));
        assert!((change.tail_over_slo - 0.38).abs() < 1e-9);
        assert_eq!(
            steering.report(7, &tail(19), S + S / 2),
            None,
            "once a second"
        );
        // The next second's report, 50 ms early, still takes its step.
        let early = 2 * S - S / 20;
        assert_eq!(steering.report(7, &tail(19), early).map(|c| c.to), Some(12));
        assert_eq!(
            steering.report(7, &tail(19), early + S).map(|c| c.to),
            Some(10)
        );
        assert_eq!(steering.report(7, &tail(19), 4 * S), None, "at the floor");
        assert_eq!(steering.weight(), 10);
    }

    #[test]
    fn a_tail_near_the_slo_doubles_the_weight_at_once_and_holds_it_a_while() {
        let mut steering = WeightSteering::new(50, 10);
        for second in 1..=3 {
            steering.report(7, &tail(10), second * S);
        }
        assert_eq!(steering.weight(), 10);
        // 40 ms of 50: above three quarters, raised at once, twice in a row if need be.
        assert_eq!(
            steering.report(7, &tail(40), 3 * S + 1).map(|c| c.to),
            Some(20)
        );
        assert_eq!(
            steering.report(7, &tail(40), 3 * S + 2).map(|c| c.to),
            Some(40)
        );
        assert_eq!(
            steering.report(7, &tail(45), 3 * S + 3).map(|c| c.to),
            Some(50)
        );
        assert_eq!(
            steering.report(7, &tail(49), 3 * S + 4),
            None,
            "at the ceiling"
        );
        // Room again, but not within 3 s of the last raise.
        assert_eq!(steering.report(7, &tail(5), 5 * S), None);
        assert_eq!(
            steering.report(7, &tail(5), 6 * S + 4).map(|c| c.to),
            Some(25)
        );
        // Between the two thresholds it holds.
        assert_eq!(steering.report(7, &tail(30), 9 * S), None);
        assert_eq!(steering.weight(), 25);
    }

    #[test]
    fn a_report_of_absurd_figures_is_read_without_overflow() {
        let absurd = LatencyReport {
            requests: u64::MAX,
            missed: u64::MAX,
            p99_us: u64::MAX,
            slo_us: 1,
        };
        assert_eq!(tail_over_slo(&absurd), Some(u64::MAX as f64));
        let mut steering = WeightSteering::new(50, 10);
        assert_eq!(
            steering.report(7, &absurd, S).map(|c| c.to),
            None,
            "already at its ceiling"
        );
    }

    #[test]
    fn a_refused_or_failed_request_counts_as_a_missed_slo() {
        let mut steering = WeightSteering::new(50, 10);
        steering.report(7, &tail(5), S);
        let missed = LatencyReport {
            missed: 1,
            ..tail(5)
        };
        assert_eq!(tail_over_slo(&missed), Some(1.0));
        assert_eq!(steering.report(7, &missed, S + 1).map(|c| c.to), Some(50));
    }

    #[test]
    fn the_worst_worker_decides_and_a_silent_or_gone_one_stops_counting() {
        let mut steering = WeightSteering::new(50, 10);
        // Worker 1 is between the thresholds, worker 2 has room: the pool holds.
        assert_eq!(steering.report(1, &tail(30), S), None);
        assert_eq!(steering.report(2, &tail(5), S + 1), None);
        steering.forget(1);
        assert_eq!(steering.report(2, &tail(5), 2 * S).map(|c| c.to), Some(25));
        // Worker 1 again, then nothing from it for more than 3 s: its tail is stale.
        assert_eq!(steering.report(1, &tail(30), 3 * S), None);
        assert_eq!(steering.report(2, &tail(5), 4 * S), None);
        assert_eq!(
            steering.report(2, &tail(5), 6 * S + 1).map(|c| c.to),
            Some(12)
        );
        // A period without requests says nothing: the weight holds.
        let idle = LatencyReport {
            requests: 0,
            ..tail(0)
        };
        assert_eq!(tail_over_slo(&idle), None);
        assert_eq!(steering.report(2, &idle, 20 * S), None);
        assert_eq!(steering.weight(), 12);
    }

    #[test]
    fn a_restart_resumes_from_the_weight_left_within_the_configured_range() {
        let mut steering = WeightSteering::new(50, 10);
        assert_eq!(steering.resume_at(12), 12);
        assert_eq!(steering.weight(), 12);
        // It steers on from there: a tail near the SLO doubles it, not resets it.
        assert_eq!(steering.report(7, &tail(40), S).map(|c| c.to), Some(24));
        // A range changed since the previous daemon: the weight left is brought within it.
        assert_eq!(WeightSteering::new(50, 20).resume_at(12), 20);
        assert_eq!(WeightSteering::new(30, 10).resume_at(50), 30);
    }

    #[test]
    fn a_floor_at_the_ceiling_holds_the_configured_weight() {
        let mut steering = WeightSteering::new(50, 50);
        assert!(!steering.steers());
        assert_eq!(steering.report(7, &tail(1), S), None);
        assert_eq!(
            WeightSteering::new(50, 80).floor(),
            50,
            "a floor above is the ceiling"
        );
    }
}
