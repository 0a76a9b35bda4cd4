//! systemd's socket activation and notify protocols, the two a launcher (systemd, or
//! `enforcer launch --relaunch --listen`) uses to hand a listening socket from one worker to
//! the next: the socket arrives as fd 3 with `LISTEN_FDS` and `LISTEN_PID`, and the worker
//! says it serves by sending `READY=1` to `NOTIFY_SOCKET`.

use std::{
    net::TcpListener,
    os::{
        fd::{FromRawFd as _, RawFd},
        linux::net::SocketAddrExt as _,
        unix::net::{SocketAddr, UnixDatagram},
    },
};

/// `SD_LISTEN_FDS_START`: the first passed fd.
const LISTEN_FD: RawFd = 3;

/// The listening socket passed by a launcher, if one was: `LISTEN_FDS` at least 1 and
/// `LISTEN_PID` this process (a variable inherited from a parent that was itself activated
/// names another pid, and is ignored, as sd_listen_fds does).
/// What was passed as a listening socket, where it is not one.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("LISTEN_FDS={0:?} is not a number of passed sockets")]
    Count(String),
    #[error(
        "LISTEN_FDS is set for this process, but fd {LISTEN_FD} is not a listening TCP socket: \
         the launcher passed something else"
    )]
    NotListening,
    #[error("the passed socket: {0}")]
    Io(#[from] std::io::Error),
}

pub fn inherited_listener() -> Result<Option<TcpListener>, ActivationError> {
    inherited_listener_from(
        std::env::var("LISTEN_PID").ok().as_deref(),
        std::env::var("LISTEN_FDS").ok().as_deref(),
        std::process::id(),
    )
}

fn inherited_listener_from(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    own_pid: u32,
) -> Result<Option<TcpListener>, ActivationError> {
    let (Some(listen_pid), Some(listen_fds)) = (listen_pid, listen_fds) else {
        return Ok(None);
    };
    if listen_pid.parse::<u32>().ok() != Some(own_pid) {
        return Ok(None);
    }
    match listen_fds.parse::<u32>() {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(_) => return Err(ActivationError::Count(listen_fds.to_owned())),
    }
    if !is_listening_tcp_socket(LISTEN_FD) {
        return Err(ActivationError::NotListening);
    }
    // SAFETY: fd 3 was checked to be an open listening TCP socket, given to this process
    // to own; nothing else here uses it.
    let listener = unsafe { TcpListener::from_raw_fd(LISTEN_FD) };
    // systemd passes it with close-on-exec cleared; it must not leak into children.
    // SAFETY: fcntl on an fd this process owns.
    unsafe { libc::fcntl(LISTEN_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    listener.set_nonblocking(true)?;
    Ok(Some(listener))
}

fn is_listening_tcp_socket(fd: RawFd) -> bool {
    let option = |level, name| {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `value`.
        let rc =
            unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &raw mut len) };
        (rc == 0).then_some(value)
    };
    option(libc::SOL_SOCKET, libc::SO_ACCEPTCONN) == Some(1)
        && option(libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && option(libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

/// Sends `READY=1` to `NOTIFY_SOCKET` when it is set (a path, or `@name` in the abstract
/// namespace). Returns whether it was sent; a launcher that went away is not this worker's
/// problem, so a failure is only logged.
pub fn notify_ready() -> bool {
    let Ok(target) = std::env::var("NOTIFY_SOCKET") else {
        return false;
    };
    match send(&target, b"READY=1\n") {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!("cannot report READY=1 to NOTIFY_SOCKET={target}: {err}");
            false
        }
    }
}

fn send(target: &str, message: &[u8]) -> std::io::Result<()> {
    let address = match target.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(target)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(message, &address)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_variables_or_another_pids_variables_mean_no_passed_socket() {
        assert!(inherited_listener_from(None, None, 7).unwrap().is_none());
        assert!(
            inherited_listener_from(Some("8"), Some("1"), 7)
                .unwrap()
                .is_none()
        );
        assert!(
            inherited_listener_from(Some("7"), Some("0"), 7)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_malformed_count_is_named() {
        let err = inherited_listener_from(Some("7"), Some("one"), 7).unwrap_err();
        assert!(err.to_string().contains("LISTEN_FDS=\"one\""), "{err}");
    }

    #[test]
    fn only_a_listening_tcp_socket_counts() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        assert!(is_listening_tcp_socket(fd));
        let datagram = UnixDatagram::unbound().unwrap();
        assert!(!is_listening_tcp_socket(std::os::fd::AsRawFd::as_raw_fd(
            &datagram
        )));
    }

    #[test]
    fn ready_reaches_an_abstract_notify_socket() {
        let name = format!("reamer-worker-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let receiver = UnixDatagram::bind_addr(&address).unwrap();
        send(&format!("@{name}"), b"READY=1\n").unwrap();
        let mut buffer = [0u8; 64];
        let n = receiver.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1\n");
    }
}
