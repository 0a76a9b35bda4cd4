//! The memory guard: inference's GPU memory must never push training out of memory. Pure: it
//! judges one device's memory as NVML reports it and answers with the pinned-memory limit
//! new inference clients get (MPS refuses their allocations beyond it: the refusal lands in
//! the inference process, never in training) and the inference processes to evict when
//! training has grown into what inference holds.
//!
//! NVML samples memory, so a training allocation that outgrows the free memory between two
//! samples can still fail: `reserve_mib` is the margin kept free for that growth.
//!
//! Only training's need evicts: memory of processes that are neither training nor inference
//! lowers what new inference clients may pin, but never makes the enforcer kill inference,
//! and on a device where training holds nothing nobody is evicted. Before, any user's GPU
//! process could make root kill inference, training or not.

use enforcer_common::protocol::gpu::MemLimitMib;

/// One inference process's memory on a device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InferenceProcess {
    pub pid: u32,
    pub pool: String,
    pub used_mib: u64,
}

/// One device's memory, attributed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceMemory {
    pub device: u32,
    pub total_mib: u64,
    pub training_mib: u64,
    /// Memory of processes that are neither training nor inference (the enforcer leaves them
    /// alone, but they take room all the same).
    pub other_mib: u64,
    pub inference: Vec<InferenceProcess>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Eviction {
    pub device: u32,
    pub pid: u32,
    pub pool: String,
    pub used_mib: u64,
    /// Says why, with the numbers: what the decision log and the operator read.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Verdict {
    pub device: u32,
    /// What all inference together may hold.
    pub allowance_mib: u64,
    /// What one new inference client may pin: the allowance less what inference holds now.
    pub new_client_limit: MemLimitMib,
    pub evict: Vec<Eviction>,
}

/// Judges one device.
pub(crate) fn judge(memory: &DeviceMemory, reserve_mib: u64) -> Verdict {
    let allowance_mib = memory
        .total_mib
        .saturating_sub(memory.training_mib)
        .saturating_sub(memory.other_mib)
        .saturating_sub(reserve_mib);
    // What inference may hold before it is evicted: the room training's memory and its
    // growth margin leave, others' memory not counted; no training here, no limit.
    let evict_above_mib = match memory.training_mib {
        0 => u64::MAX,
        training_mib => memory
            .total_mib
            .saturating_sub(training_mib)
            .saturating_sub(reserve_mib),
    };
    let mut held: u64 = memory.inference.iter().map(|p| p.used_mib).sum();
    // Largest first: the fewest evictions that bring inference back under its allowance.
    let mut by_size: Vec<&InferenceProcess> = memory.inference.iter().collect();
    by_size.sort_by(|a, b| b.used_mib.cmp(&a.used_mib).then(a.pid.cmp(&b.pid)));
    let mut evict = Vec::new();
    for process in by_size {
        if held <= evict_above_mib {
            break;
        }
        evict.push(Eviction {
            device: memory.device,
            pid: process.pid,
            pool: process.pool.clone(),
            used_mib: process.used_mib,
            message: format!(
                "evicting pid {} of pool {:?}: it holds {} MiB of GPU {}, and inference may \
                 hold {} MiB there beside training's {} MiB and the {} MiB kept free for \
                 training to grow (total {} MiB; others' {} MiB are not held against it)",
                process.pid,
                process.pool,
                process.used_mib,
                memory.device,
                evict_above_mib,
                memory.training_mib,
                reserve_mib,
                memory.total_mib,
                memory.other_mib,
            ),
        });
        held -= process.used_mib;
    }
    Verdict {
        device: memory.device,
        allowance_mib,
        new_client_limit: MemLimitMib(allowance_mib.saturating_sub(held)),
        evict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, used_mib: u64) -> InferenceProcess {
        InferenceProcess {
            pid,
            pool: "gpu".to_owned(),
            used_mib,
        }
    }

    fn h100(training_mib: u64, inference: Vec<InferenceProcess>) -> DeviceMemory {
        DeviceMemory {
            device: 0,
            total_mib: 81_559,
            training_mib,
            other_mib: 500,
            inference,
        }
    }

    #[test]
    fn room_left_becomes_the_next_clients_limit_and_nobody_is_evicted() {
        let verdict = judge(&h100(40_000, vec![process(10, 8_000)]), 4_096);
        assert_eq!(verdict.allowance_mib, 81_559 - 40_000 - 500 - 4_096);
        assert_eq!(verdict.new_client_limit, MemLimitMib(36_963 - 8_000));
        assert!(verdict.evict.is_empty());
    }

    #[test]
    fn training_growing_into_inference_evicts_the_largest_first_with_a_clear_message() {
        let inference = vec![process(10, 6_000), process(11, 20_000), process(12, 9_000)];
        // Evicted above 81559 - 65000 - 4096 = 12463 (others' 500 not held against it);
        // inference holds 35000. New clients may pin within 81559 - 65000 - 500 - 4096 = 11963.
        let verdict = judge(&h100(65_000, inference), 4_096);
        let pids: Vec<u32> = verdict.evict.iter().map(|e| e.pid).collect();
        assert_eq!(pids, vec![11, 12], "20000 then 9000 leaves 6000 <= 12463");
        assert_eq!(verdict.new_client_limit, MemLimitMib(11_963 - 6_000));
        let message = &verdict.evict[0].message;
        for part in [
            "pid 11",
            "\"gpu\"",
            "20000 MiB",
            "12463 MiB",
            "65000 MiB",
            "4096 MiB",
        ] {
            assert!(message.contains(part), "{part} missing: {message}");
        }
    }

    #[test]
    fn a_device_training_fills_leaves_inference_nothing() {
        let verdict = judge(&h100(80_000, vec![process(10, 1)]), 4_096);
        assert_eq!(verdict.allowance_mib, 0);
        assert_eq!(verdict.new_client_limit, MemLimitMib(0));
        assert_eq!(verdict.evict.len(), 1);
    }

    #[test]
    fn memory_of_others_never_evicts_and_without_training_nobody_is() {
        // Another user fills the device beside a small training job: new clients may pin
        // nothing more, but inference is not killed for the other user's memory.
        let mut crowded = h100(10_000, vec![process(10, 20_000)]);
        crowded.other_mib = 55_000;
        let verdict = judge(&crowded, 4_096);
        assert!(verdict.evict.is_empty(), "{:?}", verdict.evict);
        assert_eq!(verdict.new_client_limit, MemLimitMib(0));
        // No training on the device at all: nothing to make room for.
        let mut no_training = h100(0, vec![process(10, 70_000)]);
        no_training.other_mib = 20_000;
        assert!(judge(&no_training, 4_096).evict.is_empty());
    }
}
