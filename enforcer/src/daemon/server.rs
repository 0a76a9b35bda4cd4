//! The control socket's server: accepts connections, reads one request per line and answers
//! each, or hands a grant subscription its connection for as long as the worker keeps it.
//! The work a request does (/proc reads, cgroup writes, sensor maps) runs on the blocking
//! pool, never on the runtime's thread.
//!
//! Every local user may connect, so each connection is admitted against caps (`admission`),
//! waits at most `[control] idle_timeout_ms` for its next request, and has `answer::WRITE_TIMEOUT`
//! to take each answer: a slow or silent peer loses its slot, it does not hold one forever.

use std::{
    os::unix::fs::PermissionsExt as _,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use enforcer_common::protocol::{self, MAX_REQUEST_BYTES, Request, Response};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt as _, BufReader},
    net::{UnixListener, UnixStream, unix::UCred},
};
use tracing::{debug, warn};

use super::{
    admission::{Admission, Admitted, Refused},
    answer::send_line,
    requests,
    state::Shared,
    subscription,
};
use crate::{config::control::ControlSettings, host::user_namespace};

/// The first pause after a failed accept (out of file descriptors, say), doubled while accept
/// keeps failing up to `ACCEPT_BACKOFF_MAX`: a loop that retries at once only burns the CPU
/// the failure leaves the daemon.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Refusals are logged at most this often: a client looping on connect would flood the log.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Binds the control socket at `socket`. Anyone may read snapshots and subscribe to the
/// grants of a pool it is a member of; registering and relaunching are checked against the
/// peer's credentials.
pub(crate) fn bind(socket: &Path) -> std::io::Result<UnixListener> {
    let listener = UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Serves `listener` until the task is dropped.
pub(crate) async fn serve(listener: UnixListener, shared: Arc<Shared>, control: ControlSettings) {
    let admission = Admission::new(control.max_connections_per_user, control.max_connections);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut refusals_logged: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                let peer = stream.peer_cred().ok();
                let who =
                    user_namespace::budget_of(peer.map(|c| c.uid()), peer.and_then(|c| c.pid()));
                match admission.admit(who) {
                    Ok(admitted) => {
                        let connection = Connection {
                            peer,
                            idle_timeout: control.idle_timeout,
                            _admitted: admitted,
                        };
                        tokio::spawn(connection.serve(stream, shared.clone()));
                    }
                    Err(refused) => {
                        if refusals_logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                            warn!("control connection refused: {refused}");
                            refusals_logged = Some(Instant::now());
                        } else {
                            debug!("control connection refused: {refused}");
                        }
                        tokio::spawn(refuse(stream, refused));
                    }
                }
            }
            Err(err) => {
                if backoff == ACCEPT_BACKOFF_MIN {
                    warn!("control socket accept failed: {err}; backing off");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

/// Tells a refused peer why, then closes its connection.
async fn refuse(stream: UnixStream, refused: Refused) {
    let (_, mut write) = stream.into_split();
    let message = refused.to_string();
    let _ = send_line(&mut write, &Response::Error { message }).await;
}

/// One admitted connection: its peer, and its place among the admitted while it lives.
struct Connection {
    peer: Option<UCred>,
    idle_timeout: Duration,
    _admitted: Admitted,
}

impl Connection {
    async fn serve(self, stream: UnixStream, shared: Arc<Shared>) {
        let peer = self.peer;
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        let mut buffer = Vec::new();
        loop {
            let read =
                tokio::time::timeout(self.idle_timeout, read_request(&mut reader, &mut buffer))
                    .await;
            let (response, keep_going) = match read {
                // Idle past the timeout, or a line that never ends: the slot goes back.
                Err(_) => return,
                Ok(Ok(None) | Err(_)) => return,
                Ok(Ok(Some(Err(bad)))) => {
                    // The rest of an oversized line would be read as the next request.
                    let keep_going = !matches!(bad, BadRequest::TooLong);
                    let message = bad.to_string();
                    (Response::Error { message }, keep_going)
                }
                Ok(Ok(Some(Ok(Request::Subscribe { pool })))) => {
                    let pid = peer.and_then(|c| c.pid()).map_or(0, |p| p as u32);
                    subscription::stream_grants(&shared, &pool, pid, &mut reader, &mut write).await;
                    return;
                }
                Ok(Ok(Some(Ok(request)))) => {
                    let shared = shared.clone();
                    let handled = tokio::task::spawn_blocking(move || {
                        requests::handle(&shared, request, peer)
                    })
                    .await;
                    match handled {
                        Ok(response) => (response, true),
                        // The handler panicked: the panic hook ends the daemon.
                        Err(_) => return,
                    }
                }
            };
            if send_line(&mut write, &response).await.is_err() || !keep_going {
                return;
            }
        }
    }
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
