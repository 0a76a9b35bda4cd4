//! The notify socket a relaunched command reports `READY=1` on (systemd's notify protocol),
//! and the wait for it. The socket is in the abstract namespace, which any local process can
//! send to: the sender's credentials (SO_PASSCRED) are read with each datagram, and only the
//! command, or a process it started, is believed. Before, anyone who guessed the name could
//! make the launcher stop the old command before the new one served.

use std::{
    os::fd::{AsRawFd as _, RawFd},
    time::Duration,
};

use anyhow::Context as _;
use tokio::{io::Interest, net::UnixDatagram, process::Child};
use tracing::warn;

/// Whether a notify datagram says READY=1 (one `KEY=VALUE` per line).
pub(crate) fn is_ready_message(datagram: &[u8]) -> bool {
    datagram
        .split(|b| *b == b'\n')
        .any(|line| line == b"READY=1")
}

/// Why a new command is given up on before it was ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotReady {
    #[error("exited ({0}) before it reported READY=1")]
    Exited(String),
    #[error(
        "did not report READY=1 on NOTIFY_SOCKET within {}s (--ready-timeout-s); the command \
         must speak systemd's notify protocol to be relaunched with --listen",
        .0.as_secs_f64()
    )]
    Timeout(Duration),
}

/// Waits until the command reports READY=1, exits, or the timeout passes. A READY=1 from a
/// process outside the command's tree is ignored, and said once.
pub(crate) async fn wait_ready(
    notify: &UnixDatagram,
    child: &mut Child,
    timeout: Duration,
) -> Result<(), NotReady> {
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let command = child.id();
    let mut datagram = [0u8; 4096];
    let mut warned = false;
    loop {
        tokio::select! {
            received = notify.async_io(Interest::READABLE, || {
                receive_with_sender(notify.as_raw_fd(), &mut datagram)
            }) => {
                let Ok((n, sender)) = received else { continue };
                if !is_ready_message(&datagram[..n]) {
                    continue;
                }
                if sender.is_some_and(|pid| command.is_some_and(|c| in_tree_of(c, pid))) {
                    return Ok(());
                }
                if !std::mem::replace(&mut warned, true) {
                    warn!(
                        sender = ?sender,
                        command = ?command,
                        "READY=1 from a process that is not the command nor one it started: ignored"
                    );
                }
            }
            status = child.wait() => {
                let how = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                return Err(NotReady::Exited(how));
            }
            () = &mut deadline => {
                return Err(NotReady::Timeout(timeout));
            }
        }
    }
}

/// Whether `pid` is `root` or one of its descendants.
fn in_tree_of(root: u32, pid: u32) -> bool {
    pid == root
        || enforcer_common::proc_tree::threads(root)
            .iter()
            .any(|task| task.tid == pid)
}

/// A datagram socket in the abstract namespace (nothing to clean up), one per started
/// command, that receives its senders' credentials. Returns it and its `NOTIFY_SOCKET`
/// address.
pub(crate) fn socket(generation: u64) -> anyhow::Result<(UnixDatagram, String)> {
    use std::os::linux::net::SocketAddrExt as _;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("reamer-launch-{}-{generation}-{nanos}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let socket = std::os::unix::net::UnixDatagram::bind_addr(&address)
        .with_context(|| format!("binding the notify socket @{name}"))?;
    let on: libc::c_int = 1;
    // SAFETY: a valid int option on a socket this function owns.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error()).context("SO_PASSCRED on the notify socket");
    }
    socket.set_nonblocking(true)?;
    Ok((UnixDatagram::from_std(socket)?, format!("@{name}")))
}

/// Receives one datagram into `buffer`, with the pid the kernel vouches sent it.
fn receive_with_sender(fd: RawFd, buffer: &mut [u8]) -> std::io::Result<(usize, Option<u32>)> {
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // Room for one SCM_CREDENTIALS message, aligned as cmsghdr wants.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; its pointers are set below to live buffers.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = size_of_val(&control);
    // SAFETY: `message` points at `iov` and `control`, both alive for the call.
    let n = unsafe { libc::recvmsg(fd, &raw mut message, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut sender = None;
    // SAFETY: the CMSG_* walk stays within `message.msg_controllen` of `control`.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&raw const message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET
                && (*header).cmsg_type == libc::SCM_CREDENTIALS
            {
                let credentials: libc::ucred =
                    std::ptr::read_unaligned(libc::CMSG_DATA(header).cast());
                sender = u32::try_from(credentials.pid).ok();
            }
            header = libc::CMSG_NXTHDR(&raw const message, header);
        }
    }
    Ok((n as usize, sender))
}

#[cfg(test)]
mod tests {
    use std::os::linux::net::SocketAddrExt as _;

    use super::*;

    #[test]
    fn ready_is_one_line_of_a_notify_datagram() {
        assert!(is_ready_message(b"READY=1"));
        assert!(is_ready_message(b"STATUS=serving\nREADY=1\n"));
        assert!(!is_ready_message(b"READY=0"));
        assert!(!is_ready_message(b"STATUS=READY=1"));
    }

    #[tokio::test]
    async fn a_datagram_comes_with_the_pid_that_sent_it() {
        let (socket, address) = super::socket(7).unwrap();
        let name = address.trim_start_matches('@');
        let to = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sender = std::os::unix::net::UnixDatagram::unbound().unwrap();
        sender.send_to_addr(b"READY=1", &to).unwrap();
        let mut buffer = [0u8; 64];
        let (n, pid) = socket
            .async_io(Interest::READABLE, || {
                receive_with_sender(socket.as_raw_fd(), &mut buffer)
            })
            .await
            .unwrap();
        assert_eq!(&buffer[..n], b"READY=1");
        assert_eq!(pid, Some(std::process::id()));
        assert!(in_tree_of(std::process::id(), std::process::id()));
        assert!(
            !in_tree_of(std::process::id(), 1),
            "init is no descendant of ours"
        );
    }
}
