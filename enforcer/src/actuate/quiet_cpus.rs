//! The sensor's `reserved_cpus` map: the CPUs where a report of training queued behind
//! inference would change nothing (`Policy::quiet_cpus`), so that the sensor does not send it.
//! Each report wakes the real-time event thread, which preempts whoever runs, often the
//! training thread just queued: a report that can change nothing only costs training.

use std::collections::BTreeSet;

use aya::maps::{Array, MapData};
use tracing::warn;

pub(crate) struct QuietCpus {
    map: Array<MapData, u32>,
    /// What the map holds now.
    published: BTreeSet<u32>,
}

impl QuietCpus {
    /// The map the sensor reads (`Sensor::take_reserved_cpus`), as the sensor made it: empty.
    pub(crate) fn new(map: Array<MapData, u32>) -> Self {
        Self {
            map,
            published: BTreeSet::new(),
        }
    }

    /// Makes `quiet` the CPUs where the sensor stays quiet, writing only the changes.
    pub(crate) fn publish(&mut self, quiet: BTreeSet<u32>) {
        for &cpu in self.published.symmetric_difference(&quiet) {
            if let Err(err) = self.map.set(cpu, u32::from(quiet.contains(&cpu)), 0) {
                warn!("publishing quiet CPU {cpu}: {err}");
            }
        }
        self.published = quiet;
    }
}
