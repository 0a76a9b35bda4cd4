//! `enforcer calibrate`: this machine's floor for the cost of a program on the scheduler's
//! tracepoints.
//!
//! - [`measure`] attaches the object's two calibration programs (a no-op and a single clock
//!   read) to sched_switch with run-time statistics on, for a while, and reports nanoseconds
//!   per run. On a VM the floor can be a large part of any program's cost (measured here:
//!   tens of ns for the no-op), so the sensor's cost means most next to it.
//! - [`hold_floor`] attaches a no-op to every tracepoint the sensor uses and holds them: a
//!   workload run meanwhile loses what any program there would cost it. Its throughput loss
//!   is the floor under the sensor's own (docs/benchmarks.md, "Sensor cost").

use std::time::Duration;

use aya::{
    EbpfLoader,
    sys::{Stats, enable_stats},
};
use enforcer_common::{
    maps::{CALIBRATION_PROGRAMS, FLOOR_PROGRAMS},
    protocol::ProgramStats,
};

use super::{
    loader::{SensorError, attach_program},
    object,
};

/// Runs the calibration programs for `duration` and returns their statistics.
pub(crate) fn measure(duration: Duration) -> Result<Vec<ProgramStats>, SensorError> {
    let mut ebpf = load()?;
    // Statistics stay on while this fd is open, whatever kernel.bpf_stats_enabled says.
    let _stats = enable_stats(Stats::RunTime).map_err(SensorError::Stats)?;
    let btf = aya::Btf::from_sys_fs().map_err(SensorError::KernelBtf)?;
    for name in CALIBRATION_PROGRAMS {
        attach_program(&mut ebpf, name, "sched_switch", &btf)?;
    }
    std::thread::sleep(duration);
    let mut stats = Vec::new();
    for name in CALIBRATION_PROGRAMS {
        let program = ebpf.program(name).ok_or(SensorError::Missing {
            what: "program",
            name,
        })?;
        let info = program
            .info()
            .map_err(|source| SensorError::Program { name, source })?;
        stats.push(ProgramStats {
            id: info.id(),
            name: name.to_owned(),
            run_count: info.run_count(),
            run_time_ns: info.run_time().as_nanos() as u64,
        });
    }
    Ok(stats)
}

/// Attaches a no-op program to each tracepoint the sensor uses, with run-time statistics left
/// as they are (off unless someone turned them on), calls `attached` with the tracepoints once
/// all are attached, and holds them for `duration`. Killing the process detaches them: they
/// are links of this process, never pinned.
pub(crate) fn hold_floor(
    duration: Duration,
    attached: impl FnOnce(&[&str]),
) -> Result<(), SensorError> {
    let mut ebpf = load()?;
    let btf = aya::Btf::from_sys_fs().map_err(SensorError::KernelBtf)?;
    for (name, tracepoint) in FLOOR_PROGRAMS {
        attach_program(&mut ebpf, name, tracepoint, &btf)?;
    }
    attached(&FLOOR_PROGRAMS.map(|(_, tracepoint)| tracepoint));
    std::thread::sleep(duration);
    Ok(())
}

/// The sensor's object, loaded for calibration: its maps are created, none is pinned.
fn load() -> Result<aya::Ebpf, SensorError> {
    let object = object::object().ok_or(SensorError::NotBuilt)?;
    // The object's task-local storage map is one aya has no type for (see `offsets::loader_with`).
    EbpfLoader::new()
        .allow_unsupported_maps()
        .load(object)
        .map_err(|source| SensorError::Load { source })
}
