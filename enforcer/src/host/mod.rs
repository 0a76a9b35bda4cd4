//! What the daemon needs to know of the machine it runs on, and the preparations it makes
//! there: every path it uses, its privileges and mounts, the cgroup mode, the CPUs and their
//! SMT siblings, the clock the sensor stamps events with, and the service manager's notifications.

pub mod cgroup_support;
pub mod clock;
pub mod paths;
pub mod preflight;
pub mod procfs;
pub mod systemd;
pub mod topology;
pub mod user_namespace;
