//! What the pace controller tells the daemon, status and the decision log: where training's
//! pace comes from, the held pace it compares with, and each change of level with its reason.

use serde::Serialize;

use super::{level::Level, statistics::Ratio};

/// Where the pace the controller follows comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PaceSource {
    /// The job's progress reports: steps (or samples) a second.
    Progress,
    /// Its GPUs' busy share (`gpu::training_busy`): busy microseconds a second.
    GpuBusy,
}

impl PaceSource {
    pub(crate) fn name(self) -> &'static str {
        match self {
            PaceSource::Progress => "progress",
            PaceSource::GpuBusy => "gpu_busy",
        }
    }
}

/// A cycle's half: offline held back, or at the level compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Half {
    Held,
    Level,
}

/// Training's pace with offline held back: the mean of a comparison's held halves, and its
/// standard error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Measured {
    /// In the units of the pace's source: steps (or samples) a second, or busy µs a second.
    pub steps_per_s: f64,
    pub standard_error: f64,
    /// The held halves it is the mean of.
    pub intervals: usize,
}

/// Why the level changed: what the decision log and status show.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub(crate) enum Why {
    /// The job reports no pace (any more): the core policy's level.
    NoSignal,
    /// Offline held back: a cycle's second half, training's pace with offline held back.
    Probe,
    /// A level compared with offline held back: a comparison's first cycle starts. The held
    /// pace of the last comparison, where there was one.
    Trial { reference: Option<Measured> },
    /// Level `tried` kept training's pace: kept, or the one above tried.
    Kept { tried: Level, ratio: Ratio },
    /// Level `tried` cost training more than ε: the one below.
    TooCostly { tried: Level, ratio: Ratio },
    /// Level `tried`, kept for the job followed, cost another training job more than ε (its
    /// own cycles' interval, `others`): the one below.
    TooCostlyFor {
        tried: Level,
        job: String,
        ratio: Ratio,
    },
    /// Level `tried`, above the core policy's, was not shown to keep training's pace in
    /// `MAX_CYCLES` cycles (its interval still reaches below `1 − ε`): the one below.
    NotShownFree { tried: Level, ratio: Ratio },
    /// Level `tried`, above the core policy's and kept (or not yet judged) for the job
    /// followed, could hardly be shown free any more by another training job's cycles (`others`),
    /// whose mean and interval are `ratio` where it had two cycles or more: the one below.
    NotShownFreeFor {
        tried: Level,
        job: String,
        ratio: Option<Ratio>,
    },
    /// A half (`half`) of level `tried`'s comparison measured a pace (`to`) far below the
    /// median of the job's last held halves (`from`): a stop of the job's own, not its pace (a
    /// level's half only as often as held halves showed such stops). Its cycle is set aside,
    /// not counted (`held_halves`): another cycle.
    SetAside {
        tried: Level,
        half: Half,
        from: f64,
        to: f64,
    },
    /// The cycles so far cannot tell of level `tried`: another cycle.
    Undecided { tried: Level, ratio: Ratio },
    /// Level `tried`, at the core policy's level or below, kept: its cycles are too noisy for
    /// their mean to judge it (`MEAN_NOISE_LIMIT`), and their interval does not show it costly.
    TooNoisy { tried: Level, ratio: Ratio },
    /// The held pace moved by more than `PHASE_CHANGE`, in two cycles in a row: the search
    /// starts again.
    PhaseChange { from: f64, to: f64 },
    /// Settled, the job's pace at the level moved from its mean since by more than 2ε and
    /// twice the stretches' deviation, in two stretches of `WATCH_NS` in a row, the same way
    /// (`watch`): the level is compared again at once.
    PaceMoved { from: f64, to: f64 },
    /// Settled, the pace at the level of `job`, a training job beside the one followed, moved
    /// as `PaceMoved` says, by its own stretches (`others`): the level is compared again at once.
    PaceMovedFor { job: String, from: f64, to: f64 },
    /// Settled, level `tried` made training stop for more of its time than the job stops with
    /// offline held back, by more than ε (a one-sided 99% bound), over the last hours
    /// (`stops`): `at_levels` is the share of time lost to stops at it and the levels under it
    /// down to `lowest` (none costs more than it), `held` the share with offline held back. The
    /// level under it is compared, and it waits longer than after a comparison
    /// (`Ceiling::stops_shown`).
    Stops {
        tried: Level,
        lowest: Level,
        at_levels: f64,
        held: f64,
    },
    /// The job followed reports again after `paused_s` without a signal (a checkpoint, an
    /// evaluation: `pause`), its first `WARMUP_NS` over: the level it had is compared again,
    /// with what the loop measured of the job before.
    Resumed { paused_s: f64 },
    /// The pace now comes from elsewhere (the job began or stopped reporting its progress):
    /// the search starts again.
    SignalChanged { from: PaceSource, to: PaceSource },
    /// The pace now comes from another training job (the one followed ended, or went silent
    /// while another reports): the core policy's level while the new job's first seconds pass
    /// (`WARMUP_NS`), then the search from the top.
    JobChanged { from: String, to: String },
    /// `jobs` training jobs run, and `waiting_for`, one of them beside the job followed, has
    /// no pace yet to show a level above the core policy's free (none, or in its first
    /// `WARMUP_NS`): the loop came down from such a level, which reaches that job's cores too,
    /// and compares the policy's (`Harvest::set_training_jobs`).
    SeveralJobs { jobs: usize, waiting_for: String },
}

/// Offline held back by the loop, `held_ns` of the `running_ns` since its first tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldBack {
    pub held_ns: u64,
    pub running_ns: u64,
}

/// A change of level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Change {
    pub level: Level,
    /// Whether the loop settled at `level` with this change: no comparison runs until the
    /// next recheck.
    pub settles: bool,
    #[serde(flatten)]
    pub why: Why,
}
