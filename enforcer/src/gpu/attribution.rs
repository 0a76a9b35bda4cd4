//! Attributes each GPU process to its training job or inference pool, by the same membership
//! the CPU side uses (`Registry::owners`: cgroups, registered processes and their
//! descendants), and sums what the policy and the memory guard need per device.

use std::collections::HashMap;

pub(crate) use enforcer_common::protocol::gpu::Owner;

use super::{
    memory_guard::{DeviceMemory, InferenceProcess},
    telemetry::GpuSample,
};

/// One device's figures, attributed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attributed {
    pub memory: DeviceMemory,
    /// Training's SM utilization (%), summed over its processes; None when no training process
    /// has a per-process figure (none running, none since the last read, or NVML cannot tell
    /// under MPS).
    pub training_sm_pct: Option<f64>,
    /// Each process with its owner, for the status and the metrics.
    pub processes: Vec<(u32, Option<Owner>)>,
}

pub(crate) fn attribute(sample: &GpuSample, owners: &HashMap<u32, Owner>) -> Attributed {
    let mut memory = DeviceMemory {
        device: sample.index,
        total_mib: sample.memory_total_mib,
        training_mib: 0,
        other_mib: 0,
        inference: Vec::new(),
    };
    let mut training_sm: Option<f64> = None;
    let mut processes = Vec::new();
    let mut attributed_mib = 0;
    for process in &sample.processes {
        let owner = owners.get(&process.pid).cloned();
        let used = process.used_mib.unwrap_or(0);
        attributed_mib += used;
        match &owner {
            Some(Owner::Training(_)) => {
                memory.training_mib += used;
                if let Some(sm) = process.sm_pct {
                    *training_sm.get_or_insert(0.0) += f64::from(sm);
                }
            }
            Some(Owner::Pool(pool)) => memory.inference.push(InferenceProcess {
                pid: process.pid,
                pool: pool.clone(),
                used_mib: used,
            }),
            None => memory.other_mib += used,
        }
        processes.push((process.pid, owner));
    }
    // Memory no listed process accounts for (contexts of processes in other containers, the
    // driver's own) is room nobody here may count on.
    memory.other_mib += sample.memory_used_mib.saturating_sub(attributed_mib);
    Attributed {
        memory,
        training_sm_pct: training_sm,
        processes,
    }
}

#[cfg(test)]
mod tests {
    use super::{super::telemetry::GpuProcess, *};

    #[test]
    fn processes_are_split_between_training_inference_and_others() {
        let sample = GpuSample {
            index: 1,
            name: "H100".to_owned(),
            utilization_pct: 97,
            memory_used_mib: 50_000,
            memory_total_mib: 81_559,
            processes: vec![
                GpuProcess {
                    pid: 100,
                    used_mib: Some(30_000),
                    sm_pct: Some(60),
                },
                GpuProcess {
                    pid: 101,
                    used_mib: Some(2_000),
                    sm_pct: Some(20),
                },
                GpuProcess {
                    pid: 200,
                    used_mib: Some(8_000),
                    sm_pct: Some(15),
                },
                GpuProcess {
                    pid: 300,
                    used_mib: None,
                    sm_pct: None,
                },
            ],
        };
        let owners = HashMap::from([
            (100, Owner::Training("llm".to_owned())),
            (101, Owner::Training("llm".to_owned())),
            (200, Owner::Pool("gpu-serve".to_owned())),
        ]);
        let attributed = attribute(&sample, &owners);
        assert_eq!(attributed.memory.training_mib, 32_000);
        assert_eq!(attributed.training_sm_pct, Some(80.0));
        assert_eq!(
            attributed.memory.inference,
            vec![InferenceProcess {
                pid: 200,
                pool: "gpu-serve".to_owned(),
                used_mib: 8_000
            }]
        );
        // 50000 used, 40000 attributed: the rest is others'.
        assert_eq!(attributed.memory.other_mib, 10_000);
        assert_eq!(attributed.processes[3], (300, None));
    }

    #[test]
    fn no_training_sample_is_none_not_zero() {
        let sample = GpuSample {
            index: 0,
            name: "H100".to_owned(),
            utilization_pct: 0,
            memory_used_mib: 1_000,
            memory_total_mib: 81_559,
            processes: vec![GpuProcess {
                pid: 100,
                used_mib: Some(1_000),
                sm_pct: None,
            }],
        };
        let owners = HashMap::from([(100, Owner::Training("llm".to_owned()))]);
        assert_eq!(attribute(&sample, &owners).training_sm_pct, None);
    }
}
