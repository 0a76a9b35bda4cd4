//! Draining on SIGTERM without dropping a request, for a worker that hands its listening
//! socket to a successor (`enforcer launch --relaunch --listen`, or systemd). A worker that
//! bound its own socket has no successor: it goes to step 3 at once.
//!
//! 1. Stop accepting: this worker closes its copy of the listening socket. The launcher and
//!    the successor hold the same socket, so connections waiting in its backlog, and every
//!    new one, go to the successor.
//! 2. Answer every request that still arrives on an open connection, with `Connection: close`:
//!    a keep-alive client's next request then opens a new connection, to the successor.
//!    Closing an idle keep-alive connection at once, as a plain graceful shutdown does, races
//!    with a request the client may be sending on it just then, and that request is lost.
//! 3. Once no connection is left, or after the drain timeout (a client that keeps a
//!    connection open and idle), shut down gracefully: idle connections close, and requests
//!    in flight are answered first.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    extract::State,
    http::{HeaderValue, header},
    response::Response,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::watch,
};

pub struct Drain {
    draining: watch::Sender<bool>,
    open_connections: watch::Sender<usize>,
}

impl Drain {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            draining: watch::Sender::new(false),
            open_connections: watch::Sender::new(0),
        })
    }

    pub fn start(&self) {
        self.draining.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    pub fn open_connections(&self) -> usize {
        *self.open_connections.borrow()
    }

    /// Waits until every connection is closed, or `timeout`; answers whether all closed.
    pub async fn connections_closed(&self, timeout: Duration) -> bool {
        let mut open = self.open_connections.subscribe();
        tokio::time::timeout(timeout, open.wait_for(|n| *n == 0))
            .await
            .is_ok()
    }

    async fn started(&self) {
        let mut draining = self.draining.subscribe();
        let _ = draining.wait_for(|d| *d).await;
    }
}

/// Adds `Connection: close` to every answer given while draining (step 2).
pub async fn close_while_draining(
    State(drain): State<Arc<Drain>>,
    mut response: Response,
) -> Response {
    if drain.is_draining() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A listener that stops accepting when the drain starts (step 1) and counts open
/// connections (step 3).
pub struct DrainingListener {
    inner: Option<TcpListener>,
    local_addr: SocketAddr,
    drain: Arc<Drain>,
}

impl DrainingListener {
    pub fn new(listener: TcpListener, drain: Arc<Drain>) -> io::Result<Self> {
        Ok(Self {
            local_addr: listener.local_addr()?,
            inner: Some(listener),
            drain,
        })
    }
}

enum Accepted {
    Connection(io::Result<(TcpStream, SocketAddr)>),
    Draining,
}

impl axum::serve::Listener for DrainingListener {
    type Io = CountedConnection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(listener) = &self.inner else {
                return std::future::pending().await;
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => Accepted::Connection(accepted),
                () = self.drain.started() => Accepted::Draining,
            };
            match accepted {
                Accepted::Draining => {
                    self.inner = None;
                    tracing::info!("draining: no longer accepting connections");
                }
                Accepted::Connection(Ok((stream, addr))) => {
                    self.drain.open_connections.send_modify(|n| *n += 1);
                    let connection = CountedConnection {
                        stream,
                        drain: self.drain.clone(),
                    };
                    return (connection, addr);
                }
                Accepted::Connection(Err(err)) => {
                    // A connection reset before it was accepted concerns that client alone;
                    // anything else (out of fds) gets a pause before the next try.
                    if !matches!(
                        err.kind(),
                        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                    ) {
                        tracing::warn!("accept failed: {err}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// A TCP connection that counts itself out of the open connections when dropped.
pub struct CountedConnection {
    stream: TcpStream,
    drain: Arc<Drain>,
}

impl Drop for CountedConnection {
    fn drop(&mut self) {
        self.drain
            .open_connections
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl AsyncRead for CountedConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
