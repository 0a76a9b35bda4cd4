//! The service manager's notification protocol (sd_notify(3)), spoken without libsystemd: one
//! datagram of `KEY=VALUE` lines to the socket named in `NOTIFY_SOCKET`. `READY=1` once the
//! daemon serves, `WATCHDOG=1` while it is alive (`WatchdogSec` in the unit, passed to the
//! daemon as `WATCHDOG_USEC`). Without a service manager (no `NOTIFY_SOCKET`) nothing is sent.

use std::{
    os::{linux::net::SocketAddrExt as _, unix::net::SocketAddr},
    time::Duration,
};

/// Where notifications go, if a service manager listens.
#[derive(Debug, Clone)]
pub(crate) struct Notifier {
    address: SocketAddr,
}

impl Notifier {
    /// The manager's socket from `NOTIFY_SOCKET` (a path, or an abstract name after '@').
    pub(crate) fn from_env() -> Option<Self> {
        let name = std::env::var("NOTIFY_SOCKET").ok()?;
        let address = match name.strip_prefix('@') {
            Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name.as_bytes()),
            None => SocketAddr::from_pathname(&name),
        }
        .ok()?;
        Some(Self { address })
    }

    /// Sends `state` (e.g. "READY=1"): one datagram from a socket of its own.
    pub(crate) fn notify(&self, state: &str) -> std::io::Result<()> {
        let socket = std::os::unix::net::UnixDatagram::unbound()?;
        socket.send_to_addr(state.as_bytes(), &self.address)?;
        Ok(())
    }
}

/// The watchdog period the manager set for this process (`WATCHDOG_USEC`, for the pid in
/// `WATCHDOG_PID` where that is given), None where it set none.
pub(crate) fn watchdog_period() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_arrives_as_one_datagram_at_the_named_socket() {
        let dir = std::env::temp_dir().join(format!("reamer-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let manager = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            address: SocketAddr::from_pathname(&path).unwrap(),
        };
        notifier.notify("READY=1").unwrap();
        let mut buffer = [0u8; 64];
        let n = manager.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
