//! The userspace half of the scheduler sensor: load, attach, pin, read.

pub mod loader;
pub mod object;
pub mod snapshot;
pub mod tracefs;

pub use loader::{Sensor, SensorError};
pub use snapshot::{JobTotals, Snapshot};
