//! The control socket's server: accepts connections, reads one request per line and answers
//! each, or hands a grant subscription its connection for as long as the worker keeps it.
//! The work a request does (/proc reads, cgroup writes, sensor maps) runs on the blocking
//! pool, never on the runtime's thread.

use std::{os::unix::fs::PermissionsExt as _, path::Path, sync::Arc, time::Duration};

use enforcer_common::protocol::{self, MAX_REQUEST_BYTES, Request, Response};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{UnixListener, UnixStream, unix::OwnedWriteHalf},
};
use tracing::warn;

use super::{requests, state::Shared, subscription};

/// Binds the control socket at `socket`. Anyone may read snapshots; registering is checked
/// against the peer's credentials.
pub fn bind(socket: &Path) -> std::io::Result<UnixListener> {
    let listener = UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Serves `listener` until the task is dropped.
pub async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, shared.clone()));
            }
            Err(err) => {
                warn!("control socket accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn serve_connection(stream: UnixStream, shared: Arc<Shared>) {
    let peer = stream.peer_cred().ok();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut buffer = Vec::new();
    loop {
        let (response, keep_going) = match read_request(&mut reader, &mut buffer).await {
            Ok(None) | Err(_) => return,
            Ok(Some(Err(bad))) => {
                // The rest of an oversized line would be read as the next request.
                let keep_going = !matches!(bad, BadRequest::TooLong);
                let message = bad.to_string();
                (Response::Error { message }, keep_going)
            }
            Ok(Some(Ok(Request::Subscribe { pool }))) => {
                let pid = peer.and_then(|c| c.pid()).map_or(0, |p| p as u32);
                subscription::stream_grants(&shared, &pool, pid, &mut reader, &mut write).await;
                return;
            }
            Ok(Some(Ok(request))) => {
                let shared = shared.clone();
                let handled =
                    tokio::task::spawn_blocking(move || requests::handle(&shared, request, peer))
                        .await;
                match handled {
                    Ok(response) => (response, true),
                    // The request's handler panicked: the connection ends, as it did when the
                    // handler ran on this task.
                    Err(_) => return,
                }
            }
        };
        if send_line(&mut write, &response).await.is_err() || !keep_going {
            return;
        }
    }
}

/// Writes one message as a line.
pub async fn send_line(write: &mut OwnedWriteHalf, response: &Response) -> std::io::Result<()> {
    write.write_all(&protocol::to_line(response)).await
}

/// A request line the daemon answers with an error.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error("request longer than {MAX_REQUEST_BYTES} bytes")]
    TooLong,
    #[error("malformed request: {}", .0.0)]
    Malformed(protocol::Malformed),
}

/// Reads one request line of at most `MAX_REQUEST_BYTES`. Ok(None) at end of stream.
async fn read_request<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Option<Result<Request, BadRequest>>> {
    buffer.clear();
    let mut limited = tokio::io::AsyncReadExt::take(&mut *reader, MAX_REQUEST_BYTES as u64 + 1);
    let n = limited.read_until(b'\n', buffer).await?;
    if n == 0 {
        return Ok(None);
    }
    if buffer.len() > MAX_REQUEST_BYTES {
        return Ok(Some(Err(BadRequest::TooLong)));
    }
    Ok(Some(
        protocol::from_line(buffer).map_err(BadRequest::Malformed),
    ))
}
