//! The commands' client of the control socket (`enforcer_common::protocol`): `launch`
//! registers through it, `status` and `observe` read snapshots, `relaunch` asks.

use std::path::Path;

use enforcer_common::protocol::{self, Request, Response, Snapshot};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::UnixStream,
};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
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
    Malformed(#[from] protocol::Malformed),
    #[error("the enforcer daemon refused: {0}")]
    Refused(String),
    #[error("unexpected answer from the enforcer daemon: {0:?}")]
    Unexpected(Box<Response>),
}

/// A connection to the daemon.
pub(crate) struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    pub(crate) async fn connect(socket: &Path) -> Result<Self, ClientError> {
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
    pub(crate) async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.writer.write_all(&protocol::to_line(request)).await?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer).await? == 0 {
            return Err(ClientError::Closed);
        }
        match protocol::from_line(answer.as_bytes())? {
            Response::Error { message } => Err(ClientError::Refused(message)),
            response => Ok(response),
        }
    }

    /// The daemon's snapshot now.
    pub(crate) async fn snapshot(&mut self) -> Result<Snapshot, ClientError> {
        self.snapshot_for(Request::Snapshot).await
    }

    /// The part of the snapshot `observe` uses (`Request::Observe`).
    pub(crate) async fn observe(&mut self) -> Result<Snapshot, ClientError> {
        self.snapshot_for(Request::Observe).await
    }

    async fn snapshot_for(&mut self, request: Request) -> Result<Snapshot, ClientError> {
        match self.call(&request).await? {
            Response::Snapshot(snapshot) => Ok(*snapshot),
            other => Err(ClientError::Unexpected(Box::new(other))),
        }
    }
}
