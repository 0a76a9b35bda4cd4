//! What the daemon needs to know of the machine it runs on, and the preparations it makes
//! there: every path it uses, its privileges and mounts, the cgroup mode, the CPUs and their
//! SMT siblings, the clock the sensor stamps events with, and the service manager's notifications.

pub(crate) mod cgroup_support;
pub(crate) mod clock;
pub mod paths;
pub(crate) mod preflight;
pub(crate) mod procfs;
pub(crate) mod systemd;
pub(crate) mod topology;
pub mod user_namespace;
