//! One answer written to a control-socket peer, as a line, within a deadline: shared by the
//! server's request loop (`server`) and a grant subscription's stream (`subscription`).

use std::time::Duration;

use enforcer_common::protocol::{self, Response};
use tokio::{io::AsyncWriteExt as _, net::unix::OwnedWriteHalf};

/// How long a peer may take to read one answer (a full snapshot is tens of kilobytes, which
/// the socket's buffer takes at once) before its connection is closed.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes one message as a line, within `WRITE_TIMEOUT`: a peer that does not read loses its
/// connection rather than holding a task and its buffers.
pub(crate) async fn send_line(
    write: &mut OwnedWriteHalf,
    response: &Response,
) -> std::io::Result<()> {
    let line = protocol::to_line(response);
    tokio::time::timeout(WRITE_TIMEOUT, write.write_all(&line))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}
