//! Several training jobs. The loop follows one job's pace, and the levels above the core
//! policy's reach every job: offline on all of training's reserved cores, or running while any
//! job is short of cores. One job's pace is no proof for another's, so while more than one job
//! runs the loop goes no higher than the policy's level (`Harvest::top`).
//!
//! There and below, each level reaches every job alike, so each cycle's halves serve every job:
//! another job's pace over the same level half and held half is a cycle of its own (`Others`),
//! and a level kept for the job followed is still left where another job's cycles show it
//! costly (reason `too_costly_for`, with the job). Without them, a level that slowed only a job
//! not followed was kept for as long as that job ran.
//!
//! A half measures long enough for every job's reports (`Others::measure_ns`): two of the
//! periods of whichever job reports least often.
//!
//! Another job's cycles only ever take offline work away, and only by their interval: where its
//! 95% interval lies wholly below `1 − ε`, from `MIN_CYCLES` cycles on. Its mean alone does not
//! decide, as the followed job's does at the policy's level (`Cycles::verdict`): that takes more
//! cycles than a comparison the job followed ends may have run. So a cost of a few % to another
//! job can pass unseen, while one whose cycles leave no doubt is not kept.

use std::collections::BTreeMap;

use super::statistics::{Ratio, measure_ns, pace_between, paired_interval};
use super::tuning::{MIN_CYCLES, MIN_MEASURE_NS, SETTLE_NS};
use super::{Harvest, Level};
use crate::policy::pace::Report;

impl Harvest {
    /// How many training jobs the node runs now: with more than one, the loop goes no higher
    /// than the policy's level, and its next tick comes down to it from above (reason
    /// `several_jobs`).
    pub(crate) fn set_training_jobs(&mut self, jobs: usize) {
        self.training_jobs = jobs;
    }

    /// The reports of the training jobs beside the one followed, each named: a level compared
    /// is left where one of their paces shows it costly too.
    pub(crate) fn set_other_jobs(&mut self, reports: Vec<(String, Vec<Report>)>) {
        self.others.set_reports(reports);
    }

    /// Each job beside the one followed with two cycles or more in the current comparison (or
    /// the last one, once settled): its pace at the level over its held pace, with the interval.
    pub(crate) fn beside(&self) -> Vec<(String, Ratio)> {
        let cycles = self.others.cycles.iter();
        let judged =
            cycles.filter_map(|(job, cycles)| Some((job.clone(), paired_interval(cycles)?)));
        judged.collect()
    }

    /// The highest level the loop may try: the ladder's top while one job runs, the policy's
    /// while more do.
    pub(super) fn top(&self) -> Level {
        match self.training_jobs > 1 {
            true => Level::Policy,
            false => Level::TOP,
        }
    }
}

/// The other jobs' reports and cycles.
#[derive(Debug, Clone, Default)]
pub(super) struct Others {
    /// Each other job's reports, as of the last tick.
    reports: Vec<(String, Vec<Report>)>,
    /// Each other job's cycles in the current comparison: its pace at the level over its held
    /// pace just after it.
    cycles: BTreeMap<String, Vec<f64>>,
}

impl Others {
    /// The other jobs' reports now: each job running beside the one followed, with a pace.
    /// A job not among them (ended, or silent) has its cycles dropped.
    fn set_reports(&mut self, reports: Vec<(String, Vec<Report>)>) {
        self.cycles
            .retain(|job, _| reports.iter().any(|(name, _)| name == job));
        self.reports = reports;
    }

    /// Counts the cycle from `start`, of halves of `half_ns` (each settling for `SETTLE_NS`),
    /// for each other job whose reports cover both halves.
    pub(super) fn add_cycle(&mut self, start: u64, half_ns: u64) {
        for (job, reports) in &self.reports {
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
    /// from `MIN_CYCLES` cycles, a 95% interval wholly below `floor`.
    pub(super) fn costly_for(&self, floor: f64) -> Option<(String, Ratio)> {
        self.cycles
            .iter()
            .filter(|(_, cycles)| cycles.len() >= MIN_CYCLES)
            .find_map(|(job, cycles)| {
                let ratio = paired_interval(cycles).filter(|ratio| ratio.high < floor)?;
                Some((job.clone(), ratio))
            })
    }

    /// How long a half must measure for every other job's reports to give it a pace
    /// (`measure_ns` of each): a job reporting less often than the one followed, every 3 s
    /// beside one reporting each second, has at most one report in the followed job's 2 s and
    /// so no cycles at all.
    pub(super) fn measure_ns(&self) -> u64 {
        let each = self.reports.iter().map(|(_, reports)| measure_ns(reports));
        each.max().unwrap_or(MIN_MEASURE_NS)
    }

    /// A new comparison: the cycles so far judged nothing of its level.
    pub(super) fn clear_cycles(&mut self) {
        self.cycles.clear();
    }
}
