//! What the benchmarks share:
//! - `rounds`: rounds kept only while the host is quiet (the steal rule);
//! - `stage`: a scenario run's inference side: its online worker, groups and load;
//! - `stats`: medians, paired ratios and their intervals, and the table cells they go in;
//! - `inference`: the workers, their requests and load, the offline job, their groups;
//! - `cpus`: the machine's CPUs, counted and split;
//! - `harvest`: what the enforcer's pace controller did in a window, from its decision log;
//! - `process`: commands run to their end;
//! - `progress_bar`: the long runs' one line on stderr;
//! - `training`: a training job timed on request (`--serve`), the real one or a stand-in;
//! - `verdict`: the words a targets table gives a figure against its target.

pub(crate) mod cpus;
pub(crate) mod harvest;
pub(crate) mod inference;
pub(crate) mod process;
pub(crate) mod progress_bar;
pub(crate) mod rounds;
pub(crate) mod stage;
pub(crate) mod stats;
pub(crate) mod training;
pub(crate) mod verdict;
