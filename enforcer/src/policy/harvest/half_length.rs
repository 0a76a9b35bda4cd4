//! How long each half of a comparison measures: the shortest that holds two of every job's
//! reports, or longer where the job followed's pace narrows with the length faster than the
//! length costs. Pure: the reports and the time are passed in.
//!
//! A comparison needs cycles in proportion to their variance, and each cycle takes two halves,
//! so the time a level takes to judge goes as a cycle's variance times its half's length (its
//! settling included). A job whose pace wanders slowly gains nothing from longer halves: the
//! VM's training simulator spread by 0.96% a cycle at 2 s halves and by 0.56% at 10 s, 1.2
//! times the variance for the time. A bursty job narrows by about the length: on a model of the
//! GPU server's ResNet-50 job, fed by six loader workers whose batches come one after another,
//! cycles of 3.2 s halves spread by 25.6% and of 10 s halves by 11.3%, half the variance for the
//! time; on the server itself the job's pace over one stretch against the next spread by 30.1%
//! at 2 s and by 15.8% at 4 s beside reamer's defaults, 2.2 times less variance for the time
//! (docs/experiments/2026-11-28-mean-counts.md, 2026-11-28-pace-steps-server-cut.md).
//!
//! So the loop reads the job's noise at each length while it is settled, where nothing changes
//! but the job: the pace over back-to-back cycles of each length, from the reports the watch
//! reads, with no probe added. A comparison's halves are lengthened only where the shortest
//! halves' cycles are too noisy for a mean to judge ε (`mean_too_noisy`), and where, pooled over
//! enough cycles, a longer length judges a level at least `GAIN_NEEDED` times sooner. Longer
//! halves hold offline back longer in every comparison, which runs three cycles at least: where
//! the shortest halves' mean can judge, they buy nothing. And a job whose noise is independent
//! from second to second gains by the settling and its reports' spacing alone: on the unit
//! tests' models of such jobs, the gains read 0.9 to 1.8 times.

use super::{
    Harvest, MAX_MEASURE_NS, SETTLE_NS,
    statistics::{cycle_ratio, mean_too_noisy, measure_ns},
};
use crate::policy::pace::Report;

impl Harvest {
    /// The shortest a half may measure: two of every job's report periods, the jobs beside the
    /// one followed too.
    fn shortest_measure_ns(&self, reports: &[Report]) -> u64 {
        measure_ns(reports).max(self.others.measure_ns())
    }

    /// Settled since `since_ns`, at `now_ns`: the job's noise read by length, its lengths
    /// taken from the shortest half as the settle began.
    pub(super) fn read_half_lengths(&mut self, now_ns: u64, since_ns: u64, reports: &[Report]) {
        if !self.half_lengths.reads(since_ns) {
            let shortest_ns = self.shortest_measure_ns(reports);
            self.half_lengths.settled(since_ns, shortest_ns);
        }
        self.half_lengths.read(now_ns, reports);
    }

    /// How long the halves of a comparison begun now measure: longer than the shortest only
    /// where the job followed runs alone, whose noise is the one read. The spread pooled over
    /// the job's last comparisons is carried to a new length by the ratio of the two lengths'
    /// variances (or started again where that is not known), and a settled level's rechecks
    /// wait as much longer as the halves are, so that they hold offline back no longer.
    pub(super) fn measure_ns(&mut self, reports: &[Report]) -> u64 {
        let followed_alone = self.others.is_empty() && self.waiting_for().is_none();
        let shortest_ns = self.shortest_measure_ns(reports);
        let lengths = &mut self.half_lengths;
        lengths.unsettled();
        let length = match followed_alone {
            true => lengths.choose(shortest_ns, self.settings.epsilon),
            false => 0,
        };
        // The shortest itself moves a little with the job's report gaps: only another multiple
        // of it changes what the pooled spread is worth.
        if length != lengths.length {
            self.held_halves.clear();
            match lengths.variance_ratio(lengths.length, length) {
                Some(ratio) => self.spread.rescale(ratio),
                None => self.spread.clear(),
            }
        }
        let measure_ns = HalfLengths::measure_ns(shortest_ns, MULTIPLES[length]);
        lengths.length = length;
        lengths.measured_ns = measure_ns;
        lengths.recheck_scale = (SETTLE_NS + measure_ns) as f64 / (SETTLE_NS + shortest_ns) as f64;
        measure_ns
    }
}

/// The halves' lengths looked at, as multiples of the shortest (`base`), each at most
/// `MAX_MEASURE_NS`.
const MULTIPLES: [u64; 3] = [1, 2, 4];
/// How many times sooner longer halves must judge a level to be taken. On models of a bursty
/// job (the server's, its loader's batches spread by 15 or 30%) 10 s halves judge 1.6 and 2.0
/// times sooner than 3.2 s ones; on a model of the server's reported steps as noise independent
/// from second to second (±30%), the gains read 0.9 to 1.6.
const GAIN_NEEDED: f64 = 1.6;
/// Cycles each length needs read before its noise is compared: a variance of 30 degrees of
/// freedom lies within 0.62 to 1.46 times the true one nine times in ten.
const MIN_FREEDOM: f64 = 30.0;
/// The most cycles each length keeps, the oldest let go in proportion: about twenty minutes
/// of settled time at 10 s halves, so that the choice follows the job's noise as it changes.
const MAX_FREEDOM: f64 = 60.0;
/// A shortest half that moved this much (relative) from the one the cycles were read at
/// starts the reading again: its multiples are other lengths. Two of a job's report periods
/// at their 90th percentile move a little from one comparison to the next.
const BASE_MOVED: f64 = 0.5;

/// The job followed's noise at each length of halves, read at its settled levels.
#[derive(Debug, Clone)]
pub(super) struct HalfLengths {
    /// The shortest half's measured length the cycles were read at.
    base_ns: u64,
    /// For each multiple: the sum of its cycles' squared deviations from 1, and their count.
    read: [(f64, f64); MULTIPLES.len()],
    /// The settled level being read: when it took effect, and where each length's next
    /// cycle begins.
    settled: Option<(u64, [u64; MULTIPLES.len()])>,
    /// The last comparison's halves: their length (an index of `MULTIPLES`), how long they
    /// measured (0 before the first), and how many times longer than the shortest they were
    /// (with their settling).
    length: usize,
    measured_ns: u64,
    recheck_scale: f64,
}

impl Default for HalfLengths {
    fn default() -> Self {
        Self {
            base_ns: 0,
            read: [(0.0, 0.0); MULTIPLES.len()],
            settled: None,
            length: 0,
            measured_ns: 0,
            recheck_scale: 1.0,
        }
    }
}

impl HalfLengths {
    /// Each length's measured part: `base_ns` times its multiple, at most `MAX_MEASURE_NS`.
    fn measure_ns(base_ns: u64, multiple: u64) -> u64 {
        (base_ns * multiple).min(MAX_MEASURE_NS.max(base_ns))
    }

    /// Whether the settled level that took effect at `since_ns` is the one being read.
    pub(super) fn reads(&self, since_ns: u64) -> bool {
        self.settled.is_some_and(|(since, _)| since == since_ns)
    }

    /// A level settled at `since_ns`, with halves of `base_ns` at their shortest: its cycles
    /// are read from then on (those read before are kept, unless at another shortest).
    pub(super) fn settled(&mut self, since_ns: u64, base_ns: u64) {
        if !self.read_at(base_ns) {
            (self.base_ns, self.read) = (base_ns, Default::default());
        }
        self.settled = Some((since_ns, [since_ns; MULTIPLES.len()]));
    }

    /// At `now_ns`, settled (`settled`): each cycle of each length that ended since the last
    /// call, read from `reports`.
    pub(super) fn read(&mut self, now_ns: u64, reports: &[Report]) {
        let Some((_, next)) = &mut self.settled else {
            return;
        };
        for (i, &multiple) in MULTIPLES.iter().enumerate() {
            let half_ns = SETTLE_NS + Self::measure_ns(self.base_ns, multiple);
            while next[i] + 2 * half_ns <= now_ns {
                let start = next[i];
                next[i] += 2 * half_ns;
                // Not where a half has fewer than two reports, or none of the job's steps.
                let ratio = cycle_ratio(reports, start, half_ns).filter(|r| r.is_finite());
                if let Some(ratio) = ratio {
                    let (squares, count) = &mut self.read[i];
                    *squares += (ratio - 1.0).powi(2);
                    *count += 1.0;
                    if *count > MAX_FREEDOM {
                        *squares *= MAX_FREEDOM / *count;
                        *count = MAX_FREEDOM;
                    }
                }
            }
        }
    }

    /// Whether the cycles were read at about `base_ns` as the shortest.
    fn read_at(&self, base_ns: u64) -> bool {
        self.base_ns > 0 && (base_ns as f64 / self.base_ns as f64 - 1.0).abs() <= BASE_MOVED
    }

    /// A settled level's wait before its recheck, `wait_ns` with halves at their shortest.
    pub(super) fn recheck_wait_ns(&self, wait_ns: u64) -> u64 {
        (wait_ns as f64 * self.recheck_scale) as u64
    }

    /// The settled level's reading is over: the next settle starts its cycles afresh.
    pub(super) fn unsettled(&mut self) {
        self.settled = None;
    }

    /// The variance of a cycle at the `i`th length of `MULTIPLES`, where enough were read.
    fn variance(&self, i: usize) -> Option<f64> {
        let (squares, count) = self.read[i];
        (count >= MIN_FREEDOM).then(|| squares / count)
    }

    /// The length (an index of `MULTIPLES`) a half measures for a job whose halves need
    /// `base_ns` at their shortest: the one that judges a level soonest, where it does so
    /// `GAIN_NEEDED` times sooner than the shortest; the shortest (0) otherwise, and where the
    /// cycles read say too little (or at another shortest length).
    pub(super) fn choose(&self, base_ns: u64, epsilon: f64) -> usize {
        let same_base = self.read_at(base_ns);
        // Where the shortest halves' mean can judge ε, a comparison ends at its third cycle
        // or soon after whatever their length: longer halves would only hold offline back
        // longer.
        if !self
            .variance(0)
            .is_some_and(|variance| mean_too_noisy(variance, epsilon))
        {
            return 0;
        }
        let time_to_judge = |i: usize| {
            let measure_ns = Self::measure_ns(base_ns, MULTIPLES[i]);
            Some((self.variance(i)? * (SETTLE_NS + measure_ns) as f64, i))
        };
        let Some((shortest, _)) = time_to_judge(0).filter(|_| same_base) else {
            return 0;
        };
        (1..MULTIPLES.len())
            .filter_map(time_to_judge)
            .filter(|&(time, _)| time * GAIN_NEEDED <= shortest)
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map_or(0, |(_, length)| length)
    }

    /// A cycle's variance at the `to`th length over its variance at the `from`th, where both
    /// were read: what a spread pooled at one length is worth at the other.
    pub(super) fn variance_ratio(&self, from: usize, to: usize) -> Option<f64> {
        let at = |i: usize| self.variance(i).filter(|&variance| variance > 0.0);
        Some(at(to)? / at(from)?)
    }

    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }

    /// How long the last comparison's halves measured, where any was begun.
    pub(crate) fn measured_ns(&self) -> Option<u64> {
        (self.measured_ns > 0).then_some(self.measured_ns)
    }
}

#[cfg(test)]
mod tests {
    use enforcer_common::rng::SplitMix64;

    use super::*;

    const S: u64 = 1_000_000_000;
    const EPSILON: f64 = 0.01;

    /// Reports every second for `seconds`, counting `steps(second)` steps in each.
    fn reports(seconds: u64, mut steps: impl FnMut(u64) -> u64) -> Vec<Report> {
        let mut count = 0;
        (0..=seconds)
            .map(|s| {
                let report = Report::count(s * S, count);
                count += steps(s);
                report
            })
            .collect()
    }

    /// The lengths read over `reports`, settled from 0, read every second as the loop does.
    fn read_over(reports: &[Report], seconds: u64) -> HalfLengths {
        let mut lengths = HalfLengths::default();
        lengths.settled(0, 2 * S);
        for s in 0..=seconds {
            // The daemon keeps 30 s of reports.
            let kept: Vec<Report> = reports
                .iter()
                .filter(|r| r.at_ns <= s * S && r.at_ns + 30 * S > s * S)
                .copied()
                .collect();
            lengths.read(s * S, &kept);
        }
        lengths
    }

    #[test]
    fn a_pace_noisy_from_second_to_second_keeps_the_shortest_halves() {
        // ±30% a second, uniform: longer halves narrow the cycles only as much as their time.
        let mut rng = SplitMix64::new(3);
        let noisy = reports(7200, |_| {
            (100.0 * (1.0 + 0.3 * (2.0 * rng.next_f64() - 1.0))) as u64
        });
        let lengths = read_over(&noisy, 7200);
        assert_eq!(lengths.choose(2 * S, EPSILON), 0, "{lengths:?}");
    }

    /// Reports every second for `seconds` of a job whose steps come in bursts of 100, one a
    /// second, each up to 0.45 s early or late: a loader's batches, one after another. A
    /// half's count holds one burst more or less whatever its length.
    fn bursty(seconds: u64) -> Vec<Report> {
        let mut rng = SplitMix64::new(5);
        let bursts: Vec<f64> = (0..=seconds)
            .map(|k| k as f64 + 0.9 * (rng.next_f64() - 0.5))
            .collect();
        (0..=seconds)
            .map(|s| {
                let done = bursts.iter().filter(|&&at| at <= s as f64).count() as u64;
                Report::count(s * S, 100 * done)
            })
            .collect()
    }

    #[test]
    fn a_pace_that_comes_in_bursts_gets_longer_halves_once_enough_cycles_say_so() {
        // Four times the shortest: 8 s.
        let lengths = read_over(&bursty(7200), 7200);
        assert_eq!(lengths.choose(2 * S, EPSILON), 2, "{lengths:?}");
        // What a spread pooled at 2 s halves is worth at 8 s.
        let ratio = lengths.variance_ratio(0, 2).unwrap();
        assert!(ratio < 0.2, "{ratio}");
        // Two minutes say too little yet: the shortest.
        assert_eq!(read_over(&bursty(120), 120).choose(2 * S, EPSILON), 0);
        // Nor for a job whose shortest half is another length now.
        assert_eq!(lengths.choose(4 * S, EPSILON), 0);
    }

    #[test]
    fn a_new_settle_starts_its_cycles_afresh_and_keeps_what_was_read() {
        let bursty = bursty(7200);
        let mut lengths = read_over(&bursty, 3600);
        let before = lengths.read;
        lengths.unsettled();
        // Settled again at 4000 s: nothing of the first settle's last cycles is read twice.
        lengths.settled(4000 * S, 2 * S);
        lengths.read(4001 * S, &bursty);
        assert_eq!(lengths.read, before);
        lengths.read(4030 * S, &bursty);
        assert_ne!(lengths.read, before);
        assert_eq!(lengths.choose(2 * S, EPSILON), 2);
    }

    #[test]
    fn a_shortest_half_that_moves_with_the_report_gaps_keeps_the_pooled_spread() {
        // Two comparisons' halves at their shortest, two report periods each: 2 s for reports
        // a second apart, 2.4 s where some come 1.2 s apart. The spread pooled over the job's
        // comparisons is worth as much at either (it was cleared at each such move).
        let mut harvest = Harvest::new(crate::config::HarvestSettings { epsilon: EPSILON });
        harvest.spread.add(&[1.0, 1.1, 0.9]);
        let every_second = reports(30, |_| 100);
        let mut slower = every_second.clone();
        for (i, report) in slower.iter_mut().enumerate() {
            report.at_ns += (i as u64 / 2) * S / 5;
        }
        assert_eq!(harvest.measure_ns(&every_second), 2 * S);
        let before = harvest.spread.variance_with(&[]);
        assert!(harvest.measure_ns(&slower) > 2 * S);
        assert_eq!(harvest.spread.variance_with(&[]), before);
        assert!(before > 0.0);
    }
}
