//! The lowest level left as too costly, and how long the levels from it up wait before the
//! loop tries them again. Pure: times and costs are passed in.
//!
//! A cost found may go away: a neighbour's memory traffic stops, the job's phase ends, or the
//! comparison that found it was an unlucky one. With one wait of five minutes for every cost,
//! tried again only at the first recheck after it, a model job whose levels cost it 3% for
//! five minutes came back to the policy's level 352 to 394 s after the cost went.
//!
//! So the wait is the longer of two:
//! - a minute the first time a level is found too costly, twice as long each time it is found
//!   so again, up to five minutes; once it keeps training's pace, a minute again;
//! - the wait that keeps another such try within `TRY_SHARE_OF_EPSILON` of ε: the comparison's
//!   time at the level times the cost found, over a quarter of ε. A try of a level that costs
//!   10% costs training 0.9 s of its time; it waits the five minutes, as before.
//!
//! A level whose wait is shorter than five minutes is tried as soon as it is over
//! (`cost_may_be_gone_above`), not at the next recheck, up to four minutes later. The model
//! job above came back 118 to 249 s after the cost went (12 seeds); at 10%, 352 to 388 s, as
//! before. Over the VM job's recorded steps with a cost that came for five minutes and went
//! for five (`xtask/scripts/phase_replay.py STEPS OLD NEW --cost C --slow-pace 1`, 5 × 2 h),
//! offline ran 52% of the time against 21% at a 2% cost, training losing 0.53% against
//! 0.25%; 42% against 14% at 5%, 0.91% against 0.41%; at 10%, 15% either way.
//!
//! A level shown over hours to make training stop (`stops`) waits by the same budget, up to
//! the two hours its account keeps: such a cost is found only after many minutes at the level.
//!
//! A level above the core policy's that is not shown free (its cycles could not prove it)
//! waits the five minutes at once, and the next recheck after: its noise does not go away
//! sooner, and each try of it holds offline back for up to 72 s.

use super::{level::Level, stops::ACCOUNT_NS};

/// The first wait before a level found too costly is tried again.
pub(super) const CEILING_FIRST_NS: u64 = 60_000_000_000;
/// The longest wait, and the wait after a level is not shown free.
pub(super) const CEILING_NS: u64 = 300_000_000_000;
/// The share of ε that trying a costly level again may cost training, over the wait before
/// it: a level found to cost 10% over three cycles' 3 s halves (9 s at it, 0.9 s of training
/// lost) waits the longest wait, and one found to cost 2% (0.18 s) a minute and 12 s. Over the
/// VM job's steps with a 10% cost coming and going every five minutes, trying such levels as
/// soon as the doubling wait allowed cost training 1.5%; with this budget, 0.8%.
const TRY_SHARE_OF_EPSILON: f64 = 0.25;

#[derive(Debug, Clone, Default)]
pub(super) struct Ceiling {
    standing: Option<Standing>,
    /// The level last shown over hours to make training stop (`stops`): apart, so that a
    /// comparison's shorter wait for a level under it does not lift it.
    stopped: Option<Standing>,
    /// Per level of the ladder: how many times in a row it was found too costly, with no
    /// comparison keeping it between.
    too_costly: [u32; Level::LADDER.len()],
}

/// The levels from `level` up are not tried before `at_ns + wait_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Standing {
    level: Level,
    at_ns: u64,
    wait_ns: u64,
}

impl Ceiling {
    /// `level` shown too costly at `now_ns`, its comparison having cost training `lost_ns` of
    /// its time (the level's halves times the cost found): it and the levels above wait, the
    /// longer the more often in a row it was, and long enough that another such try costs
    /// training at most `TRY_SHARE_OF_EPSILON` of `epsilon`.
    pub(super) fn too_costly(&mut self, level: Level, now_ns: u64, lost_ns: f64, epsilon: f64) {
        let times = &mut self.too_costly[level.index()];
        *times = times.saturating_add(1);
        let doublings = (*times - 1).min(16);
        let backed_off_ns = CEILING_FIRST_NS.saturating_mul(1 << doublings);
        let within_budget_ns = lost_ns / (TRY_SHARE_OF_EPSILON * epsilon);
        let wait_ns = (backed_off_ns as f64)
            .max(within_budget_ns)
            .min(CEILING_NS as f64) as u64;
        self.standing = Some(Standing {
            level,
            at_ns: now_ns,
            wait_ns,
        });
    }

    /// `level` shown by the stops it brings over hours (`stops`) to have cost training `lost_ns`:
    /// it waits as long as keeps that within a quarter of ε, past the five minutes a comparison's
    /// verdict has it wait, up to `stops::ACCOUNT_NS`: tried again within that, the stops still
    /// counted leave it again at its first stretch, and after it, its account starts afresh.
    pub(super) fn stops_shown(&mut self, level: Level, now_ns: u64, lost_ns: f64, epsilon: f64) {
        self.too_costly(level, now_ns, lost_ns, epsilon);
        let within_budget_ns = lost_ns / (TRY_SHARE_OF_EPSILON * epsilon);
        self.stopped = Some(Standing {
            level,
            at_ns: now_ns,
            wait_ns: (within_budget_ns.min(ACCOUNT_NS as f64) as u64).max(CEILING_NS),
        });
    }

    /// `level`, above the policy's, not shown free at `now_ns`: it and the levels above wait
    /// the longest.
    pub(super) fn not_shown_free(&mut self, level: Level, now_ns: u64) {
        self.standing = Some(Standing {
            level,
            at_ns: now_ns,
            wait_ns: CEILING_NS,
        });
    }

    /// `level` kept training's pace: found too costly again, it waits the first wait.
    pub(super) fn kept(&mut self, level: Level) {
        self.too_costly[level.index()] = 0;
    }

    /// Lifts the ceiling where its wait is over: the level above the settled one may be tried.
    pub(super) fn lift_if_over(&mut self, now_ns: u64) {
        for standing in [&mut self.standing, &mut self.stopped] {
            if standing.is_some_and(|s| now_ns.saturating_sub(s.at_ns) >= s.wait_ns) {
                *standing = None;
            }
        }
    }

    /// Whether a level over `level` was given a wait shorter than the longest (so it was shown
    /// too costly: one not shown free waits the longest) and has waited it: the cost may be
    /// gone, and the level is worth a recheck now.
    /// One given the longest wait is tried at the first recheck after it: through a bursty
    /// job's noise (the loader model at a 30% spread, every level costing 10%), trying it as
    /// soon as the wait was over kept offline at the policy's level 67% of the time against
    /// 58%.
    pub(super) fn cost_may_be_gone_above(&self, level: Level, now_ns: u64) -> bool {
        self.standing.is_some_and(|s| {
            s.wait_ns < CEILING_NS && level < s.level && now_ns.saturating_sub(s.at_ns) >= s.wait_ns
        })
    }

    /// Whether `level` may be tried: it lies under the ceiling, or none stands.
    pub(super) fn allows(&self, level: Level) -> bool {
        [self.standing, self.stopped]
            .iter()
            .all(|standing| standing.is_none_or(|s| level < s.level))
    }

    /// Forgets it all: a new phase, a new signal.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// When `level` may be tried again after it was found too costly at 0, lifting each second.
    fn tried_again_after_s(ceiling: &mut Ceiling, level: Level) -> u64 {
        ceiling.too_costly(level, 0, 0.0, 0.01);
        (1..=CEILING_NS / S)
            .find(|&s| {
                ceiling.lift_if_over(s * S);
                ceiling.allows(level)
            })
            .expect("lifted within the longest wait")
    }

    #[test]
    fn a_level_found_too_costly_again_and_again_waits_twice_as_long_each_time_up_to_five_minutes() {
        let mut ceiling = Ceiling::default();
        let waits: Vec<u64> = (0..6)
            .map(|_| tried_again_after_s(&mut ceiling, Level::Policy))
            .collect();
        assert_eq!(waits, [60, 120, 240, 300, 300, 300]);
    }

    #[test]
    fn a_level_that_keeps_the_pace_between_waits_the_first_wait_again() {
        let mut ceiling = Ceiling::default();
        tried_again_after_s(&mut ceiling, Level::Half);
        tried_again_after_s(&mut ceiling, Level::Half);
        // Another level's verdicts leave its count alone.
        ceiling.kept(Level::Quarter);
        assert_eq!(tried_again_after_s(&mut ceiling, Level::Half), 240);
        ceiling.kept(Level::Half);
        assert_eq!(tried_again_after_s(&mut ceiling, Level::Half), 60);
    }

    #[test]
    fn the_levels_under_the_ceiling_may_be_tried_and_those_from_it_up_may_not() {
        let mut ceiling = Ceiling::default();
        assert!(ceiling.allows(Level::TOP));
        ceiling.too_costly(Level::Policy, 0, 0.0, 0.01);
        assert!(ceiling.allows(Level::ThreeQuarters));
        assert!(!ceiling.allows(Level::Policy));
        assert!(!ceiling.allows(Level::TOP));
        // Not lifted before its wait is over.
        ceiling.lift_if_over(CEILING_FIRST_NS - 1);
        assert!(!ceiling.allows(Level::Policy));
    }

    #[test]
    fn a_costlier_level_waits_until_another_try_of_it_costs_a_quarter_of_epsilon() {
        let mut ceiling = Ceiling::default();
        // 9 s at a level that cost 2%: 0.18 s lost, 72 s at 1% ε.
        ceiling.too_costly(Level::Policy, 0, 0.18 * S as f64, 0.01);
        ceiling.lift_if_over(71 * S);
        assert!(!ceiling.allows(Level::Policy));
        assert!(ceiling.cost_may_be_gone_above(Level::ThreeQuarters, 72 * S));
        ceiling.lift_if_over(72 * S);
        assert!(ceiling.allows(Level::Policy));
        // 10%: 0.9 s, longer than the longest wait, which it waits; and it waits for a
        // recheck, not for the cost to be gone.
        ceiling.too_costly(Level::Policy, 0, 0.9 * S as f64, 0.01);
        assert!(!ceiling.cost_may_be_gone_above(Level::ThreeQuarters, CEILING_NS));
        ceiling.lift_if_over(CEILING_NS);
        assert!(ceiling.allows(Level::Policy));
    }

    #[test]
    fn a_level_not_shown_free_waits_the_longest_at_once() {
        let mut ceiling = Ceiling::default();
        ceiling.not_shown_free(Level::Unpaused, 0);
        assert!(!ceiling.cost_may_be_gone_above(Level::Policy, CEILING_NS));
        ceiling.lift_if_over(CEILING_NS - 1);
        assert!(!ceiling.allows(Level::Unpaused));
        ceiling.lift_if_over(CEILING_NS);
        assert!(ceiling.allows(Level::Unpaused));
    }

    #[test]
    fn cleared_every_level_waits_the_first_wait_again() {
        let mut ceiling = Ceiling::default();
        tried_again_after_s(&mut ceiling, Level::Policy);
        ceiling.too_costly(Level::Policy, 0, 0.0, 0.01);
        ceiling.clear();
        assert!(ceiling.allows(Level::TOP));
        assert_eq!(tried_again_after_s(&mut ceiling, Level::Policy), 60);
    }
}
