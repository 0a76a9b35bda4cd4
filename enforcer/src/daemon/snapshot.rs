//! `Request::Snapshot`: the sensor's totals per job, the pools, the enforcement state and the
//! GPU side, read at one instant; `Request::Observe`: the part `observe` uses. Each lock is
//! held only for its in-memory state: the pools' cgroup files are read after letting go of the
//! enforcement's lock, which the event thread needs.

use enforcer_common::{
    histogram::{NR_BUCKETS, percentile},
    protocol::{EnforcementStatus, JobProgress, JobTotals, PodInfo, PoolInfo, Snapshot},
};

use super::{event_thread, state::Shared};
use crate::{
    actuate::thread_policy, gpu::service::GpuService, registry::GroupClass, sensor::readings,
};

/// How much a snapshot reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    /// Everything: `status`, `/metrics`.
    Full,
    /// What `observe` uses (`Request::Observe`), read ten times a second by a watching
    /// operator: no file is read and no decision copied.
    Observe,
}

pub(crate) fn take_snapshot(shared: &Shared, detail: Detail) -> Snapshot {
    let full = detail == Detail::Full;
    let registry = shared.registry.lock().expect("registry poisoned");
    let sensor = shared.sensor.lock().expect("sensor poisoned");
    let ids: Vec<u32> = registry.training.iter().map(|job| job.id).collect();
    let readings::RunTimes {
        jobs: totals,
        running,
        at_ns: now_ns,
    } = readings::run_times(&sensor.maps, &ids);
    // Beside the run times: a reader pairs these counters (the untraced slices above all) with
    // the run time of the same interval, which a read a few locks later would skew.
    let counters = readings::read_counters(&sensor.maps);
    // The event thread takes the tally after every event: held for copies only.
    let cpu_slots = shared.cpus.last().map_or(0, |&cpu| cpu as usize + 1);
    let (events_received, contentions_by_cpu): (Vec<u64>, Vec<u64>) = {
        let tally = shared.tally.lock().expect("event tally poisoned");
        let per_job = registry.training.iter().map(|job| tally.of_job(job.id));
        (per_job.collect(), tally.contentions_by_cpu(cpu_slots))
    };
    let progress = shared.progress.lock().expect("progress board poisoned");
    let progress_of = |name: &str| {
        let pace = progress.get(name)?.pace(now_ns)?;
        Some(JobProgress {
            steps: pace.steps,
            steps_per_s: pace.steps_per_s,
            age_s: pace.age_s,
        })
    };
    let jobs: Vec<JobTotals> = registry
        .training
        .iter()
        .zip(totals.into_iter().zip(events_received))
        .map(|(job, (stats, events_received))| JobTotals {
            id: job.id,
            name: job.name.clone(),
            threads: job.threads,
            run_ns: stats.run_ns + running.get(&job.id).copied().unwrap_or(0),
            wait_ns: stats.wait_ns,
            waits: stats.waits,
            max_wait_ns: stats.max_wait_ns,
            behind_inference: stats.behind_inference,
            long_waits: stats.long_waits,
            offline_wait_ns: stats.offline_wait_ns,
            events_received,
            wait_hist: stats.wait_hist.to_vec(),
            reports_ran: stats.reports_ran,
            report_to_ran_ns: stats.report_to_ran_ns,
            report_to_ran_hist: stats.report_to_ran_hist.to_vec(),
            progress: progress_of(&job.name),
            gpu_busy: shared
                .gpu
                .get()
                .and_then(|gpu| gpu.busy_share(&job.name, now_ns)),
        })
        .collect();
    drop(progress);
    let relaunch = shared.relaunch.lock().expect("relaunch board poisoned");
    let pools = registry
        .pools
        .iter()
        .map(|pool| {
            let (relaunch_generation, relaunching_launchers) =
                relaunch.watching(&pool.name, now_ns);
            PoolInfo {
                id: pool.id,
                name: pool.name.clone(),
                kind: if pool.class == GroupClass::Online {
                    "online"
                } else {
                    "offline"
                }
                .to_owned(),
                threads: pool.threads,
                relaunch_generation,
                relaunching_launchers,
            }
        })
        .collect();
    let pod_members: Vec<(String, crate::registry::pods::PodMember)> = registry
        .pods
        .iter()
        .map(|(uid, pod)| (uid.clone(), pod.clone()))
        .collect();
    let waiting: Vec<PodInfo> = registry
        .waiting
        .iter()
        .map(waiting_pod)
        .chain(registry.refused.iter().map(refused_pod))
        .collect();
    drop((relaunch, registry));
    let cpu_class_ns = match full {
        true => readings::read_cpu_class_ns(&sensor.maps),
        false => Vec::new(),
    };
    let programs = sensor.program_stats();
    drop(sensor);
    let enforcement = enforcement_status(shared, &jobs, detail);
    let pods = match full {
        true => pods(shared, pod_members)
            .into_iter()
            .chain(waiting)
            .collect(),
        false => Vec::new(),
    };
    Snapshot {
        instance: shared.instance.clone(),
        monotonic_ns: now_ns,
        online_cpus: shared.cpus.len(),
        jobs,
        contentions_by_cpu,
        pools,
        cpu_class_ns,
        counters,
        programs,
        enforcement: Some(enforcement),
        metrics_addr: shared.metrics_addr.clone(),
        gpu: shared.gpu.get().filter(|_| full).map(GpuService::report),
        event_thread: thread_policy::own_thread_named(event_thread::THREAD_NAME)
            .filter(|_| full)
            .map(thread_policy::describe),
        pods,
    }
}

/// The managed pods: what the registry has of them, with how the pools write them. Their
/// threads are counted from their groups' files, with no lock held.
fn pods(shared: &Shared, members: Vec<(String, crate::registry::pods::PodMember)>) -> Vec<PodInfo> {
    let views = shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .pools()
        .pod_views();
    members
        .into_iter()
        .map(|(uid, member)| {
            let view = views.iter().find(|view| view.uid == uid);
            let sources: Vec<_> = member
                .containers
                .iter()
                .cloned()
                .map(crate::config::Source::Cgroup)
                .collect();
            let role = member.role();
            let (state, detail) = match (view, &member.exclusive_cpus) {
                (Some(view), _) => (view.state.label(), view.state.to_string()),
                (None, Some(cpus)) => (
                    "measured",
                    format!("training, measured; the CPU manager gave it exclusive CPUs ({cpus})"),
                ),
                (None, None) => ("measured", "training, measured".to_owned()),
            };
            PodInfo {
                pod: member.key,
                uid,
                role: role.to_owned(),
                group: member.group,
                containers: member.containers.len(),
                threads: crate::registry::group_threads(&sources).len(),
                state: state.to_owned(),
                detail,
                foreign_writes: view.map_or(0, |view| view.foreign_writes),
            }
        })
        .collect()
}

/// A training pod that waits for a job slot: seen, not measured.
fn waiting_pod((uid, waiting): (&String, &crate::registry::pods::WaitingPod)) -> PodInfo {
    let job = match &waiting.pod.role {
        crate::kubernetes::classify::Role::Training { job } => job.clone(),
        crate::kubernetes::classify::Role::Pool { pool, .. } => pool.clone(),
    };
    PodInfo {
        pod: waiting.pod.key.clone(),
        uid: uid.clone(),
        role: "training".to_owned(),
        group: job,
        containers: waiting.containers.len(),
        threads: 0,
        state: "waiting".to_owned(),
        detail: format!(
            "not measured yet: {}; taken when a training job ends",
            waiting.reason
        ),
        foreign_writes: 0,
    }
}

/// A pod marked for reamer that it does not take: its claim, refused, and why.
fn refused_pod((uid, (key, reason)): (&String, &(String, String))) -> PodInfo {
    PodInfo {
        pod: key.clone(),
        uid: uid.clone(),
        role: "-".to_owned(),
        group: "-".to_owned(),
        containers: 0,
        threads: 0,
        state: "refused".to_owned(),
        detail: reason.clone(),
        foreign_writes: 0,
    }
}

/// The enforcement's status, with "event to training ran" summed from the sensor's per-job
/// histograms (the kernel measures it, see `record_report_ran` in the sensor).
fn enforcement_status(shared: &Shared, jobs: &[JobTotals], detail: Detail) -> EnforcementStatus {
    let reading = shared
        .enforcement
        .lock()
        .expect("enforcement poisoned")
        .status();
    let mut status = match detail {
        Detail::Full => reading.finish(),
        Detail::Observe => reading.without_files(),
    };
    let mut hist = vec![0u64; NR_BUCKETS];
    for job in jobs {
        for (sum, count) in hist.iter_mut().zip(&job.report_to_ran_hist) {
            *sum += count;
        }
    }
    status.event_to_ran_p50_ns = percentile(&hist, 0.5);
    status.event_to_ran_p99_ns = percentile(&hist, 0.99);
    status.event_to_ran_sum_ns = jobs.iter().map(|j| j.report_to_ran_ns).sum();
    status.event_to_ran_hist = hist;
    status
}
