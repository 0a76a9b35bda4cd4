//! The daemon's shared state, and the lock each part of it lives behind.
//!
//! The event thread takes only `enforcement` and then `tally`, for microseconds each. Readers
//! (snapshots, `/metrics`) take `enforcement` only for its in-memory state and read every file
//! after letting go of it. Where more than one lock is held, they are taken in the order of
//! the fields below.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, OnceLock},
};

use super::{
    enforcement::Enforcement, event_thread::EventTally, heartbeat::Heartbeat, journal::Journal,
    relaunch_board::RelaunchBoard,
};
use crate::{
    gpu::service::GpuService, policy::pace::PaceTracker, registry::Registry, sensor::Sensor,
};

pub(crate) struct Shared {
    pub instance: String,
    /// The machine's online CPUs.
    pub cpus: BTreeSet<u32>,
    pub registry: Mutex<Registry>,
    /// Training processes launched through this daemon, for a restarted one to find.
    pub journal: Mutex<Journal>,
    pub enforcement: Arc<Mutex<Enforcement>>,
    pub sensor: Mutex<Sensor>,
    pub tally: Arc<Mutex<EventTally>>,
    /// When the event thread last came back from poll(2): the watchdog and `Health` read it.
    pub heartbeat: Arc<Heartbeat>,
    /// The launchers that relaunch their command on request, and each pool's generation.
    pub relaunch: Mutex<RelaunchBoard>,
    /// Where /metrics is served, if anywhere.
    pub metrics_addr: Option<String>,
    /// The SLO of each pool whose config gives one, for the processes launched into it.
    pub pool_slo_ms: HashMap<String, u64>,
    /// Set once, right after `Shared` exists: its NVML sampler reads the registry.
    pub gpu: OnceLock<GpuService>,
    /// Each training job's reports of its own progress, by job name. Held for in-memory
    /// updates only; no other lock is taken under it.
    pub progress: Mutex<HashMap<String, PaceTracker>>,
}
