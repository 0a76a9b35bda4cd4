//! The control socket's protocol: a unix stream socket speaking JSON lines, one request per
//! line and one response per request, except a grant subscription, which streams grants one
//! way and takes needs and latency reports the other.
//!
//! The enforcer serves it; `enforcer launch`, `observe`, `status` and `relaunch`, the inference
//! worker, the tests and the benchmarks speak it, all through these types.

pub mod gpu;
pub mod snapshot;

use serde::{Deserialize, Serialize};

pub use snapshot::{
    BesideJob, EnforcementStatus, HarvestStatus, JobProgress, JobTotals, PodInfo, PoolInfo,
    PoolStatus, ProgramStats, Snapshot,
};

/// Set for every command `enforcer launch` starts: the control socket of the daemon it
/// registered with.
pub const SOCKET_ENV: &str = "REAMER_SOCKET";
/// Where set (seconds, above 0), a job's progress reporter tries again this long after a
/// failure instead of 30 s: for a job that outlives its daemons, as a benchmark's job does
/// while a daemon is started for each of its windows. Read by `python/reamer_progress.py`
/// too.
pub const PROGRESS_RETRY_ENV: &str = "REAMER_PROGRESS_RETRY_S";
/// Set for a command launched into a pool: the pool's name, so that an inference worker
/// subscribes to its grants without being told twice.
pub const POOL_ENV: &str = "REAMER_POOL";
/// Set for a command launched into a pool whose config gives `slo_ms`: the inference worker
/// takes it as its `--slo-ms` unless the command line says otherwise.
pub const SLO_ENV: &str = "REAMER_SLO_MS";

/// Longest request line accepted; anything longer is a broken or hostile client.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// What a launched process joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    Training,
    Pool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Adds process `pid` (with its threads and descendants) to a training job or a pool.
    Register {
        kind: GroupKind,
        name: String,
        pid: u32,
    },
    /// A worker of pool `pool` asks for its core grants: the current one at once, then every
    /// change, a shrink announced before the cgroup is rewritten. Only a process inside the
    /// pool's cgroup may subscribe for it (checked with the socket's peer credentials). The
    /// subscription lasts while the connection is open both ways: closing it, or only its
    /// write half, ends the subscription.
    Subscribe { pool: String },
    /// Sent by a subscribed worker of an online pool, on its subscription: it needs `cpus`
    /// CPUs to meet its SLO at its current load. The pool's need is the sum over its workers;
    /// beyond the pool's `min_cores` it is granted from the cores training leaves free. No
    /// answer: the grants that follow are the answer. A worker holds a smaller need for a few
    /// seconds before it sends it, so the grants do not follow every wobble of the load.
    Need { cpus: usize },
    /// Sent by a subscribed worker of an online pool once a second while it has requests, and
    /// at once where the period's requests already miss the SLO: their latency over the
    /// period against the worker's SLO. The enforcer steers the pool's CPU weight by it,
    /// between the pool's `min_cpu_weight` and `cpu_weight`. No answer.
    Latency(LatencyReport),
    /// Reads the sensor's totals and the enforcement state.
    Snapshot,
    /// Reads what `enforcer observe` shows and records, cheaply enough to ask ten times a
    /// second: a `Snapshot` without the pools' files (CPUs, processes), the recent decisions,
    /// the time by class, the GPU side and the event thread's scheduling.
    Observe,
    /// A launcher started with `--relaunch` asks, every half second, what a new worker of
    /// `pool` would start with now and the pool's relaunch generation: a new MPS
    /// percentage, or a raised generation, makes it relaunch its command.
    Watch { pool: String },
    /// Makes every launcher of `pool` started with `--relaunch` relaunch its command: the new
    /// one is started, and the old one is stopped once the new one is ready (root only).
    Relaunch { pool: String },
    /// Sent by a training job's own process: the steps (or samples) it has done since it
    /// started, counted by the job. The daemon takes the job from the sender's credentials (a
    /// process of no training job is refused) and turns the counts into the job's pace. One
    /// answer per report; about once a second is enough (`python/reamer_progress.py`).
    Progress {
        steps: u64,
        /// The count averaged over the time since the job's last report (absent from the
        /// first report, and from reporters that do not keep it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mean: Option<MeanCount>,
    },
    /// Whether the daemon's event path is alive, as its service watchdog judges it: what
    /// `enforcer health` and the Kubernetes probes ask, over the control socket, where no
    /// HTTP client can take their place.
    Health,
}

/// A job's count of steps averaged over time, `seconds` long up to the report that carries
/// it. A job whose steps come in bursts (a data loader's workers finishing their batches
/// together) has a count that climbs in stairs, and a pace read from two counts a few seconds
/// apart moves by a whole burst with where in a burst each count fell; averaged over the time
/// between reports, the count follows the stairs' slope instead.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanCount {
    pub steps: f64,
    pub seconds: f64,
}

impl MeanCount {
    /// The longest time a mean may cover: a report's mean speaks of its last minute at most.
    pub const MAX_SECONDS: f64 = 60.0;

    /// Why this mean cannot be the average of a count that reached `steps` at the report: not
    /// a number, negative, above the count, or over no time or more than `MAX_SECONDS`.
    pub fn problem(&self, steps: u64) -> Option<String> {
        if !(self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= Self::MAX_SECONDS) {
            return Some(format!(
                "mean.seconds {} is not a time above 0 and at most {} s",
                self.seconds,
                Self::MAX_SECONDS
            ));
        }
        // Its sender's sum may round a hair above a count that stayed the same throughout.
        let most = steps as f64 * (1.0 + 1e-9) + 1e-9;
        if !(self.steps.is_finite() && self.steps >= 0.0 && self.steps <= most) {
            return Some(format!(
                "mean.steps {} is not a count from 0 to the report's {steps} steps",
                self.steps
            ));
        }
        None
    }
}

/// One online worker's latency over its last report period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyReport {
    /// Requests answered in the period.
    pub requests: u64,
    /// Requests refused for overload, or failed, in the period: misses whatever the latency.
    #[serde(default)]
    pub missed: u64,
    pub p99_us: u64,
    pub slo_us: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Response {
    Registered {
        name: String,
        id: u32,
        threads: usize,
        /// Environment the registered process should start with (a GPU pool's MPS limits).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<(String, String)>,
    },
    Snapshot(Box<Snapshot>),
    Grant(Grant),
    Watching {
        /// Raised by each `Relaunch` of the pool.
        generation: u64,
        /// What a new worker of the pool starts with now (a GPU pool's MPS limits).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<(String, String)>,
        /// Why a new worker would be refused now (no GPU memory left for one): a relaunch
        /// waits until this clears.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    Relaunching {
        pool: String,
        generation: u64,
        /// The pids of the launchers that will relaunch their command.
        launchers: Vec<u32>,
    },
    /// The answer to `Progress`: the job it was counted for, and the job's pace now.
    Progress {
        job: String,
        steps_per_s: Option<f64>,
    },
    /// The answer to `Health`: None where the event path is alive, else what is wrong.
    Health {
        problem: Option<String>,
    },
    Error {
        message: String,
    },
}

/// The CPUs a pool may use. `shrinking` announces that CPUs are being taken away: the cpuset
/// is rewritten right after this message, and a worker that keeps threads on them is simply
/// held to the new set by the cgroup. `paused` (offline pools, `[policy]
/// pause_offline_when_training_short`): the pool's cgroup is frozen right after this message,
/// until a grant says otherwise; the CPUs are those it resumes on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub pool: String,
    pub cpus: Vec<u32>,
    #[serde(default)]
    pub shrinking: bool,
    #[serde(default)]
    pub paused: bool,
}

/// A message as one line of the protocol: its JSON and a newline.
pub fn to_line<T: Serialize>(message: &T) -> Vec<u8> {
    // The protocol's types hold no map with non-string keys and no float that is not finite
    // where it matters: serializing them cannot fail, and a failure would be a bug here.
    let mut line = serde_json::to_vec(message).expect("protocol messages serialize");
    line.push(b'\n');
    line
}

/// A line that is not a message of the protocol.
#[derive(Debug, thiserror::Error)]
#[error("malformed message: {0}")]
pub struct Malformed(#[from] pub serde_json::Error);

/// Parses one line (its newline optional).
pub fn from_line<'a, T: Deserialize<'a>>(line: &'a [u8]) -> Result<T, Malformed> {
    Ok(serde_json::from_slice(line)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_report_with_or_without_its_mean_and_a_mean_that_cannot_be_its_counts() {
        // The Python helper's first report, and the ones after it.
        let first: Request = from_line(br#"{"op":"progress","steps":12}"#).unwrap();
        assert_eq!(
            first,
            Request::Progress {
                steps: 12,
                mean: None
            }
        );
        let line = br#"{"op":"progress","steps":40,"mean":{"steps":33.5,"seconds":1.02}}"#;
        let Request::Progress {
            steps,
            mean: Some(mean),
        } = from_line(line).unwrap()
        else {
            panic!("a report with its mean");
        };
        assert_eq!((steps, mean.steps, mean.seconds), (40, 33.5, 1.02));
        assert_eq!(mean.problem(steps), None);
        let mean = |steps, seconds| MeanCount { steps, seconds };
        // A sum that rounds a hair above a count that did not move is still the count's.
        assert_eq!(mean(40.000_000_000_1, 1.0).problem(40), None);
        for (bad, field) in [
            (mean(41.0, 1.0), "mean.steps 41"),
            (mean(-1.0, 1.0), "mean.steps -1"),
            (mean(f64::NAN, 1.0), "mean.steps NaN"),
            (mean(3.0, 0.0), "mean.seconds 0"),
            (mean(3.0, 61.0), "mean.seconds 61"),
        ] {
            let problem = bad.problem(40).expect("refused");
            assert!(problem.starts_with(field), "{problem}");
        }
    }

    #[test]
    fn messages_keep_the_wire_form_workers_and_scripts_send() {
        let grant = Response::Grant(Grant {
            pool: "batch".into(),
            cpus: vec![2, 3],
            shrinking: false,
            paused: true,
        });
        assert_eq!(
            String::from_utf8(to_line(&grant)).unwrap(),
            "{\"status\":\"grant\",\"pool\":\"batch\",\"cpus\":[2,3],\"shrinking\":false,\"paused\":true}\n"
        );
        let latency: Request =
            from_line(br#"{"op":"latency","requests":40,"missed":1,"p99_us":9000,"slo_us":50000}"#)
                .unwrap();
        assert_eq!(
            latency,
            Request::Latency(LatencyReport {
                requests: 40,
                missed: 1,
                p99_us: 9000,
                slo_us: 50000
            })
        );
        // An older worker's grant without `paused`, and a report without `missed`.
        let old: Grant = from_line(br#"{"pool":"p","cpus":[1],"shrinking":true}"#).unwrap();
        assert!(!old.paused);
        let need: Request = from_line(b"{\"op\":\"need\",\"cpus\":3}\n").unwrap();
        assert_eq!(need, Request::Need { cpus: 3 });
        assert!(from_line::<Request>(br#"{"op":"dance"}"#).is_err());
    }
}
