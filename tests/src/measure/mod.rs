//! What the kernel says a process, a thread or the machine used.

pub mod proc_stats;
pub mod schedstat;
