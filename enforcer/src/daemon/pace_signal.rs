//! The pace controller's signal, once a tick (`[policy] harvest_by_pace`): which training job's
//! pace steers it, that pace's reports, and the paces of the jobs beside it (by which a level
//! that slows one of them is left too: `harvest/others.rs`).
//!
//! One job steers it: a job's progress reports come first, its GPUs' busy share
//! (`gpu::training_busy`) second. Among the jobs with a pace from the same source, the one the
//! controller follows now keeps it for as long as it has one; otherwise the first in the
//! registry's order. Each change of job costs the controller its measurements: the new job's
//! first 10 s at the core policy's level, then a search from the top (`Why::JobChanged`). Taken
//! in the registry's order alone, a job earlier in it that reports in bursts, silent past
//! `pace::STALE_NS` between them, would take the signal back from a steady one at each burst
//! and lose it again at each silence. The job followed itself, silent while its processes run
//! (a checkpoint, an evaluation), is paused (`harvest/pause.rs`): no signal until it has a pace
//! again from the same source, for up to ten minutes (`PAUSE_KEPT_NS`), not its GPUs' busy
//! share nor another job's. Its GPUs idle for 2 s are such a silence
//! (`policy::busy_pace::IDLE_SILENT_NS`).

use super::state::Shared;
use crate::policy::{harvest::PaceSource, pace::Report};

/// The controller's step at `now_ns`, with the pace of the job it follows (or none), the
/// training jobs running (`Registry::running_training_jobs`: while one of them beside the job
/// followed has no pace, it keeps to the core policy's level and below,
/// `Harvest::set_training_jobs`), and the other jobs' paces.
pub(super) fn step(shared: &Shared, now_ns: u64) {
    let (jobs, running): (Vec<String>, Vec<String>) = {
        let registry = shared.registry.lock().expect("registry poisoned");
        let names = registry.training.iter().map(|job| job.name.clone());
        (names.collect(), registry.running_training_jobs())
    };
    // The job followed, or the one it paused for (`harvest/pause.rs`): the first to have a
    // pace again.
    let followed = {
        let enforcement = shared.enforcement.lock().expect("enforcement poisoned");
        let followed = enforcement.pace_followed();
        followed.or_else(|| enforcement.pace_paused(now_ns))
    };
    let followed_by = |source: PaceSource| {
        followed
            .as_ref()
            .filter(|(from, _)| *from == source)
            .map(|(_, job)| job.as_str())
    };
    // Each job's pace from its reports, where it has one, and from its GPUs' busy share.
    let reported: Vec<Option<Vec<Report>>> = {
        let board = shared.progress.lock().expect("progress board poisoned");
        let reports = |name: &String| {
            let tracker = board.get(name)?;
            tracker.pace(now_ns)?.steps_per_s?;
            Some(tracker.reports().collect())
        };
        jobs.iter().map(reports).collect()
    };
    let busy = |name: &str| shared.gpu.get()?.busy_reports(name, now_ns);
    let of = |name: &str| jobs.iter().position(|job| job == name);
    let by_reports = |name: &str| reported[of(name)?].clone();
    let (pace, paused) = choose(&jobs, followed_by, &running, by_reports, busy);
    // The jobs running beside the one followed, each by its own pace: a level that slows one
    // of them is left too, and one above the policy's is kept only where each shows it free
    // (`Harvest::set_other_jobs`). An ended job's last reports show nothing of its cores.
    let followed_now = pace.as_ref().map(|(_, job, _)| *job).or(paused);
    let others = jobs
        .iter()
        .zip(reported)
        .filter(|(name, _)| Some(name.as_str()) != followed_now && running.contains(name))
        .filter_map(|(name, reports)| Some((name.clone(), reports.or_else(|| busy(name))?)))
        .collect();
    let (signal, reports) = pace.map_or((None, Vec::new()), |(source, job, reports)| {
        (Some((source, job)), reports)
    });
    shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .on_pace(now_ns, signal, &reports, running, others);
}

/// Which job steers the controller, from which source and with which pace, or the job it is
/// paused for. A job's progress reports come first, its GPUs' busy share second
/// (`followed_by` a source: the job followed by it, or paused for). A job followed that is
/// silent while its processes run (`running`) is paused (a checkpoint, an evaluation): no
/// signal until it has a pace again, from neither source and no other job, each of which would
/// start the search afresh; its GPUs, idle while it writes a checkpoint, give none either
/// (`policy::busy_pace::IDLE_SILENT_NS`). A job paused on its GPUs' share gives way to a job
/// that reports its own progress, which would have steered before.
fn choose<'a, T>(
    jobs: &'a [String],
    followed_by: impl Fn(PaceSource) -> Option<&'a str>,
    running: &[String],
    by_reports: impl Fn(&str) -> Option<T>,
    by_busy: impl Fn(&str) -> Option<T>,
) -> (Option<(PaceSource, &'a str, T)>, Option<&'a str>) {
    let silent_while_running = |job: &&str, pace: &dyn Fn(&str) -> Option<T>| {
        running.iter().any(|name| name == job) && pace(job).is_none()
    };
    let paused_reporting =
        followed_by(PaceSource::Progress).filter(|job| silent_while_running(job, &by_reports));
    if paused_reporting.is_some() {
        return (None, paused_reporting);
    }
    if let Some((job, pace)) = follow(jobs, followed_by(PaceSource::Progress), &by_reports) {
        return (Some((PaceSource::Progress, job, pace)), None);
    }
    let paused_busy =
        followed_by(PaceSource::GpuBusy).filter(|job| silent_while_running(job, &by_busy));
    if paused_busy.is_some() {
        return (None, paused_busy);
    }
    let pace = follow(jobs, followed_by(PaceSource::GpuBusy), by_busy);
    (
        pace.map(|(job, pace)| (PaceSource::GpuBusy, job, pace)),
        None,
    )
}

/// Of `jobs` (the registry's order), the one whose `pace` steers the controller, with that
/// pace: `followed` while it still has one, else the first that has one.
fn follow<'a, T>(
    jobs: &'a [String],
    followed: Option<&str>,
    mut pace: impl FnMut(&str) -> Option<T>,
) -> Option<(&'a str, T)> {
    let followed = jobs.iter().filter(|job| Some(job.as_str()) == followed);
    followed
        .chain(jobs)
        .find_map(|job| Some((job.as_str(), pace(job)?)))
}

#[cfg(test)]
mod tests {
    use super::{PaceSource, choose, follow};

    fn jobs(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Each job's pace, where it has one.
    fn paces<'a>(with: &'a [(&'a str, f64)]) -> impl Fn(&str) -> Option<f64> + 'a {
        move |job| with.iter().find(|(name, _)| *name == job).map(|&(_, p)| p)
    }

    #[test]
    fn with_none_followed_the_first_job_with_a_pace_steers() {
        let jobs = jobs(&["resnet", "bert", "gpt"]);
        let chosen = follow(&jobs, None, paces(&[("gpt", 3.0), ("bert", 2.0)]));
        assert_eq!(chosen, Some(("bert", 2.0)));
        assert_eq!(follow(&jobs, None, paces(&[])), None);
    }

    #[test]
    fn the_job_followed_keeps_the_signal_while_an_earlier_one_reports_again() {
        // "bert" took the signal while "resnet" was silent; "resnet" reports again.
        let jobs = jobs(&["resnet", "bert"]);
        let both = [("resnet", 1.0), ("bert", 2.0)];
        assert_eq!(
            follow(&jobs, Some("bert"), paces(&both)),
            Some(("bert", 2.0))
        );
        // Silent itself, it gives the signal to the first job with a pace.
        let resnet_only = [("resnet", 1.0)];
        let chosen = follow(&jobs, Some("bert"), paces(&resnet_only));
        assert_eq!(chosen, Some(("resnet", 1.0)));
    }

    #[test]
    fn a_followed_job_that_left_the_registry_steers_nothing() {
        // An ended job's name, still held by the controller, with a pace left on the board.
        let jobs = jobs(&["bert"]);
        let chosen = follow(
            &jobs,
            Some("resnet"),
            paces(&[("resnet", 1.0), ("bert", 2.0)]),
        );
        assert_eq!(chosen, Some(("bert", 2.0)));
    }

    #[test]
    fn a_silent_job_followed_is_paused_while_it_runs_whichever_its_source() {
        let all = jobs(&["resnet", "bert"]);
        let running = all.clone();
        let none = |_: &str| None::<f64>;
        for source in [PaceSource::Progress, PaceSource::GpuBusy] {
            let followed = |from: PaceSource| (from == source).then_some("resnet");
            // Silent, though "bert" has a pace from the same source and any below it: paused
            // for "resnet".
            let bert = paces(&[("bert", 2.0)]);
            let chosen = match source {
                PaceSource::Progress => choose(&all, followed, &running, &bert, &bert),
                PaceSource::GpuBusy => choose(&all, followed, &running, none, &bert),
            };
            assert_eq!(chosen, (None, Some("resnet")), "{source:?}");
            // Its processes gone: ended, and the signal goes to the first job with a pace.
            let chosen = choose(&all, followed, &jobs(&["bert"]), &bert, none);
            assert_eq!(chosen, (Some((PaceSource::Progress, "bert", 2.0)), None));
            // Back: followed again, by its source.
            let resnet = paces(&[("resnet", 1.0)]);
            let (by_reports, by_busy) = match source {
                PaceSource::Progress => (resnet, paces(&[])),
                PaceSource::GpuBusy => (paces(&[]), resnet),
            };
            let chosen = choose(&all, followed, &running, by_reports, by_busy);
            assert_eq!(chosen, (Some((source, "resnet", 1.0)), None));
        }
    }

    #[test]
    fn a_job_paused_on_its_gpus_gives_way_to_a_job_that_reports_its_progress() {
        let all = jobs(&["resnet", "bert"]);
        let followed = |from: PaceSource| (from == PaceSource::GpuBusy).then_some("resnet");
        let chosen = choose(&all, followed, &all, paces(&[("bert", 2.0)]), paces(&[]));
        assert_eq!(chosen, (Some((PaceSource::Progress, "bert", 2.0)), None));
        // With none followed, reports come first, busy shares second.
        let chosen = choose(&all, |_| None, &all, paces(&[]), paces(&[("bert", 0.7)]));
        assert_eq!(chosen, (Some((PaceSource::GpuBusy, "bert", 0.7)), None));
    }
}
