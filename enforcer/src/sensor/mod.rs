//! The userspace half of the scheduler sensor: load, attach, pin, read.

pub(crate) mod btf;
pub(crate) mod calibration;
pub(crate) mod interval;
pub(crate) mod loader;
pub mod object;
pub(crate) mod offsets;
pub(crate) mod readings;
pub(crate) mod readopt;

pub use loader::{Sensor, SensorError, SensorMaps};
