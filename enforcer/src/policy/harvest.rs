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
//! So the two fixed rules of the core policy are rungs the controller passes where training's
//! pace shows them free, not settings fixed for every machine: on the VM, offline on
//! training's cores cost training 0.6% on one host and 7.6% on another. Offline on training's
//! cores for a part of each second (`offline_on_training_cores_share`) is not a rung: on the
//! VM a quarter of each second cost training as much as all of it, 2.3% against 2.4%, and
//! such rungs only lengthened the search through costly levels
//! (docs/experiments/2026-11-27-training-core-shares-vm.md).
//!
//! The loop, from the job's progress reports (`pace::PaceTracker`), compares a level with
//! offline held back **in pairs**: a cycle runs the level for a half, then holds offline back
//! for a half, each half settling for `SETTLE_NS` and then measuring training's pace (from the
//! means of the count the job sends with its reports, where it does: `pace_between`) for two
//! of the job's report periods, or longer where the job's noise narrows with the length
//! (`half_length`); the cycle's ratio is the level's pace over the held pace just after it.
//! Paired halves seconds apart cancel the drift of the job's pace: on the VM (AMD EPYC host)
//! the training simulator alone, 4 s of it against the next 8 s, varied by 1.2% (standard
//! deviation); four paired cycles of the same readings by 0.6%.
//!
//! - The search starts at the top of the ladder and comes down: a level whose interval lies
//!   below `1 − ε` gives way to the one under it, and the levels from it up are not tried
//!   again until the ceiling's wait is over (`ceiling`: a minute the first time, longer for a
//!   costlier level and for one found too costly again, up to five minutes; five at once for
//!   a level above the policy's not shown free); the first level not shown costly whose
//!   cycles say it keeps training's pace is kept. A machine where the top is free settles
//!   after one comparison.
//! - A cycle whose held half (or level half, only as often) lies far below the job's last held
//!   halves (a stop of its own: a checkpoint, a garbage collection) is set aside (`held_halves`).
//! - The interval: the mean of the cycles' ratios ± Student's t (95%) standard errors, judged from
//!   `MIN_CYCLES` cycles on: at or above `1 − ε`, kept; below, too costly. A level above the core
//!   policy's runs on while the cycles left, up to `MAX_CYCLES_ABOVE_POLICY`, could show it free
//!   with a chance of 5% or more, at the mean so far (no higher than 1) and a spread the job's
//!   cycles keep below nine times in ten (pooled over its last comparisons); then it is left (not
//!   shown free: the policy's level is the default, and more needs proof). Where that spread could
//!   show no level free at all, the levels between it and the policy's are passed over. At the
//!   policy's level and below, the mean decides (kept where at or above `1 − ε`, left otherwise; a
//!   mean within a standard error of `1 − ε`, a coin's toss, first runs on up to
//!   `MAX_CYCLES_NEAR_FLOOR` cycles; the mean, interval and error over the cycles that kept the
//!   level before too, `kept_cycles`, unless the comparison's own read it costlier), where it can:
//!   a mean too noisy to judge ε by (`MEAN_NOISE_LIMIT`, from the cycles' spread pooled over the
//!   job's last comparisons, a rare cycle far from its own comparison's left out, `pooled_spread`)
//!   keeps the level unless the interval, looked at once after `MAX_CYCLES`, lies below `1 − ε`
//!   (reason `too_noisy`), as a job without a signal keeps the policy's; such a comparison ends
//!   sooner where the cycles left could show the level costly with less than a 5% chance, and a
//!   level below the policy's kept so goes back up to it once its ceiling is old. Its cycles are
//!   carried to the level's next comparison (`carried`): a 99% interval over them all below `1 − ε`
//!   leaves the level too, and a comparison runs on where its cycles could take that interval
//!   there. A level tried above one just kept, and left, settles the search back on the kept one
//!   without comparing it again.
//! - Settled, the level is compared again after `RECHECK_NS`, then twice as long after each
//!   recheck that keeps it, up to `RECHECK_MAX_NS` (each as many times longer as the halves are
//!   longer than their shortest, `half_length`), or once a level above it found too costly
//!   has waited a wait under five minutes; a recheck keeps the level on its mean from
//!   `MIN_CYCLES` cycles where the mean is not too noisy to, and runs on otherwise; a held pace
//!   that moved from the last comparison's by more than `PHASE_CHANGE` and twice that
//!   comparison's standard error, in two cycles in a row, the same way (a new phase of the
//!   job), starts the search again from the top. Between rechecks the pace at the settled
//!   level is read in stretches of `watch::WATCH_NS`: one that moved by more than training may
//!   feel, beyond the job's noise (`watch`), has the level compared again at once
//!   (`pace_moved`). A level whose stretches lose more of their time to stops than held time
//!   does, by more than ε over the last two hours (a cost that comes as rare stops, which a few
//!   cycles seldom see), is left for the one under it (`stops`); while its stops point that way
//!   and the held time cannot show it yet, its rechecks come every minute.
//!
//! What it costs offline: half of every comparison, from `MIN_CYCLES` to `MAX_CYCLES` cycles
//! of `2 × (SETTLE_NS + 2 s)` for a job reporting once a second: 9 to 18 s held back in 18 to
//! 36 s, up to 36 s in 72 s where the mean lies at the floor, and up to 72 s in 144 s above
//! the policy's level where the cycles keep pointing to a cost a little below ε. Settled, one
//! recheck of 3 cycles where the level still keeps the pace: at one a minute, about 11% of
//! offline's time; at one in four minutes, about 3.5% (a too-noisy level's recheck runs on to
//! six where its carried cycles point to a cost). The first comparison waits for the job's
//! first `WARMUP_NS` of reports. The price of the longer waits: a level whose cost grows by
//! less than the watch sees (2ε, and twice its stretches' spread) is found a recheck late.
//!
//! The pace comes from the job's progress reports where it sends them, and otherwise from its GPUs'
//! busy share (`gpu::training_busy`), counted up like reports. The job's own count comes first: it
//! is the pace itself, while the busy share follows the pace only as long as a step's GPU work
//! stays the same. A change of source starts the search again from the top: the two are in
//! different units. So does a change of the job followed, after the new job's first `WARMUP_NS` at
//! the policy's level: one job's cycles say nothing of another's. Without either (a job that does
//! not report and holds no GPU of its own, or silent for `pace::STALE_NS`) the level is the core
//! policy's own, as without this loop; a silence of the job followed shorter than
//! `PAUSE_KEPT_NS` is a pause, after which its level is compared again with what was measured
//! of the job before (`pause`). The loop follows one job's pace; the other training jobs'
//! paces over the same cycles can leave a level the job followed keeps, and a level above the
//! policy's, which reaches every job's cores, is kept only where each of them shows it free
//! too. While a job beside has no pace, or is in its first `WARMUP_NS` of one, the loop goes no
//! higher than the policy's level. Settled, each job beside's pace is watched as the followed
//! job's is (reason `pace_moved_for`; `others`).
//!
//! Its parts: `level`, the ladder; `tuning`, its timings and thresholds; `statistics`, the
//! arithmetic of paces, cycles and intervals; `pooled_spread`, how noisy the job's cycles are;
//! `verdict`, what a comparison's cycles say of its level; `carried`, a too-noisy level's cycles
//! from one comparison to the next; `kept_cycles`, the cycles that kept a level, pooled with its
//! next comparison's; `ceiling`, how long a level left waits before it is tried again; `watch`, the
//! settled level's pace between its rechecks; `half_length`, how long a half measures;
//! `held_halves`, a half a stop of the job's own slowed; `settled`, the loop settled at a level;
//! `stops`, the time each level makes training stop, counted over hours; `pause`, a silence of
//! the job that is a pause; `others`, the jobs beside the one followed; `reading`, what status
//! reads of the loop; `change`, what the loop tells the daemon (each change of level and its
//! reason); `replay`, the loop over a job's recorded step times (`enforcer replay-pace`), and
//! `replay::spread`, how far its cycles would spread over them (`--spread`).

mod carried;
mod ceiling;
mod change;
mod half_length;
mod held_halves;
mod kept_cycles;
mod level;
mod others;
mod pause;
mod pooled_spread;
mod reading;
pub(crate) mod replay;
mod settled;
mod statistics;
mod stops;
mod tuning;
mod verdict;
mod watch;

use self::carried::Carried;
use self::ceiling::Ceiling;
pub(crate) use self::change::{Change, HeldBack, Measured, PaceSource, Why};
use self::half_length::HalfLengths;
use self::held_halves::HeldHalves;
use self::kept_cycles::KeptCycles;
pub(crate) use self::level::{Level, shape};
use self::others::{Beside, Others};
use self::pause::Pauses;
use self::pooled_spread::PooledSpread;
use self::statistics::{
    could_show_free_at_spread, mean_too_noisy, measured, pace_and_span_between, standard_error,
};
pub(crate) use self::statistics::{pace_between, paired_interval};
use self::stops::Stops;
use self::tuning::{FUTILITY_Z, MEAN_NOISE_LIMIT, POOLED_COMPARISONS, REPORTS_PER_HALF};
pub(crate) use self::tuning::{
    MAX_CYCLES, MAX_CYCLES_ABOVE_POLICY, MAX_CYCLES_NEAR_FLOOR, MAX_MEASURE_NS, MIN_CYCLES,
    MIN_MEASURE_NS, PHASE_CHANGE, RECHECK_MAX_NS, RECHECK_NS, SETTLE_NS, WARMUP_NS,
};
use self::verdict::{Cycles, Verdict};
use self::watch::{StretchSpread, Watch};
use super::pace::Report;
use crate::config::HarvestSettings;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    NoSignal,
    /// The job has had a pace since `since`: its first comparison after `WARMUP_NS`.
    WarmingUp {
        since: u64,
    },
    /// `level` compared with offline held back in cycles from `since`, each `level` for a
    /// half of `half_ns`, then held back for one (`holding`); `judged` cycles are over. A
    /// `recheck` of the level kept: it keeps it on its mean from `MIN_CYCLES` cycles.
    Comparing {
        since: u64,
        level: Level,
        half_ns: u64,
        holding: bool,
        judged: usize,
        recheck: bool,
    },
    /// `level` kept, its pace `watch`ed since it took effect (`Watch::since`).
    Settled {
        level: Level,
        watch: Watch,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Harvest {
    settings: HarvestSettings,
    phase: Phase,
    /// Where the pace comes from while there is one, and the job it is of.
    source: Option<PaceSource>,
    job: Option<String>,
    /// The current comparison's cycles: the level's pace over the held pace, and the held
    /// pace.
    cycles: Vec<(f64, f64)>,
    /// How far the cycles of the job's last comparisons spread: whether its mean can judge.
    spread: PooledSpread,
    /// Where that spread is too wide, each level's cycles at or below the policy's, carried
    /// from comparison to comparison.
    carried: Carried,
    /// Each level's cycles from the comparisons that kept it on its mean, pooled with the
    /// next comparison's own.
    kept_cycles: KeptCycles,
    /// The held pace of the last comparison judged, and of the current one so far.
    reference: Option<Measured>,
    /// The held pace the last judged comparison measured, with its standard error: a new
    /// phase is judged against it.
    last_held: Option<Measured>,
    /// The last cycle's held pace, where it had moved more than `PHASE_CHANGE` from
    /// `last_held`: one more such cycle, the same way, is a new phase.
    moved_once: Option<f64>,
    /// The job's last held halves: a half far below them is a stop of its own, set aside.
    held_halves: HeldHalves,
    /// The time training lost to stops over the last hours, at each level and held back.
    stops: Stops,
    /// The lowest level found too costly, and how long the levels from it up wait.
    ceiling: Ceiling,
    /// The level kept by the comparison before the current one, which tries the level above
    /// it: where that one is left, the search settles back here.
    kept_below: Option<Level>,
    /// How far the settled pace spread over the job's watches before the current one (`watch`).
    stretch_spread: StretchSpread,
    /// The job's noise by the length of the halves, and the length the last comparison's
    /// measured (`half_length`).
    half_lengths: HalfLengths,
    /// The job's newest count, and what the loop was doing when it last went silent (`pause`).
    pauses: Pauses,
    /// The level the loop last settled at, and how long it waits there before a recheck.
    settled_at: Option<Level>,
    recheck_after_ns: u64,
    /// The training jobs the node runs, by name (`set_training_jobs`), which set the highest
    /// level the loop may try (`top`), and the cycles of those it does not follow (`others`).
    training_jobs: Vec<String>,
    others: Others,
    /// The last change, for status.
    last: Option<Change>,
    /// What the loop has cost offline: the first tick, the last one, and the time between
    /// ticks spent at `Level::Held` (its probes, and a level found too costly down to a
    /// quarter).
    first_tick_ns: Option<u64>,
    last_tick_ns: u64,
    held_back_ns: u64,
}

impl Harvest {
    pub(crate) fn new(settings: HarvestSettings) -> Self {
        Self {
            settings,
            phase: Phase::NoSignal,
            source: None,
            job: None,
            cycles: Vec::new(),
            spread: PooledSpread::default(),
            carried: Carried::default(),
            kept_cycles: KeptCycles::default(),
            reference: None,
            last_held: None,
            moved_once: None,
            held_halves: HeldHalves::default(),
            stops: Stops::default(),
            ceiling: Ceiling::default(),
            kept_below: None,
            stretch_spread: StretchSpread::default(),
            half_lengths: HalfLengths::default(),
            pauses: Pauses::default(),
            settled_at: None,
            recheck_after_ns: RECHECK_NS,
            training_jobs: Vec::new(),
            others: Others::default(),
            last: None,
            first_tick_ns: None,
            last_tick_ns: 0,
            held_back_ns: 0,
        }
    }

    /// One step of the loop at `now_ns`, with the job's reports (`signal`: where the pace
    /// comes from now, and the job it is of; None without one: no reports, or stale ones). A
    /// change of level, if any.
    pub(crate) fn tick(
        &mut self,
        now_ns: u64,
        signal: Option<(PaceSource, &str)>,
        reports: &[Report],
    ) -> Option<Change> {
        // The level since the last tick held until this one.
        if self.first_tick_ns.is_none() {
            self.first_tick_ns = Some(now_ns);
        } else if self.level() == Level::Held {
            self.held_back_ns += now_ns.saturating_sub(self.last_tick_ns);
        }
        self.last_tick_ns = now_ns;
        let change = self.step(now_ns, signal, reports);
        if let Some(change) = &change {
            self.last = Some(change.clone());
        }
        change
    }

    fn step(
        &mut self,
        now_ns: u64,
        signal: Option<(PaceSource, &str)>,
        reports: &[Report],
    ) -> Option<Change> {
        let Some((source, job)) = signal else {
            if self.phase == Phase::NoSignal {
                return None;
            }
            // Warming up, nothing changed yet: no step to log.
            let warming_up = matches!(self.phase, Phase::WarmingUp { .. });
            self.pause(now_ns);
            self.phase = Phase::NoSignal;
            return (!warming_up).then(|| self.change(Why::NoSignal));
        };
        self.signal_heard(reports);
        let searching = !matches!(self.phase, Phase::NoSignal | Phase::WarmingUp { .. });
        let other_job = (self.job.as_deref() != Some(job))
            .then(|| self.job.replace(job.to_owned()))
            .flatten();
        if let Some(from) = other_job {
            // Another job's pace (the one followed ended, or went silent while another
            // reports): nothing measured of the last one holds for it, and its first seconds
            // are not its pace.
            self.phase = Phase::WarmingUp { since: now_ns };
            if searching {
                self.forget();
                self.source = Some(source);
                let to = job.to_owned();
                return Some(self.change(Why::JobChanged { from, to }));
            }
        }
        let before = self.source.replace(source);
        if let Some(from) = before.filter(|&from| from != source && searching) {
            // Paces in the other source's units mean nothing now.
            self.forget();
            let why = Why::SignalChanged { from, to: source };
            return Some(self.compare(now_ns, self.top(), reports, why));
        }
        if self.level_judged().is_some_and(|level| level > self.top()) {
            let why = Why::SeveralJobs {
                jobs: self.training_jobs.len(),
                waiting_for: self.waiting_for().unwrap_or_default().to_owned(),
            };
            return Some(self.compare(now_ns, self.top(), reports, why));
        }
        match self.phase {
            Phase::NoSignal => {
                self.phase = Phase::WarmingUp { since: now_ns };
                None
            }
            // The first comparison waits for the jobs beside too: from the top of the ladder
            // where each has a pace of its own by then.
            Phase::WarmingUp { since } => {
                (now_ns.saturating_sub(since) >= WARMUP_NS && self.others_warmed_up()).then(|| {
                    self.resume(now_ns, since, reports).unwrap_or_else(|| {
                        let why = Why::Trial { reference: None };
                        self.compare(now_ns, self.top(), reports, why)
                    })
                })
            }
            Phase::Comparing {
                since,
                half_ns,
                holding,
                judged,
                ..
            } => {
                let cycle_ns = 2 * half_ns;
                let elapsed = now_ns.saturating_sub(since);
                if elapsed / cycle_ns > judged as u64 {
                    let start = since + judged as u64 * cycle_ns;
                    return self.judge_cycle(now_ns, start, reports);
                }
                if !holding && elapsed % cycle_ns >= half_ns {
                    if let Phase::Comparing { holding, .. } = &mut self.phase {
                        *holding = true;
                    }
                    return Some(self.change(Why::Probe));
                }
                None
            }
            Phase::Settled { level, watch } => self.step_settled(now_ns, level, watch, reports),
        }
    }

    /// The cycle that began at `start` is over: its ratio counted, then the level judged
    /// where its cycles can tell, or another cycle begun.
    fn judge_cycle(&mut self, now_ns: u64, start: u64, reports: &[Report]) -> Option<Change> {
        let Phase::Comparing {
            since,
            level,
            half_ns,
            judged,
            recheck,
            ..
        } = self.phase
        else {
            unreachable!("a cycle is judged while comparing");
        };
        self.phase = Phase::Comparing {
            since,
            level,
            half_ns,
            holding: false,
            judged: judged + 1,
            recheck,
        };
        self.others.add_cycle(start, half_ns);
        let level_pace = pace_between(reports, start, start + SETTLE_NS, start + half_ns);
        let held_read = pace_and_span_between(
            reports,
            start + half_ns,
            start + half_ns + SETTLE_NS,
            start + 2 * half_ns,
        );
        // A held half with fewer than two reports: stopped throughout, as far as it can tell.
        let (held, span_ns) = held_read.unwrap_or((0.0, half_ns - SETTLE_NS));
        self.stops.held_half(start + 2 * half_ns, held, span_ns);
        let held_pace = held_read.map(|(held, _)| held);
        if let (Some(level_pace), Some(held)) = (level_pace, held_pace.filter(|&p| p > 0.0)) {
            let moved = self
                .last_held
                .filter(|before| {
                    let error = 2.0 * before.standard_error / before.steps_per_s;
                    (held / before.steps_per_s - 1.0).abs() > PHASE_CHANGE + error
                })
                .map(|before| before.steps_per_s);
            match (moved, self.moved_once.take()) {
                // Twice in a row, the same way: a new phase of the job, and what was found of
                // the old one says nothing now. One held half alone is not enough: on the GPU
                // server the ResNet-50 job's busy share, even averaged over 5 s, moved by
                // 8–10% (standard deviation) from one 2 s stretch to the next with nothing
                // changing, and single halves beyond 15% restarted the search from the top
                // four times in two windows. Farther, too, by twice the last comparison's
                // standard error: its held pace is a mean of a few such halves; in ten hours of
                // a model of that noise, two halves in a row passed 15% twice, once from a
                // held pace itself 10% low.
                (Some(before), Some(first)) if (first > before) == (held > before) => {
                    self.forget();
                    let why = Why::PhaseChange {
                        from: before,
                        to: held,
                    };
                    return Some(self.compare(now_ns, self.top(), reports, why));
                }
                (Some(_), _) => self.moved_once = Some(held),
                (None, _) => {}
            }
            // A half that a stop of the job's own slowed is set aside: another cycle.
            if let Some(why) = self.held_halves.set_aside(level, held, level_pace) {
                return Some(self.change(why));
            }
            self.cycles.push((level_pace / held, held));
            let held: Vec<f64> = self.cycles.iter().map(|&(_, held)| held).collect();
            self.reference = measured(&held);
        }
        let ratios: Vec<f64> = self.cycles.iter().map(|&(ratio, _)| ratio).collect();
        let Some(ratio) = paired_interval(&ratios).filter(|_| ratios.len() >= MIN_CYCLES) else {
            // Too few cycles yet (or a half without two reports): another cycle.
            return Some(self.change(Why::Trial {
                reference: self.reference,
            }));
        };
        let floor = 1.0 - self.settings.epsilon;
        let noisy = mean_too_noisy(self.spread.variance_with(&ratios), self.settings.epsilon);
        let spread_bound = self.spread.upper_bound_with(&ratios);
        // Where the mean decides, it is the mean over the cycles that kept the level before
        // too (`KeptCycles`).
        let (ratio, error) = (level <= Level::Policy && !noisy)
            .then(|| self.kept_cycles.pooled(level, &ratios))
            .flatten()
            .and_then(|pooled| Some((paired_interval(&pooled)?, standard_error(&pooled))))
            .unwrap_or_else(|| (ratio, standard_error(&ratios)));
        let cycles = Cycles {
            level,
            recheck,
            ratios: &ratios,
            ratio,
            error,
            floor,
            noisy,
            spread_bound,
        };
        // Above the policy's level the jobs beside the one followed must show the level free
        // too (`others`); one whose cycles could hardly show it any more ends the comparison.
        // At the policy's level and below, a job beside whose settled pace moved has this
        // recheck run on while its mean, where it decides, is below `1 − ε` (`others`).
        let epsilon = self.settings.epsilon;
        let beside = match level > Level::Policy {
            true => self.others.above_policy(floor, recheck, judged + 1),
            false if self.others.moved_wants_a_cycle(floor, epsilon, judged + 1) => Beside::NotYet,
            false => Beside::Free,
        };
        let (verdict, not_shown_free_for) = match (cycles.verdict(&self.carried), beside) {
            (None | Some(Verdict::Kept), Beside::NotShownFree { job, ratio }) => {
                (Verdict::NotShownFree, Some((job, ratio)))
            }
            // Kept, or too noisy to judge, for the job followed: on while a job beside wants
            // another cycle.
            (None, _) | (Some(Verdict::Kept | Verdict::TooNoisy), Beside::NotYet) => {
                return Some(self.change(Why::Undecided {
                    tried: level,
                    ratio,
                }));
            }
            (Some(verdict), _) => (verdict, None),
        };
        // Kept for the job followed, or not shown free for a job beside, and shown costly by
        // another job's cycles: left, as too costly for it.
        let costly_for = (matches!(verdict, Verdict::Kept | Verdict::TooNoisy)
            || not_shown_free_for.is_some())
        .then(|| {
            let mean_decides = (level <= Level::Policy).then_some(epsilon);
            self.others.costly_for(floor, mean_decides)
        })
        .flatten();
        let verdict = costly_for.as_ref().map_or(verdict, |_| Verdict::TooCostly);
        match level <= Level::Policy && !noisy && verdict == Verdict::Kept {
            true => self.kept_cycles.kept(level, &ratios),
            false => self.kept_cycles.drop_level(level),
        }
        // A level kept as too noisy to judge may still be shown costly by its cycles carried
        // over its comparisons (`Carried`).
        let (verdict, ratio) = match level <= Level::Policy && noisy {
            true => match self.carried.add_and_judge(level, &ratios, floor) {
                Some(carried) if verdict == Verdict::TooNoisy => (Verdict::TooCostly, carried),
                _ => (verdict, ratio),
            },
            false => {
                self.carried.drop_level(level);
                (verdict, ratio)
            }
        };
        self.last_held = self.reference;
        self.spread.add(&ratios);
        self.others.judged();
        self.cycles.clear();
        let (why, ratio) = match (costly_for, not_shown_free_for) {
            (Some((job, ratio)), _) => (
                Why::TooCostlyFor {
                    tried: level,
                    job,
                    ratio,
                },
                ratio,
            ),
            (None, Some((job, beside))) => (
                Why::NotShownFreeFor {
                    tried: level,
                    job,
                    ratio: beside,
                },
                ratio,
            ),
            (None, None) => (verdict.why(level, ratio), ratio),
        };
        if verdict == Verdict::Kept {
            self.ceiling.kept(level);
        }
        if matches!(verdict, Verdict::Kept | Verdict::TooNoisy) {
            // Kept; the level above is tried once no ceiling stands in its way (after a
            // search that came down, the ceiling is the level just above). Kept as too noisy
            // to judge, only up to the policy's level, which needs no proof: one interval
            // below `1 − ε` by chance would otherwise keep such a job below it for good. On a
            // model of the GPU server's job that cost nothing (100 runs of 30 minutes), the
            // loop spent 8.9% of its time below the policy's level that way; going back up
            // once the ceiling is old, 4.0%.
            let highest = match verdict {
                Verdict::TooNoisy => Level::Policy,
                _ => self.top(),
            };
            return match level
                .up()
                .filter(|&up| up <= highest && self.ceiling.allows(up))
            {
                Some(up) => {
                    let change = self.compare(now_ns, up, reports, why);
                    self.kept_below = Some(level);
                    Some(change)
                }
                None => Some(self.settle(now_ns, level, why)),
            };
        }
        // Too costly, shown, on the mean, or not shown free: training first.
        match verdict {
            Verdict::NotShownFree => self.ceiling.not_shown_free(level, now_ns),
            _ => {
                // What this comparison cost training: its level halves at the cost found.
                let at_level_ns = (judged + 1) as f64 * half_ns as f64;
                let lost_ns = at_level_ns * (1.0 - ratio.ratio).max(0.0);
                self.ceiling
                    .too_costly(level, now_ns, lost_ns, self.settings.epsilon);
            }
        }
        let down = level.down();
        if let Some(kept) = down.filter(|&down| Some(down) == self.kept_below) {
            // The level under it was kept by the comparison just before this one: settled
            // there again without a second comparison (18 to 36 s, half of it held back).
            return Some(self.settle(now_ns, kept, why));
        }
        if verdict == Verdict::NotShownFree
            && down.is_some_and(|down| down > Level::Policy)
            && !could_show_free_at_spread(spread_bound, floor)
        {
            // Cycles this noisy could show no level free: the levels between are passed over
            // as not shown free, and the policy's is compared. On the GPU server each level
            // above the policy's took 21 to 53 s, half of it held back, for no verdict.
            if let Some(above) = Level::Policy.up() {
                self.ceiling.not_shown_free(above, now_ns);
            }
            return Some(self.compare(now_ns, Level::Policy, reports, why));
        }
        match down.filter(|&down| down > Level::Held) {
            Some(down) => Some(self.compare(now_ns, down, reports, why)),
            // Even a quarter costs training more than ε: held back until the next check.
            None => Some(self.settle(now_ns, Level::Held, why)),
        }
    }

    /// The level being compared (its held halves included), or settled at.
    fn level_judged(&self) -> Option<Level> {
        match self.phase {
            Phase::Comparing { level, .. } | Phase::Settled { level, .. } => Some(level),
            Phase::NoSignal | Phase::WarmingUp { .. } => None,
        }
    }

    /// Begins comparing `level` with offline held back: its half first.
    fn compare(&mut self, now_ns: u64, level: Level, reports: &[Report], why: Why) -> Change {
        self.cycles.clear();
        // A recheck that a job beside's moved pace began has that job's mean judge the level.
        let moved = match &why {
            Why::PaceMovedFor { job, .. } => Some(job.clone()),
            _ => None,
        };
        self.others.comparison_begins(moved);
        self.kept_below = None;
        let measure_ns = self.measure_ns(reports);
        self.phase = Phase::Comparing {
            since: now_ns,
            level,
            half_ns: SETTLE_NS + measure_ns,
            holding: false,
            judged: 0,
            recheck: false,
        };
        self.change(why)
    }

    fn settle(&mut self, now_ns: u64, level: Level, why: Why) -> Change {
        self.kept_below = None;
        // Settled again where it was: the level keeps training's pace, and the next recheck
        // waits longer. Anywhere else, the first wait.
        self.recheck_after_ns = match self.settled_at.replace(level) == Some(level) {
            true => (self.recheck_after_ns * 2).min(RECHECK_MAX_NS),
            false => RECHECK_NS,
        };
        self.phase = Phase::Settled {
            level,
            watch: Watch::new(now_ns),
        };
        self.change(why)
    }

    fn change(&self, why: Why) -> Change {
        Change {
            level: self.level(),
            settles: matches!(self.phase, Phase::Settled { .. }),
            why,
        }
    }
}

#[cfg(test)]
mod tests;
