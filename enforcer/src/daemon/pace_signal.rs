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
//! (a checkpoint, an evaluation), is paused (`harvest/pause.rs`): no signal until it reports
//! again, for up to ten minutes (`PAUSE_KEPT_NS`), not its GPUs' busy share nor another job's.

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
    // A job followed by its reports that is silent while its processes run is paused (a
    // checkpoint, an evaluation): no signal until it reports again, not its GPUs' busy share
    // (idle while it writes a checkpoint) nor another job's pace, each of which would start the
    // search afresh.
    let paused = paused(followed_by(PaceSource::Progress), &running, |job| {
        of(job).is_some_and(|at| reported[at].is_some())
    });
    let pace = match paused {
        Some(_) => None,
        None => follow(&jobs, followed_by(PaceSource::Progress), |name| {
            reported[of(name)?].clone()
        })
        .map(|(job, reports)| (PaceSource::Progress, job, reports))
        .or_else(|| {
            follow(&jobs, followed_by(PaceSource::GpuBusy), busy)
                .map(|(job, reports)| (PaceSource::GpuBusy, job, reports))
        }),
    };
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

/// `followed`, the job followed by its progress reports (or paused for), where it is paused:
/// its processes still run (`running`), and it has no pace of its reports.
fn paused<'a>(
    followed: Option<&'a str>,
    running: &[String],
    has_pace: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    followed.filter(|job| running.iter().any(|name| name == job) && !has_pace(job))
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
    use super::{follow, paused};

    fn jobs(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Each job's pace, where it has one.
    fn paces<'a>(with: &'a [(&'a str, f64)]) -> impl FnMut(&str) -> Option<f64> + 'a {
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
    fn a_silent_job_followed_by_its_reports_is_paused_while_it_runs() {
        let running = jobs(&["resnet", "bert"]);
        let silent = |_: &str| false;
        assert_eq!(paused(Some("resnet"), &running, silent), Some("resnet"));
        // Reporting again: followed, not paused.
        assert_eq!(paused(Some("resnet"), &running, |_| true), None);
        // Its processes gone: ended, and the signal goes to another job or its GPUs.
        assert_eq!(paused(Some("gpt"), &running, silent), None);
        assert_eq!(paused(None, &running, silent), None);
    }
}
