//! What status, `/metrics` and the daemon read of the pace controller: the level in force, the
//! job followed and its reference pace, the last change, what the loop has held back, and how
//! long its halves measure.

use super::{Change, Harvest, HeldBack, Level, Measured, PaceSource, Phase};

impl Harvest {
    /// How long offline has been held back since the loop's first tick, and how long that
    /// is: the share of offline's time its probes take, as an operator sees it.
    pub(crate) fn held_back(&self) -> HeldBack {
        HeldBack {
            held_ns: self.held_back_ns,
            running_ns: self
                .first_tick_ns
                .map_or(0, |first| self.last_tick_ns.saturating_sub(first)),
        }
    }

    /// How long each half of the last comparison measured, where one was begun.
    pub(crate) fn half_measure_ns(&self) -> Option<u64> {
        self.half_lengths.measured_ns()
    }

    /// The last change `tick` made, if any.
    pub(crate) fn last_change(&self) -> Option<&Change> {
        self.last.as_ref()
    }

    /// The level in force.
    pub(crate) fn level(&self) -> Level {
        match self.phase {
            Phase::NoSignal | Phase::WarmingUp { .. } => Level::Policy,
            Phase::Comparing { holding: true, .. } => Level::Held,
            Phase::Comparing { level, .. } | Phase::Settled { level, .. } => level,
        }
    }

    /// Training's pace with offline held back, where measured, in the units of `source`.
    pub(crate) fn reference(&self) -> Option<Measured> {
        self.reference
    }

    /// Where the pace comes from, while the job has one.
    pub(crate) fn source(&self) -> Option<PaceSource> {
        self.source
    }

    /// The training job whose pace the loop follows, while it has one.
    pub(crate) fn job(&self) -> Option<&str> {
        self.job.as_deref()
    }
}
