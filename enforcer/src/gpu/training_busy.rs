//! Each training job's GPU busy share, where it is its own: counted up as a pace
//! (`policy::busy_pace`), the pace controller's signal (`policy::harvest`) for a job that
//! reports no progress of its own.
//!
//! While nothing else runs on a job's GPUs, each of its steps does the same GPU work, so the
//! share of time its GPUs are busy moves with its pace: a loader-bound job's GPU idles while
//! its input pipeline is slowed, and a GPU-bound job's idles while its launching thread is.
//! The share is counted only where it is the job's own:
//! - NVML's per-process SM utilization of the job's processes, where the driver gives it, 0
//!   for a process it has sampled before that ran nothing since (`process_sm`), so that a job
//!   that stops beside a busy GPU pool reads idle, as one alone on its GPU does;
//! - otherwise the device's utilization, where the job is the only training job on the device
//!   and no inference pool has a process there. Processes reamer does not own do not stop it:
//!   under MPS the control daemon's server is such a process, and it is the one that runs
//!   every client's kernels. A foreign tenant's kernels on the device would read as training's.
//!
//! "Each step does the same GPU work" is the weak link: on the H200 server offline slowed the
//! ResNet-50 job's steps on the CPU side too (step p50 32 → 35 ms), which keeps a step's GPU
//! busy time up as steps get fewer, and the share, even averaged over 5 s, moved by 8–10%
//! from one 2 s stretch to the next with nothing changing
//! (docs/experiments/2026-11-27-pace-controller-server.md). A job that can report its steps
//! should.
//!
//! A device shared with a GPU pool and without per-process figures (MPS on the H100 and H200
//! gives none) has no figure for training: there, the GPU pool's work changes what a step costs
//! the GPU, and the share would follow the gate, not the job.
//!
//! The shares are summed over the job's devices (GPUs busy, 0 to the job's GPU count) and
//! counted up as a pace by `policy::busy_pace`.

use std::collections::BTreeMap;

use super::{
    attribution::{Attributed, Owner},
    telemetry::GpuSample,
};

/// Each training job's busy share on one device's sample, in GPUs busy (0 to 1); a job whose
/// share there is not its own is absent. A job's shares over its devices add up.
pub(crate) fn busy_on_device(sample: &GpuSample, attributed: &Attributed) -> BTreeMap<String, f64> {
    let mut jobs: BTreeMap<&str, Option<u32>> = BTreeMap::new();
    let mut pool_on_device = false;
    for (process, (_, owner)) in sample.processes.iter().zip(&attributed.processes) {
        match owner {
            Some(Owner::Training(job)) => {
                let sm = jobs.entry(job.as_str()).or_default();
                if let Some(pct) = process.sm_pct {
                    *sm = Some(sm.unwrap_or(0) + pct);
                }
            }
            Some(Owner::Pool(_)) => pool_on_device = true,
            None => {}
        }
    }
    let alone = jobs.len() == 1 && !pool_on_device;
    jobs.into_iter()
        .filter_map(|(job, sm_pct)| {
            let pct = match sm_pct {
                Some(pct) => pct,
                None if alone => sample.utilization_pct,
                None => return None,
            };
            Some((job.to_owned(), f64::from(pct.min(100)) / 100.0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{super::telemetry::GpuProcess, *};

    fn process(pid: u32, sm_pct: Option<u32>) -> GpuProcess {
        GpuProcess {
            pid,
            used_mib: Some(1_000),
            sm_pct,
        }
    }

    fn device(
        utilization_pct: u32,
        processes: Vec<(GpuProcess, Option<Owner>)>,
    ) -> (GpuSample, Attributed) {
        let sample = GpuSample {
            index: 0,
            name: "H100".to_owned(),
            utilization_pct,
            memory_used_mib: 10_000,
            memory_total_mib: 81_559,
            processes: processes.iter().map(|(p, _)| p.clone()).collect(),
        };
        let owners: HashMap<u32, Owner> = processes
            .iter()
            .filter_map(|(p, owner)| owner.clone().map(|o| (p.pid, o)))
            .collect();
        let attributed = super::super::attribution::attribute(&sample, &owners);
        (sample, attributed)
    }

    fn training(name: &str) -> Option<Owner> {
        Some(Owner::Training(name.to_owned()))
    }

    fn shares(devices: &[(GpuSample, Attributed)]) -> BTreeMap<String, f64> {
        let mut shares = BTreeMap::new();
        for (sample, attributed) in devices {
            for (job, share) in busy_on_device(sample, attributed) {
                *shares.entry(job).or_insert(0.0) += share;
            }
        }
        shares
    }

    #[test]
    fn per_process_figures_win_over_the_device_and_sum_over_devices() {
        let devices = [
            // The job's two processes' SM figures, though the device reads higher (a foreign
            // process's kernels).
            device(
                90,
                vec![
                    (process(1, Some(30)), training("llm")),
                    (process(2, Some(20)), training("llm")),
                    (process(9, None), None),
                ],
            ),
            // Alone on its second GPU, without per-process figures: the device's.
            device(70, vec![(process(3, None), training("llm"))]),
        ];
        let shares = shares(&devices);
        assert_eq!(shares.len(), 1);
        assert!((shares["llm"] - 1.2).abs() < 1e-9, "{shares:?}");
    }

    #[test]
    fn a_device_shared_with_inference_or_another_job_gives_no_figure_without_per_process() {
        let with_pool = device(
            95,
            vec![
                (process(1, None), training("llm")),
                (process(2, None), Some(Owner::Pool("gpu-serve".to_owned()))),
            ],
        );
        let two_jobs = device(
            95,
            vec![
                (process(1, None), training("a")),
                (process(2, None), training("b")),
            ],
        );
        assert!(shares(&[with_pool]).is_empty());
        assert!(shares(&[two_jobs]).is_empty());
        // The MPS server, owned by no one, does not stop the device's figure.
        let under_mps = device(
            88,
            vec![
                (process(1, None), training("llm")),
                (process(5, None), None),
            ],
        );
        assert_eq!(
            shares(&[under_mps]),
            BTreeMap::from([("llm".to_owned(), 0.88)])
        );
    }

    #[test]
    fn a_job_stopped_beside_a_busy_pool_reads_idle_where_nvml_has_sampled_it() {
        // `process_sm` gives a process NVML has sampled before, and that ran nothing since,
        // 0: the job's own figure, though the device is busy with the pool's kernels.
        let stopped_beside_pool = device(
            95,
            vec![
                (process(1, Some(0)), training("llm")),
                (
                    process(2, Some(95)),
                    Some(Owner::Pool("gpu-serve".to_owned())),
                ),
            ],
        );
        assert_eq!(
            shares(&[stopped_beside_pool]),
            BTreeMap::from([("llm".to_owned(), 0.0)])
        );
    }
}
