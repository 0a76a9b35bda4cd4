//! Several training jobs. The loop follows one job's pace, and the levels above the core
//! policy's reach every job: offline on all of training's reserved cores, or running while any
//! job is short of cores. One job's pace is no proof for another's, so such a level is kept only
//! where every job running beside the one followed shows it free by its own pace.
//!
//! Each level reaches every job alike, so each cycle's halves serve every job: another job's
//! pace over the same level half and held half is a cycle of its own (`Others`).
//!
//! - Above the policy's level, a level the job followed keeps is kept only where each job beside
//!   it shows it free too (`Others::above_policy`): its own cycles' 95% interval at or above
//!   `1 − ε`, or, in a recheck, their mean, as for the job followed. The comparison runs on
//!   while a job's cycles could still show it, up to `MAX_CYCLES_ABOVE_POLICY`, and ends where they
//!   could hardly show it any more (reason `not_shown_free_for`, with the job). A running job with
//!   no pace at all (no reports and no GPU of its own) cannot show anything, nor can one in its
//!   first `WARMUP_NS` of reports (a job's first seconds are not its pace): while one runs, the
//!   loop goes no higher than the policy's level (`Harvest::top`, reason `several_jobs`), and a
//!   level above it comes down at the next tick, so a new job is not left beside offline on its
//!   cores until a recheck. The first comparison waits for them too. So one tenant's count,
//!   honest or not, can put offline on another tenant's cores only where that tenant's own pace
//!   shows it free.
//! - At the policy's level and below, a level kept for the job followed is still left where
//!   another job's 95% interval lies wholly below `1 − ε`, from `MIN_CYCLES` cycles on (reason
//!   `too_costly_for`, with the job). Its mean alone does not decide there, as the followed
//!   job's does (`Cycles::verdict`): that takes more cycles than a comparison the job followed
//!   ends may have run. So a cost of a few % to another job can pass unseen at those levels
//!   (unless it moves that job's settled pace: below), while one whose cycles leave no doubt
//!   is not kept. Without these cycles, a level that slowed only a job not followed was kept
//!   for as long as that job ran.
//! - A job beside counts its cycles from its first `WARMUP_NS` of reports on, as the job
//!   followed waits as long for its first comparison.
//! - A half measures long enough for every job's reports (`Others::measure_ns`): two of the
//!   periods of whichever job reports least often.
//! - Settled, each job beside's pace at the level is watched between rechecks as the job
//!   followed's is (`watch`, from the later of the settling and the end of the job's first
//!   `WARMUP_NS`, with its own stretches' spread): a move beyond 2ε and twice that spread, in two
//!   stretches in a row, the same way, has the level compared again at once (reason
//!   `pace_moved_for`, with the job), not at the next recheck one to four minutes later. Each job
//!   watched adds its own false moves, a recheck each (9 s or more of offline held back): on
//!   models at spreads of 1 to 30% a second, with nothing costing, one in 16 hours at most.
//! - In that recheck, at the policy's level and below, the mean of the moved job's cycles
//!   decides, as the followed job's does, where its cycles are not too noisy for it
//!   (`mean_too_noisy`, from its pooled spread): a mean below `1 − ε` runs the comparison on to
//!   `MAX_CYCLES` cycles, and then leaves the level (`too_costly_for`), also where the job
//!   followed is too noisy for its own mean and its verdict came at the third cycle (judged
//!   then, a new phase of the job beside that cost nothing had `policy` left in 9 runs of 20
//!   on a model; at the sixth, in 2). Its interval alone lets
//!   a cost of a few % pass where the job's pace is as noisy as the VM's; its watch's move is
//!   the evidence that lets its mean judge, as in no other comparison, so that what each job
//!   beside adds to the levels wrongly left stays as rare as its moves. On a model at the VM's
//!   spread (4.5% a second), a cost of 5% to the job beside was left before the recheck in 17
//!   runs of 20, against 6 by its interval alone; a new phase of it that cost nothing had
//!   `policy` left for it in 2 runs of 20.

use std::collections::BTreeMap;

use super::pooled_spread::PooledSpread;
use super::statistics::{
    Ratio, could_show_free_by, mean_too_noisy, measure_ns, pace_between, paired_interval,
};
use super::tuning::{
    MAX_CYCLES, MAX_CYCLES_ABOVE_POLICY, MIN_CYCLES, MIN_MEASURE_NS, SETTLE_NS, WARMUP_NS,
};
use super::watch::{StretchSpread, Watch};
use super::{Harvest, Level};
use crate::policy::pace::Report;

impl Harvest {
    /// The training jobs the node runs, by name: while one of them other than the job followed
    /// has no pace, or is in its first `WARMUP_NS` of one, the loop goes no higher than the
    /// policy's level, and its next tick comes down to it from above (reason `several_jobs`).
    pub(crate) fn set_training_jobs(&mut self, running: Vec<String>) {
        self.training_jobs = running;
    }

    /// The reports of the training jobs beside the one followed, each named, at `now_ns`: a
    /// level compared is left where one of their paces shows it costly too, and one above the
    /// policy's is kept only where each of them shows it free.
    pub(crate) fn set_other_jobs(&mut self, now_ns: u64, reports: Vec<(String, Vec<Report>)>) {
        self.others.set_reports(now_ns, reports);
    }

    /// Each job beside the one followed with two cycles or more in the current comparison (or
    /// the last one, once settled): its pace at the level over its held pace, with the interval.
    pub(crate) fn beside(&self) -> Vec<(String, Ratio)> {
        let cycles = self.others.cycles.iter();
        let judged =
            cycles.filter_map(|(job, cycles)| Some((job.clone(), paired_interval(cycles)?)));
        judged.collect()
    }

    /// The highest level the loop may try: the ladder's top, or the policy's while a running
    /// job other than the one followed has no pace yet to show a level above it free
    /// (`waiting_for`).
    pub(super) fn top(&self) -> Level {
        match self.waiting_for() {
            Some(_) => Level::Policy,
            None => Level::TOP,
        }
    }

    /// Whether every job beside the one followed with a pace is past its first `WARMUP_NS` of
    /// it: the first comparison waits for them, to start from the top of the ladder.
    pub(super) fn others_warmed_up(&self) -> bool {
        let mut others = self.others.since.keys();
        others.all(|job| !self.others.warming(job, self.last_tick_ns))
    }

    /// The first running training job, other than the one followed, with no pace, or in its
    /// first `WARMUP_NS` of one (as of the last tick): its pace cannot show a level free yet.
    pub(super) fn waiting_for(&self) -> Option<&str> {
        let followed = self.job.as_deref();
        let now_ns = self.last_tick_ns;
        self.training_jobs
            .iter()
            .map(String::as_str)
            .filter(|&job| Some(job) != followed)
            .find(|&job| !self.others.has_pace(job) || self.others.warming(job, now_ns))
    }
}

/// What the jobs beside the one followed say of a level above the policy's.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Beside {
    /// Every one of them shows it free (or none runs).
    Free,
    /// One of them cannot tell yet: another cycle.
    NotYet,
    /// `job`'s cycles could hardly show it free any more: the level is left. `ratio`, where it
    /// has two cycles or more.
    NotShownFree { job: String, ratio: Option<Ratio> },
}

/// The other jobs' reports and cycles.
#[derive(Debug, Clone, Default)]
pub(super) struct Others {
    /// Each other job's reports, as of the last tick.
    reports: Vec<(String, Vec<Report>)>,
    /// When each of them was first told with a pace, in its current run of reports: its cycles
    /// count from `WARMUP_NS` later.
    since: BTreeMap<String, u64>,
    /// Each other job's cycles in the current comparison: its pace at the level over its held
    /// pace just after it.
    cycles: BTreeMap<String, Vec<f64>>,
    /// How far each other job's cycles spread over its last comparisons, as `Harvest::spread`
    /// for the job followed: whether its cycles left could still show a level free.
    spread: BTreeMap<String, PooledSpread>,
    /// Settled, each other job's pace at the level, as the job followed's (`Watch`).
    watches: BTreeMap<String, Watch>,
    /// How far each other job's settled paces spread over its watches before the current one.
    stretch_spread: BTreeMap<String, StretchSpread>,
    /// The other job whose settled pace moved, in the recheck that move began: its mean
    /// decides at the policy's level and below (`moved_mean`).
    moved: Option<String>,
}

impl Others {
    /// The other jobs' reports at `now_ns`: each job running beside the one followed, with a
    /// pace. A job not among them (ended, or silent) has what was measured of it dropped.
    fn set_reports(&mut self, now_ns: u64, reports: Vec<(String, Vec<Report>)>) {
        let told = |job: &String| reports.iter().any(|(name, _)| name == job);
        self.cycles.retain(|job, _| told(job));
        self.since.retain(|job, _| told(job));
        self.spread.retain(|job, _| told(job));
        self.watches.retain(|job, _| told(job));
        self.stretch_spread.retain(|job, _| told(job));
        for (job, _) in &reports {
            self.since.entry(job.clone()).or_insert(now_ns);
        }
        self.reports = reports;
    }

    /// Whether `job` runs beside the one followed with a pace.
    fn has_pace(&self, job: &str) -> bool {
        self.reports.iter().any(|(name, _)| name == job)
    }

    /// Whether `job` is in its first `WARMUP_NS` of a pace at `now_ns`.
    fn warming(&self, job: &str, now_ns: u64) -> bool {
        self.since
            .get(job)
            .is_some_and(|&since| now_ns < since + WARMUP_NS)
    }

    /// Counts the cycle from `start`, of halves of `half_ns` (each settling for `SETTLE_NS`),
    /// for each other job past its first `WARMUP_NS` whose reports cover both halves.
    pub(super) fn add_cycle(&mut self, start: u64, half_ns: u64) {
        for (job, reports) in &self.reports {
            if self.warming(job, start) {
                continue;
            }
            let level = pace_between(reports, start, start + SETTLE_NS, start + half_ns);
            let held_from = start + half_ns;
            let held = pace_between(
                reports,
                held_from,
                held_from + SETTLE_NS,
                start + 2 * half_ns,
            );
            if let (Some(level), Some(held)) = (level, held.filter(|&held| held > 0.0)) {
                self.cycles
                    .entry(job.clone())
                    .or_default()
                    .push(level / held);
            }
        }
    }

    /// The first other job (by name) whose cycles in this comparison show its level costly:
    /// from `MIN_CYCLES` cycles, a 95% interval wholly below `floor`; else the job whose
    /// settled pace moved, where its mean decides (`moved_mean`, at the policy's level and
    /// below: `mean_decides`, with ε) and lies below `floor`.
    pub(super) fn costly_for(
        &self,
        floor: f64,
        mean_decides: Option<f64>,
    ) -> Option<(String, Ratio)> {
        let by_interval = self
            .cycles
            .iter()
            .filter(|(_, cycles)| cycles.len() >= MIN_CYCLES)
            .find_map(|(job, cycles)| {
                let ratio = paired_interval(cycles).filter(|ratio| ratio.high < floor)?;
                Some((job.clone(), ratio))
            });
        let by_mean = || {
            let (job, ratio) = self.moved_mean(mean_decides?)?;
            (ratio.cycles >= MIN_CYCLES && ratio.ratio < floor).then(|| (job.to_owned(), ratio))
        };
        by_interval.or_else(by_mean)
    }

    /// In a recheck begun by its settled pace's move, the job whose pace moved and its cycles'
    /// mean and interval, where that mean can judge `epsilon`: its cycles not too noisy for it
    /// (`mean_too_noisy`, from the spread of its cycles pooled over its last comparisons).
    fn moved_mean(&self, epsilon: f64) -> Option<(&str, Ratio)> {
        let job = self.moved.as_deref()?;
        let cycles = self.cycles.get(job)?;
        let none = PooledSpread::default();
        let spread = self.spread.get(job).unwrap_or(&none);
        if mean_too_noisy(spread.variance_with(cycles), epsilon) {
            return None;
        }
        Some((job, paired_interval(cycles)?))
    }

    /// At the policy's level and below, after `judged` cycles, whether the job whose settled
    /// pace moved wants another before the level is judged, up to `MAX_CYCLES`: with a pace,
    /// fewer than `MIN_CYCLES` of its own; or a mean below `floor` whose interval is not yet
    /// wholly below it, where its mean decides (`moved_mean`), as the followed job's runs on to
    /// `MAX_CYCLES`.
    pub(super) fn moved_wants_a_cycle(&self, floor: f64, epsilon: f64, judged: usize) -> bool {
        let Some(job) = self.moved.as_deref().filter(|_| judged < MAX_CYCLES) else {
            return false;
        };
        let counted = self.cycles.get(job).map_or(0, Vec::len);
        match counted < MIN_CYCLES {
            true => self.has_pace(job),
            false => self
                .moved_mean(epsilon)
                .is_some_and(|(_, ratio)| ratio.ratio < floor && ratio.high >= floor),
        }
    }

    /// What the other jobs' cycles say of a level above the policy's after `judged` cycles of
    /// the comparison (a `recheck` of the level kept, or a search): free where each job's shows
    /// it free, from `MIN_CYCLES` cycles (their interval at or above `floor`; in a recheck,
    /// their mean); not shown free where one job's cycles left, up to `MAX_CYCLES_ABOVE_POLICY`,
    /// could hardly show it (`could_show_free_by`, at the spread its cycles keep).
    pub(super) fn above_policy(&self, floor: f64, recheck: bool, judged: usize) -> Beside {
        let left = MAX_CYCLES_ABOVE_POLICY.saturating_sub(judged);
        let none = PooledSpread::default();
        let mut beside = Beside::Free;
        for (job, _) in &self.reports {
            let cycles = self.cycles.get(job).map_or(&[][..], Vec::as_slice);
            let ratio = paired_interval(cycles);
            let shown = ratio.filter(|_| cycles.len() >= MIN_CYCLES);
            if shown.is_some_and(|r| r.low >= floor || (recheck && r.ratio >= floor)) {
                continue;
            }
            let spread = self
                .spread
                .get(job)
                .unwrap_or(&none)
                .upper_bound_with(cycles);
            let may_yet = cycles.len() < MIN_CYCLES
                || could_show_free_by(cycles, floor, cycles.len() + left, spread);
            match left > 0 && may_yet {
                true => beside = Beside::NotYet,
                false => {
                    let job = job.clone();
                    return Beside::NotShownFree { job, ratio };
                }
            }
        }
        beside
    }

    /// How long a half must measure for every other job's reports to give it a pace
    /// (`measure_ns` of each): a job reporting less often than the one followed, every 3 s
    /// beside one reporting each second, has at most one report in the followed job's 2 s and
    /// so no cycles at all.
    pub(super) fn measure_ns(&self) -> u64 {
        let each = self.reports.iter().map(|(_, reports)| measure_ns(reports));
        each.max().unwrap_or(MIN_MEASURE_NS)
    }

    /// Whether no job beside the one followed reports a pace.
    pub(super) fn is_empty(&self) -> bool {
        self.reports.is_empty()
    }

    /// The comparison is judged: each job's cycles join its spread.
    pub(super) fn judged(&mut self) {
        for (job, cycles) in &self.cycles {
            self.spread.entry(job.clone()).or_default().add(cycles);
        }
    }

    /// A new comparison (a search's, or a recheck's): the cycles so far judged nothing of its
    /// level, and a settled level's watches end, their stretches joining each job's spread.
    /// `moved`: the job beside whose settled pace moved, where that move began this recheck.
    pub(super) fn comparison_begins(&mut self, moved: Option<String>) {
        self.cycles.clear();
        self.moved = moved;
        for (job, watch) in std::mem::take(&mut self.watches) {
            let before = self.stretch_spread.get(&job).copied().unwrap_or_default();
            self.stretch_spread.insert(job, watch.spread(before));
        }
    }

    /// Settled at `settled_ns`, at `now_ns`: each other job's pace at the level read as the job
    /// followed's is (`Watch::read`, at `epsilon`), from the later of `settled_ns` and the end
    /// of its first `WARMUP_NS`. The first job (in the order told) whose pace moved, with its
    /// pace before and after.
    pub(super) fn watch(
        &mut self,
        now_ns: u64,
        settled_ns: u64,
        epsilon: f64,
    ) -> Option<(String, f64, f64)> {
        for (job, reports) in &self.reports {
            let Some(&since) = self.since.get(job) else {
                continue;
            };
            let from = settled_ns.max(since + WARMUP_NS);
            if now_ns < from {
                continue;
            }
            let watch = self
                .watches
                .entry(job.clone())
                .or_insert_with(|| Watch::new(from));
            let before = self.stretch_spread.get(job).copied().unwrap_or_default();
            if let Some((from, to)) = watch.read(now_ns, reports, before, epsilon) {
                return Some((job.clone(), from, to));
            }
        }
        None
    }

    /// A new signal: nothing measured of the jobs beside holds against it.
    pub(super) fn forget(&mut self) {
        self.cycles.clear();
        self.spread.clear();
        self.watches.clear();
        self.stretch_spread.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const FLOOR: f64 = 0.99;

    /// A job's reports at 100 steps a second, once a second, from `from_s` to `to_s`.
    fn steady(from_s: u64, to_s: u64) -> Vec<Report> {
        let report = |t: u64| Report::count(t * S, 100 * (t - from_s));
        (from_s..=to_s).map(report).collect()
    }

    #[test]
    fn a_job_beside_counts_its_cycles_from_its_first_seconds_on() {
        let mut others = Others::default();
        others.set_reports(0, vec![("bert".into(), steady(0, 60))]);
        // A cycle within its first `WARMUP_NS`: not counted.
        others.add_cycle(2 * S, 3 * S);
        assert!(others.cycles.is_empty());
        others.add_cycle(WARMUP_NS, 3 * S);
        assert_eq!(others.cycles["bert"], [1.0]);
        // Told again, its first report stands.
        others.set_reports(20 * S, vec![("bert".into(), steady(0, 60))]);
        others.add_cycle(20 * S, 3 * S);
        assert_eq!(others.cycles["bert"].len(), 2);
        // Silent, and back: its first seconds again.
        others.set_reports(30 * S, Vec::new());
        assert!(others.cycles.is_empty());
        others.set_reports(31 * S, vec![("bert".into(), steady(31, 90))]);
        others.add_cycle(32 * S, 3 * S);
        assert!(others.cycles.is_empty());
    }

    /// Jobs beside `a` and `b`, with these cycles.
    fn beside(a: &[f64], b: &[f64]) -> Others {
        let mut others = Others::default();
        others.set_reports(0, vec![("a".into(), Vec::new()), ("b".into(), Vec::new())]);
        others.cycles.insert("a".into(), a.to_vec());
        others.cycles.insert("b".into(), b.to_vec());
        others
    }

    #[test]
    fn a_level_above_the_policys_is_free_only_where_each_job_beside_shows_it() {
        let free = [1.0, 1.001, 0.999];
        // Too few cycles of one job, or too wide an interval: another cycle.
        assert_eq!(
            beside(&free, &[1.0]).above_policy(FLOOR, false, 3),
            Beside::NotYet
        );
        let wide = [1.0, 0.99, 1.01];
        assert_eq!(
            beside(&free, &wide).above_policy(FLOOR, false, 3),
            Beside::NotYet
        );
        // A recheck keeps the level on the mean, as for the job followed.
        assert_eq!(
            beside(&free, &wide).above_policy(FLOOR, true, 3),
            Beside::Free
        );
        assert_eq!(
            beside(&free, &free).above_policy(FLOOR, false, 3),
            Beside::Free
        );
        // Out of cycles, or with cycles that could hardly show it free any more: left.
        for (cycles, judged) in [
            (&wide[..], MAX_CYCLES_ABOVE_POLICY),
            (&[0.97, 0.971, 0.969], 3),
        ] {
            let Beside::NotShownFree { job, ratio } =
                beside(&free, cycles).above_policy(FLOOR, false, judged)
            else {
                panic!("{cycles:?} after {judged} cycles");
            };
            assert_eq!(job, "b");
            assert_eq!(ratio.map(|r| r.cycles), Some(3));
        }
        // No job beside: nothing to show.
        assert_eq!(
            Others::default().above_policy(FLOOR, false, 3),
            Beside::Free
        );
    }

    #[test]
    fn the_mean_of_a_job_whose_settled_pace_moved_decides_in_the_recheck_it_began() {
        let free = [1.0, 1.001, 0.999];
        // 2% below the pace held, the interval still reaching `1 − ε`.
        let costly = [0.98, 0.975, 0.985];
        let mut others = beside(&free, &costly);
        let epsilon = 1.0 - FLOOR;
        // In any other comparison only the interval decides.
        assert!(!others.moved_wants_a_cycle(FLOOR, epsilon, 3));
        assert_eq!(others.costly_for(FLOOR, Some(epsilon)), None);
        // In the recheck b's move began: on to `MAX_CYCLES`, then left on its mean.
        // (Its cycles counted again over the new comparison.)
        others.comparison_begins(Some("b".into()));
        others.cycles.insert("b".into(), costly.to_vec());
        assert!(others.moved_wants_a_cycle(FLOOR, epsilon, 3));
        assert!(!others.moved_wants_a_cycle(FLOOR, epsilon, MAX_CYCLES));
        let (job, ratio) = others.costly_for(FLOOR, Some(epsilon)).expect("left for b");
        assert_eq!((job.as_str(), ratio.cycles), ("b", 3));
        // Above the policy's level its mean does not decide this way.
        assert_eq!(others.costly_for(FLOOR, None), None);
        // A new comparison: no job's move behind it.
        others.comparison_begins(None);
        assert_eq!(others.moved, None);
    }
}
