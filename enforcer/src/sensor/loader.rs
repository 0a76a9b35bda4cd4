//! Loads the sensor into the kernel, attaches it to the sched tracepoints and pins its maps.

use std::path::{Path, PathBuf};

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, MapError, PerCpuArray, PerCpuValues, RingBuf},
    programs::{BtfTracePoint, ProgramError},
};
use enforcer_common::{CpuState, JobStats, ThreadState, maps as names, protocol::ProgramStats};
use tracing::{info, warn};

use crate::{config::SensorSettings, host::paths};

use super::{
    btf::Btf,
    object, offsets,
    readopt::{self, Readopted},
};

#[derive(Debug, thiserror::Error)]
pub enum SensorError {
    #[error(
        "eBPF object not built: this enforcer binary was compiled with AYA_BUILD_SKIP; \
         rebuild it with `cargo xtask build`"
    )]
    NotBuilt,
    #[error(transparent)]
    Offsets(#[from] offsets::OffsetError),
    #[error("reading kernel BTF for the programs' attach points: {0}")]
    KernelBtf(aya::BtfError),
    #[error(
        "loading the eBPF object failed: {source}. BPF may be unavailable here: the enforcer \
         needs root (CAP_BPF, CAP_PERFMON), a kernel with CONFIG_BPF_SYSCALL and BTF"
    )]
    Load { source: aya::EbpfError },
    #[error("program {name}: {source}")]
    Program {
        name: &'static str,
        source: ProgramError,
    },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        source: MapError,
    },
    #[error("map {name}: one value per CPU: {source}")]
    MapValues {
        name: &'static str,
        source: std::io::Error,
    },
    #[error("the eBPF object has no {what} named {name}")]
    Missing {
        what: &'static str,
        name: &'static str,
    },
    #[error("cannot enable BPF run-time statistics: {0}")]
    Stats(aya::sys::SyscallError),
    #[error("creating the pin directory {path}: {error}")]
    PinDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("pinning map {name} under {path}: {error}")]
    Pin {
        path: PathBuf,
        name: &'static str,
        error: aya::pin::PinError,
    },
}

/// The maps userspace reads and writes, taken out of the loaded object.
pub struct SensorMaps {
    /// Training threads' classes.
    pub thread_state: HashMap<MapData, u32, ThreadState>,
    /// Inference threads' classes, in a map of their own (`[sensor] max_inference_threads`).
    pub pool_threads: HashMap<MapData, u32, ThreadState>,
    pub job_stats: PerCpuArray<MapData, JobStats>,
    pub cpu_state: Array<MapData, CpuState>,
    pub counters: PerCpuArray<MapData, u64>,
    pub settings: Array<MapData, enforcer_common::Settings>,
    /// `classify_gen`: bumped after every change to `thread_state`.
    pub classify_gen: Array<MapData, u64>,
}

/// The loaded, attached sensor. Dropping it detaches the programs; `unpin` removes the pins.
pub struct Sensor {
    /// Holds the programs and their tracepoint links.
    ebpf: Ebpf,
    pin_dir: PathBuf,
    /// Taken by whoever consumes events.
    events: Option<RingBuf<MapData>>,
    /// Taken by the enforcer, which publishes training's CPUs in it.
    reserved_cpus: Option<Array<MapData, u32>>,
    pub maps: SensorMaps,
    /// What was taken over from a previous daemon's pins (empty on a first start).
    pub readopted: Readopted,
}

impl Sensor {
    /// Loads and attaches the sensor, pins its maps in `pin_dir` and applies `settings`. The
    /// state maps a previous daemon of this instance left pinned there are taken over
    /// (`readopt`); the others are made afresh.
    pub fn load(pin_dir: &Path, settings: &SensorSettings) -> Result<Self, SensorError> {
        let object = object::object().ok_or(SensorError::NotBuilt)?;
        let btf = Btf::from_sys_fs().map_err(offsets::OffsetError::from)?;
        let offsets = offsets::resolve(&btf, settings.clock)?;
        info!(
            clock = offsets::clock_in_use(&offsets, settings.clock),
            "sensor's wait and run-time clock"
        );
        let readopted = readopt::prepare(pin_dir, settings.max_inference_threads);
        std::fs::create_dir_all(pin_dir).map_err(|error| SensorError::PinDir {
            path: pin_dir.to_owned(),
            error,
        })?;
        let mut loader = offsets::loader_with(&offsets);
        loader.map_max_entries(names::POOL_THREADS, settings.max_inference_threads);
        // Opened from their pin when it is there, created and pinned there otherwise.
        for name in readopt::state_map_names() {
            loader.map_pin_path(name, pin_dir.join(name));
        }
        let mut ebpf = loader
            .load(object)
            .map_err(|source| SensorError::Load { source })?;

        // aya-log: the sensor logs only on rare paths (a full thread map at fork).
        match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(logger) => spawn_log_pump(logger),
            Err(err) => warn!("eBPF log forwarding unavailable: {err}"),
        }

        // The first generation is written before any program runs: a new `task_cache` entry
        // (generation 0) is then always stale, and the programs need no special case for it.
        let generation = ebpf
            .map_mut(names::CLASSIFY_GEN)
            .ok_or(SensorError::Missing {
                what: "map",
                name: names::CLASSIFY_GEN,
            })?;
        Array::<_, u64>::try_from(generation)
            .and_then(|mut generation| generation.set(0, 1, 0))
            .map_err(|source| SensorError::Map {
                name: names::CLASSIFY_GEN,
                source,
            })?;

        let kernel_btf = aya::Btf::from_sys_fs().map_err(SensorError::KernelBtf)?;
        for (name, tracepoint) in names::PROGRAMS {
            attach_program(&mut ebpf, name, tracepoint, &kernel_btf)?;
        }

        pin_all(&ebpf, pin_dir)?;
        let maps = take_maps(&mut ebpf)?;
        let events = take(&mut ebpf, names::EVENTS)?;
        let reserved_cpus = take(&mut ebpf, names::RESERVED_CPUS)?;
        let mut sensor = Self {
            ebpf,
            pin_dir: pin_dir.to_owned(),
            events: Some(events),
            reserved_cpus: Some(reserved_cpus),
            maps,
            readopted,
        };
        sensor.apply_settings(settings.kernel())?;
        info!(pin_dir = %pin_dir.display(), "sensor attached to {} tracepoints", names::PROGRAMS.len());
        Ok(sensor)
    }

    /// Rewrites the runtime knobs; the programs see them at their next run.
    pub fn apply_settings(
        &mut self,
        settings: enforcer_common::Settings,
    ) -> Result<(), SensorError> {
        self.maps
            .settings
            .set(0, settings, 0)
            .map_err(|source| SensorError::Map {
                name: names::SETTINGS,
                source,
            })
    }

    /// Tells the programs that `thread_state` changed: each thread's class is copied into
    /// its `task_cache` entry again at its next event.
    pub fn classes_changed(&mut self) -> Result<(), SensorError> {
        let failed = |source| SensorError::Map {
            name: names::CLASSIFY_GEN,
            source,
        };
        let generation = self.maps.classify_gen.get(&0, 0).map_err(failed)?;
        self.maps
            .classify_gen
            .set(0, generation.wrapping_add(1).max(1), 0)
            .map_err(failed)
    }

    /// Zeroes training job `id`'s totals, on every CPU: a job id freed by a job that ended is
    /// given to the next new job, which must not start with the ended job's hours of run time
    /// (the slow path would read them as one tick's demand).
    pub fn reset_job_stats(&mut self, id: u32) -> Result<(), SensorError> {
        let failed = |source| SensorError::Map {
            name: names::JOB_STATS,
            source,
        };
        let values = |source| SensorError::MapValues {
            name: names::JOB_STATS,
            source,
        };
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| values(e))?;
        let zeros = PerCpuValues::try_from(vec![JobStats::default(); cpus]).map_err(values)?;
        self.maps.job_stats.set(id, zeros, 0).map_err(failed)
    }

    /// The `reserved_cpus` map, once.
    pub fn take_reserved_cpus(&mut self) -> Option<Array<MapData, u32>> {
        self.reserved_cpus.take()
    }

    /// The event ring buffer, once.
    pub fn take_events(&mut self) -> Option<RingBuf<MapData>> {
        self.events.take()
    }

    /// Run counts and run times of the sensor's programs (non-zero only while
    /// `kernel.bpf_stats_enabled` is 1).
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        self.ebpf
            .programs()
            .filter_map(|(name, program)| {
                let info = program.info().ok()?;
                Some(ProgramStats {
                    id: info.id(),
                    name: name.to_owned(),
                    run_count: info.run_count(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                })
            })
            .collect()
    }

    /// Removes the pinned maps and their directory. The programs detach when `self` drops.
    pub fn unpin(&self) {
        remove_pins(&self.pin_dir);
    }
}

/// Loads program `name` of the object and attaches it to the BTF-enabled `tracepoint`.
pub(super) fn attach_program(
    ebpf: &mut Ebpf,
    name: &'static str,
    tracepoint: &str,
    kernel_btf: &aya::Btf,
) -> Result<(), SensorError> {
    let error = |source| SensorError::Program { name, source };
    let program: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .ok_or(SensorError::Missing {
            what: "program",
            name,
        })?
        .try_into()
        .map_err(error)?;
    program.load(tracepoint, kernel_btf).map_err(error)?;
    program.attach().map_err(error)?;
    Ok(())
}

/// Pins the maps the loader did not (the state maps are pinned where they were opened).
fn pin_all(ebpf: &Ebpf, pin_dir: &Path) -> Result<(), SensorError> {
    let state_maps: Vec<&str> = readopt::state_map_names().collect();
    for name in names::ALL_MAPS {
        if state_maps.contains(&name) {
            continue;
        }
        let map = ebpf
            .map(name)
            .ok_or(SensorError::Missing { what: "map", name })?;
        map.pin(pin_dir.join(name))
            .map_err(|error| SensorError::Pin {
                path: pin_dir.to_owned(),
                name,
                error,
            })?;
    }
    Ok(())
}

/// Removes every pin in `pin_dir`, then the directory and its empty parents up to the root.
pub(crate) fn remove_pins(pin_dir: &Path) {
    for name in names::ALL_MAPS {
        let _ = std::fs::remove_file(pin_dir.join(name));
    }
    let _ = std::fs::remove_dir(pin_dir);
    // Parents are shared with other instances: remove_dir fails harmlessly while they are used.
    let mut parent = pin_dir.parent();
    while let Some(dir) = parent {
        if dir == Path::new(paths::BPFFS) || std::fs::remove_dir(dir).is_err() {
            break;
        }
        parent = dir.parent();
    }
}

fn take<M>(ebpf: &mut Ebpf, name: &'static str) -> Result<M, SensorError>
where
    M: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(SensorError::Missing { what: "map", name })?;
    M::try_from(map).map_err(|source| SensorError::Map { name, source })
}

fn take_maps(ebpf: &mut Ebpf) -> Result<SensorMaps, SensorError> {
    Ok(SensorMaps {
        thread_state: take(ebpf, names::THREAD_STATE)?,
        pool_threads: take(ebpf, names::POOL_THREADS)?,
        job_stats: take(ebpf, names::JOB_STATS)?,
        cpu_state: take(ebpf, names::CPU_STATE)?,
        counters: take(ebpf, names::COUNTERS)?,
        settings: take(ebpf, names::SETTINGS)?,
        classify_gen: take(ebpf, names::CLASSIFY_GEN)?,
    })
}

/// Forwards the sensor's aya-log records to the `log`/`tracing` output.
fn spawn_log_pump<T: log::Log + 'static>(logger: aya_log::EbpfLogger<T>) {
    // SAFETY: the logger owns its fd and the AsyncFd owns the logger.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE)
    };
    let Ok(mut logger) = registered else {
        warn!("eBPF log forwarding unavailable: cannot register its ring buffer");
        return;
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = logger.readable_mut().await else {
                return;
            };
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
}
