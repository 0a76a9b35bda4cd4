//! What a comparison's cycles say of its level: kept, too costly, not shown free, kept as too
//! noisy to judge, or nothing yet (another cycle). Pure: the comparison's cycles and the
//! level's carried ones are passed in.

use super::{
    MAX_CYCLES, MAX_CYCLES_ABOVE_POLICY, MAX_CYCLES_NEAR_FLOOR,
    carried::Carried,
    change::Why,
    level::Level,
    statistics::{Ratio, could_show_costly_by_max_cycles, could_show_free_by},
};

/// What a comparison's cycles say of its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Kept,
    TooCostly,
    /// Above the core policy's level and not shown to keep training's pace.
    NotShownFree,
    /// At the core policy's level or below, kept: too noisy to judge on the mean.
    TooNoisy,
}

impl Verdict {
    /// The reason the decision log gives for it.
    pub(super) fn why(self, tried: Level, ratio: Ratio) -> Why {
        match self {
            Verdict::Kept => Why::Kept { tried, ratio },
            Verdict::TooCostly => Why::TooCostly { tried, ratio },
            Verdict::NotShownFree => Why::NotShownFree { tried, ratio },
            Verdict::TooNoisy => Why::TooNoisy { tried, ratio },
        }
    }
}

/// A comparison's cycles so far, from `MIN_CYCLES` on.
pub(super) struct Cycles<'a> {
    pub(super) level: Level,
    /// A recheck of the level kept, rather than a search.
    pub(super) recheck: bool,
    /// Each cycle's pace at the level over the held pace just after it.
    pub(super) ratios: &'a [f64],
    /// Their mean and 95% interval: where the mean decides and cycles of comparisons that
    /// kept the level before are pooled with these (`KeptCycles`), over them all. Cycle
    /// counts stay the comparison's own.
    pub(super) ratio: Ratio,
    /// The standard error of `ratio`'s mean, over the same cycles.
    pub(super) error: f64,
    /// `1 − ε`.
    pub(super) floor: f64,
    /// Their mean too noisy to judge ε by (`mean_too_noisy`, from the job's pooled spread).
    pub(super) noisy: bool,
    /// The spread the job's cycles keep below nine times in ten (`PooledSpread`).
    pub(super) spread_bound: f64,
}

impl Cycles<'_> {
    /// The verdict, or None where another cycle is wanted.
    pub(super) fn verdict(&self, carried: &Carried) -> Option<Verdict> {
        let Cycles {
            level,
            recheck,
            ratios,
            ratio,
            error,
            floor,
            noisy,
            spread_bound,
        } = *self;
        // Where only the interval can move a level down (below), it is looked at once, after
        // `MAX_CYCLES`: each look is another chance for the noise. On a model of the GPU
        // server's job that cost nothing (100 runs of 30 minutes), the interval looked at from
        // the third cycle to the sixth left 5.3% of the policy's comparisons; looked at once,
        // 1.9%.
        let interval_judges_cost = !(level <= Level::Policy && noisy) || ratios.len() >= MAX_CYCLES;
        let verdict = if ratio.low >= floor {
            Verdict::Kept
        } else if ratio.high < floor && interval_judges_cost {
            Verdict::TooCostly
        } else if recheck && ratio.ratio >= floor && !noisy {
            // A recheck looks for a kept level turned costly: a mean that still keeps
            // training's pace ends it, where a search waits for the interval. On the VM every
            // comparison ran its six cycles (docs/experiments/2026-11-27-pace-pairs-vm.md): a
            // settled level's rechecks held offline back for 18 s a minute; ended at the
            // third cycle where the mean allows, 9 s. Not where the mean is too noisy to say
            // anything of ε: a level above the policy's is then rechecked as it was found.
            Verdict::Kept
        } else if level <= Level::Policy
            && noisy
            && (ratio.ratio >= floor || !could_show_costly_by_max_cycles(ratios, floor))
            && !carried.could_show_costly(level, ratios, floor)
        {
            // A signal too noisy for the mean is, for the mean, no signal: the level stays, as
            // without one (the core policy's own, where the search came down to it), and only
            // an interval below `1 − ε` moves it. On the GPU server the ResNet-50 job's cycles
            // spread by 9 to 20%: there a mean below `1 − ε` would take a level that costs
            // nothing down in about four comparisons of ten, each one lower. The comparison
            // ends as soon as the cycles left could hardly show the level costly.
            Verdict::TooNoisy
        } else if (ratios.len() < MAX_CYCLES && (level <= Level::Policy || (recheck && !noisy)))
                // Above the policy's level a comparison runs on while its cycles could still show
                // the level free; a recheck keeps a level on its mean (above), which its next
                // cycles may still lift, unless the mean is too noisy to keep it on.
                || (level > Level::Policy
                    && could_show_free_by(ratios, floor, MAX_CYCLES_ABOVE_POLICY, spread_bound))
                || (level <= Level::Policy
                    && ratios.len() < MAX_CYCLES_NEAR_FLOOR
                    && (ratio.ratio - floor).abs() < error)
        {
            return None;
        } else if level > Level::Policy {
            // The cycles cannot tell, and above the core policy's level a level is kept only
            // where shown free: after `MAX_CYCLES_ABOVE_POLICY`, or sooner where the cycles
            // left could hardly show it (`could_show_free_by`). On the VM each level above the
            // policy's ran its six cycles, 36 s with 18 s held back, and none was shown free
            // (docs/experiments/2026-11-27-pace-proof-vm.md). On the GPU server the ResNet-50
            // job's GPU busy share, even averaged over 5 s, moved by 8–10% (standard
            // deviation) from one 2 s stretch to the next with nothing changing, and five
            // cycles never told whether `training_cores` kept 1%
            // (docs/experiments/2026-11-27-pace-controller-server.md).
            Verdict::NotShownFree
        } else if ratio.ratio >= floor {
            // At the policy's level and below, the mean decides. Keeping those only where the
            // interval also ruled out twice ε was tried: on a noisy day on the VM the
            // controller came down below the policy's level in every window and harvested
            // half what reamer's defaults did
            // (docs/experiments/2026-11-27-training-core-shares-vm.md).
            Verdict::Kept
        } else {
            Verdict::TooCostly
        };
        Some(verdict)
    }
}
