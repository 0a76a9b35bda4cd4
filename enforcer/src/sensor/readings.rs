//! Reading the sensor's in-kernel aggregates: per-job totals, per-CPU time by class and the
//! diagnostic counters, each summed over CPUs in one pass over its map.

use std::collections::BTreeMap;

use enforcer_common::{CLASS_TRAINING, COUNTER_NAMES, CpuState, JobStats, NR_CLASSES, NR_COUNTERS};

use super::SensorMaps;
use crate::host::clock::monotonic_ns;

/// Sums one job's per-CPU statistics.
fn read_job(maps: &SensorMaps, id: u32) -> Result<JobStats, aya::maps::MapError> {
    let per_cpu = maps.job_stats.get(&id, 0)?;
    let mut total = JobStats::default();
    for cpu in per_cpu.iter() {
        total.run_ns += cpu.run_ns;
        total.wait_ns += cpu.wait_ns;
        total.waits += cpu.waits;
        total.max_wait_ns = total.max_wait_ns.max(cpu.max_wait_ns);
        total.behind_inference += cpu.behind_inference;
        total.long_waits += cpu.long_waits;
        total.offline_wait_ns += cpu.offline_wait_ns;
        for (sum, count) in total.wait_hist.iter_mut().zip(cpu.wait_hist.iter()) {
            *sum += count;
        }
        total.reports_ran += cpu.reports_ran;
        total.report_to_ran_ns += cpu.report_to_ran_ns;
        for (sum, count) in total
            .report_to_ran_hist
            .iter_mut()
            .zip(cpu.report_to_ran_hist.iter())
        {
            *sum += count;
        }
    }
    Ok(total)
}

/// Training's run time as of one instant: each job's completed slices, and the slices in
/// progress then.
#[derive(Debug)]
pub(crate) struct RunTimes {
    /// The jobs' statistics, in the order asked for (zeros where a job has no entry).
    pub(crate) jobs: Vec<JobStats>,
    /// Per job, the time its threads running at `at_ns` have run since they were switched in.
    pub(crate) running: BTreeMap<u32, u64>,
    /// The CLOCK_MONOTONIC instant of the reading.
    pub(crate) at_ns: u64,
}

/// How many times a reading is taken, at most, while a slice it would miss ended during it:
/// the window is a few syscalls, and a slice long enough to matter seldom ends in it. After
/// the last, what it read is kept, as every reading was before the retry.
const READ_ATTEMPTS: usize = 4;

/// A slice that ended during a reading may be in neither of its reads; at most this much, it
/// is left to the next reading: 1% of a CPU over `observe`'s 100 ms intervals. On a machine
/// of many CPUs whose threads switch every millisecond, some CPU switches during most
/// readings; only a slice that began before the reading can leave out more than the reading's
/// own length.
const MISSED_SLICE_LIMIT_NS: u64 = 1_000_000;

/// Reads `jobs`' run times: completed slices and the slices in progress. The sensor adds a
/// slice to a job's `run_ns` only when it ends, so a thread that runs for seconds without a
/// switch would otherwise count nothing until then, and all of it in the interval it ends in.
///
/// Totals and slots are two reads. A slice that ended between them would be in neither, and
/// counted whole in the next reading: a thread that ran for a second would move a second from
/// one interval to the next. So the slots are read before and after the totals, and the
/// reading is taken again where a slice that could be missed ended meanwhile.
pub(crate) fn run_times(maps: &SensorMaps, jobs: &[u32]) -> RunTimes {
    settled_run_times(
        || cpu_states(maps),
        || {
            jobs.iter()
                .map(|&id| read_job(maps, id).unwrap_or_default())
                .collect()
        },
        monotonic_ns,
    )
}

/// [`run_times`] over its three reads: the slots, the jobs' totals and the clock.
fn settled_run_times(
    mut slots: impl FnMut() -> Vec<CpuState>,
    mut totals: impl FnMut() -> Vec<JobStats>,
    clock: impl Fn() -> u64,
) -> RunTimes {
    let mut before = slots();
    let mut attempts = 1;
    loop {
        let jobs = totals();
        let at_ns = clock();
        let after = slots();
        if attempts == READ_ATTEMPTS
            || could_miss_ns(&before, &after, at_ns) <= MISSED_SLICE_LIMIT_NS
        {
            return RunTimes {
                jobs,
                running: running_slices(&after, at_ns),
                at_ns,
            };
        }
        before = after;
        attempts += 1;
    }
}

/// The most run time a reading between two copies of the slots could miss, at `at_ns`: on a
/// CPU where a training slice ran at the first copy and not at the second, it ended between
/// them, before the totals were read (and counted in them) or after (and in neither); the
/// time since its start bounds what is missing.
fn could_miss_ns(before: &[CpuState], after: &[CpuState], at_ns: u64) -> u64 {
    let slice = |slot: &CpuState| {
        (slot.current_class == CLASS_TRAINING && slot.training_since_ns != 0)
            .then_some((slot.training_since_ns, slot.training_exec_start_ns))
    };
    before
        .iter()
        .zip(after.iter().map(Some).chain(std::iter::repeat(None)))
        .filter_map(|(b, a)| {
            let started = slice(b)?;
            (a.and_then(slice) != Some(started)).then(|| at_ns.saturating_sub(started.0))
        })
        .max()
        .unwrap_or(0)
}

/// Training's slices in progress at CLOCK_MONOTONIC `now_ns`, per job, from a copy of the
/// slots.
fn running_slices(slots: &[CpuState], now_ns: u64) -> BTreeMap<u32, u64> {
    let mut per_job = BTreeMap::new();
    for state in slots {
        // `training_since_ns` is written before `current_class` and read after it, so a
        // training class here comes with its own slice's start or a later one, never an
        // earlier (`CpuState`).
        if state.current_class == CLASS_TRAINING
            && state.training_since_ns != 0
            && now_ns > state.training_since_ns
        {
            *per_job.entry(state.current_group).or_default() += now_ns - state.training_since_ns;
        }
    }
    per_job
}

/// A copy of every CPU's slot (zeros where one cannot be read).
fn cpu_states(maps: &SensorMaps) -> Vec<CpuState> {
    (0..possible_cpus())
        .map(|cpu| maps.cpu_state.get(&cpu, 0).unwrap_or_default())
        .collect()
}

/// The CPUs that can exist (`/sys/devices/system/cpu/possible`): the slots of `cpu_state`
/// in use.
fn possible_cpus() -> u32 {
    aya::util::nr_cpus().unwrap_or(1) as u32
}

/// Sums the per-CPU diagnostic counters.
pub(crate) fn read_counters(maps: &SensorMaps) -> BTreeMap<String, u64> {
    (0..NR_COUNTERS)
        .map(|i| {
            let total = maps.counters.get(&i, 0).map_or(0, |v| v.iter().sum());
            (COUNTER_NAMES[i as usize].to_owned(), total)
        })
        .collect()
}

/// Per-CPU time by class, for the CPUs that exist.
pub(crate) fn read_cpu_class_ns(maps: &SensorMaps) -> Vec<[u64; NR_CLASSES]> {
    cpu_states(maps).iter().map(|slot| slot.class_ns).collect()
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use enforcer_common::CLASS_OTHER;

    use super::*;

    const JOB: u32 = 7;
    const MS: u64 = 1_000_000;

    /// A CPU running one of `JOB`'s threads since `since_ns`, switched in at `since_ns`.
    fn training_since(since_ns: u64) -> CpuState {
        CpuState {
            switched_at_ns: since_ns,
            current_class: CLASS_TRAINING,
            current_group: JOB,
            current_tid: 100,
            training_since_ns: since_ns,
            training_exec_start_ns: 5 * MS,
            ..CpuState::default()
        }
    }

    /// A CPU switched to a thread of no class at `at_ns`.
    fn other_since(at_ns: u64) -> CpuState {
        CpuState {
            switched_at_ns: at_ns,
            current_class: CLASS_OTHER,
            current_tid: 200,
            ..CpuState::default()
        }
    }

    fn ran(run_ns: u64) -> Vec<JobStats> {
        vec![JobStats {
            run_ns,
            ..JobStats::default()
        }]
    }

    /// Replays scripted reads in order, each read taking the next of its kind.
    fn replay(
        slots: Vec<Vec<CpuState>>,
        totals: Vec<Vec<JobStats>>,
        clock: Vec<u64>,
    ) -> (RunTimes, usize) {
        let slots = RefCell::new(slots.into_iter());
        let totals = RefCell::new(totals.into_iter());
        let clock = RefCell::new(clock.into_iter());
        let reads = RefCell::new(0);
        let read = settled_run_times(
            || slots.borrow_mut().next().expect("a scripted slot copy"),
            || {
                *reads.borrow_mut() += 1;
                totals.borrow_mut().next().expect("a scripted totals read")
            },
            || clock.borrow_mut().next().expect("a scripted clock read"),
        );
        (read, reads.into_inner())
    }

    fn job_run_ns(read: &RunTimes) -> u64 {
        read.jobs[0].run_ns + read.running.get(&JOB).copied().unwrap_or(0)
    }

    #[test]
    fn a_slice_that_ends_between_the_totals_and_the_slots_is_counted_by_a_second_reading() {
        // A slice from 1 ms runs on; the totals are read at 149 ms, before it ends at 150 ms,
        // and the slots after it ended. Read once, the 149 ms it ran are in neither.
        let (read, attempts) = replay(
            vec![
                vec![training_since(MS)],
                vec![other_since(150 * MS)],
                vec![other_since(150 * MS)],
            ],
            vec![ran(0), ran(149 * MS)],
            vec![149 * MS, 160 * MS],
        );
        assert_eq!(attempts, 2, "{:?} running", read.running);
        assert_eq!(job_run_ns(&read), 149 * MS, "{:?} running", read.running);
        assert_eq!(read.at_ns, 160 * MS);
    }

    #[test]
    fn a_slice_of_under_a_millisecond_that_ends_during_the_reading_is_left_to_the_next() {
        // Started 0.5 ms before the reading: it misses at most that, not worth reading again.
        let (read, attempts) = replay(
            vec![
                vec![training_since(100 * MS)],
                vec![other_since(100 * MS + MS / 2)],
            ],
            vec![ran(0)],
            vec![100 * MS + MS / 2],
        );
        assert_eq!(attempts, 1, "{:?} running", read.running);
    }

    #[test]
    fn a_slice_running_through_the_reading_counts_up_to_its_instant() {
        let (read, attempts) = replay(
            vec![vec![training_since(MS)], vec![training_since(MS)]],
            vec![ran(20 * MS)],
            vec![101 * MS],
        );
        assert_eq!(attempts, 1);
        assert_eq!(job_run_ns(&read), 120 * MS, "{:?} running", read.running);
    }

    #[test]
    fn a_cpu_switching_through_every_reading_keeps_the_last_after_a_bounded_number() {
        // Consecutive training slices move the start on by the one that ended (the switch
        // program), so only the start tells them apart.
        let slots = (0..=READ_ATTEMPTS as u64)
            .map(|k| vec![training_since(MS + k * 10 * MS)])
            .collect();
        let totals = (0..READ_ATTEMPTS as u64)
            .map(|k| ran(k * 10 * MS))
            .collect();
        let clock = (0..READ_ATTEMPTS as u64).map(|k| 100 * MS + k).collect();
        let (read, attempts) = replay(slots, totals, clock);
        assert_eq!(attempts, READ_ATTEMPTS);
        assert_eq!(read.at_ns, 100 * MS + READ_ATTEMPTS as u64 - 1);
    }
}
