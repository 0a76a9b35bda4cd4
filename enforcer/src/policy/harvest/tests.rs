//! Unit tests of `harvest`.

use enforcer_common::rng::SplitMix64;

use super::ceiling::CEILING_NS;
use super::change::Half;
use super::statistics::measure_ns;
use super::tuning::PAUSE_KEPT_NS;
use super::*;
use crate::policy::{cores::Allocation, pace};

const S: u64 = 1_000_000_000;
const TICK: u64 = S / 10;
/// The drift's period: on the VM the training simulator's pace alone wandered by ±2-3% over
/// tens of seconds.
const DRIFT_PERIOD_S: f64 = 40.0;

/// A model job: its pace alone, what each level costs it (a fraction of its pace), the noise
/// of its pace from one second to the next (relative, uniform), and a slow drift of it (a
/// sine of `drift` relative amplitude over `DRIFT_PERIOD_S`), as the VM's host gives.
#[derive(Clone)]
struct Job {
    pace: f64,
    cost: fn(Level) -> f64,
    noise: f64,
    drift: f64,
    rng: SplitMix64,
    steps: f64,
    second_pace: f64,
    /// Where the loop is told the pace comes from, and whose pace it is.
    source: PaceSource,
    name: &'static str,
    /// Seconds from one report to the next, drawn uniformly from this range.
    report_gap_s: (f64, f64),
    next_report_ns: u64,
}

impl Job {
    fn new(pace: f64, cost: fn(Level) -> f64, noise: f64) -> Self {
        Self {
            pace,
            cost,
            noise,
            drift: 0.0,
            rng: SplitMix64::new(7),
            steps: 0.0,
            second_pace: pace,
            source: PaceSource::Progress,
            name: "job",
            report_gap_s: (1.0, 1.0),
            next_report_ns: 0,
        }
    }
}

/// What a run of the loop did: the level at every tick and every change.
struct Run {
    levels: Vec<(u64, Level)>,
    changes: Vec<(u64, Change)>,
}

impl Run {
    /// The level the loop last settled at.
    fn settled_level(&self) -> Option<Level> {
        self.changes
            .iter()
            .rev()
            .find_map(|(_, c)| c.settles.then_some(c.level))
    }

    /// When the loop first settled.
    fn first_settled_at(&self) -> Option<u64> {
        self.changes
            .iter()
            .find(|(_, c)| c.settles)
            .map(|(at, _)| *at)
    }

    /// When the loop first compared its settled level again because the pace moved.
    fn pace_moved_at(&self) -> Option<u64> {
        self.changes
            .iter()
            .find(|(_, c)| matches!(c.why, Why::PaceMoved { .. }))
            .map(|(at, _)| *at)
    }

    /// The share of the ticks from `from_s` on spent at `level`.
    fn share_at(&self, from_s: u64, level: Level) -> f64 {
        let after: Vec<_> = self
            .levels
            .iter()
            .filter(|(t, _)| *t >= from_s * S)
            .collect();
        after.iter().filter(|(_, l)| *l == level).count() as f64 / after.len() as f64
    }
}

/// Runs `harvest` over `job` from `start_s` for `seconds`: ticks of 100 ms, a report every
/// `job.report_gap_s`; `reports` carries over between calls.
fn run(
    harvest: &mut Harvest,
    job: &mut Job,
    reports: &mut Vec<Report>,
    start_s: u64,
    seconds: u64,
) -> Run {
    let mut out = Run {
        levels: Vec::new(),
        changes: Vec::new(),
    };
    for tick in (start_s * S / TICK)..((start_s + seconds) * S / TICK) {
        let now = tick * TICK;
        job.advance(now, harvest.level(), reports);
        if let Some(change) = harvest.tick(now, Some((job.source, job.name)), reports) {
            out.changes.push((now, change));
        }
        out.levels.push((now, harvest.level()));
    }
    out
}

impl Job {
    /// One tick of the job at `now`, at `level`: its pace drawn each second, a report when
    /// due into `reports`, and its steps over the tick.
    fn advance(&mut self, now: u64, level: Level, reports: &mut Vec<Report>) {
        if now.is_multiple_of(S) {
            let u = self.rng.next_f64() * 2.0 - 1.0;
            let phase = std::f64::consts::TAU * (now / S) as f64 / DRIFT_PERIOD_S;
            self.second_pace =
                self.pace * (1.0 + self.noise * u) * (1.0 + self.drift * phase.sin());
        }
        if now >= self.next_report_ns {
            // Samples, as a job counting its batches' samples reports them: a report's
            // count is exact at its instant, as one sent right after a step is.
            reports.push(Report::count(now, (self.steps * 128.0) as u64));
            reports.retain(|report| report.at_ns + 30 * S > now);
            let (shortest, longest) = self.report_gap_s;
            let gap = match longest > shortest {
                true => shortest + (longest - shortest) * self.rng.next_f64(),
                false => shortest,
            };
            self.next_report_ns = now + (gap * S as f64) as u64;
        }
        self.steps += self.second_pace * (1.0 - (self.cost)(level)) * (TICK as f64 / S as f64);
    }
}

fn settings() -> HarvestSettings {
    HarvestSettings { epsilon: 0.01 }
}

#[test]
fn a_job_that_nothing_slows_keeps_the_top_level_from_its_first_comparison() {
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(100.0, |_| 0.0, 0.01);
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 300);
    assert_eq!(run.settled_level(), Some(Level::TrainingCores));
    // 10 s of warm-up, then one comparison of the top: three to six cycles of 6 s.
    let settled = run.first_settled_at().expect("settled");
    assert!(
        settled <= 46 * S,
        "settled at {} s: {:?}",
        settled / S,
        run.changes
    );
    assert!(
        !run.changes
            .iter()
            .any(|(_, c)| matches!(c.why, Why::TooCostly { .. })),
        "{:?}",
        run.changes
    );
    // Settled: a comparison a minute, half of it held back.
    let held = run.share_at(50, Level::Held);
    assert!((0.05..=0.22).contains(&held), "held {held:.3} of the time");
}

#[test]
fn a_job_whose_pace_drifts_is_not_taken_for_one_that_offline_slows() {
    // ±3% over 40 s, nothing costing it: paired halves seconds apart see the same drift.
    for seed in 1..=5 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, |_| 0.0, 0.01);
        job.drift = 0.03;
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 300);
        assert_eq!(
            run.settled_level(),
            Some(Level::TrainingCores),
            "seed {seed}: {:?}",
            run.changes
        );
        assert!(
            run.share_at(60, Level::TrainingCores) > 0.75,
            "seed {seed}: {:?}",
            run.changes
        );
    }
}

#[test]
fn a_recheck_ends_at_its_third_cycle_where_the_mean_keeps_the_pace_and_not_where_it_does_not() {
    for seed in 1..=5 {
        let mut harvest = Harvest::new(settings());
        let mut reports = Vec::new();
        let mut job = Job::new(100.0, |_| 0.0, 0.01);
        job.drift = 0.03;
        job.rng = SplitMix64::new(seed);
        // Rechecks after 1, 2, 4 and 4 minutes: four in 800 s.
        let free = run(&mut harvest, &mut job, &mut reports, 0, 800);
        // The cycles of each comparison after the first: its held halves.
        let mut cycles = Vec::new();
        let mut probes = 0;
        for (_, change) in &free.changes {
            match change.why {
                Why::Probe => probes += 1,
                Why::Kept { .. } | Why::TooCostly { .. } => {
                    cycles.push(probes);
                    probes = 0;
                }
                _ => {}
            }
        }
        let rechecks = &cycles[1..];
        assert!(rechecks.len() >= 4, "seed {seed}: {:?}", free.changes);
        let short = rechecks.iter().filter(|&&n| n == MIN_CYCLES).count();
        assert!(
            short * 4 >= rechecks.len() * 3,
            "seed {seed}: cycles {cycles:?}"
        );
        let held = free.share_at(100, Level::Held);
        assert!(held < 0.14, "seed {seed}: held {held:.3} of the time");
        // Turned costly: 3% at the top. The next recheck's mean shows it, at most four minutes
        // on, and it is left.
        job.cost = |l| if l == Level::TrainingCores { 0.03 } else { 0.0 };
        let costly = run(&mut harvest, &mut job, &mut reports, 800, 320);
        assert!(
            costly.share_at(1100, Level::TrainingCores) == 0.0,
            "seed {seed}: {:?}",
            costly.changes
        );
    }
}

#[test]
fn a_level_that_keeps_trainings_pace_is_rechecked_less_often_and_a_new_level_as_often_as_first() {
    let mut harvest = Harvest::new(settings());
    let mut reports = Vec::new();
    let mut job = Job::new(100.0, |_| 0.0, 0.01);
    let free = run(&mut harvest, &mut job, &mut reports, 0, 1300);
    let settled: Vec<u64> = free
        .changes
        .iter()
        .filter(|(_, c)| c.settles)
        .map(|(at, _)| at / S)
        .collect();
    // From one settle to the next: the wait, then a recheck of three cycles (18 s).
    let gaps: Vec<u64> = settled.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.len() >= 4 && gaps[..3] == [78, 138, 258] && gaps[3..].iter().all(|&g| g == 258),
        "gaps {gaps:?}: {:?}",
        free.changes
    );
    let held = free.share_at(400, Level::Held);
    assert!(held < 0.05, "held {held:.3} of the time");
    // Costly at the top now: the recheck leaves it, and the level under it is rechecked a
    // minute after it settles there.
    job.cost = |l| if l == Level::TrainingCores { 0.03 } else { 0.0 };
    let costly = run(&mut harvest, &mut job, &mut reports, 1300, 400);
    let (left_at, _) = costly
        .changes
        .iter()
        .find(|(_, c)| c.settles && c.level == Level::Unpaused)
        .expect("settled under the top");
    let next_probe = costly
        .changes
        .iter()
        .find(|(at, c)| at > left_at && c.why == Why::Probe)
        .map(|(at, _)| (at - left_at) / S);
    // The level's first half (3 s), then its held half.
    assert_eq!(next_probe, Some(63), "{:?}", costly.changes);
}

#[test]
fn sharing_trainings_cores_that_costs_seven_percent_is_left_and_its_tries_cost_little() {
    // The VM's Intel host: offline on training's core cost it 7.6%; elsewhere nothing.
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(150.0, |l| 0.076 * l.training_cores_share(), 0.01);
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 900);
    // The rung under it: the policy without its pause for training's shortage, which costs
    // nothing here.
    assert_eq!(
        run.settled_level(),
        Some(Level::Unpaused),
        "{:?}",
        run.changes
    );
    let left = run
        .changes
        .iter()
        .filter(|(_, c)| {
            matches!(c.why, Why::TooCostly { tried: Level::TrainingCores, ratio }
                if ratio.ratio < 0.95)
        })
        .count();
    // Tried again, and left, every five minutes or so: each try costs training 7.6% over its
    // 9 s at the level, and the wait before the next keeps that within a quarter of ε.
    assert!((2..=4).contains(&left), "{:?}", run.changes);
    let tries_cost = run.share_at(80, Level::TrainingCores) * 0.076;
    assert!(tries_cost < 0.0025, "{tries_cost}: {:?}", run.changes);
    assert!(
        run.share_at(80, Level::Unpaused) > 0.75,
        "{:?}",
        run.changes
    );
}

#[test]
fn a_small_cost_gone_is_found_gone_within_minutes_and_a_large_one_is_tried_again_later() {
    // Every level above `held` costs the job 3% (or 10%) for five minutes, then nothing.
    type Cost = fn(Level) -> f64;
    let costs: [(Cost, u64); 2] = [
        (|l| if l > Level::Held { 0.03 } else { 0.0 }, 270),
        (|l| if l > Level::Held { 0.1 } else { 0.0 }, 300),
    ];
    for (size, (cost, within_s)) in costs.into_iter().enumerate() {
        for seed in 1..=3 {
            let mut harvest = Harvest::new(settings());
            let mut job = Job::new(150.0, cost, 0.01);
            job.rng = SplitMix64::new(seed);
            let mut reports = Vec::new();
            let costly = run(&mut harvest, &mut job, &mut reports, 0, 300);
            assert!(
                costly.share_at(100, Level::Held) > 0.85,
                "{:?}",
                costly.changes
            );
            job.cost = |_| 0.0;
            let free = run(&mut harvest, &mut job, &mut reports, 300, 600);
            let back_s = free
                .levels
                .iter()
                .find(|&&(_, level)| level >= Level::Policy)
                .map(|&(at, _)| at / S - 300);
            // A level found to cost 3% waits about a minute and 48 s before it is tried again,
            // two minutes the second time: back at the policy's level, a comparison a level,
            // 118 to 249 s after the cost went (12 seeds; 352 to 394 s with one wait of five
            // minutes for every cost). One found to cost 10% waits the longest, as before:
            // each try of it costs training 0.9 s (352 to 388 s).
            match size {
                0 => assert!(
                    back_s.is_some_and(|s| s < within_s),
                    "seed {seed}: back after {back_s:?} s: {:?}",
                    free.changes
                ),
                _ => assert!(
                    back_s.is_some_and(|s| s >= within_s),
                    "seed {seed}: back after {back_s:?} s: {:?}",
                    free.changes
                ),
            }
        }
    }
}

#[test]
fn running_offline_through_trainings_shortage_that_costs_five_percent_is_left() {
    // The pause while training is short of cores earns its keep here: without it, 5%.
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(
        120.0,
        |l| if l.pauses_when_short() { 0.0 } else { 0.05 },
        0.01,
    );
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 300);
    assert_eq!(
        run.settled_level(),
        Some(Level::Policy),
        "{:?}",
        run.changes
    );
    assert!(run.share_at(120, Level::Policy) > 0.75, "{:?}", run.changes);
    assert_eq!(
        run.share_at(120, Level::TrainingCores),
        0.0,
        "{:?}",
        run.changes
    );
}

#[test]
fn a_cost_growing_with_offlines_share_settles_where_it_stays_within_epsilon() {
    // Linear in the share of the offline CPUs: 0.8% a quarter, 3.2% at the policy's level.
    let cost = |l: Level| match l {
        Level::TrainingCores => 0.06,
        other => 0.032 * other.offline_share(),
    };
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(100.0, cost, 0.005);
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 390);
    // A quarter costs 0.8% and keeps training within 1%; half costs 1.6%, too much.
    // (Reported as samples, 128 a step: the pace is read to a fraction of a step.)
    // The search comes down the ladder a comparison a level (about two minutes here);
    // settled there, held halves aside. Half, found too costly at about 100 s, is tried again
    // once its wait is over (a minute and more), and then after twice as long: each time left.
    assert_eq!(
        run.settled_level(),
        Some(Level::Quarter),
        "{:?}",
        run.changes
    );
    assert!(
        run.share_at(150, Level::Quarter) > 0.65,
        "{:?}",
        run.changes
    );
    assert!(run.share_at(150, Level::Half) < 0.1, "{:?}", run.changes);
    // Training keeps within ε, its tries of half included.
    let lost: f64 = Level::LADDER
        .iter()
        .map(|&level| run.share_at(150, level) * cost(level))
        .sum();
    assert!(lost < 0.01, "{lost}: {:?}", run.changes);
}

#[test]
fn a_noisy_job_is_not_given_a_costly_level_on_a_lucky_reading() {
    // 5% noise from second to second; the policy's level costs 3%.
    let cost = |l: Level| if l >= Level::Policy { 0.03 } else { 0.0 };
    for seed in 1..=5 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, cost, 0.05);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 400);
        let last = run.settled_level();
        assert!(
            last.is_some_and(|l| l < Level::Policy),
            "seed {seed}: settled at {last:?}"
        );
        assert!(
            Level::LADDER
                .iter()
                .filter(|&&l| l >= Level::Policy)
                .map(|&l| run.share_at(150, l))
                .sum::<f64>()
                < 0.2,
            "seed {seed}: {:?}",
            run.changes
        );
    }
}

/// The GPU server's ResNet-50 job as its GPU busy share showed it: the share, even averaged
/// over 5 s, moved by 8–10% (standard deviation) from one 2 s stretch to the next with
/// nothing changing (uniform ±15% a second here: about 6% over a 2 s half, and 8% for the
/// ratio of two).
const SERVER_NOISE: f64 = 0.15;

#[test]
fn a_level_above_the_policys_is_kept_only_where_its_cycles_show_it_free() {
    // Above the policy's level offline costs 3%, which the noise hides in six cycles.
    let cost = |l: Level| if l > Level::Policy { 0.03 } else { 0.0 };
    let mut not_shown_free = 0;
    for seed in 1..=5 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, cost, SERVER_NOISE);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 400);
        let above: f64 = [Level::Unpaused, Level::TrainingCores]
            .iter()
            .map(|&l| run.share_at(150, l))
            .sum();
        assert!(
            above < 0.1,
            "seed {seed}: {above:.2} above the policy's level: {:?}",
            run.changes
        );
        not_shown_free += run
            .changes
            .iter()
            .filter(|(_, c)| matches!(c.why, Why::NotShownFree { .. }))
            .count();
    }
    // Most left on their undecided cycles, not on an interval the noise put below 1 − ε.
    assert!(not_shown_free >= 3, "{not_shown_free}");
    // Where the cycles do show it free, the top is kept, as before.
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(100.0, |_| 0.0, 0.01);
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 200);
    assert_eq!(run.settled_level(), Some(Level::TrainingCores));
}

/// The VM's cycles: uniform ±4.5% a second gives about 2.6% (standard deviation) for the
/// ratio of a cycle's two halves; the co-location windows' comparisons on the VM spread by 2.2
/// to 2.6% at their third cycle (2026-11-27, AMD EPYC host).
const VM_NOISE: f64 = 0.045;

/// A quieter job than `VM_NOISE`: uniform ±2% a second, about 1.2% for a cycle's ratio, as
/// the VM's training simulator alone spread over 2 s halves (2026-11-28, AMD EPYC host).
const QUIET_NOISE: f64 = 0.02;

#[test]
fn a_level_above_the_policys_that_costs_half_of_epsilon_runs_on_until_its_cycles_show_it_free() {
    // Above the policy's level offline costs half of ε, on a quiet job (cycles spreading by
    // about 1.2%, as the VM's training simulator alone did): six cycles seldom show that
    // free. The top runs on while its cycles could still show it free, and is kept where they
    // do. Where it costs twice ε, its cycles soon say they cannot, and it is left.
    let half_of_epsilon = |l: Level| if l > Level::Policy { 0.005 } else { 0.0 };
    let (mut above, mut cycles_to_keep) = (0.0, Vec::new());
    for seed in 1..=8 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, half_of_epsilon, QUIET_NOISE);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 600);
        for (why, level, cycles) in judgments(&run) {
            if level > Level::Policy {
                assert!(cycles <= MAX_CYCLES_ABOVE_POLICY, "seed {seed}: {why:?}");
            }
            if let Why::Kept { tried, .. } = why
                && *tried > Level::Policy
            {
                cycles_to_keep.push(cycles);
            }
        }
        above += (run.share_at(0, Level::TrainingCores) + run.share_at(0, Level::Unpaused)) / 8.0;
    }
    println!(
        "above the policy's level {:.1}% of the time; kept there after {cycles_to_keep:?} cycles",
        above * 100.0
    );
    // Six cycles at most, as before: 8.8% of the time.
    assert!(above > 0.4, "{above:.3} above the policy's level");
    assert!(
        cycles_to_keep.iter().any(|&n| n > MAX_CYCLES),
        "{cycles_to_keep:?}"
    );
    let costly = |l: Level| if l > Level::Policy { 0.02 } else { 0.0 };
    let mut all = Vec::new();
    for seed in 1..=8 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, costly, VM_NOISE);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 150);
        all.extend(
            judgments(&run)
                .into_iter()
                .filter(|&(_, level, _)| level > Level::Policy)
                .map(|(_, _, cycles)| cycles),
        );
    }
    println!("levels above the policy's costing 2%, judged after {all:?} cycles");
    assert!(all.len() >= 8, "levels judged: {all:?}");
    let mean = all.iter().sum::<usize>() as f64 / all.len() as f64;
    assert!(
        mean <= MAX_CYCLES as f64,
        "cycles of the levels left: {all:?}"
    );
}

#[test]
fn a_level_tried_above_the_one_kept_and_left_settles_back_without_a_comparison() {
    // Above the policy's level offline costs 3%; the policy's level is free.
    let cost = |l: Level| if l > Level::Policy { 0.03 } else { 0.0 };
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(100.0, cost, 0.01);
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 800);
    // The ceiling is five minutes old at a recheck: the policy's level kept, `unpaused`
    // tried above it, found too costly, and the loop back on the policy's level at once.
    let retried = run
        .changes
        .iter()
        .position(|(at, c)| *at > CEILING_NS && matches!(c.why, Why::Kept { .. }) && !c.settles)
        .expect("the level above tried again");
    let (_, tried) = &run.changes[retried];
    assert_eq!(tried.level, Level::Unpaused, "{:?}", run.changes);
    let left = run.changes[retried..]
        .iter()
        .find(|(_, c)| matches!(c.why, Why::TooCostly { .. } | Why::NotShownFree { .. }))
        .expect("left");
    assert_eq!(
        (left.1.level, left.1.settles),
        (Level::Policy, true),
        "{:?}",
        run.changes
    );
}

#[test]
fn a_held_pace_as_far_as_the_noise_takes_it_is_not_a_new_phase() {
    // Ten hours of the server's noise: one held half beyond 15% is common, and before the
    // last comparison's own error counted, two in a row the same way came twice, once from a
    // held pace itself 10% low, a mean of three halves this noisy.
    for seed in 1..=40 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, |_| 0.0, SERVER_NOISE);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 900);
        let phases: Vec<_> = run
            .changes
            .iter()
            .filter(|(_, c)| matches!(c.why, Why::PhaseChange { .. } | Why::PaceMoved { .. }))
            .collect();
        assert!(phases.is_empty(), "seed {seed}: {phases:?}");
    }
}

#[test]
fn the_servers_noise_seldom_moves_a_settled_pace() {
    // Ten hours of a job that nothing costs, its pace ±30% a second (the server's reported
    // steps): settled, its pace read in 16 s stretches moved beyond 2ε and twice their
    // deviation, twice in a row, 4 times. Each costs a recheck, 9 s or more of offline held
    // back: one in two hours is about 0.1% of offline's time.
    let moved: Vec<_> = (1..=20)
        .flat_map(|seed| {
            free_job_at_the_servers_noise(seed, 1800)
                .changes
                .into_iter()
                .filter(|(_, c)| matches!(c.why, Why::PaceMoved { .. }))
                .map(move |(at, c)| (seed, at, c))
        })
        .collect();
    assert!(moved.len() <= 5, "{moved:?}");
}

#[test]
fn a_settled_level_whose_cost_grows_is_compared_at_once_where_training_would_feel_it() {
    // A quiet job (1% noise, the VM's training simulator's): a level that begins to cost 5% is
    // compared again within two stretches and left, not at its recheck (225 s later, when
    // the watch waited for a move of 15%).
    for seed in 1..=5 {
        let (mut harvest, mut job, mut reports, at) = free_job_settled_for_long(0.01, seed);
        job.cost = |l| if l == Level::Held { 0.0 } else { 0.05 };
        let after = run(&mut harvest, &mut job, &mut reports, at, 100);
        assert!(
            after.pace_moved_at().is_some_and(|t| t <= (at + 48) * S),
            "seed {seed}, costly from {at} s: {:?}",
            after.changes
        );
        assert!(
            after
                .changes
                .iter()
                .any(|(t, c)| *t <= (at + 60) * S && matches!(c.why, Why::TooCostly { .. })),
            "seed {seed}, costly from {at} s: {:?}",
            after.changes
        );
    }
    // At the server's reported-steps noise (±30% a second) a cost of 20% moved the pace
    // beyond the watch's bar within 48 s in 8 runs of 10 (with a bar of 15%, in none): the
    // stretches there spread by about 7%, and a move must pass 2ε and twice that.
    let seen = (1..=10)
        .filter(|&seed| {
            let (mut harvest, mut job, mut reports, at) =
                free_job_settled_for_long(LOADER_BOUND_NOISE, seed);
            job.cost = |l| if l == Level::Held { 0.0 } else { 0.2 };
            let after = run(&mut harvest, &mut job, &mut reports, at, 48);
            after.pace_moved_at().is_some()
        })
        .count();
    assert!(seen >= 6, "{seen} of 10");
}

/// A job of 100 steps a second that nothing costs, at `noise`, its noise drawn from `seed`,
/// run from the start until it is settled for long (`run_until_settled_for_long`): the loop,
/// the job, its reports and the second it got there.
fn free_job_settled_for_long(noise: f64, seed: u64) -> (Harvest, Job, Vec<Report>, u64) {
    let mut harvest = Harvest::new(settings());
    let mut reports = Vec::new();
    let mut job = Job::new(100.0, |_| 0.0, noise);
    job.rng = SplitMix64::new(seed);
    let at = run_until_settled_for_long(&mut harvest, &mut job, &mut reports, 0);
    (harvest, job, reports, at)
}

/// Runs `harvest` over `job` second by second from `start_s` until it is settled with at
/// least two minutes to its next recheck and its pace read over two stretches: the second
/// it got there.
fn run_until_settled_for_long(
    harvest: &mut Harvest,
    job: &mut Job,
    reports: &mut Vec<Report>,
    start_s: u64,
) -> u64 {
    settled_for_long_after(harvest, start_s, |harvest, now_s| {
        run(harvest, job, reports, now_s, 1);
    })
}

/// As `run_until_settled_for_long`, each second run by `one_second(harvest, now_s)`.
fn settled_for_long_after(
    harvest: &mut Harvest,
    start_s: u64,
    mut one_second: impl FnMut(&mut Harvest, u64),
) -> u64 {
    for now_s in start_s..start_s + 1200 {
        one_second(harvest, now_s);
        let now = (now_s + 1) * S;
        if let Phase::Settled { watch, .. } = harvest.phase
            && now >= watch.since() + SETTLE_NS + 2 * watch::WATCH_NS
            && watch.since() + harvest.recheck_after_ns >= now + 120 * S
        {
            return now_s + 1;
        }
    }
    panic!("never settled for long: {:?}", harvest.phase);
}

#[test]
fn a_new_phase_while_settled_is_compared_at_once_not_at_the_next_recheck() {
    // At the server's noise too: the settled pace is read over 16 s.
    for seed in 1..=5 {
        let (mut harvest, mut job, mut reports, at) =
            free_job_settled_for_long(LOADER_BOUND_NOISE, seed);
        job.pace = 50.0;
        let after = run(&mut harvest, &mut job, &mut reports, at, 48);
        assert!(
            after.pace_moved_at().is_some(),
            "seed {seed}, changed at {at} s: {:?}",
            after.changes
        );
    }
    for seed in 1..=5 {
        let (mut harvest, mut job, mut reports, at) = free_job_settled_for_long(0.01, seed);
        // Evaluation: half the pace, and everything offline does now costs it 4%.
        job.pace = 50.0;
        job.cost = |l| if l == Level::Held { 0.0 } else { 0.04 };
        let after = run(&mut harvest, &mut job, &mut reports, at, 100);
        // Two stretches of 16 s, the first of them perhaps begun before the change.
        assert!(
            after.pace_moved_at().is_some_and(|t| t <= (at + 48) * S),
            "seed {seed}, changed at {at} s: {:?}",
            after.changes
        );
        // Its held halves moved too: the search starts again from the top, and comes down.
        assert!(
            after
                .changes
                .iter()
                .any(|(_, c)| matches!(c.why, Why::PhaseChange { .. })),
            "seed {seed}: {:?}",
            after.changes
        );
        let later = run(&mut harvest, &mut job, &mut reports, at + 100, 300);
        assert_eq!(
            later.settled_level(),
            Some(Level::Held),
            "seed {seed}: {:?}",
            later.changes
        );
    }
}

#[test]
fn a_settled_level_that_turns_costly_is_compared_at_once_and_left() {
    // Job::new's own seed.
    let (mut harvest, mut job, mut reports, at) = free_job_settled_for_long(0.01, 7);
    assert_eq!(harvest.level(), Level::TrainingCores);
    // Offline's work beside training grew: every level but `held` costs it 30% now, and the
    // pace alone is what it was.
    job.cost = |l| if l == Level::Held { 0.0 } else { 0.3 };
    let after = run(&mut harvest, &mut job, &mut reports, at, 100);
    let moved = after
        .changes
        .iter()
        .position(|(_, c)| matches!(c.why, Why::PaceMoved { .. }))
        .unwrap_or_else(|| panic!("{:?}", after.changes));
    assert!(
        after.changes[moved].0 <= (at + 48) * S,
        "{:?}",
        after.changes
    );
    // Its recheck finds it too costly: not a new phase, the held pace has not moved.
    assert!(
        matches!(
            after.changes[moved..]
                .iter()
                .find(|(_, c)| !matches!(
                    c.why,
                    Why::Probe | Why::Trial { .. } | Why::PaceMoved { .. }
                ))
                .map(|(_, c)| &c.why),
            Some(Why::TooCostly {
                tried: Level::TrainingCores,
                ..
            })
        ),
        "{:?}",
        after.changes
    );
}

/// A job that nothing slows, 100 s in: the loop settled at the top of its ladder.
fn settled_at_the_top() -> (Harvest, Job, Vec<Report>) {
    let mut harvest = Harvest::new(settings());
    let mut reports = Vec::new();
    let mut job = Job::new(100.0, |_| 0.0, 0.01);
    let first = run(&mut harvest, &mut job, &mut reports, 0, 100);
    assert_eq!(first.settled_level(), Some(Level::TrainingCores));
    (harvest, job, reports)
}

#[test]
fn a_new_phase_of_the_job_starts_the_search_again() {
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    // Evaluation: half the pace, and now everything offline does costs it 4%.
    job.pace = 50.0;
    job.cost = |l| if l == Level::Held { 0.0 } else { 0.04 };
    let second = run(&mut harvest, &mut job, &mut reports, 100, 400);
    assert!(
        second
            .changes
            .iter()
            .any(|(_, c)| matches!(c.why, Why::PhaseChange { .. } | Why::TooCostly { .. })),
        "{:?}",
        second.changes
    );
    assert_eq!(
        second.settled_level(),
        Some(Level::Held),
        "{:?}",
        second.changes
    );
}

#[test]
fn a_change_of_signal_starts_the_search_again_from_a_probe() {
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    assert_eq!(harvest.source(), Some(PaceSource::Progress));
    // The job stops reporting; its GPU's busy share, in other units, takes over.
    job.source = PaceSource::GpuBusy;
    let second = run(&mut harvest, &mut job, &mut reports, 100, 100);
    let (at, change) = &second.changes[0];
    assert_eq!(*at, 100 * S);
    // Compared again from the top, against held halves of the new source.
    assert_eq!(change.level, Level::TrainingCores);
    assert_eq!(
        change.why,
        Why::SignalChanged {
            from: PaceSource::Progress,
            to: PaceSource::GpuBusy
        }
    );
    assert_eq!(harvest.source(), Some(PaceSource::GpuBusy));
    assert_eq!(
        (second.changes[1].1.level, &second.changes[1].1.why),
        (Level::Held, &Why::Probe)
    );
    assert_eq!(
        second.settled_level(),
        Some(Level::TrainingCores),
        "{:?}",
        second.changes
    );
}

#[test]
fn another_jobs_pace_is_followed_from_its_first_seconds_not_compared_with_the_last_ones() {
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    assert_eq!(harvest.job(), Some("job"));
    // The job ends; another one, already reporting, is the first with a pace now: its own
    // count, a third of the pace, and offline on training's cores costs it 5%.
    (job.name, job.pace, job.steps) = ("other", 30.0, 0.0);
    job.cost = |l| if l == Level::TrainingCores { 0.05 } else { 0.0 };
    reports.clear();
    let second = run(&mut harvest, &mut job, &mut reports, 100, 200);
    let (at, change) = &second.changes[0];
    assert_eq!(*at, 100 * S);
    assert_eq!(
        (change.level, &change.why),
        (
            Level::Policy,
            &Why::JobChanged {
                from: "job".into(),
                to: "other".into()
            }
        )
    );
    assert_eq!(harvest.job(), Some("other"));
    // The core policy's level through the new job's first seconds, then the search from the
    // top, which finds training's cores too costly for it.
    let (next, _) = &second.changes[1];
    assert!(*next >= at + WARMUP_NS, "{:?}", second.changes);
    assert!(second.share_at(100, Level::Policy) > 0.0);
    assert_eq!(
        second.settled_level(),
        Some(Level::Unpaused),
        "{:?}",
        second.changes
    );
}

/// Names, as the daemon gives the jobs running.
fn names(jobs: &[&str]) -> Vec<String> {
    jobs.iter().map(|job| (*job).to_owned()).collect()
}

#[test]
fn a_second_training_job_without_a_pace_keeps_the_loop_at_the_policys_level_until_it_leaves() {
    let mut harvest = Harvest::new(settings());
    // Nothing slows this job: alone, its pace shows even training's cores free.
    let mut job = Job::new(100.0, |_| 0.0, 0.01);
    let mut reports = Vec::new();
    let alone = run(&mut harvest, &mut job, &mut reports, 0, 120);
    assert_eq!(
        alone.settled_level(),
        Some(Level::TrainingCores),
        "{:?}",
        alone.changes
    );

    // A second job starts, with no pace of its own: this job's pace says nothing of what
    // offline on the other's cores costs it, so the loop comes down at its next tick and goes
    // no higher.
    harvest.set_training_jobs(names(&["job", "other"]));
    let beside = run(&mut harvest, &mut job, &mut reports, 120, 900);
    let (at, first) = beside.changes.first().expect("a change at once");
    assert_eq!(*at, 120 * S);
    assert_eq!(
        (first.level, &first.why),
        (
            Level::Policy,
            &Why::SeveralJobs {
                jobs: 2,
                waiting_for: "other".into()
            }
        )
    );
    assert!(
        beside
            .levels
            .iter()
            .all(|&(_, level)| level <= Level::Policy),
        "{:?}",
        beside.changes
    );
    assert_eq!(beside.settled_level(), Some(Level::Policy));

    // It leaves: the levels above are tried again from the next recheck on.
    harvest.set_training_jobs(names(&["job"]));
    let after = run(&mut harvest, &mut job, &mut reports, 1020, 600);
    assert_eq!(
        after.settled_level(),
        Some(Level::TrainingCores),
        "{:?}",
        after.changes
    );
}

/// Runs `harvest` over two jobs from `start_s` for `seconds`: it follows `followed`'s pace and,
/// where `tell_others`, is told `beside`'s too (`Harvest::set_other_jobs`); not told, the job
/// beside runs without a pace.
fn run_beside(
    harvest: &mut Harvest,
    jobs: (&mut Job, &mut Job),
    start_s: u64,
    seconds: u64,
    tell_others: bool,
) -> Run {
    let mut reports = (Vec::new(), Vec::new());
    run_beside_with(harvest, jobs, &mut reports, start_s, seconds, tell_others)
}

/// As `run_beside`, the two jobs' reports carried over from one call to the next in `reports`.
fn run_beside_with(
    harvest: &mut Harvest,
    (followed, beside): (&mut Job, &mut Job),
    (reports, beside_reports): &mut (Vec<Report>, Vec<Report>),
    start_s: u64,
    seconds: u64,
    tell_others: bool,
) -> Run {
    let mut out = Run {
        levels: Vec::new(),
        changes: Vec::new(),
    };
    harvest.set_training_jobs(names(&[followed.name, beside.name]));
    for tick in (start_s * S / TICK)..((start_s + seconds) * S / TICK) {
        let now = tick * TICK;
        followed.advance(now, harvest.level(), reports);
        beside.advance(now, harvest.level(), beside_reports);
        if tell_others {
            let others = vec![(beside.name.to_owned(), beside_reports.clone())];
            harvest.set_other_jobs(now, others);
        }
        let signal = Some((followed.source, followed.name));
        if let Some(change) = harvest.tick(now, signal, reports) {
            out.changes.push((now, change));
        }
        out.levels.push((now, harvest.level()));
    }
    out
}

/// Two jobs, the loop following the first's pace and told the second's, with their reports,
/// which carry over from one `run` to the next.
struct TwoJobs {
    followed: Job,
    beside: Job,
    reports: (Vec<Report>, Vec<Report>),
}

impl TwoJobs {
    fn new(followed: Job, beside: Job) -> Self {
        let reports = (Vec::new(), Vec::new());
        Self {
            followed,
            beside,
            reports,
        }
    }

    /// As `run_beside`, told the job beside's pace.
    fn run(&mut self, harvest: &mut Harvest, start_s: u64, seconds: u64) -> Run {
        let jobs = (&mut self.followed, &mut self.beside);
        run_beside_with(harvest, jobs, &mut self.reports, start_s, seconds, true)
    }
}

/// `cost` at `three_quarters` and above, nothing below: a job beside the one followed whose
/// loader shares offline's CPUs, say.
fn from_three_quarters(level: Level, cost: f64) -> f64 {
    match level >= Level::ThreeQuarters {
        true => cost,
        false => 0.0,
    }
}

#[test]
fn a_level_that_slows_the_job_not_followed_is_left_for_it() {
    // The job followed feels nothing; the one beside it loses 10% of its pace wherever offline
    // has three quarters of its CPUs or more.
    let followed = || Job::new(100.0, |_| 0.0, 0.01);
    let beside = || Job {
        name: "beside",
        rng: SplitMix64::new(11),
        ..Job::new(50.0, |level| from_three_quarters(level, 0.1), 0.01)
    };

    // Told only the job followed, the loop keeps the policy's level all along.
    let mut harvest = Harvest::new(settings());
    let blind = run_beside(
        &mut harvest,
        (&mut followed(), &mut beside()),
        0,
        600,
        false,
    );
    assert!(
        blind.share_at(60, Level::Policy) > 0.8,
        "{:?}",
        blind.changes
    );

    // Told the other job's pace too: `policy` and `three_quarters` are left for it, each on
    // the other job's own cycles, and the loop settles at `half`, where neither job pays.
    let mut harvest = Harvest::new(settings());
    let told = run_beside(&mut harvest, (&mut followed(), &mut beside()), 0, 600, true);
    let left_for: Vec<(Level, &str, f64)> = told
        .changes
        .iter()
        .filter_map(|(_, change)| match &change.why {
            Why::TooCostlyFor { tried, job, ratio } => Some((*tried, job.as_str(), ratio.ratio)),
            _ => None,
        })
        .collect();
    assert!(
        left_for
            .iter()
            .any(|&(tried, job, _)| tried == Level::Policy && job == "beside"),
        "{left_for:?}"
    );
    assert!(
        left_for
            .iter()
            .all(|&(_, _, ratio)| (0.85..0.95).contains(&ratio)),
        "{left_for:?}"
    );
    assert_eq!(
        told.settled_level(),
        Some(Level::Half),
        "{:?}",
        told.changes
    );
    assert!(told.share_at(300, Level::Half) > 0.6, "{:?}", told.changes);
}

#[test]
fn a_job_beside_reporting_less_often_has_its_own_cycles() {
    // As above, with the job beside reporting every 3 s while the one followed reports each
    // second: halves of the followed job's two report periods held at most one of its reports.
    let mut followed = Job::new(100.0, |_| 0.0, 0.01);
    let mut beside = Job {
        name: "beside",
        rng: SplitMix64::new(11),
        report_gap_s: (3.0, 3.0),
        ..Job::new(50.0, |level| from_three_quarters(level, 0.1), 0.01)
    };
    let mut harvest = Harvest::new(settings());
    let told = run_beside(&mut harvest, (&mut followed, &mut beside), 0, 900, true);
    let left_for_beside = told
        .changes
        .iter()
        .any(|(_, change)| matches!(&change.why, Why::TooCostlyFor { job, .. } if job == "beside"));
    assert!(left_for_beside, "{:?}", told.changes);
    assert_eq!(
        told.settled_level(),
        Some(Level::Half),
        "{:?}",
        told.changes
    );
}

#[test]
fn a_job_beside_that_pays_nothing_has_no_level_left_for_it() {
    // Both jobs' paces as noisy as the VM's training simulator's (±4.5% a second, its cycles
    // spreading by about 2.6%), and no level costs either: the other job's cycles must not take
    // offline work away by chance. Eight runs of 30 minutes.
    let mut left_for = 0;
    for seed in 0..8 {
        let mut followed = Job::new(100.0, |_| 0.0, 0.045);
        followed.rng = SplitMix64::new(seed);
        let mut beside = Job::new(50.0, |_| 0.0, 0.045);
        (beside.name, beside.rng) = ("beside", SplitMix64::new(100 + seed));
        let mut harvest = Harvest::new(settings());
        let run = run_beside(&mut harvest, (&mut followed, &mut beside), 0, 1800, true);
        let changes = run.changes.iter();
        left_for += changes
            .filter(|(_, change)| matches!(change.why, Why::TooCostlyFor { .. }))
            .count();
    }
    println!("levels left for the job beside in 4 hours: {left_for}");
    assert!(left_for <= 1, "{left_for}");
}

#[test]
fn two_jobs_that_pay_nothing_share_training_cores_once_each_pace_shows_it_free() {
    // Offline costs neither job anything, anywhere. Told both paces, the loop goes above the
    // policy's level, each job's own cycles showing it free. Told only the followed job's, the
    // job beside runs without a pace, and the loop keeps to the policy's level.
    let followed = || Job::new(100.0, |_| 0.0, 0.01);
    let beside = || Job {
        name: "beside",
        rng: SplitMix64::new(11),
        ..Job::new(50.0, |_| 0.0, 0.01)
    };
    let mut harvest = Harvest::new(settings());
    let told = run_beside(&mut harvest, (&mut followed(), &mut beside()), 0, 600, true);
    assert_eq!(
        told.settled_level(),
        Some(Level::TrainingCores),
        "{:?}",
        told.changes
    );
    assert!(
        told.share_at(120, Level::TrainingCores) > 0.7,
        "{:?}",
        told.changes
    );
    // The job beside was measured at the level kept, by its last recheck: its mean free.
    let beside_ratio = harvest.beside();
    assert!(
        beside_ratio
            .iter()
            .any(|(job, ratio)| job == "beside" && ratio.ratio >= 0.99),
        "{beside_ratio:?}"
    );

    let mut harvest = Harvest::new(settings());
    let blind = run_beside(
        &mut harvest,
        (&mut followed(), &mut beside()),
        0,
        600,
        false,
    );
    assert!(
        blind
            .levels
            .iter()
            .all(|&(_, level)| level <= Level::Policy),
        "{:?}",
        blind.changes
    );
}

#[test]
fn training_cores_that_slow_only_the_job_beside_are_left_for_it() {
    // Offline on training's cores costs the job beside 3% (its own reserved cores); nothing
    // costs the job followed. The loop leaves `training_cores` for the job beside, on that
    // job's cycles, and settles at `unpaused`, where neither pays.
    let mut followed = Job::new(100.0, |_| 0.0, 0.01);
    let mut beside = Job {
        name: "beside",
        rng: SplitMix64::new(11),
        ..Job::new(
            50.0,
            |level| f64::from(level == Level::TrainingCores) * 0.03,
            0.01,
        )
    };
    let mut harvest = Harvest::new(settings());
    let run = run_beside(&mut harvest, (&mut followed, &mut beside), 0, 900, true);
    let left_for_beside = run.changes.iter().any(|(_, change)| {
        matches!(
            &change.why,
            Why::TooCostlyFor { tried: Level::TrainingCores, job, .. }
                | Why::NotShownFreeFor { tried: Level::TrainingCores, job, .. }
                if job == "beside"
        )
    });
    assert!(left_for_beside, "{:?}", run.changes);
    assert_eq!(
        run.settled_level(),
        Some(Level::Unpaused),
        "{:?}",
        run.changes
    );
    // Tried again only after the ceiling's waits: a minute, then longer.
    assert!(
        run.share_at(300, Level::TrainingCores) < 0.1,
        "{:?}",
        run.changes
    );
    assert!(
        run.share_at(300, Level::Unpaused) > 0.6,
        "{:?}",
        run.changes
    );
}

#[test]
fn a_job_that_starts_beside_offline_on_training_cores_brings_it_down_at_once() {
    // The job followed, alone, settles at `training_cores`. A second job starts, which offline
    // on training's cores costs 10%: the loop comes down to `policy` at its next tick, waits for
    // the new job's first seconds, and then leaves `training_cores` for it on its own cycles.
    let (mut harvest, mut followed, reports) = settled_at_the_top();
    let mut beside = Job {
        name: "beside",
        rng: SplitMix64::new(11),
        ..Job::new(
            50.0,
            |level| f64::from(level == Level::TrainingCores) * 0.1,
            0.01,
        )
    };
    let mut reports = (reports, Vec::new());
    let jobs = (&mut followed, &mut beside);
    let run = run_beside_with(&mut harvest, jobs, &mut reports, 100, 600, true);
    let changes = &run.changes;
    let (at, first) = changes.first().expect("a change at once");
    assert_eq!(*at, 100 * S);
    assert_eq!(
        (first.level, &first.why),
        (
            Level::Policy,
            &Why::SeveralJobs {
                jobs: 2,
                waiting_for: "beside".into()
            }
        )
    );
    let left_for_beside = changes.iter().any(|(_, change)| {
        matches!(
            &change.why,
            Why::TooCostlyFor { tried: Level::TrainingCores, job, .. }
                | Why::NotShownFreeFor { tried: Level::TrainingCores, job, .. }
                if job == "beside"
        )
    });
    assert!(left_for_beside, "{changes:?}");
    let settled = changes.iter().rev().find(|(_, change)| change.settles);
    assert_eq!(
        settled.map(|(_, c)| c.level),
        Some(Level::Unpaused),
        "{changes:?}"
    );
    // The job beside's comparisons of `training_cores`, and their retries once the ceiling's
    // wait is over: a few % of its ten minutes.
    let share = run.share_at(100, Level::TrainingCores);
    assert!(share < 0.1, "{share} {changes:?}");
}

#[test]
fn a_cost_that_grows_for_a_job_beside_while_settled_is_compared_at_once() {
    // Nothing costs either job, and the loop settles. Then offline's work grows, and every level
    // but `held` costs the job beside `cost`; the job followed still feels nothing, so its own
    // watch sees nothing. The job beside's does, within two stretches, and the level is left
    // for it: not at the recheck, two minutes or more later. 20 runs a case; at a spread of 1%
    // a second each run left its level after 50 s, where with the job followed alone watched
    // each left it after 225 s. At 4.5% the recheck its move begins runs on to six cycles
    // where the job's mean is below `1 − ε`, and leaves the level on that mean.
    type Cost = fn(Level) -> f64;
    let costs: [(f64, Cost); 3] = [
        (0.03, |level| f64::from(level != Level::Held) * 0.03),
        (0.05, |level| f64::from(level != Level::Held) * 0.05),
        (0.10, |level| f64::from(level != Level::Held) * 0.10),
    ];
    for (cost, cost_of) in costs {
        for noise in [0.01, 0.045] {
            // For each run, when the level settled at was left (s after the cost began).
            let mut left_after = Vec::new();
            for seed in 1..=20 {
                let (mut harvest, mut jobs, at) = two_jobs_settled_for_long((noise, noise), seed);
                let settled = harvest.level();
                jobs.beside.cost = cost_of;
                let after = jobs.run(&mut harvest, at, 600);
                let left = after
                    .levels
                    .iter()
                    .find(|&&(_, l)| l < settled && l != Level::Held);
                left_after.push(left.map(|(t, _)| (t - at * S) / S));
                if noise > 0.01 {
                    continue;
                }
                let moved_for_beside = after.changes.iter().find(|(_, change)| {
                    matches!(&change.why, Why::PaceMovedFor { job, from, to }
                        if job == "beside" && to < from)
                });
                assert!(
                    moved_for_beside.is_some_and(|(t, _)| *t <= (at + 48) * S),
                    "cost {cost}, seed {seed}, from {at} s: {:?}",
                    after.changes
                );
                assert!(
                    left.is_some_and(|(t, _)| *t <= (at + 60) * S),
                    "cost {cost}, seed {seed}, from {at} s: {:?}",
                    after.changes
                );
            }
            let within = |s: u64| left_after.iter().flatten().filter(|&&t| t <= s).count();
            println!(
                "cost {:.0}% to the job beside at a spread of {:.1}%: left within 60 s in {} runs \
                 of 20, within 120 s in {}, within 600 s in {}: {left_after:?}",
                100.0 * cost,
                100.0 * noise,
                within(60),
                within(120),
                within(600),
            );
            if noise > 0.01 && cost >= 0.05 {
                // Before the recheck that came at 225 s: with the interval alone, 6 runs of 20 at
                // a cost of 5%, 17 at 10%.
                assert!(within(120) >= 14, "{left_after:?}");
            }
        }
    }
}

#[test]
fn a_new_phase_of_the_job_beside_seldom_has_its_level_left_for_it() {
    // Nothing costs either job, and the loop settles; then the job beside's pace halves (its
    // evaluation, say). Its watch sees the move and the level is compared again, its mean
    // deciding at the policy's level and below: a level there left for it is one wrongly left.
    // 20 runs a case: both jobs quiet (1% a second), both at the VM's spread (4.5%), and the
    // job followed at the server's reported-steps noise (±30%), too noisy for its own mean, so
    // that its verdict comes at the third cycle: 0, 2 and 2 levels wrongly left. With the moved
    // job's mean judged as soon as the followed job's verdict came, the last case left 9. (At
    // 4.5%, more runs left `unpaused` as not shown free for the job beside, as any of its
    // rechecks may: there a level above the policy's is kept only where every job's mean keeps
    // it.)
    for noises in [(0.01, 0.01), (0.045, 0.045), (LOADER_BOUND_NOISE, 0.045)] {
        let mut wrongly_left = Vec::new();
        for seed in 1..=20 {
            let (mut harvest, mut jobs, at) = two_jobs_settled_for_long(noises, seed);
            jobs.beside.pace /= 2.0;
            let after = jobs.run(&mut harvest, at, 300);
            let left_for = after.changes.into_iter().filter(|(_, change)| {
                matches!(change.why, Why::TooCostlyFor { tried, .. } if tried <= Level::Policy)
            });
            wrongly_left.extend(left_for.map(|(t, change)| (seed, (t - at * S) / S, change.why)));
        }
        println!(
            "a new phase of the job beside, spreads {noises:?}: {} levels at `policy` or below \
             left for it in 20 runs: {wrongly_left:?}",
            wrongly_left.len()
        );
        assert!(wrongly_left.len() <= 4, "{wrongly_left:?}");
    }
}

#[test]
fn a_cost_to_the_job_beside_is_found_beside_a_job_too_noisy_for_its_mean() {
    // The job followed at the server's reported-steps noise, whose comparisons at the policy's
    // level end at their third cycle; the job beside at the VM's spread. Once settled, every
    // level but `held` costs the job beside 5%: its move has the level compared again, and its
    // mean, judged at its sixth cycle, leaves the level in most runs before the recheck.
    let mut found = Vec::new();
    for seed in 1..=20 {
        let (mut harvest, mut jobs, at) =
            two_jobs_settled_for_long((LOADER_BOUND_NOISE, 0.045), seed);
        jobs.beside.cost = |level| f64::from(level != Level::Held) * 0.05;
        let after = jobs.run(&mut harvest, at, 120);
        let left_for = after.changes.iter().find(
            |(_, change)| matches!(&change.why, Why::TooCostlyFor { job, .. } if job == "beside"),
        );
        found.extend(left_for.map(|(t, _)| (seed, (t - at * S) / S)));
    }
    println!(
        "left for the job beside within 120 s in {} runs of 20: {found:?}",
        found.len()
    );
    assert!(found.len() >= 14, "{found:?}");
}

/// Two jobs of 100 and 50 steps a second that nothing costs, at `noises` (the job followed's,
/// the job beside's), their noise drawn from `seed`, run from the start until the loop is
/// settled for long (`run_until_settled_for_long`): the loop, the jobs and the second it got
/// there.
fn two_jobs_settled_for_long(
    (noise, beside_noise): (f64, f64),
    seed: u64,
) -> (Harvest, TwoJobs, u64) {
    let mut followed = Job::new(100.0, |_| 0.0, noise);
    followed.rng = SplitMix64::new(seed);
    let mut beside = Job::new(50.0, |_| 0.0, beside_noise);
    (beside.name, beside.rng) = ("beside", SplitMix64::new(100 + seed));
    let mut jobs = TwoJobs::new(followed, beside);
    let mut harvest = Harvest::new(settings());
    let at = settled_for_long_after(&mut harvest, 0, |harvest, now_s| {
        jobs.run(harvest, now_s, 1);
    });
    (harvest, jobs, at)
}

#[test]
fn a_job_beside_that_pays_nothing_seldom_has_its_settled_pace_taken_to_have_moved() {
    // Each job watched adds the false moves of its own pace: each costs a recheck, offline held
    // back 9 s or more. Eight runs of two hours at each spread of the paces a second, nothing
    // costing: the job beside's pace moved 0, 0, 0 and 1 times at 1, 4.5, 15 and 30%, the job
    // followed's 0, 0, 0 and 2. One in four hours is about 0.06% of offline's time.
    for noise in [0.01, 0.045, 0.15, LOADER_BOUND_NOISE] {
        let mut moved_for = Vec::new();
        for seed in 0..8 {
            let mut followed = Job::new(100.0, |_| 0.0, noise);
            followed.rng = SplitMix64::new(seed);
            let mut beside = Job::new(50.0, |_| 0.0, noise);
            (beside.name, beside.rng) = ("beside", SplitMix64::new(100 + seed));
            let mut harvest = Harvest::new(settings());
            let run = run_beside(&mut harvest, (&mut followed, &mut beside), 0, 7200, true);
            let changes = run.changes.into_iter();
            moved_for.extend(changes.filter(|(_, c)| matches!(c.why, Why::PaceMovedFor { .. })));
        }
        println!(
            "spread {:.1}%: the job beside's settled pace moved {} times in 16 hours",
            100.0 * noise,
            moved_for.len()
        );
        assert!(moved_for.len() <= 4, "spread {noise}: {moved_for:?}");
    }
}

#[test]
fn what_a_level_costs_the_job_beside_is_kept_from_it_by_its_own_cycles() {
    // The job beside loses `cost` of its pace from `three_quarters` up; the job followed feels
    // nothing. Eight runs of 30 minutes a case, told the job beside's pace and not: what it
    // lost over the runs (the share of the time at those levels times the cost).
    fn beside_lost(cost: fn(Level) -> f64, noise: f64, tell_others: bool) -> f64 {
        let mut lost = 0.0;
        for seed in 0..8 {
            let mut followed = Job::new(100.0, |_| 0.0, noise);
            followed.rng = SplitMix64::new(seed);
            let mut beside = Job::new(50.0, cost, noise);
            (beside.name, beside.rng) = ("beside", SplitMix64::new(100 + seed));
            let mut harvest = Harvest::new(settings());
            let run = run_beside(
                &mut harvest,
                (&mut followed, &mut beside),
                0,
                1800,
                tell_others,
            );
            let after: Vec<Level> = run.levels.iter().map(|&(_, level)| level).collect();
            let paid: f64 = after.iter().map(|&level| cost(level)).sum();
            lost += paid / after.len() as f64 / 8.0;
        }
        lost
    }
    type Cost = fn(Level) -> f64;
    let costs: [(f64, Cost); 3] = [
        (0.03, |level| from_three_quarters(level, 0.03)),
        (0.05, |level| from_three_quarters(level, 0.05)),
        (0.10, |level| from_three_quarters(level, 0.10)),
    ];
    // Spreads of 1% and 4.5% a second (the VM's training simulator's cycles: about 2.6%).
    for (cost, cost_of) in costs {
        for noise in [0.01, 0.045] {
            let (told, blind) = (
                beside_lost(cost_of, noise, true),
                beside_lost(cost_of, noise, false),
            );
            println!(
                "beside losing {:.0}% at a spread of {:.1}%: it lost {:.2}% told, {:.2}% not",
                100.0 * cost,
                100.0 * noise,
                100.0 * told,
                100.0 * blind
            );
            assert!(told < blind, "{told} against {blind}");
            if cost >= 0.05 {
                assert!(told < 0.01, "{told}");
            }
        }
    }
}

#[test]
fn without_a_signal_the_policy_level_stands_and_a_lost_one_returns_to_it() {
    let mut harvest = Harvest::new(settings());
    assert_eq!(harvest.tick(0, None, &[]), None);
    assert_eq!(harvest.level(), Level::Policy);
    // A signal: the first probe waits for the job's first WARMUP_NS.
    assert_eq!(
        harvest.tick(S, Some((PaceSource::Progress, "job")), &[]),
        None
    );
    assert_eq!(
        harvest.tick(S + WARMUP_NS - 1, Some((PaceSource::Progress, "job")), &[]),
        None
    );
    assert_eq!(harvest.level(), Level::Policy);
    let change = harvest
        .tick(S + WARMUP_NS, Some((PaceSource::Progress, "job")), &[])
        .unwrap();
    assert_eq!(
        (change.level, change.why),
        (Level::TrainingCores, Why::Trial { reference: None })
    );
    // Lost (the job went silent): back to the policy's level at once.
    let change = harvest.tick(2 * S + WARMUP_NS, None, &[]).unwrap();
    assert_eq!((change.level, change.why), (Level::Policy, Why::NoSignal));
    assert_eq!(harvest.reference(), None);
}

/// `seconds` without a signal from `start_s`, ticks of 100 ms: the changes.
fn silence(harvest: &mut Harvest, start_s: u64, seconds: u64) -> Vec<(u64, Change)> {
    ((start_s * S / TICK)..((start_s + seconds) * S / TICK))
        .filter_map(|tick| Some((tick * TICK, harvest.tick(tick * TICK, None, &[])?)))
        .collect()
}

#[test]
fn a_pause_of_the_job_followed_keeps_what_was_measured_and_compares_its_level_again() {
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    let reference = harvest.reference();
    assert!(reference.is_some());
    // A checkpoint: 30 s without a report. The policy's level at once, as before.
    let silent = silence(&mut harvest, 100, 30);
    assert_eq!(silent.len(), 1, "{silent:?}");
    assert_eq!(
        (silent[0].1.level, &silent[0].1.why),
        (Level::Policy, &Why::NoSignal)
    );
    assert_eq!(harvest.job(), None);
    // The daemon keeps the signal for the job while it waits for it, up to PAUSE_KEPT_NS.
    assert_eq!(
        harvest.paused_job(129 * S),
        Some((PaceSource::Progress, "job", 29 * S))
    );
    assert_eq!(harvest.paused_job(100 * S + PAUSE_KEPT_NS), None);
    assert_eq!(harvest.reference(), reference);
    // The job reports again: after its warm-up, the level it was settled at is compared
    // again, on a recheck's terms, not searched for from the top.
    let back = run(&mut harvest, &mut job, &mut reports, 130, 60);
    let (at, first) = &back.changes[0];
    assert_eq!(*at, 130 * S + WARMUP_NS, "{:?}", back.changes);
    assert_eq!(first.level, Level::TrainingCores);
    assert!(
        matches!(first.why, Why::Resumed { paused_s } if (29.9..=30.1).contains(&paused_s)),
        "{first:?}"
    );
    assert_eq!(harvest.paused_job(135 * S), None);
    // Kept where it was, without a search: no level below it compared.
    assert_eq!(back.settled_level(), Some(Level::TrainingCores));
    assert!(
        back.changes
            .iter()
            .all(|(_, c)| matches!(c.level, Level::TrainingCores | Level::Held)),
        "{:?}",
        back.changes
    );
}

#[test]
fn a_pause_broken_by_a_few_reports_goes_on_until_the_job_reports_for_its_warm_up() {
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    silence(&mut harvest, 100, 30);
    // Three seconds of reports (the job's warm-up is 10 s), then silent again: still paused.
    let brief = run(&mut harvest, &mut job, &mut reports, 130, 3);
    assert!(brief.changes.is_empty(), "{:?}", brief.changes);
    assert!(silence(&mut harvest, 133, 20).is_empty());
    assert_eq!(
        harvest.paused_job(150 * S),
        Some((PaceSource::Progress, "job", 50 * S))
    );
    let back = run(&mut harvest, &mut job, &mut reports, 153, 20);
    let (at, first) = &back.changes[0];
    assert_eq!(*at, 153 * S + WARMUP_NS, "{:?}", back.changes);
    assert!(matches!(first.why, Why::Resumed { .. }), "{first:?}");
}

#[test]
fn a_silence_too_long_for_a_pause_a_new_run_or_another_job_starts_the_search_afresh() {
    let first_comparison = |harvest: &mut Harvest, job: &mut Job, reports: &mut Vec<Report>| {
        let back = run(harvest, job, reports, 1000, 20);
        back.changes[0].1.clone()
    };
    let afresh = Change {
        level: Level::TrainingCores,
        settles: false,
        why: Why::Trial { reference: None },
    };
    // Silent for longer than a pause.
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    silence(&mut harvest, 100, 900);
    assert_eq!(harvest.paused_job(999 * S), None);
    let change = first_comparison(&mut harvest, &mut job, &mut reports);
    assert_eq!(change, afresh);
    // A new run of the job: its count starts again.
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    silence(&mut harvest, 100, 30);
    (job.steps, job.next_report_ns) = (0.0, 0);
    reports.clear();
    assert_eq!(
        first_comparison(&mut harvest, &mut job, &mut reports),
        afresh
    );
    // Another job reports where the one followed went silent.
    let (mut harvest, mut job, mut reports) = settled_at_the_top();
    silence(&mut harvest, 100, 30);
    job.name = "other";
    assert_eq!(
        first_comparison(&mut harvest, &mut job, &mut reports),
        afresh
    );
}

#[test]
fn a_level_pauses_or_narrows_the_offline_pools_only() {
    let allocation = Allocation {
        training: [0, 1].into(),
        pools: [
            ("web".to_owned(), [2].into()),
            ("batch".to_owned(), (3..16).collect()),
        ]
        .into(),
        offline_paused: false,
    };
    let offline = ["batch".to_owned()];
    let held = shape(Level::Held, allocation.clone(), &offline);
    assert!(held.offline_paused);
    assert_eq!(held.pools, allocation.pools);
    // A quarter of 13 CPUs: 4 (rounded up), the highest, farthest from training.
    let quarter = shape(Level::Quarter, allocation.clone(), &offline);
    assert_eq!(quarter.pools["batch"], [12, 13, 14, 15].into());
    assert_eq!(quarter.pools["web"], [2].into());
    assert_eq!(quarter.training, allocation.training);
    assert!(!quarter.offline_paused);
    // A share of one CPU keeps it.
    let mut one = allocation.clone();
    one.pools.insert("batch".to_owned(), [15].into());
    assert_eq!(
        shape(Level::Quarter, one, &offline).pools["batch"],
        [15].into()
    );
    for level in [Level::Policy, Level::TrainingCores] {
        assert_eq!(shape(level, allocation.clone(), &offline), allocation);
    }
}

#[test]
fn the_paired_interval_widens_with_the_noise_and_a_half_needs_two_reports() {
    let steady = paired_interval(&[1.0, 1.0, 1.0]).unwrap();
    assert_eq!((steady.low, steady.ratio, steady.high), (1.0, 1.0, 1.0));
    let noisy = paired_interval(&[0.98, 1.02, 0.99, 1.01]).unwrap();
    assert!((noisy.ratio - 1.0).abs() < 1e-12);
    // t with 3 degrees of freedom (3.18) times the standard error (0.91%).
    assert!((noisy.high - 1.029).abs() < 0.001, "{noisy:?}");
    assert_eq!(paired_interval(&[1.0]), None);
    let reports: Vec<Report> = (0..=4).map(|s| Report::count(s * S, s * 100)).collect();
    assert_eq!(pace_between(&reports, 0, S, 3 * S), Some(100.0));
    assert_eq!(pace_between(&reports, 0, S / 2, S + S / 2), None);
    // A job reporting every 4 s is measured over two of its periods.
    let slow: Vec<Report> = (0..5).map(|s| Report::count(s * 4 * S, s * 400)).collect();
    assert_eq!(measure_ns(&slow), 8 * S);
    assert_eq!(measure_ns(&reports), MIN_MEASURE_NS);
}

#[test]
fn a_half_is_read_from_the_means_that_lie_within_its_own_time_and_else_from_its_counts() {
    // Ten steps a second in bursts: the counts at the reports fall ahead of the trend or
    // behind it, the means over the second before each lie on it.
    let bursts = [12, 20, 34, 40];
    let reports: Vec<Report> = (1..=4u64)
        .map(|s| Report {
            at_ns: s * S,
            steps: bursts[s as usize - 1],
            mean: Some(pace::Mean {
                from_ns: (s - 1) * S,
                steps: 10.0 * s as f64 - 5.0,
            }),
        })
        .collect();
    let from_counts = 28.0 / 3.0;
    assert_eq!(pace_between(&reports, 0, S, 4 * S), Some(10.0));
    // The first report's mean began before the half: the others' still give the slope.
    assert_eq!(pace_between(&reports, S / 2, S, 4 * S), Some(10.0));
    // One mean within the half is no slope: the counts decide.
    assert_eq!(pace_between(&reports, 3 * S, S, 4 * S), Some(from_counts));
    let counts: Vec<Report> = reports
        .iter()
        .map(|r| Report { mean: None, ..*r })
        .collect();
    assert_eq!(pace_between(&counts, 0, S, 4 * S), Some(from_counts));
}

/// The GPU server's ResNet-50 job as its reported steps showed it: a comparison's cycles
/// spread by 9 to 20% (the ratio of two halves) with halves of about 2 s. Uniform ±30% a
/// second gives about 17% for the ratio of two 2 s halves.
const LOADER_BOUND_NOISE: f64 = 0.3;

/// The loop over `seconds` of a job that nothing costs, at the server's reported-steps noise
/// (`LOADER_BOUND_NOISE`), its noise drawn from `seed`.
fn free_job_at_the_servers_noise(seed: u64, seconds: u64) -> Run {
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(100.0, |_| 0.0, LOADER_BOUND_NOISE);
    job.rng = SplitMix64::new(seed);
    run(&mut harvest, &mut job, &mut Vec::new(), 0, seconds)
}

/// Each comparison judged in `run`: its verdict, the level it judged and its cycles (held
/// halves). A new phase starts the count again.
fn judgments(run: &Run) -> Vec<(&Why, Level, usize)> {
    let mut judged = Vec::new();
    let mut probes = 0;
    for (_, change) in &run.changes {
        match &change.why {
            Why::Probe => probes += 1,
            why @ (Why::Kept { tried, .. }
            | Why::TooCostly { tried, .. }
            | Why::NotShownFree { tried, .. }
            | Why::TooNoisy { tried, .. }) => {
                judged.push((why, *tried, probes));
                probes = 0;
            }
            Why::PhaseChange { .. } => probes = 0,
            // Its held half is not one of the comparison's cycles.
            Why::SetAside { .. } => probes -= 1,
            _ => {}
        }
    }
    judged
}

/// Each comparison judged in `run`: its level and its cycles.
fn judged_cycles(run: &Run) -> Vec<(Level, usize)> {
    judgments(run)
        .into_iter()
        .map(|(_, level, cycles)| (level, cycles))
        .collect()
}

#[test]
fn reports_a_step_late_lose_no_cycle() {
    // Reports 1 to 1.6 s apart, as a job reporting after the first step past each second
    // sends them where some steps wait 0.6 s for their batch. Every cycle counts: the first
    // interval comes with the third cycle's end.
    for seed in 1..=10 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, |_| 0.0, 0.01);
        job.rng = SplitMix64::new(seed);
        job.report_gap_s = (1.0, 1.6);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 120);
        let probes_to_first_interval = run
            .changes
            .iter()
            .take_while(|(_, c)| matches!(c.why, Why::Probe | Why::Trial { .. }))
            .filter(|(_, c)| c.why == Why::Probe)
            .count();
        assert_eq!(
            probes_to_first_interval, MIN_CYCLES,
            "seed {seed}: {:?}",
            run.changes
        );
    }
}

#[test]
fn a_pace_too_noisy_to_judge_one_percent_settles_at_the_policys_level_soon() {
    // Nothing costs training, and the cycles spread by about 17%: no level can be shown free,
    // and no mean says anything of 1%. The search passes over the levels above the policy's
    // after one comparison of three cycles, and keeps the policy's. It goes above it only on
    // an interval that clears 1 − ε and below it only on one below 1 − ε, never on a mean the
    // noise put there, and holds offline back little once settled.
    let floor = 1.0 - settings().epsilon;
    let (mut above, mut below, mut held, mut seeds) = (0.0, 0.0, 0.0, 0.0);
    for seed in 1..=20 {
        let run = free_job_at_the_servers_noise(seed, 600);
        let judged = judged_cycles(&run);
        assert_eq!(
            judged.first(),
            Some(&(Level::TrainingCores, MIN_CYCLES)),
            "seed {seed}: {:?}",
            run.changes
        );
        let settled = run.first_settled_at().expect("settled");
        // 10 s of warm-up, three cycles of 6 s at the top, three to six at the policy's.
        assert!(
            settled <= 70 * S,
            "seed {seed}: settled at {} s",
            settled / S
        );
        let mut first_search = run.changes.iter().take_while(|(_, c)| !c.settles);
        assert!(
            !first_search.any(|(_, c)| c.level == Level::Unpaused),
            "seed {seed}: {:?}",
            run.changes
        );
        for (_, change) in &run.changes {
            match change.why {
                Why::TooCostly { ratio, .. } => {
                    assert!(
                        ratio.high < floor,
                        "seed {seed}: left on its mean: {change:?}"
                    );
                }
                Why::Kept { tried, ratio } if tried > Level::Policy => {
                    assert!(
                        ratio.low >= floor,
                        "seed {seed}: kept on its mean: {change:?}"
                    );
                }
                _ => {}
            }
        }
        above += [Level::Unpaused, Level::TrainingCores]
            .iter()
            .map(|&l| run.share_at(70, l))
            .sum::<f64>();
        below += [Level::Quarter, Level::Half, Level::ThreeQuarters]
            .iter()
            .map(|&l| run.share_at(70, l))
            .sum::<f64>();
        held += run.share_at(70, Level::Held);
        seeds += 1.0;
    }
    // An interval below 1 − ε by chance, looked at from the third cycle to the sixth, still
    // takes a few comparisons down a level.
    assert!(
        above / seeds < 0.1,
        "{:.3} of the time above",
        above / seeds
    );
    assert!(
        below / seeds < 0.1,
        "{:.3} of the time below",
        below / seeds
    );
    assert!(
        held / seeds < 0.15,
        "{:.3} of the time held back",
        held / seeds
    );
}

#[test]
fn a_cost_larger_than_the_noise_is_still_found_through_it() {
    // The same noise, and the policy's level and those above cost training 40%: the interval
    // lies below 1 − ε by the sixth cycle, and the loop comes down below the policy's level.
    let cost = |l: Level| if l >= Level::Policy { 0.4 } else { 0.0 };
    let mut below = 0;
    for seed in 1..=10 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, cost, LOADER_BOUND_NOISE);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 300);
        if run.settled_level().is_some_and(|l| l < Level::Policy) {
            below += 1;
        }
    }
    assert!(below >= 8, "{below} of 10 came below the policy's level");
}

#[test]
fn a_level_kept_above_the_policys_is_left_at_its_recheck_once_the_pace_is_too_noisy() {
    // The top kept on a quiet pace; then the pace turns as noisy as the server's job. The
    // recheck cannot keep the top on its mean, and its cycles could not show it free: it is
    // left at the third, not the sixth, and the search passes over `unpaused`. (At the fourth
    // where a first noisy held half lay so far below the quiet ones that it was set aside as a
    // stop, `held_halves`: the quiet halves set the bar until the new ones replace them.)
    for seed in 1..=5 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, |_| 0.0, 0.01);
        job.rng = SplitMix64::new(seed);
        let mut reports = Vec::new();
        let quiet = run(&mut harvest, &mut job, &mut reports, 0, 60);
        assert_eq!(quiet.settled_level(), Some(Level::TrainingCores));
        job.noise = LOADER_BOUND_NOISE;
        let noisy = run(&mut harvest, &mut job, &mut reports, 60, 120);
        let set_aside = noisy
            .changes
            .iter()
            .any(|(_, c)| matches!(c.why, Why::SetAside { .. }));
        let (level, cycles) = judged_cycles(&noisy)[0];
        assert!(
            level == Level::TrainingCores
                && (cycles == MIN_CYCLES || set_aside && cycles == MIN_CYCLES + 1),
            "seed {seed}: {:?}",
            noisy.changes
        );
        assert!(
            !noisy
                .changes
                .iter()
                .any(|(_, c)| c.level == Level::Unpaused),
            "seed {seed}: {:?}",
            noisy.changes
        );
    }
}

#[test]
fn what_the_loop_held_offline_back_is_counted_tick_by_tick() {
    // Every tick the loop spent at `held` counts its 100 ms; the running time is from the
    // first tick to the last.
    let mut harvest = Harvest::new(settings());
    let mut job = Job::new(100.0, |_| 0.0, 0.01);
    let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 300);
    let held_ticks = run
        .levels
        .windows(2)
        .filter(|pair| pair[0].1 == Level::Held)
        .count() as u64;
    let held = harvest.held_back();
    assert!(held_ticks > 0);
    assert_eq!(held.held_ns, held_ticks * TICK);
    assert_eq!(held.running_ns, 300 * S - TICK);
}
#[test]
fn a_pace_too_noisy_for_its_mean_ends_a_comparison_that_could_hardly_show_a_cost() {
    // Nothing costs training, and the cycles spread by about 17%: at the policy's level a
    // comparison whose mean reads below 1 − ε by chance stops at the third cycle where the
    // cycles left could hardly take its interval below it, and the level stays.
    let mut longer = 0;
    for seed in 1..=20 {
        let run = free_job_at_the_servers_noise(seed, 600);
        longer += judged_cycles(&run)
            .iter()
            .filter(|&&(level, cycles)| level == Level::Policy && cycles > MIN_CYCLES)
            .count();
    }
    assert!(
        longer <= 15,
        "{longer} of the policy's comparisons ran past the third cycle"
    );
}

#[test]
fn a_pace_too_noisy_for_its_mean_leaves_the_policys_level_only_after_max_cycles() {
    // The interval is looked at once, at the sixth cycle, where only it can move a level
    // down: every earlier look is another chance for the noise. Whether the mean is too
    // noisy is the job's spread over its last comparisons: a comparison whose few cycles
    // happen to spread little is not judged on its mean for that.
    let mut early = 0;
    for seed in 1..=40 {
        let run = free_job_at_the_servers_noise(seed, 600);
        for (why, level, cycles) in judgments(&run) {
            if level <= Level::Policy && matches!(why, Why::TooCostly { .. }) && cycles < MAX_CYCLES
            {
                early += 1;
                eprintln!("seed {seed}: {why:?} after {cycles} cycles");
            }
        }
    }
    assert_eq!(early, 0, "left before the sixth cycle");
}

#[test]
fn a_pace_too_noisy_for_its_mean_returns_to_the_policys_level_once_its_ceiling_is_old() {
    // The policy's level costs 40% for a while: the loop comes down below it. Then it costs
    // nothing, and the noisy cycles can never show it free: the loop goes back up to it once
    // the ceiling is older than `CEILING_NS`, as a job without a signal would be there.
    let (mut down, mut back) = (0, 0);
    for seed in 1..=10 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(
            100.0,
            |l| if l >= Level::Policy { 0.4 } else { 0.0 },
            LOADER_BOUND_NOISE,
        );
        job.rng = SplitMix64::new(seed);
        let mut reports = Vec::new();
        let costly = run(&mut harvest, &mut job, &mut reports, 0, 300);
        if costly.settled_level().is_none_or(|l| l >= Level::Policy) {
            continue;
        }
        down += 1;
        job.cost = |_| 0.0;
        let after = run(&mut harvest, &mut job, &mut reports, 300, 900);
        if after.settled_level() == Some(Level::Policy) {
            back += 1;
        }
    }
    assert!(down >= 8, "{down} of 10 came below the policy's level");
    assert!(
        back >= down - 1,
        "{back} of the {down} below the policy's level returned to it"
    );
}

#[test]
fn a_pace_too_noisy_for_its_mean_seldom_leaves_the_policys_level_of_a_job_it_costs_nothing() {
    // The server's reported-steps noise, nothing costing, 100 runs of 30 minutes: the share of
    // the policy's comparisons that left it, and of the time below it and held back after the
    // first 70 s. What the docs quote; `--nocapture` prints it.
    let (mut compared, mut left, mut below, mut held) = (0, 0, 0.0, 0.0);
    let runs = 100;
    for seed in 1..=runs {
        let run = free_job_at_the_servers_noise(seed, 1800);
        for (why, level, _) in judgments(&run) {
            if level == Level::Policy {
                compared += 1;
                left += usize::from(matches!(why, Why::TooCostly { .. }));
            }
        }
        below += [Level::Quarter, Level::Half, Level::ThreeQuarters]
            .iter()
            .map(|&l| run.share_at(70, l))
            .sum::<f64>();
        held += run.share_at(70, Level::Held);
    }
    let (left_share, below, held) = (
        left as f64 / compared as f64,
        below / runs as f64,
        held / runs as f64,
    );
    eprintln!(
        "{left} of {compared} comparisons at the policy's level left it ({:.1}%); below it \
         {:.1}% of the time, held back {:.1}%",
        left_share * 100.0,
        below * 100.0,
        held * 100.0
    );
    assert!(left_share < 0.03, "{left_share:.3} of comparisons left it");
    assert!(below < 0.06, "{below:.3} of the time below it");
    assert!(held < 0.06, "{held:.3} of the time held back");
}

/// Over 20 runs of 30 minutes of a model of the VM's job (its noise, and a drift of 2%), every
/// level above `held` costing it the same (as `enforcer replay-pace --cost` slows a
/// recording): the mean share of the time at `held`, and at `policy` or above, and each
/// comparison's level and cycles.
fn shares_over_vm_runs(cost: fn(Level) -> f64) -> VmRuns {
    let (mut held, mut at_or_above, mut cycles) = (0.0, 0.0, Vec::new());
    for seed in 1..=20 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, cost, VM_NOISE);
        job.drift = 0.02;
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 1800);
        held += run.share_at(0, Level::Held) / 20.0;
        at_or_above += [Level::Policy, Level::Unpaused, Level::TrainingCores]
            .iter()
            .map(|&l| run.share_at(0, l))
            .sum::<f64>()
            / 20.0;
        cycles.extend(judged_cycles(&run));
    }
    VmRuns {
        held,
        at_or_above,
        cycles,
    }
}

/// What `shares_over_vm_runs` found.
struct VmRuns {
    held: f64,
    at_or_above: f64,
    cycles: Vec<(Level, usize)>,
}

#[test]
fn a_mean_at_the_floor_runs_more_cycles_and_half_of_epsilon_keeps_the_policys_level() {
    // Every level above `held` costing 0, 0.5, 1, 2 and 3%; the figures printed for each
    // (`-- --nocapture`).
    type Cost = fn(Level) -> f64;
    let costs: [(f64, Cost); 5] = [
        (0.0, |_| 0.0),
        (0.005, |l| if l > Level::Held { 0.005 } else { 0.0 }),
        (0.01, |l| if l > Level::Held { 0.01 } else { 0.0 }),
        (0.02, |l| if l > Level::Held { 0.02 } else { 0.0 }),
        (0.03, |l| if l > Level::Held { 0.03 } else { 0.0 }),
    ];
    let runs: Vec<VmRuns> = costs
        .iter()
        .map(|&(size, cost)| {
            let runs = shares_over_vm_runs(cost);
            println!(
                "cost {:.1}%: held {:.1}% of the time, at `policy` or above {:.1}%",
                size * 100.0,
                runs.held * 100.0,
                runs.at_or_above * 100.0
            );
            runs
        })
        .collect();
    // Half of ε: a mean within a standard error of 1 − ε decided at six cycles left the
    // policy's level in about one comparison of three: 57% of the time at it or above.
    let VmRuns {
        at_or_above,
        cycles,
        ..
    } = &runs[1];
    assert!(
        *at_or_above > 0.65,
        "{at_or_above:.3} at the policy's level or above"
    );
    let longest = cycles
        .iter()
        .filter(|&&(level, _)| level <= Level::Policy)
        .map(|&(_, n)| n)
        .max()
        .unwrap_or(0);
    assert!(
        longest > MAX_CYCLES && longest <= MAX_CYCLES_NEAR_FLOOR,
        "{cycles:?}"
    );
    // Beyond the policy's level, up to `MAX_CYCLES_ABOVE_POLICY`.
    assert!(
        cycles
            .iter()
            .all(|&(level, n)| level <= Level::Policy || n <= MAX_CYCLES_ABOVE_POLICY),
        "{cycles:?}"
    );
    // Twice ε: offline still held back most of the time, so that training loses within ε on
    // average: 85% held back (0.3% lost) where every level left waited five minutes, 80%
    // (0.4%) once a cheap try waited less (`ceiling`), 60% (0.8%) now that a recheck is
    // judged with the cycles that kept its level (`KeptCycles`): a level kept on a lucky
    // mean is kept for a recheck or two longer. The price of holding offline back 12% of the
    // time rather than 17% where `policy` costs 0.8%, as on the VM (the test below).
    let held = runs[3].held;
    assert!(held > 0.55, "{held:.3} held back");
}

/// Over 10 runs of two hours of a job at the server's reported-steps noise
/// (`LOADER_BOUND_NOISE`) whose levels cost it `cost`: the mean share of the time at `policy`
/// or above, below it, what the levels cost training on average, and how many levels the
/// carried cycles left (an interval over more cycles than one comparison runs).
fn shares_over_noisy_runs(cost: fn(Level) -> f64) -> (f64, f64, f64, usize) {
    let (mut at_or_above, mut below, mut lost, mut carried) = (0.0, 0.0, 0.0, 0);
    for seed in 1..=10 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, cost, LOADER_BOUND_NOISE);
        job.rng = SplitMix64::new(seed);
        let run = run(&mut harvest, &mut job, &mut Vec::new(), 0, 7200);
        carried += run
            .changes
            .iter()
            .filter(|(_, change)| {
                matches!(change.why, Why::TooCostly { ratio, .. }
                    if ratio.cycles > MAX_CYCLES_NEAR_FLOOR)
            })
            .count();
        for level in Level::LADDER {
            let share = run.share_at(0, level) / 10.0;
            lost += share * cost(level);
            match level {
                Level::Held => {}
                _ if level >= Level::Policy => at_or_above += share,
                _ => below += share,
            }
        }
    }
    (at_or_above, below, lost, carried)
}

#[test]
fn a_cost_the_noise_hides_from_one_comparison_shows_over_the_levels_rechecks() {
    // The policy's level and those above cost training 10%, at a noise where one comparison's
    // interval shows only about 15%: the cycles carried over its rechecks show it, and the loop
    // comes below it. Before they were carried, 65% of two hours at `policy` or above, and
    // 6.5% of training's pace lost. Figures printed with `-- --nocapture`.
    let (at_or_above, below, lost, _) =
        shares_over_noisy_runs(|l| if l >= Level::Policy { 0.1 } else { 0.0 });
    println!(
        "policy costing 10%: at `policy` or above {:.1}% of the time, below it {:.1}%, \
         training's pace lost {:.2}%",
        at_or_above * 100.0,
        below * 100.0,
        lost * 100.0
    );
    assert!(at_or_above < 0.5, "{at_or_above:.3} at `policy` or above");
    assert!(lost < 0.05, "{lost:.4} of training's pace lost");
    // Nothing costing: the carried cycles take no level down (in 80 hours of the same runs,
    // with and without a drift of the pace, none did either).
    let (at_or_above, below, _, carried) = shares_over_noisy_runs(|_| 0.0);
    println!(
        "nothing costing: at `policy` or above {:.1}% of the time, below it {:.1}%",
        at_or_above * 100.0,
        below * 100.0
    );
    assert_eq!(carried, 0, "levels left on carried cycles");
    assert!(below < 0.05, "{below:.3} below `policy`");
}

#[test]
fn a_spread_from_few_cycles_is_bounded_widest() {
    // √(f / χ²₀.₁₀(f)) for a sample spread of 1: 3.08 at two degrees of freedom, 1.43 at ten
    // (the table), 1.21 at thirty (Wilson–Hilferty).
    let bound = |freedom| statistics::spread_upper_bound(1.0, freedom);
    assert!((bound(2) - 3.079).abs() < 0.005, "{}", bound(2));
    assert!((bound(10) - 1.434).abs() < 0.005, "{}", bound(10));
    assert!((bound(30) - 1.207).abs() < 0.005, "{}", bound(30));
    let spread = statistics::spread_upper_bound(0.02 * 0.02, 10);
    assert!((spread - 0.02 * 1.434).abs() < 1e-4, "{spread}");
}

/// What the levels cost the training simulator on the VM (docs/benchmarks.md): `policy`
/// 0.8%, the levels under it less, `unpaused` 1.2% and training's cores 3%.
fn vm_frontier(level: Level) -> f64 {
    match level {
        Level::Held => 0.0,
        Level::Quarter => 0.002,
        Level::Half => 0.004,
        Level::ThreeQuarters => 0.006,
        Level::Policy => 0.008,
        Level::Unpaused => 0.012,
        Level::TrainingCores => 0.03,
    }
}

#[test]
fn a_policy_that_costs_close_to_epsilon_is_kept_on_the_cycles_that_kept_it_before() {
    // The VM's frontier (`vm_frontier`). Judged afresh, a recheck of `policy` is a coin's toss
    // that mostly runs on past its third cycle; pooled with the cycles that kept it
    // (`KeptCycles`), it mostly ends there.
    let runs = shares_over_vm_runs(vm_frontier);
    let at_policy: Vec<usize> = runs
        .cycles
        .iter()
        .filter(|&&(level, _)| level == Level::Policy)
        .map(|&(_, n)| n)
        .collect();
    let ended_at_third =
        at_policy.iter().filter(|&&n| n == MIN_CYCLES).count() as f64 / at_policy.len() as f64;
    println!(
        "held {:.1}% of the time, at `policy` or above {:.1}%; {:.0}% of {} comparisons of \
         `policy` ended at their third cycle",
        runs.held * 100.0,
        runs.at_or_above * 100.0,
        ended_at_third * 100.0,
        at_policy.len()
    );
    // Judged afresh: held back 17.0% of the time, at `policy` or above 57.2%, 37% of those
    // comparisons ended at their third cycle. Pooled: 12.4%, 69.2%, 63%.
    assert!(
        ended_at_third > 0.5,
        "{ended_at_third:.3} ended at their third cycle"
    );
    assert!(runs.held < 0.145, "{:.3} held back", runs.held);
    assert!(
        runs.at_or_above > 0.63,
        "{:.3} at `policy` or above",
        runs.at_or_above
    );
}

#[test]
fn a_policy_whose_cost_grows_past_epsilon_is_left_within_minutes() {
    // The VM's frontier for half an hour, then `policy` costing 3%: its rechecks (or the watch
    // between them) must show it, though the cycles that kept it before, at 0.8%, are pooled
    // with theirs (`KeptCycles`). 120 runs, those settled at `policy` when the cost came;
    // printed with `-- --nocapture`.
    let mut left_after = Vec::new();
    for seed in 1..=120 {
        let mut harvest = Harvest::new(settings());
        let mut job = Job::new(100.0, vm_frontier, VM_NOISE);
        job.drift = 0.02;
        job.rng = SplitMix64::new(seed);
        let mut reports = Vec::new();
        let before = run(&mut harvest, &mut job, &mut reports, 0, 1800);
        if before.levels.last().map(|&(_, level)| level) != Some(Level::Policy) {
            continue;
        }
        job.cost = |level| match level {
            Level::Policy => 0.03,
            level => vm_frontier(level),
        };
        let after = run(&mut harvest, &mut job, &mut reports, 1800, 900);
        let left = after
            .changes
            .iter()
            .find(|(_, change)| change.settles && change.level < Level::Policy)
            .map(|(at, _)| at / S - 1800);
        left_after.push(left);
    }
    let mut left: Vec<u64> = left_after.iter().flatten().copied().collect();
    left.sort_unstable();
    let median = left.get(left_after.len() / 2).copied();
    let not_left = left_after.len() - left.len();
    println!(
        "of {} runs at `policy`, left after a median {median:?} s; {not_left} not within 900 s",
        left_after.len()
    );
    // A median 338 s, and 9 of 82 not within 15 minutes: the cycles kept at 0.8% outvote a
    // recheck's three for a recheck or two. Judged afresh, 235 s and 1 of 51, for offline held
    // back 17% of the time on the VM's frontier against 12% (the test above). A recheck ended
    // at its first cycle where that one kept the pace, with the kept cycles behind it, held
    // offline back 9.5% there, and left this cost after 447 s, 18 of 82 not within 15 minutes
    // (docs/experiments/2026-11-29-recheck-variants.md).
    assert!(left_after.len() >= 60, "{left_after:?}");
    assert!(median.is_some_and(|median| median <= 360), "{left:?}");
    assert!(
        not_left * 8 <= left_after.len(),
        "{not_left} not left: {left:?}"
    );
}

#[test]
fn two_jobs_that_pay_nothing_are_above_the_policys_level_as_their_noise_allows() {
    // Nothing costs either job. Eight runs of 30 minutes a case: one job alone; two jobs, both
    // paces told (each must show a level above the policy's free); two jobs, the one beside
    // without a pace (the loop keeps to the policy's level, as it did for any two jobs before
    // each job's pace could show a level free). The time above the policy's level and the time
    // offline was held back, by the spread of the jobs' paces.
    #[derive(Clone, Copy)]
    enum Case {
        Alone,
        Beside { told: bool },
    }
    fn shares(case: Case, noise: f64) -> (f64, f64) {
        let (mut above, mut held) = (0.0, 0.0);
        for seed in 0..8 {
            let mut followed = Job::new(100.0, |_| 0.0, noise);
            followed.rng = SplitMix64::new(seed);
            let mut harvest = Harvest::new(settings());
            let run = match case {
                Case::Alone => run(&mut harvest, &mut followed, &mut Vec::new(), 0, 1800),
                Case::Beside { told } => {
                    let mut beside = Job::new(50.0, |_| 0.0, noise);
                    (beside.name, beside.rng) = ("beside", SplitMix64::new(100 + seed));
                    run_beside(&mut harvest, (&mut followed, &mut beside), 0, 1800, told)
                }
            };
            above +=
                (run.share_at(0, Level::Unpaused) + run.share_at(0, Level::TrainingCores)) / 8.0;
            let held_back = harvest.held_back();
            held += held_back.held_ns as f64 / held_back.running_ns as f64 / 8.0;
        }
        (above, held)
    }
    // Spreads of 1%, 2% and 4.5% a second (the VM's training simulator's).
    for noise in [0.01, 0.02, 0.045] {
        let alone = shares(Case::Alone, noise);
        let told = shares(Case::Beside { told: true }, noise);
        let without = shares(Case::Beside { told: false }, noise);
        for (name, (above, held)) in [
            ("one job", alone),
            ("two jobs", told),
            ("two jobs, one without a pace", without),
        ] {
            println!(
                "spread {:.1}%, {name}: above the policy's level {:.1}% of the time, offline \
                 held back {:.1}%",
                100.0 * noise,
                100.0 * above,
                100.0 * held
            );
        }
        assert_eq!(without.0, 0.0);
        assert!(told.0 > 0.0, "{told:?}");
        // Two quiet jobs show a level free about as often as one.
        if noise <= 0.01 {
            assert!(told.0 >= 0.9 * alone.0, "{told:?} against {alone:?}");
        }
    }
}

/// The training simulator's steps on the VM, as a model: 5.5 ms, its pace wandering by about
/// 2% over a second or so (its cycles then spread by 2 to 3%, as the VM's did), for `seconds`,
/// stopping for `stop_ms` once every 45 to 75 s, at random: a checkpoint, a garbage
/// collection.
fn steps_with_stops(seconds: f64, stop_ms: f64, seed: u64) -> Vec<f64> {
    const WANDER: f64 = 0.02;
    const KEPT_PER_TENTH: f64 = 0.9;
    let mut rng = SplitMix64::new(seed);
    let mut uniform = move || 3f64.sqrt() * (2.0 * rng.next_f64() - 1.0);
    let (mut at_ms, mut next_stop_ms, mut steps) = (0.0, 60e3, Vec::new());
    let (mut pace, mut paced_at_ms) = (1.0, 0.0);
    while at_ms < seconds * 1e3 {
        while paced_at_ms < at_ms {
            let fresh = WANDER * (1.0 - KEPT_PER_TENTH * KEPT_PER_TENTH).sqrt() * uniform();
            pace = 1.0 + KEPT_PER_TENTH * (pace - 1.0) + fresh;
            paced_at_ms += 100.0;
        }
        let mut ms = 5.5 * (1.0 + 0.1 * uniform() / 3f64.sqrt()) / pace;
        if at_ms >= next_stop_ms {
            ms += stop_ms;
            next_stop_ms = at_ms + 60e3 + 15e3 * uniform() / 3f64.sqrt();
        }
        at_ms += ms;
        steps.push(ms);
    }
    steps
}

#[test]
fn a_jobs_own_stops_in_held_halves_do_not_hide_a_cost_of_twice_epsilon() {
    // Two hours of the model, every level above `held` costing it 2%, over five seeds. A stop
    // of 0.7 s in a held half reads the level beside it about a third faster than training
    // alone, and widens the job's pooled spread until a mean too noisy to judge keeps the
    // level. Before such halves were set aside, offline was held back 38% of the time and
    // training lost 1.24% (past ε); with them set aside, 65% and 0.70%; without the stops,
    // 88% and 0.24%. (With the far cycles left out of the pooled spread and level halves
    // matched by held ones too, 82% and 0.37%: the tests below.) Printed with
    // `-- --nocapture`.
    use replay::{Beside, Reporter, StepTrace, replay};
    let mut lost = Vec::new();
    for seed in 1..=5 {
        let job = StepTrace::from_step_ms(&steps_with_stops(1800.0, 700.0, seed)).unwrap();
        let beside = Beside::slowed(job.clone(), 0.02);
        let run = replay(&job, &beside, 7200, settings(), Reporter::WithMeans);
        let set_aside = run
            .changes
            .iter()
            .filter(|c| matches!(c.change.why, Why::SetAside { .. }))
            .count();
        let held = run.time_at_level.get("held").copied().unwrap_or(0.0);
        println!(
            "seed {seed}: held back {:.1}%, {set_aside} set aside",
            held * 100.0
        );
        lost.push(0.02 * (1.0 - held));
    }
    let mean_lost = lost.iter().sum::<f64>() / lost.len() as f64;
    assert!(mean_lost < 0.01, "training lost {:.2}%", mean_lost * 100.0);
}

#[test]
fn a_jobs_own_stops_in_level_halves_do_not_make_its_mean_too_noisy_to_judge() {
    // The model of the VM's job above, every level above `held` costing it 2%. A stop of 0.7 s
    // in a level's half reads its cycle a third low: one among 20 cycles that spread by 2.4%
    // made their pooled spread 8%, a mean too noisy to judge ε by, and the level was kept.
    // With every cycle counted in that spread, 80 comparisons of the five runs were kept as
    // too noisy and training lost 0.69%; with the cycles far from their comparison's median
    // left out of it, 17 and 0.33%; with level halves matched by held ones too (`held_halves`),
    // 13 and 0.37%; without the stops, none and 0.24%. Printed with `-- --nocapture`.
    use replay::{Beside, Reporter, StepTrace, replay};
    let (mut lost, mut too_noisy) = (Vec::new(), 0);
    for seed in 1..=5 {
        let job = StepTrace::from_step_ms(&steps_with_stops(1800.0, 700.0, seed)).unwrap();
        let beside = Beside::slowed(job.clone(), 0.02);
        let run = replay(&job, &beside, 7200, settings(), Reporter::WithMeans);
        too_noisy += run
            .changes
            .iter()
            .filter(|c| matches!(c.change.why, Why::TooNoisy { .. }))
            .count();
        let held = run.time_at_level.get("held").copied().unwrap_or(0.0);
        lost.push(0.02 * (1.0 - held));
    }
    let mean_lost = lost.iter().sum::<f64>() / lost.len() as f64;
    println!(
        "{too_noisy} comparisons kept as too noisy, training lost {:.2}%",
        mean_lost * 100.0
    );
    assert!(too_noisy <= 30, "{too_noisy} comparisons kept as too noisy");
    assert!(mean_lost < 0.005, "training lost {:.2}%", mean_lost * 100.0);
}

#[test]
fn a_level_that_itself_stops_training_has_its_halves_set_aside_no_more_than_held_ones() {
    // The model of the VM's job, which stops only where offline runs: 1.5 s once every 45 to
    // 75 s at every level above `held`, a cost of about 2.5%. A level half that such a stop
    // slowed is set aside only as often as a held half was (the held halves' own noise, now
    // and then): 4 level halves and 4 held ones over five runs of two hours. What it does not
    // hold: that the level is left. Training lost 2.29%, past ε, here and before level halves
    // were set aside: three cycles of a recheck seldom see a stop once a minute, and each
    // comparison that does leaves the level for one below it that costs the same
    // (docs/experiments/2026-12-07-far-cycles.md). With the stops counted over hours (`stops`),
    // 2.12%: two hours are too few for the held time to bound the job's own stops
    // (`a_level_that_makes_training_stop_now_and_then`, over eight). Printed with `--
    // --nocapture`.
    use replay::{Beside, Reporter, StepTrace, replay};
    let (mut lost, mut held_halves, mut level_halves) = (Vec::new(), 0, 0);
    for seed in 1..=5 {
        let steps = steps_with_stops(1800.0, 0.0, seed);
        let stopping = steps_with_stops(1800.0, 1500.0, seed);
        // Both run 1800 s: the stops cost training the steps they take.
        let cost = 1.0 - stopping.len() as f64 / steps.len() as f64;
        let job = StepTrace::from_step_ms(&steps).unwrap();
        let beside = Beside::everywhere(StepTrace::from_step_ms(&stopping).unwrap());
        let run = replay(&job, &beside, 7200, settings(), Reporter::WithMeans);
        for change in &run.changes {
            match change.change.why {
                Why::SetAside {
                    half: Half::Held, ..
                } => held_halves += 1,
                Why::SetAside {
                    half: Half::Level, ..
                } => level_halves += 1,
                _ => {}
            }
        }
        let held = run.time_at_level.get("held").copied().unwrap_or(0.0);
        lost.push(cost * (1.0 - held));
        println!(
            "seed {seed}: the stops cost {:.2}%, held back {:.1}%",
            cost * 100.0,
            held * 100.0
        );
    }
    let mean_lost = lost.iter().sum::<f64>() / lost.len() as f64;
    println!(
        "{held_halves} held and {level_halves} level halves set aside, training lost {:.2}%",
        mean_lost * 100.0
    );
    assert!(
        level_halves <= held_halves,
        "{level_halves} > {held_halves}"
    );
}

/// Over `hours` of the model of the VM's job (`steps_with_stops`) stopping for `level_stop_ms`
/// once a minute at the levels `stopping` says and for `own_stop_ms` at every level, `held`
/// included, five seeds: the mean share of training's time lost to the levels' stops, the
/// mean share held back, and the levels left for their stops.
fn over_hours_of_stops(
    hours: u64,
    level_stop_ms: f64,
    stopping: fn(Level) -> bool,
    own_stop_ms: f64,
) -> (f64, f64, usize) {
    use replay::{Beside, Reporter, StepTrace, replay};
    let (mut lost, mut held_back, mut left) = (0.0, 0.0, 0);
    for seed in 1..=5 {
        let own = steps_with_stops(1800.0, own_stop_ms, seed);
        let both = steps_with_stops(1800.0, own_stop_ms + level_stop_ms, seed);
        let cost = 1.0 - both.len() as f64 / own.len() as f64;
        let job = StepTrace::from_step_ms(&own).unwrap();
        let both = StepTrace::from_step_ms(&both).unwrap();
        let beside = Level::LADDER[1..]
            .iter()
            .filter(|&&level| stopping(level))
            .fold(Beside::everywhere(job.clone()), |beside, &level| {
                beside.with_level_trace(level, both.clone())
            });
        let run = replay(&job, &beside, hours * 3600, settings(), Reporter::WithMeans);
        let at = |level: Level| run.time_at_level.get(level.name()).copied().unwrap_or(0.0);
        lost += cost
            * Level::LADDER
                .iter()
                .filter(|&&l| stopping(l))
                .map(|&l| at(l))
                .sum::<f64>();
        held_back += at(Level::Held);
        left += run
            .changes
            .iter()
            .filter(|change| matches!(change.change.why, Why::Stops { .. }))
            .count();
    }
    (lost / 5.0, held_back / 5.0, left)
}

#[test]
fn a_level_that_makes_training_stop_now_and_then_is_left_once_its_stops_are_counted() {
    // 1.5 s once a minute, about 2.5% of training's time, at every level above `held`, or
    // only at those above the policy's. Comparisons alone seldom see such stops: over eight
    // hours, training lost 2.29% and 1.53% of its time to them before the loop counted stops;
    // where it does, 1.42% and 0.72% (docs/experiments/2026-12-07-stops-over-hours.md). Printed
    // with `-- --nocapture`.
    let every: fn(Level) -> bool = |level| level > Level::Held;
    let above_policy: fn(Level) -> bool = |level| level > Level::Policy;
    for (name, stopping, bound) in [
        ("every level", every, 0.02),
        ("above the policy's", above_policy, 0.01),
    ] {
        let (lost, held_back, left) = over_hours_of_stops(8, 1500.0, stopping, 0.0);
        println!(
            "{name}: training lost {:.2}%, held back {:.1}%, {left} levels left for stops",
            lost * 100.0,
            held_back * 100.0
        );
        assert!(lost < bound, "{name}: {lost}");
    }
}

#[test]
fn a_jobs_own_stops_are_not_taken_for_a_levels() {
    // The job stops once a minute whatever offline does, for 0.7, 1.5 or 3 s, and no level
    // costs it anything: offline held back 9.7%, 8.2% and 8.8% of the time before the loop
    // counted stops, 9.7%, 7.6% and 8.4% after.
    for own_ms in [700.0, 1500.0, 3000.0] {
        let (_, held_back, left) = over_hours_of_stops(8, 0.0, |_| false, own_ms);
        println!(
            "own stops of {own_ms} ms: held back {:.1}%, {left} left",
            held_back * 100.0
        );
        assert_eq!(left, 0);
        assert!(held_back < 0.12, "{own_ms} ms: {held_back}");
    }
}
