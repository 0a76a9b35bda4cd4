//! The control socket: a unix stream socket speaking JSON lines, one request per line and one
//! response per request. `launch` registers through it, `observe` reads snapshots through it.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::UnixStream,
};

use crate::sensor::Snapshot;

/// Longest request line accepted; anything longer is a broken or hostile client.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    Training,
    Pool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// between the pool's `min_cpu_weight` and `cpu_weight` (`online_weight`). No answer.
    Latency {
        /// Requests answered in the period.
        requests: u64,
        /// Requests refused for overload, or failed, in the period.
        #[serde(default)]
        missed: u64,
        p99_us: u64,
        slo_us: u64,
    },
    /// Reads the sensor's totals.
    Snapshot,
    /// A launcher started with `--relaunch` asks, every half second, what a new worker of
    /// `pool` would start with now and the pool's relaunch generation: a new MPS
    /// percentage, or a raised generation, makes it relaunch its command.
    Watch { pool: String },
    /// Makes every launcher of `pool` started with `--relaunch` relaunch its command: the new
    /// one is started, and the old one is stopped once the new one is ready (root only).
    Relaunch { pool: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub shrinking: bool,
    #[serde(default)]
    pub paused: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no enforcer daemon answers at {path}: {source}. Start one with `enforcer run` \
         (or `cargo xtask run -- run`), or pass the --instance it runs as"
    )]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("talking to the enforcer daemon: {0}")]
    Io(#[from] std::io::Error),
    #[error("the enforcer daemon closed the connection without answering")]
    Closed,
    #[error("the enforcer daemon sent a malformed answer: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("the enforcer daemon refused: {0}")]
    Refused(String),
}

/// A connection to the daemon.
pub struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    pub async fn connect(socket: &Path) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|source| ClientError::Connect {
                path: socket.display().to_string(),
                source,
            })?;
        let (read, writer) = stream.into_split();
        Ok(Self {
            reader: BufReader::new(read),
            writer,
        })
    }

    /// Sends one request and waits for its answer; an `Error` answer becomes `Refused`.
    pub async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        self.writer.write_all(&line).await?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer).await? == 0 {
            return Err(ClientError::Closed);
        }
        match serde_json::from_str(&answer)? {
            Response::Error { message } => Err(ClientError::Refused(message)),
            response => Ok(response),
        }
    }
}

/// Reads one request line of at most `MAX_REQUEST_BYTES`. Ok(None) at end of stream.
pub async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Option<Result<Request, String>>> {
    buffer.clear();
    let mut limited = tokio::io::AsyncReadExt::take(&mut *reader, MAX_REQUEST_BYTES as u64 + 1);
    let n = limited.read_until(b'\n', buffer).await?;
    if n == 0 {
        return Ok(None);
    }
    if buffer.len() > MAX_REQUEST_BYTES {
        return Ok(Some(Err(format!(
            "request longer than {MAX_REQUEST_BYTES} bytes"
        ))));
    }
    Ok(Some(
        serde_json::from_slice(buffer).map_err(|e| format!("malformed request: {e}")),
    ))
}
