//! A silence of the job followed that is a pause, not an end, and what a new start drops
//! (`forget`).
//!
//! A training job stops reporting while it writes a checkpoint, runs an evaluation or starts an
//! epoch's data loader, and then reports again at the pace it had. What the loop measured of it
//! holds through such a pause: the spread its comparisons pool, the length its halves need (on
//! a bursty job, minutes of reading), the levels found too costly and their waits. Dropped at
//! every silence past `pace::STALE_NS`, they cost a search from the top after each: on models
//! of a job that checkpoints for 30 s every 5 minutes, offline was held back 16–17% of the time
//! where nothing cost against 11%, and where every level cost, each search tried them again,
//! held back 61% of the time (the quiet job, 2%) and 26% (the bursty one, 10%) against 85% and
//! 77% kept (`replay`, `a_job_that_pauses_to_checkpoint`).
//!
//! So the loop keeps them through a silence of the same job, from the same source, shorter than
//! `PAUSE_KEPT_NS`, its count not gone back (a count that went back is a new run). The silence
//! itself is at the core policy's level. Once the job has reported again for `WARMUP_NS`, the
//! level it had is compared again where it stands (reason `resumed`), as when its settled pace
//! moves: on a recheck's terms where it was settled, afresh where a comparison was under way. A
//! job whose pace changed over the pause is found so by that comparison (a new phase, or a level
//! now too costly) as at any other time. A longer silence, a new run, another job or another
//! source is a new start: everything dropped, and the search from the top.
//!
//! The daemon keeps the signal for a job so paused while its processes run (`paused_job`,
//! `daemon::pace_signal`): its silence is no reason to follow its GPUs' busy share (a checkpoint
//! idles them) or another job's pace, either of which would start the loop afresh. A job
//! followed by its GPUs' busy share falls silent the same way, its GPUs idle for 2 s
//! (`policy::busy_pace::IDLE_SILENT_NS`).

use super::{Change, Harvest, Level, PaceSource, Phase, StretchSpread, Why, tuning::PAUSE_KEPT_NS};
use crate::policy::pace::Report;

/// What the loop was doing when the job followed went silent.
#[derive(Debug, Clone, PartialEq)]
struct Paused {
    job: String,
    source: PaceSource,
    /// When the signal was lost.
    since_ns: u64,
    /// The level compared or settled at, and whether it was settled.
    level: Level,
    settled: bool,
    /// The job's count at its last report before the silence.
    steps: Option<u64>,
}

/// The job's newest count, and the pause the loop is in, if any.
#[derive(Debug, Clone, Default)]
pub(super) struct Pauses {
    newest_steps: Option<u64>,
    paused: Option<Paused>,
}

impl Harvest {
    /// A tick with a signal: the job's newest count.
    pub(super) fn signal_heard(&mut self, reports: &[Report]) {
        self.pauses.newest_steps = reports.last().map(|report| report.steps);
    }

    /// The signal is lost: what the loop was doing is kept for the job's return, with
    /// everything it measured. Lost in a warm-up, nothing was measured since the last start,
    /// and a pause before it goes on.
    pub(super) fn pause(&mut self, now_ns: u64) {
        let (job, source) = (self.job.take(), self.source.take());
        let (level, settled) = match self.phase {
            Phase::Comparing { level, .. } => (level, false),
            Phase::Settled { level, .. } => (level, true),
            Phase::NoSignal | Phase::WarmingUp { .. } => return,
        };
        let (Some(job), Some(source)) = (job, source) else {
            // A comparison is only begun with a signal: nothing to keep it for.
            self.forget();
            return;
        };
        self.cycles.clear();
        self.pauses.paused = Some(Paused {
            job,
            source,
            since_ns: now_ns,
            level,
            settled,
            steps: self.pauses.newest_steps,
        });
    }

    /// The job followed, silent for less than `PAUSE_KEPT_NS` (as of `now_ns`) while the loop
    /// waits for it, and how long since its signal was lost: the daemon keeps the signal for
    /// it, and status says so.
    pub(crate) fn paused_job(&self, now_ns: u64) -> Option<(PaceSource, &str, u64)> {
        let paused = self.pauses.paused.as_ref()?;
        let silent_ns = now_ns.saturating_sub(paused.since_ns);
        (self.phase == Phase::NoSignal && silent_ns < PAUSE_KEPT_NS).then_some((
            paused.source,
            paused.job.as_str(),
            silent_ns,
        ))
    }

    /// The warm-up after a silence, begun when the signal came back at `back_ns`, is over:
    /// where it was a pause of the job now followed, its level compared again
    /// (`Why::Resumed`); otherwise everything measured is dropped, and None.
    pub(super) fn resume(
        &mut self,
        now_ns: u64,
        back_ns: u64,
        reports: &[Report],
    ) -> Option<Change> {
        let paused = self.pauses.paused.take()?;
        let silent_ns = back_ns.saturating_sub(paused.since_ns);
        let same_run = match (paused.steps, reports.last()) {
            (Some(before), Some(after)) => after.steps >= before,
            _ => false,
        };
        let resumable = self.job.as_deref() == Some(paused.job.as_str())
            && self.source == Some(paused.source)
            && silent_ns < PAUSE_KEPT_NS
            && same_run;
        if !resumable {
            self.forget();
            return None;
        }
        let why = Why::Resumed {
            paused_s: silent_ns as f64 / 1e9,
        };
        let level = paused.level.min(self.top());
        Some(match paused.settled {
            true => self.recheck(now_ns, level, reports, why),
            false => self.compare(now_ns, level, reports, why),
        })
    }

    /// Drops what was measured: a new start (another job, another source, a silence that was
    /// not a pause).
    pub(super) fn forget(&mut self) {
        self.cycles.clear();
        self.others.forget();
        self.spread.clear();
        self.carried.clear();
        self.kept_cycles.clear();
        self.reference = None;
        self.last_held = None;
        self.moved_once = None;
        self.held_halves.clear();
        self.stops.clear();
        self.ceiling.clear();
        self.kept_below = None;
        self.stretch_spread = StretchSpread::default();
        self.half_lengths.clear();
        self.pauses.paused = None;
        self.settled_at = None;
    }
}
