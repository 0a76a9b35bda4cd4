//! How much of the machine offline inference may take, found from training's own pace: the
//! most offline work while training keeps at least `1 − ε` of its pace with offline held back.
//! Pure: reports and times are passed in.
//!
//! The run queue cannot protect training alone. On the GPU server offline inference at
//! `cpu.idle` never queued a ResNet-50 job and still cost it 13–19% (memory bandwidth,
//! caches, turbo); on the 2-vCPU VM the same sharing of training's cores cost 0.6% on one host
//! and 7.6% on another. So no fixed level is right everywhere: this finds the level on the
//! machine and job at hand.
//!
//! The levels, a ladder from least to most offline work (`Level`): held back entirely; a
//! quarter, half, three quarters of the CPUs the core policy gives offline (the top ones,
//! farthest from training, which grows from CPU 0); all of them (the policy as it is); the
//! same without the core policy's pause while training is short of cores
//! (`pause_offline_when_training_short` and its duty cycle); and training's reserved cores too.
//! So the two fixed rules of the core policy are rungs the controller climbs past where
//! training's pace shows them free, not settings fixed for every machine: on the VM, offline on
//! training's cores cost training 0.6% on one host and 7.6% on another.
//!
//! The loop, from the job's progress reports (`pace::PaceTracker`):
//! - a **probe** holds offline back for `PROBE_SETTLE_NS` and measures training's pace over
//!   `PROBE_MEASURE_NS`: the reference;
//! - a **trial** runs a level for `TRIAL_SETTLE_NS`, then measures over `TRIAL_MEASURE_NS`;
//! - the two are compared as an interval, not as single readings: each is the mean of the
//!   paces between consecutive reports, with its standard error; the ratio's interval is
//!   the ratio ± 2 standard errors. A level whose interval lies at or above `1 − ε` is kept and
//!   the next one up tried; one whose interval lies below is left for the one under it; one
//!   the interval cannot tell is tried again, and after `MAX_UNDECIDED` such trials judged by
//!   their mean ratio: kept without trying higher where it is at or above `1 − ε`, left
//!   otherwise;
//! - settled, the level is checked against a fresh probe every `RECHECK_NS`; the level above
//!   one found too costly is tried again after `CEILING_NS`; a reference that moved by more
//!   than `PHASE_CHANGE` (a new phase of the job: evaluation, a checkpoint, a new job) starts
//!   the search again from the current level.
//!
//! What it costs offline: a probe holds it back for 5 s; searching, one probe serves the
//! trials of the next `REFERENCE_TTL_NS`; settled, one probe every `RECHECK_NS` (5 s of 60:
//! about 8% of offline's time). A search from the policy's level to the top of the ladder takes
//! one probe and three trials at the least: 32 s, after the job's first `WARMUP_NS` of reports;
//! each trial the interval cannot decide adds a probe and a trial (14 s).
//!
//! The pace comes from the job's progress reports where it sends them, and otherwise from its
//! GPUs' busy share (`gpu::training_busy`), counted up like reports. The job's own count comes
//! first: it is the pace itself, while the busy share follows the pace only as long as a
//! step's GPU work stays the same. A change of source starts the search again from a probe:
//! the two are in different units. Without either (a job that does not report and holds no GPU
//! of its own, or silent for `pace::STALE_NS`) the level is the core policy's own, as without
//! this loop.

use std::collections::BTreeSet;

use serde::Serialize;

use super::cores::Allocation;
use crate::config::HarvestSettings;

/// The rungs, least offline work first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Level {
    /// Offline pools paused.
    Held,
    /// Offline pools on a share of the CPUs the core policy gives them.
    Quarter,
    Half,
    ThreeQuarters,
    /// The core policy's allocation as it is.
    Policy,
    /// The policy's, without its pause of offline while training is short of cores.
    Unpaused,
    /// The policy's without the pause, with offline on training's reserved cores too.
    TrainingCores,
}

impl Level {
    const LADDER: [Level; 7] = [
        Level::Held,
        Level::Quarter,
        Level::Half,
        Level::ThreeQuarters,
        Level::Policy,
        Level::Unpaused,
        Level::TrainingCores,
    ];

    fn index(self) -> usize {
        Self::LADDER
            .iter()
            .position(|&l| l == self)
            .expect("every level is on the ladder")
    }

    fn up(self) -> Option<Level> {
        Self::LADDER.get(self.index() + 1).copied()
    }

    fn down(self) -> Option<Level> {
        self.index().checked_sub(1).map(|i| Self::LADDER[i])
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Held => "held",
            Level::Quarter => "quarter",
            Level::Half => "half",
            Level::ThreeQuarters => "three_quarters",
            Level::Policy => "policy",
            Level::Unpaused => "unpaused",
            Level::TrainingCores => "training_cores",
        }
    }

    /// The share of the offline CPUs the policy gives that offline keeps at this level (1 at
    /// `Policy` and above; `Held` pauses instead).
    pub(crate) fn offline_share(self) -> f64 {
        match self {
            Level::Held => 0.0,
            Level::Quarter => 0.25,
            Level::Half => 0.5,
            Level::ThreeQuarters => 0.75,
            Level::Policy | Level::Unpaused | Level::TrainingCores => 1.0,
        }
    }

    /// Whether the core policy may pause offline while training is short of cores at this
    /// level (where configured: `pause_offline_when_training_short`).
    pub(crate) fn pauses_when_short(self) -> bool {
        self < Level::Unpaused
    }
}

/// A job's first probe waits until it has reported a pace this long: its first seconds
/// (imports, a data loader's start, autotuning) are not its pace. Measured on the VM: a probe
/// in the training simulator's first 5 s read 174 steps/s against 179 alone.
pub(crate) const WARMUP_NS: u64 = 10_000_000_000;
/// Offline held back before a probe measures: long enough for offline's threads to leave the
/// CPUs and the caches to refill with training's (two of the 1 s report periods).
pub(crate) const PROBE_SETTLE_NS: u64 = 1_000_000_000;
/// A probe measures the reference over this: four reports of a job reporting once a second.
pub(crate) const PROBE_MEASURE_NS: u64 = 4_000_000_000;
pub(crate) const TRIAL_SETTLE_NS: u64 = 1_000_000_000;
/// A trial measures over this: eight reports, twice the probe's, since a trial costs
/// offline nothing.
pub(crate) const TRIAL_MEASURE_NS: u64 = 8_000_000_000;
/// A reference this young serves a trial without a new probe.
pub(crate) const REFERENCE_TTL_NS: u64 = 30_000_000_000;
/// Settled, the level is checked this often.
pub(crate) const RECHECK_NS: u64 = 60_000_000_000;
/// The level above one found too costly is not tried again before this.
pub(crate) const CEILING_NS: u64 = 300_000_000_000;
/// A reference this far from the last one (relative) is a new phase of the job.
pub(crate) const PHASE_CHANGE: f64 = 0.15;
/// Trials of one level the interval cannot decide before their mean decides.
pub(crate) const MAX_UNDECIDED: usize = 3;

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

/// `allocation` at `level`, for the offline pools named in `offline`: `Held` pauses them; a
/// share keeps each on that share of its CPUs (at least one), the highest-numbered, farthest
/// from training, which the policy grows from CPU 0; `Policy` and above leave the allocation
/// as the policy made it (which does not pause for training's shortage from `Unpaused` up,
/// `Policy::pause_when_short`, and shares training's cores at `TrainingCores`,
/// `Policy::share_training_cores`).
pub(crate) fn shape(level: Level, mut allocation: Allocation, offline: &[String]) -> Allocation {
    match level {
        Level::Held => allocation.offline_paused = true,
        Level::Quarter | Level::Half | Level::ThreeQuarters => {
            for name in offline {
                if let Some(cpus) = allocation.pools.get_mut(name) {
                    let keep = ((cpus.len() as f64 * level.offline_share()).ceil() as usize).max(1);
                    let top: BTreeSet<u32> = cpus.iter().rev().take(keep).copied().collect();
                    *cpus = top;
                }
            }
        }
        Level::Policy | Level::Unpaused | Level::TrainingCores => {}
    }
    allocation
}

/// A pace measured over a window: the mean of the paces between consecutive reports, and its
/// standard error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Measured {
    pub steps_per_s: f64,
    pub standard_error: f64,
    pub intervals: usize,
}

/// The paces between consecutive reports within `[from_ns, to_ns]`, as a measurement; None
/// with fewer than two intervals.
pub(crate) fn measure(reports: &[(u64, u64)], from_ns: u64, to_ns: u64) -> Option<Measured> {
    let inside: Vec<(u64, u64)> = reports
        .iter()
        .copied()
        .filter(|&(at, _)| at >= from_ns && at <= to_ns)
        .collect();
    let paces: Vec<f64> = inside
        .windows(2)
        .filter(|pair| pair[1].0 > pair[0].0)
        .map(|pair| {
            pair[1].1.saturating_sub(pair[0].1) as f64 * 1e9 / (pair[1].0 - pair[0].0) as f64
        })
        .collect();
    if paces.len() < 2 {
        return None;
    }
    let n = paces.len() as f64;
    let mean = paces.iter().sum::<f64>() / n;
    let variance = paces.iter().map(|p| (p - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(Measured {
        steps_per_s: mean,
        standard_error: (variance / n).sqrt(),
        intervals: paces.len(),
    })
}

/// A trial's pace against its reference: the ratio and its interval (± 2 standard errors).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Ratio {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

pub(crate) fn ratio(trial: &Measured, reference: &Measured) -> Option<Ratio> {
    if reference.steps_per_s <= 0.0 {
        return None;
    }
    let ratio = trial.steps_per_s / reference.steps_per_s;
    let relative = |m: &Measured| match m.steps_per_s {
        pace if pace > 0.0 => m.standard_error / pace,
        _ => 0.0,
    };
    let spread = 2.0 * ratio * (relative(trial).powi(2) + relative(reference).powi(2)).sqrt();
    Some(Ratio {
        ratio,
        low: ratio - spread,
        high: ratio + spread,
    })
}

/// Why the level changed: what the decision log and status show.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub(crate) enum Why {
    /// The job reports no pace (any more): the core policy's level.
    NoSignal,
    /// Offline held back to measure training's reference pace.
    Probe,
    /// A level tried against the reference.
    Trial { reference: Measured },
    /// Level `tried` kept training's pace: kept, or the next one up tried.
    Kept { tried: Level, ratio: Ratio },
    /// Level `tried` cost training more than ε: the one below.
    TooCostly { tried: Level, ratio: Ratio },
    /// The interval could not tell of level `tried`: it is tried again.
    Undecided { tried: Level, ratio: Ratio },
    /// The reference moved by more than `PHASE_CHANGE`: the search starts again.
    PhaseChange { from: f64, to: f64 },
    /// The pace now comes from elsewhere (the job began or stopped reporting its progress):
    /// the search starts again from a probe.
    SignalChanged { from: PaceSource, to: PaceSource },
}

/// A change of level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Change {
    pub level: Level,
    #[serde(flatten)]
    pub why: Why,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    NoSignal,
    /// The job has had a pace since `since`: its first probe after `WARMUP_NS`.
    WarmingUp {
        since: u64,
    },
    /// Offline held back since `since`; then `then` is tried.
    Probe {
        since: u64,
        then: Level,
    },
    /// `level` tried since `since`.
    Trial {
        since: u64,
        level: Level,
    },
    /// `level` kept since `since`.
    Settled {
        since: u64,
        level: Level,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Harvest {
    settings: HarvestSettings,
    phase: Phase,
    /// Where the pace comes from while there is one.
    source: Option<PaceSource>,
    reference: Option<(u64, Measured)>,
    /// The lowest level found too costly, and when.
    ceiling: Option<(Level, u64)>,
    /// The ratios of the trials of the current level that the interval could not decide.
    undecided: Vec<f64>,
    /// The last change, for status.
    last: Option<Change>,
}

impl Harvest {
    pub(crate) fn new(settings: HarvestSettings) -> Self {
        Self {
            settings,
            phase: Phase::NoSignal,
            source: None,
            reference: None,
            ceiling: None,
            undecided: Vec::new(),
            last: None,
        }
    }

    /// The last change `tick` made, if any.
    pub(crate) fn last_change(&self) -> Option<&Change> {
        self.last.as_ref()
    }

    /// The level in force.
    pub(crate) fn level(&self) -> Level {
        match self.phase {
            Phase::NoSignal | Phase::WarmingUp { .. } => Level::Policy,
            Phase::Probe { .. } => Level::Held,
            Phase::Trial { level, .. } | Phase::Settled { level, .. } => level,
        }
    }

    /// The reference pace, where one was measured, in the units of `source`.
    pub(crate) fn reference(&self) -> Option<Measured> {
        self.reference.map(|(_, m)| m)
    }

    /// Where the pace comes from, while the job has one.
    pub(crate) fn source(&self) -> Option<PaceSource> {
        self.source
    }

    /// One step of the loop at `now_ns`, with the job's reports (`signal`: where the job's
    /// pace comes from now, None without one: no reports, or stale ones). A change of level,
    /// if any.
    pub(crate) fn tick(
        &mut self,
        now_ns: u64,
        signal: Option<PaceSource>,
        reports: &[(u64, u64)],
    ) -> Option<Change> {
        let change = self.step(now_ns, signal, reports);
        if let Some(change) = &change {
            self.last = Some(change.clone());
        }
        change
    }

    fn step(
        &mut self,
        now_ns: u64,
        signal: Option<PaceSource>,
        reports: &[(u64, u64)],
    ) -> Option<Change> {
        let Some(source) = signal else {
            self.source = None;
            match self.phase {
                Phase::NoSignal => return None,
                // Nothing changed yet: no step to log.
                Phase::WarmingUp { .. } => {
                    self.phase = Phase::NoSignal;
                    return None;
                }
                _ => {}
            }
            self.phase = Phase::NoSignal;
            self.reference = None;
            self.undecided.clear();
            return Some(self.change(Why::NoSignal));
        };
        let before = self.source.replace(source);
        let searching = !matches!(self.phase, Phase::NoSignal | Phase::WarmingUp { .. });
        if let Some(from) = before.filter(|&from| from != source && searching) {
            // A reference in the other source's units means nothing now.
            self.reference = None;
            self.ceiling = None;
            self.undecided.clear();
            return Some(self.probe_then(
                now_ns,
                Level::Policy,
                Why::SignalChanged { from, to: source },
            ));
        }
        match self.phase {
            Phase::NoSignal => {
                self.phase = Phase::WarmingUp { since: now_ns };
                None
            }
            Phase::WarmingUp { since } => (now_ns.saturating_sub(since) >= WARMUP_NS)
                .then(|| self.probe(now_ns, Level::Policy)),
            Phase::Probe { since, then } => {
                let from = since + PROBE_SETTLE_NS;
                if now_ns < from + PROBE_MEASURE_NS {
                    return None;
                }
                let Some(reference) = measure(reports, from, now_ns) else {
                    // Too few reports in the window: the job reports slowly, measure longer.
                    return None;
                };
                let phase_change = self.reference.and_then(|(_, before)| {
                    let moved = (reference.steps_per_s / before.steps_per_s - 1.0).abs();
                    (moved > PHASE_CHANGE).then_some((before.steps_per_s, reference.steps_per_s))
                });
                self.reference = Some((now_ns, reference));
                if let Some((from, to)) = phase_change {
                    self.ceiling = None;
                    self.phase = Phase::Trial {
                        since: now_ns,
                        level: then,
                    };
                    return Some(self.change(Why::PhaseChange { from, to }));
                }
                self.phase = Phase::Trial {
                    since: now_ns,
                    level: then,
                };
                Some(self.change(Why::Trial { reference }))
            }
            Phase::Trial { since, level } => {
                let from = since + TRIAL_SETTLE_NS;
                if now_ns < from + TRIAL_MEASURE_NS {
                    return None;
                }
                let (_, reference) = self.reference.expect("a trial follows a probe");
                let ratio = measure(reports, from, now_ns).and_then(|t| ratio(&t, &reference))?;
                Some(self.judge(now_ns, level, ratio))
            }
            Phase::Settled { since, level } => {
                if now_ns.saturating_sub(since) < RECHECK_NS {
                    return None;
                }
                // The level above may be tried again once the ceiling is old.
                if self
                    .ceiling
                    .is_some_and(|(_, at)| now_ns.saturating_sub(at) >= CEILING_NS)
                {
                    self.ceiling = None;
                }
                Some(self.probe(now_ns, level))
            }
        }
    }

    /// After a trial of `level`: keep it and try the next one up, fall to the one below, or
    /// try again.
    fn judge(&mut self, now_ns: u64, level: Level, ratio: Ratio) -> Change {
        let floor = 1.0 - self.settings.epsilon;
        let proven_within = ratio.low >= floor;
        let proven_costly = ratio.high < floor;
        if !proven_within && !proven_costly {
            self.undecided.push(ratio.ratio);
            if self.undecided.len() < MAX_UNDECIDED {
                return self.probe_then(
                    now_ns,
                    level,
                    Why::Undecided {
                        tried: level,
                        ratio,
                    },
                );
            }
        }
        let mean = match self.undecided.len() {
            0 => ratio.ratio,
            n => self.undecided.iter().sum::<f64>() / n as f64,
        };
        let undecided = !std::mem::take(&mut self.undecided).is_empty();
        if proven_within || (undecided && mean >= floor) {
            // Kept; the next level up only where this one was shown within ε.
            let next = level
                .up()
                .filter(|_| proven_within)
                .filter(|up| self.ceiling.is_none_or(|(ceiling, _)| *up < ceiling));
            match next {
                Some(up) => self.try_level(
                    now_ns,
                    up,
                    Why::Kept {
                        tried: level,
                        ratio,
                    },
                ),
                None => {
                    self.phase = Phase::Settled {
                        since: now_ns,
                        level,
                    };
                    self.change(Why::Kept {
                        tried: level,
                        ratio,
                    })
                }
            }
        } else {
            // Too costly, shown or on the mean of the undecided trials: training first.
            self.ceiling = Some((level, now_ns));
            match level.down().filter(|&down| down > Level::Held) {
                Some(down) => self.try_level(
                    now_ns,
                    down,
                    Why::TooCostly {
                        tried: level,
                        ratio,
                    },
                ),
                None => {
                    // Even a quarter costs training more than ε: held back until the next
                    // check.
                    self.phase = Phase::Settled {
                        since: now_ns,
                        level: Level::Held,
                    };
                    self.change(Why::TooCostly {
                        tried: level,
                        ratio,
                    })
                }
            }
        }
    }

    /// Tries `level` next: at once against a young reference, else after a new probe.
    fn try_level(&mut self, now_ns: u64, level: Level, why: Why) -> Change {
        let young = self
            .reference
            .is_some_and(|(at, _)| now_ns.saturating_sub(at) < REFERENCE_TTL_NS);
        if !young {
            return self.probe_then(now_ns, level, why);
        }
        self.phase = Phase::Trial {
            since: now_ns,
            level,
        };
        Change { level, why }
    }

    /// Holds offline back for a probe, then tries `then`. Also how a trial the interval could
    /// not decide is tried again: after a new probe, since a reference read high or low by
    /// chance would tilt every trial against it.
    fn probe_then(&mut self, now_ns: u64, then: Level, why: Why) -> Change {
        self.phase = Phase::Probe {
            since: now_ns,
            then,
        };
        self.change(why)
    }

    fn probe(&mut self, now_ns: u64, then: Level) -> Change {
        self.probe_then(now_ns, then, Why::Probe)
    }

    fn change(&self, why: Why) -> Change {
        Change {
            level: self.level(),
            why,
        }
    }
}

#[cfg(test)]
mod tests;
