//! Every filesystem path the enforcer uses, in one place.

use std::path::PathBuf;

/// Where bpffs is (and is mounted when missing).
pub const BPFFS: &str = "/sys/fs/bpf";
/// Where tracefs is (and is mounted when missing). Holds the tracepoint `format` files.
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// Root of everything the enforcer pins; never the flat root of bpffs.
pub const PIN_ROOT: &str = "/sys/fs/bpf/reamer";
/// Layout version of the pinned maps: bumped whenever a shared type changes size or meaning,
/// so that a new daemon never reads an old daemon's maps as its own. v2: `ThreadState` gained
/// `report_ran_since_ns`. v3: `ThreadState` keeps only class and group (the wait in progress
/// moved to the unpinned `task_cache`), and `counters` gained `task_cache_missing`. v4:
/// `CpuState` padded to 128 bytes, a cache line pair of its own per CPU. v5: `CpuState` gained
/// the training slice in progress and grew to 192 bytes; `run_ns` counts `sum_exec_runtime`.
/// v6: inference threads moved from `thread_state` to `pool_threads`, and `counters` gained
/// `pool_thread_map_full`. v7: `counters` gained `switches_from_unknown_task`. v8: `counters`
/// gained `untraced_training_slices`.
pub const PIN_LAYOUT: &str = "v8";
/// Runtime directory for control sockets.
pub const RUN_DIR: &str = "/run/reamer";
/// The pipe directory of an MPS control daemon the enforcer starts (`[gpu] mps = "start"`)
/// when `mps_pipe_dir` names none: under /run, which only root can write, not NVIDIA's default
/// in world-writable /tmp (gpu/pipe_dir.rs).
pub const MPS_PIPE_DIR: &str = "/run/reamer/mps";
/// Config file read by `enforcer run` when `--config` is not given (optional).
pub const DEFAULT_CONFIG: &str = "/etc/reamer/enforcer.toml";
/// Instance name when `--instance` is not given. Instances let tests and the demo run a daemon
/// of their own beside the node's.
pub const DEFAULT_INSTANCE: &str = "default";

/// Directory holding this instance's pinned maps: `/sys/fs/bpf/reamer/v8/<instance>`.
pub fn pin_dir(instance: &str) -> PathBuf {
    PathBuf::from(PIN_ROOT).join(PIN_LAYOUT).join(instance)
}

/// This instance's control socket: `/run/reamer/<instance>.sock`.
pub fn socket_path(instance: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{instance}.sock"))
}

/// This instance's decision log: `/run/reamer/<instance>.decisions.jsonl`.
pub fn decision_log(instance: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{instance}.decisions.jsonl"))
}

/// Training processes launched through this instance's daemon, for its successor to find:
/// `/run/reamer/<instance>.launched.json`.
pub fn launched_journal(instance: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{instance}.launched.json"))
}

/// What this instance changed in pods' groups, written before each change for its successor
/// to undo: `/run/reamer/<instance>.pod-groups.json` (`actuate::pod_ledger`).
pub fn pod_ledger(instance: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{instance}.pod-groups.json"))
}

/// Where earlier versions of reamer kept the kubelet's CPUs of the pods' containers: read once into the
/// ledger by a daemon upgraded after one that died.
pub fn legacy_pod_bases(instance: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{instance}.pod-cpus.json"))
}

/// An instance name that cannot name a directory and a file.
#[derive(Debug, thiserror::Error)]
#[error("instance name {0:?} must be 1-64 characters of letters, digits, '-' or '_'")]
pub struct InvalidInstance(pub String);

/// Checks an instance name: it becomes a directory and a file name.
pub fn validate_instance(instance: &str) -> Result<(), InvalidInstance> {
    let ok = !instance.is_empty()
        && instance.len() <= 64
        && instance
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(InvalidInstance(instance.to_owned()))
    }
}
