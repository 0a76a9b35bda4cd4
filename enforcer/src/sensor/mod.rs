//! The userspace half of the scheduler sensor: load, attach, pin, read.

pub mod btf;
pub mod calibration;
pub mod loader;
pub mod object;
pub mod offsets;
pub mod readopt;
pub mod snapshot;

pub use loader::{Sensor, SensorError};
pub use snapshot::{JobTotals, Snapshot};
