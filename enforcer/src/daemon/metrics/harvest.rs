//! The pace controller's series (`[policy] harvest_by_pace`): the level it holds offline at,
//! its steps by reason, the seconds it held offline back, how long its halves measure, and,
//! labelled with the job whose pace it follows, that job's pace with offline held back and what
//! the level judged last cost it.

use std::fmt;

use enforcer_common::protocol::HarvestStatus;
use prometheus_client::{encoding::DescriptorEncoder, metrics::MetricType};

use super::{counter, gauge};
use crate::policy::harvest::Level;

pub(super) fn encode(encoder: &mut DescriptorEncoder, harvest: &HarvestStatus) -> fmt::Result {
    // Every level, 1 for the one in force: a level left reads 0 at once rather than going
    // stale, and `max by (level)` over time shows where offline was held.
    let mut family = encoder.encode_descriptor(
        "reamer_harvest_level",
        "The level the pace controller holds offline inference at (1; every other level 0), \
         from held (offline paused) to training_cores (offline on training's cores too).",
        None,
        MetricType::Gauge,
    )?;
    for level in Level::LADDER {
        let value = u64::from(level.name() == harvest.level);
        gauge(
            &mut family.encode_family(&[("level", level.name())])?,
            value,
        )?;
    }
    let mut family = encoder.encode_descriptor(
        "reamer_harvest_steps",
        "The pace controller's steps by reason, as the decision log writes them: probe (a held \
         half), trial, kept, too_costly, not_shown_free, phase_change, job_changed and others.",
        None,
        MetricType::Counter,
    )?;
    for (reason, count) in &harvest.steps {
        counter(
            &mut family.encode_family(&[("reason", reason.as_str())])?,
            *count,
        )?;
    }
    counter(
        &mut encoder.encode_descriptor(
            "reamer_harvest_held_back_seconds",
            "Seconds the pace controller held offline inference back (its probes, and a level \
             found too costly down to a quarter): its rate is the share of offline's time the \
             controller costs it.",
            None,
            MetricType::Counter,
        )?,
        harvest.held_back_s,
    )?;
    if let Some(half) = harvest.half_measure_s {
        gauge(
            &mut encoder.encode_descriptor(
                "reamer_harvest_half_measure_seconds",
                "How long each half of the pace controller's last comparison measured, after \
                 its settling: two of the job's report periods, or longer where its pace narrows \
                 with the length (a bursty job's).",
                None,
                MetricType::Gauge,
            )?,
            half,
        )?;
    }
    let job: Vec<(&str, &str)> = harvest
        .job
        .iter()
        .map(|job| ("job", job.as_str()))
        .collect();
    if let Some(reference) = harvest.reference_steps_per_s {
        // One gauge per unit: steps from the job's reports, GPUs busy from NVML.
        let (name, help, value) = match harvest.signal.as_deref() {
            Some("gpu_busy") => (
                "reamer_harvest_reference_gpus_busy",
                "Training's GPUs' busy share with offline held back (GPUs busy, from NVML): the \
                 mean of the pace controller's last held halves.",
                reference / 1e6,
            ),
            _ => (
                "reamer_harvest_reference_steps_per_second",
                "Training's pace with offline held back: the mean of the pace controller's last \
                 held halves.",
                reference,
            ),
        };
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        gauge(&mut family.encode_family(&job)?, value)?;
    }
    // What the level compared costs each job beside the one followed so far, and what the level
    // judged last cost the job it was judged by (the job followed, or a job beside it for
    // `too_costly_for`) where that job is not among them: (job, [ratio, low, high]), one series
    // per job and bound.
    let mut costs: Vec<(&str, [f64; 3])> = harvest
        .beside
        .iter()
        .map(|beside| (beside.job.as_str(), [beside.ratio, beside.low, beside.high]))
        .collect();
    if let Some(change) = &harvest.last_change
        && change["ratio"]["ratio"].is_f64()
    {
        let bound = |name: &str| change["ratio"][name].as_f64().unwrap_or(f64::NAN);
        let job = change["job"]
            .as_str()
            .or(harvest.job.as_deref())
            .unwrap_or("");
        if !costs.iter().any(|&(beside, _)| beside == job) {
            costs.push((job, [bound("ratio"), bound("low"), bound("high")]));
        }
    }
    if !costs.is_empty() {
        let mut family = encoder.encode_descriptor(
            "reamer_harvest_pace_ratio",
            "A training job's pace over its pace with offline held back: for the job the pace \
             controller follows, at the level it judged last; for each job beside it, at the \
             level it compares now (bound: the ratio and its interval's ends).",
            None,
            MetricType::Gauge,
        )?;
        for (job, values) in costs {
            for (bound, value) in ["ratio", "low", "high"].into_iter().zip(values) {
                let labels: &[(&str, &str)] = match job.is_empty() {
                    true => &[("bound", bound)],
                    false => &[("job", job), ("bound", bound)],
                };
                if value.is_finite() {
                    gauge(&mut family.encode_family(&labels)?, value)?;
                }
            }
        }
    }
    Ok(())
}
