//! The sensor's state maps pinned by a previous daemon of this instance, taken over by the
//! next one.
//!
//! A daemon that stopped cleanly removed its pins; one that died (SIGKILL, a crash, the OOM
//! killer) left them, and its programs detached with it. Its successor loads its programs on
//! the same `thread_state`, `job_stats`, `cpu_state` and `counters`, so that every thread
//! classified before (children of launched jobs included, which no registry lists) stays
//! classified, and the per-job totals and histograms go on instead of restarting from zero.
//! The event ring, the settings and `reserved_cpus` are made afresh: stale events would be
//! acted on, and the other two are rewritten at start anyway.
//!
//! Between the two daemons no program ran, so the maps are corrected before they are used:
//! - threads that exited meanwhile were never removed (the exit hook was detached): their
//!   entries go;
//! - a wait or a report in progress at the crash would end at the next switch-in with the
//!   whole gap counted as run-queue wait: they lived in `task_cache`, which is never taken
//!   over, so every thread starts afresh there;
//! - each CPU's current segment began before the gap: it is forgotten, so the gap is not
//!   charged to whatever class ran at the crash.
//!
//! A pin whose shape (type, key size, value size, entries) differs from this build's is not
//! used: it is removed with a warning, and the map starts empty. (Layout changes also bump
//! `paths::PIN_LAYOUT`; this check catches what a missed bump would not.)

use std::path::Path;

use aya::maps::{Array, HashMap, Map, MapData, MapInfo, MapType};
use enforcer_common::{
    CpuState, JobStats, MAX_CPUS, MAX_JOBS, MAX_THREADS, NR_COUNTERS, ThreadState, maps as names,
};
use tracing::{info, warn};

/// A state map and the shape this build gives it.
struct StateMap {
    name: &'static str,
    map_type: MapType,
    value_size: usize,
    max_entries: u32,
}

/// The maps a successor takes over, `pool_threads` of `max_inference_threads` entries. Every
/// key is a `u32` (tid, job id, CPU, counter index).
fn state_maps(max_inference_threads: u32) -> [StateMap; 5] {
    [
        StateMap {
            name: names::THREAD_STATE,
            map_type: MapType::Hash,
            value_size: size_of::<ThreadState>(),
            max_entries: MAX_THREADS,
        },
        StateMap {
            name: names::POOL_THREADS,
            map_type: MapType::Hash,
            value_size: size_of::<ThreadState>(),
            max_entries: max_inference_threads,
        },
        StateMap {
            name: names::JOB_STATS,
            map_type: MapType::PerCpuArray,
            value_size: size_of::<JobStats>(),
            max_entries: MAX_JOBS,
        },
        StateMap {
            name: names::CPU_STATE,
            map_type: MapType::Array,
            value_size: size_of::<CpuState>(),
            max_entries: MAX_CPUS,
        },
        StateMap {
            name: names::COUNTERS,
            map_type: MapType::PerCpuArray,
            value_size: size_of::<u64>(),
            max_entries: NR_COUNTERS,
        },
    ]
}

/// Names of the maps the loader opens from (or creates at) their pin.
pub(crate) fn state_map_names() -> impl Iterator<Item = &'static str> {
    state_maps(0).into_iter().map(|m| m.name)
}

/// What was taken over from a previous daemon.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Readopted {
    /// State maps whose pins were found usable and are used as they are.
    pub maps: Vec<&'static str>,
    /// Classified threads still alive.
    pub threads_kept: usize,
    /// Entries of threads that exited while no daemon ran.
    pub threads_pruned: usize,
}

/// Prepares `pin_dir` for loading: usable state pins are corrected for the gap and kept, the
/// rest of a previous run's pins removed. Returns what will be taken over.
pub(crate) fn prepare(pin_dir: &Path, max_inference_threads: u32) -> Readopted {
    let mut readopted = Readopted::default();
    if !pin_dir.exists() {
        return readopted;
    }
    for map in &state_maps(max_inference_threads) {
        let path = pin_dir.join(map.name);
        if !path.exists() {
            continue;
        }
        let usable = check_shape(&path, map).and_then(|()| correct_for_gap(&path, map.name));
        match usable {
            Ok(Some((kept, pruned))) => {
                readopted.threads_kept += kept;
                readopted.threads_pruned += pruned;
                readopted.maps.push(map.name);
            }
            Ok(None) => readopted.maps.push(map.name),
            Err(reason) => {
                warn!(
                    map = map.name,
                    "not taking over the pinned map: {reason}; it starts empty"
                );
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    for name in names::ALL_MAPS {
        if !readopted.maps.contains(&name) {
            let _ = std::fs::remove_file(pin_dir.join(name));
        }
    }
    if readopted.maps.is_empty() {
        warn!(pin_dir = %pin_dir.display(), "removed stale pins of a previous run");
    } else {
        info!(
            maps = readopted.maps.join(","),
            threads = readopted.threads_kept,
            pruned = readopted.threads_pruned,
            "taking over the pinned sensor state of a previous run"
        );
    }
    readopted
}

/// Why a pinned state map is not taken over.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("cannot read its info: {0}")]
    Info(aya::maps::MapError),
    #[error("its type is unknown to this build: {0}")]
    Type(aya::maps::MapError),
    #[error("its shape (type, key, value, entries) is {found:?}, this build's {wanted:?}")]
    Shape {
        found: (MapType, u32, u32, u32),
        wanted: (MapType, u32, u32, u32),
    },
    #[error("cannot open it: {0}")]
    Open(aya::maps::MapError),
    #[error("correcting it for the gap: {0}")]
    Correct(aya::maps::MapError),
}

fn check_shape(path: &Path, expected: &StateMap) -> Result<(), Unusable> {
    let info = MapInfo::from_pin(path).map_err(Unusable::Info)?;
    let map_type = info.map_type().map_err(Unusable::Type)?;
    let found = (
        map_type,
        info.key_size(),
        info.value_size(),
        info.max_entries(),
    );
    let wanted = (
        expected.map_type,
        size_of::<u32>() as u32,
        expected.value_size as u32,
        expected.max_entries,
    );
    if found != wanted {
        return Err(Unusable::Shape { found, wanted });
    }
    Ok(())
}

/// Corrects one state map for the time no program ran. For `thread_state`, returns the
/// threads kept and pruned.
fn correct_for_gap(path: &Path, name: &str) -> Result<Option<(usize, usize)>, Unusable> {
    let data = MapData::from_pin(path).map_err(Unusable::Open)?;
    let failed = Unusable::Correct;
    if name == names::THREAD_STATE || name == names::POOL_THREADS {
        let mut threads =
            HashMap::<_, u32, ThreadState>::try_from(Map::HashMap(data)).map_err(failed)?;
        return prune_exited_threads(&mut threads).map(Some).map_err(failed);
    }
    if name == names::CPU_STATE {
        let mut cpus = Array::<_, CpuState>::try_from(Map::Array(data)).map_err(failed)?;
        forget_gap_in_cpus(&mut cpus).map_err(failed)?;
    }
    // job_stats and counters hold totals only.
    Ok(None)
}

fn prune_exited_threads(
    threads: &mut HashMap<MapData, u32, ThreadState>,
) -> Result<(usize, usize), aya::maps::MapError> {
    let tids: Vec<u32> = threads.keys().filter_map(Result::ok).collect();
    let (mut kept, mut pruned) = (0, 0);
    for tid in tids {
        // /proc/<tid> resolves any thread id, not only a process's.
        if !Path::new(&format!("/proc/{tid}")).exists() {
            threads.remove(&tid)?;
            pruned += 1;
            continue;
        }
        kept += 1;
    }
    Ok((kept, pruned))
}

fn forget_gap_in_cpus(cpus: &mut Array<MapData, CpuState>) -> Result<(), aya::maps::MapError> {
    for cpu in 0..cpus.len() {
        let state = cpus.get(&cpu, 0)?;
        if state.switched_at_ns != 0 || state.last_event_ns != 0 || state.training_since_ns != 0 {
            // switched_at_ns = 0: the sensor treats the CPU's segment as unknown until its
            // next switch, and charges nothing for it; training_since_ns = 0: nor does
            // userspace count a slice in progress that began before the gap.
            let state = CpuState {
                switched_at_ns: 0,
                last_event_ns: 0,
                training_since_ns: 0,
                ..state
            };
            cpus.set(cpu, state, 0)?;
        }
    }
    Ok(())
}
