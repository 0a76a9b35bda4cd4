//! The userspace half of the scheduler sensor: load, attach, pin, read.

pub mod btf;
pub mod calibration;
pub mod interval;
pub mod loader;
pub mod object;
pub mod offsets;
pub mod readings;
pub mod readopt;

pub use loader::{Sensor, SensorError, SensorMaps};
