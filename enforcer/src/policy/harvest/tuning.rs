//! The pace controller's timings and thresholds, each with what it was measured or chosen
//! against: how long a half settles and measures, how many cycles judge a level, how far a
//! pace must move to be a new phase, and how long a settled level waits for its recheck.

/// A job's first comparison waits until it has reported a pace this long: its first seconds
/// (imports, a data loader's start, autotuning) are not its pace. Measured on the VM: a probe
/// in the training simulator's first 5 s read 174 steps/s against 179 alone.
pub(crate) const WARMUP_NS: u64 = 10_000_000_000;
/// Each half of a cycle settles this long before it measures: offline's threads leave the
/// CPUs (or come back) and the caches refill.
pub(crate) const SETTLE_NS: u64 = 1_000_000_000;
/// A half measures over `REPORTS_PER_HALF` of the job's report periods, at least this: two
/// periods of a job reporting once a second. Longer halves would not narrow the VM's cycles:
/// the training simulator alone, its pace over one stretch against the next, spread by 1.9%
/// for 1 s stretches and by 1.5% for 2, 4 and 8 s
/// (docs/experiments/2026-11-27-noisy-pace-pooled.md).
pub(crate) const MIN_MEASURE_NS: u64 = 2_000_000_000;
/// The most a half measures: a job reporting every 5 s or less often gets 10 s halves.
pub(crate) const MAX_MEASURE_NS: u64 = 10_000_000_000;
/// Report periods in a half's measurement: two give it two or three reports.
pub(super) const REPORTS_PER_HALF: u64 = 2;
/// Cycles before the interval may judge a level: fewer give no useful interval.
pub(crate) const MIN_CYCLES: usize = 3;
/// Cycles after which the mean judges a level the interval could not.
pub(crate) const MAX_CYCLES: usize = 6;
/// Above the core policy's level, a comparison whose cycles could still show the level free
/// (`could_show_free_by`) runs on past `MAX_CYCLES`, up to this many cycles: where sharing
/// training's cores costs a little less than ε, six cycles cannot show it. Replayed over the
/// VM job's recorded steps (2 hours, the levels above the policy's costing half of ε, the
/// others nothing), the controller spent 77% of the time above the policy's level against
/// 57% at six cycles, and 42% against 21% at three quarters of ε, offline held back 7–8% of
/// the time against 6–7%; at 1.5 and 2 times ε as seldom above it (2%). A job as noisy as the
/// GPU server's is judged as before (docs/experiments/2026-11-28-longer-proof-above-policy.md).
/// 48 cycles gained little more.
pub(crate) const MAX_CYCLES_ABOVE_POLICY: usize = 24;
/// At the policy's level and below, a comparison whose mean lies within one of its standard
/// errors of `1 − ε` after `MAX_CYCLES` runs on, up to this many cycles, before its mean
/// decides: there the verdict is a coin's toss, and a level that costs training half of ε
/// was left in about one comparison of three. On a model of the VM's job (20 runs of 30
/// minutes, every level above `held` costing the same), the time at `policy` or above rose
/// from 57% to 72% at a cost of 0.5%, and from 22% to 37% at 1%, while a cost of 2% kept
/// offline held back as much (82% to 86%); over the VM job's recorded steps
/// (`enforcer replay-pace --cost 0.005`), from 47% to 91%
/// (docs/experiments/2026-11-28-replay-cost-vm.md).
pub(crate) const MAX_CYCLES_NEAR_FLOOR: usize = 12;
/// Above the core policy's level, a comparison ends before `MAX_CYCLES_ABOVE_POLICY` where the
/// cycles left would need a mean this many of their standard errors above the mean so far to
/// show the level free: a chance under 5% (one-sided normal). On the VM, where each cycle's
/// ratio spread by 2.2 to 2.6%, every such level ran six cycles, the most it then had, and none
/// was shown free.
pub(super) const FUTILITY_Z: f64 = 1.645;
/// At the policy's level and below, the mean of a comparison's cycles decides only where its
/// standard error at `MAX_CYCLES` cycles is at most this many ε (`mean_too_noisy`); noisier,
/// the level is kept unless its interval lies below `1 − ε`.
pub(super) const MEAN_NOISE_LIMIT: f64 = 2.0;
/// Comparisons judged before the current one whose cycles' spread says with it how noisy the
/// job's pace is (`PooledSpread`): with the current one, about 20 cycles at three to six each.
pub(super) const POOLED_COMPARISONS: usize = 4;
/// A silence of the job followed shorter than this, its processes running, is a pause: what
/// the loop measured of the job is kept for its return (`pause`). A checkpoint or an
/// evaluation takes seconds to minutes (ResNet-50's ImageNet validation, 50,000 images, about
/// 20 s at the GPU server's 1,091 training images a second, and more at its loader's pace); a
/// job silent for ten minutes has more likely ended or been replaced.
pub(crate) const PAUSE_KEPT_NS: u64 = 600_000_000_000;
/// Settled, the level is compared again after this long the first time.
pub(crate) const RECHECK_NS: u64 = 60_000_000_000;
/// Each recheck that settles the loop at the same level doubles the wait before the next, up
/// to this: a settled level's held halves take about 11% of offline's time at one recheck a
/// minute, more than offline can give up to stay within 10% of the best static level's work,
/// and about 3.5% at one in four minutes.
pub(crate) const RECHECK_MAX_NS: u64 = 240_000_000_000;
/// A held pace this far from the last comparison's (relative), in two cycles in a row, is a
/// new phase of the job.
pub(crate) const PHASE_CHANGE: f64 = 0.15;
