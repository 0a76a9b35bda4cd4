//! The loop settled at a level: its pace read stretch by stretch (`watch`), the jobs beside
//! watched too (`others`), the stops it brings counted (`stops`), and its recheck when due.

use super::{Change, Harvest, Level, Phase, RECHECK_NS, Why, stops::Shown, watch::Watch};
use crate::policy::pace::Report;

impl Harvest {
    /// One step of the loop settled at `level`, its pace `watch`ed.
    pub(super) fn step_settled(
        &mut self,
        now_ns: u64,
        level: Level,
        mut watch: Watch,
        reports: &[Report],
    ) -> Option<Change> {
        self.read_half_lengths(now_ns, watch.since(), reports);
        let epsilon = self.settings.epsilon;
        let moved = watch.read(now_ns, reports, self.stretch_spread, epsilon);
        let stretch = watch.take_stretch();
        self.phase = Phase::Settled { level, watch };
        let shown = stretch
            .and_then(|(pace, span_ns)| self.stops.stretch(level, now_ns, pace, span_ns, epsilon));
        if let Some(shown) = shown {
            self.stretch_spread = watch.spread(self.stretch_spread);
            return Some(self.leave_for_stops(now_ns, level, shown, reports));
        }
        if let Some((from, to)) = moved {
            self.stretch_spread = watch.spread(self.stretch_spread);
            return Some(self.recheck(now_ns, level, reports, Why::PaceMoved { from, to }));
        }
        // The jobs beside too: a cost that grows for one of them is found now, not at the
        // recheck.
        if let Some((job, from, to)) = self.others.watch(now_ns, watch.since(), epsilon) {
            self.stretch_spread = watch.spread(self.stretch_spread);
            let why = Why::PaceMovedFor { job, from, to };
            return Some(self.recheck(now_ns, level, reports, why));
        }
        // Due after its wait (a minute while the level's stops point to a cost the held time
        // cannot show yet: its held halves are what can), or as soon as a level above found too
        // costly has waited its own: it is tried then, not at a recheck up to four minutes later.
        let wait_ns = match self.stops.suspect(level, epsilon) {
            true => RECHECK_NS,
            false => self.half_lengths.recheck_wait_ns(self.recheck_after_ns),
        };
        let due = now_ns.saturating_sub(watch.since()) >= wait_ns
            || self.ceiling.cost_may_be_gone_above(level, now_ns);
        if !due {
            return None;
        }
        // Due: no change of level until its held half.
        self.stretch_spread = watch.spread(self.stretch_spread);
        self.recheck(now_ns, level, reports, Why::Probe);
        None
    }

    /// Compares the settled `level` again where it stands.
    pub(super) fn recheck(
        &mut self,
        now_ns: u64,
        level: Level,
        reports: &[Report],
        why: Why,
    ) -> Change {
        // The level above may be tried again once the ceiling's wait is over.
        self.ceiling.lift_if_over(now_ns);
        let change = self.compare(now_ns, level, reports, why);
        if let Phase::Comparing { recheck, .. } = &mut self.phase {
            *recheck = true;
        }
        change
    }

    /// The settled `level` was shown to make training stop (`shown`): the level under it is
    /// compared, and this one waits as long as its stops say (`Ceiling::stops_shown`).
    fn leave_for_stops(
        &mut self,
        now_ns: u64,
        level: Level,
        shown: Shown,
        reports: &[Report],
    ) -> Change {
        let epsilon = self.settings.epsilon;
        self.ceiling
            .stops_shown(level, now_ns, shown.lost_ns, epsilon);
        let why = Why::Stops {
            tried: level,
            lowest: shown.lowest,
            at_levels: shown.at_level,
            held: shown.held,
        };
        match level.down().filter(|&down| down > Level::Held) {
            Some(down) => self.compare(now_ns, down, reports, why),
            None => self.settle(now_ns, Level::Held, why),
        }
    }
}
