//! `enforcer launch --pool P --relaunch`: a launcher that stays as its command's parent and
//! relaunches the command when new workers of the pool would start differently, or when
//! `enforcer relaunch --pool P` asks.
//!
//! "Differently" is a GPU pool's MPS active-thread percentage: NVIDIA applies a new
//! percentage only to clients created afterwards, so a lasting limit reaches a running
//! worker only through a new process.
//!
//! With `--listen ADDR` the launcher owns the listening socket and hands it to each command
//! as systemd's socket activation does (fd 3, `LISTEN_FDS=1`, `LISTEN_PID`). The socket, and
//! the connections waiting in its backlog, outlive every relaunch. The new command is
//! started first. Once it reports `READY=1` on `NOTIFY_SOCKET` (systemd's notify protocol),
//! the old one gets SIGTERM and drains: it stops accepting, answers what it holds, and exits.
//! No request is refused on the way (the inference worker does all of this).
//!
//! Without `--listen`, the old command is stopped first and the new one started after. That
//! suits an offline worker, which checkpoints on SIGTERM: the next one resumes from there.

use std::{
    net::{SocketAddr, TcpListener},
    os::{
        fd::{AsRawFd as _, RawFd},
        unix::process::ExitStatusExt as _,
    },
    path::{Path, PathBuf},
    process::ExitStatus,
    time::Duration,
};

use anyhow::Context as _;
use tokio::{
    net::UnixDatagram,
    process::{Child, Command},
    signal::unix::{Signal, SignalKind, signal},
};
use tracing::{info, warn};

use enforcer_common::protocol::{GroupKind, POOL_ENV, Request, Response, SOCKET_ENV};

use super::{exec, register_self};
use crate::{cli::client::Client, daemon::relaunch_board::WATCH_EVERY, gpu::mps::PERCENTAGE_ENV};

/// The fd the listening socket has in the command: systemd's `SD_LISTEN_FDS_START`.
pub(crate) const LISTEN_FD: RawFd = 3;
/// The hidden subcommand that sets `LISTEN_PID` to its own pid and execs the command: the
/// pid is known only after the fork, and the environment cannot be changed safely there.
pub(crate) const EXEC_LISTENING: &str = "exec-listening";

pub(crate) struct Options {
    pub listen: Option<SocketAddr>,
    /// How long a new command may take to report READY=1 (with `listen`).
    pub ready_timeout: Duration,
    /// How long a command may take to exit on SIGTERM before SIGKILL.
    pub stop_timeout: Duration,
    /// Who the command runs as (`--user`); None: root, as the launcher.
    pub identity: Option<super::identity::Identity>,
}

/// What a command was started with, compared at each poll with what the daemon says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartedWith {
    /// The pool's relaunch generation.
    pub generation: u64,
    /// The MPS active-thread percentage; no limit counts as 100.
    pub percentage: u32,
}

impl StartedWith {
    pub(crate) fn new(generation: u64, env: &[(String, String)]) -> Self {
        let percentage = env
            .iter()
            .find(|(key, _)| key == PERCENTAGE_ENV)
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(100);
        Self {
            generation,
            percentage,
        }
    }
}

/// Why the running command should be relaunched, if it should. A generation lower than the
/// running command's means the daemon restarted (generations start at 0 again): the running
/// command takes it, so that the new daemon's next `enforcer relaunch` counts.
pub(crate) fn relaunch_reason(running: &mut StartedWith, now: StartedWith) -> Option<String> {
    running.generation = running.generation.min(now.generation);
    if now.generation > running.generation {
        return Some(format!(
            "`enforcer relaunch` asked (generation {})",
            now.generation
        ));
    }
    if now.percentage != running.percentage {
        return Some(format!(
            "new GPU inference clients get an MPS active-thread percentage of {}, the running \
             command has {}",
            now.percentage, running.percentage
        ));
    }
    None
}

/// The shell's convention for a child's end: its exit code, or 128 + the signal that ended it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}

/// Runs `command` in pool `pool` and relaunches it as needed; returns the exit code to end
/// with, the last command's.
pub(crate) fn run(
    socket: &Path,
    pool: &str,
    command: &[String],
    options: Options,
) -> anyhow::Result<u8> {
    if command.is_empty() {
        anyhow::bail!("no command given: use `enforcer launch --pool NAME --relaunch -- CMD`");
    }
    let listener = options
        .listen
        .map(|addr| {
            TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} (--listen)"))
        })
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let launcher = Launcher {
        socket: socket.to_owned(),
        pool: pool.to_owned(),
        command: command.to_vec(),
        listener,
        options,
    };
    runtime.block_on(launcher.supervise())
}

struct Launcher {
    socket: PathBuf,
    pool: String,
    command: Vec<String>,
    listener: Option<TcpListener>,
    options: Options,
}

/// A running command.
struct Worker {
    child: Child,
    pid: u32,
    started: StartedWith,
}

/// What the daemon says a new worker would start with now.
struct Watched {
    started: StartedWith,
    env: Vec<(String, String)>,
    refused: Option<String>,
}

/// The end of a relaunch.
enum Relaunch {
    Done(Worker),
    /// The old command keeps running; why the new one did not take over.
    Abandoned(String),
    /// The old command stopped and the new one could not start: nothing runs.
    Failed(anyhow::Error),
    /// The launcher was told to stop meanwhile; any new command is stopped already.
    Interrupted,
}

struct Stop {
    term: Signal,
    interrupt: Signal,
}

impl Stop {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("SIGINT handler")?,
        })
    }

    async fn requested(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

impl Launcher {
    async fn supervise(self) -> anyhow::Result<u8> {
        // Registering this launcher puts it, and so every command it starts, in the pool.
        let env = register_self(&self.socket, GroupKind::Pool, &self.pool).await?;
        let mut client = Some(Client::connect(&self.socket).await?);
        let first = self
            .watch(&mut client)
            .await
            .context("asking the daemon what the pool's workers start with")?;
        if let Some(listener) = &self.listener {
            info!(
                "listening on {} for the command: it gets the socket as fd {LISTEN_FD} \
                 (LISTEN_FDS=1), and reports READY=1 on NOTIFY_SOCKET when it serves",
                listener.local_addr()?
            );
        }
        let mut stop = Stop::new()?;
        let started = StartedWith::new(first.started.generation, &env);
        let (mut worker, _notify) = self.start(started, &env)?;
        let mut tick = tokio::time::interval(WATCH_EVERY);
        let mut daemon_lost = false;
        let mut postponed: Option<String> = None;
        loop {
            tokio::select! {
                status = worker.child.wait() => {
                    return Ok(exit_code(status.context("waiting for the command")?));
                }
                () = stop.requested() => {
                    info!(pid = worker.pid, "told to stop: stopping the command");
                    let status = self.stop(&mut worker).await;
                    return Ok(exit_code(status));
                }
                _ = tick.tick() => {}
            }
            let now = match self.watch(&mut client).await {
                Ok(now) => {
                    if std::mem::take(&mut daemon_lost) {
                        info!("the daemon answers again: relaunches resume");
                    }
                    now
                }
                Err(err) => {
                    if !std::mem::replace(&mut daemon_lost, true) {
                        warn!("{err:#}: the command keeps running; relaunches wait for the daemon");
                    }
                    continue;
                }
            };
            let Some(reason) = relaunch_reason(&mut worker.started, now.started) else {
                postponed = None;
                continue;
            };
            if let Some(refused) = &now.refused {
                if postponed.as_ref() != Some(refused) {
                    warn!("relaunch postponed ({reason}): {refused}");
                    postponed = Some(refused.clone());
                }
                continue;
            }
            postponed = None;
            info!(pid = worker.pid, "relaunching: {reason}");
            let wanted = now.started;
            let outcome = if self.listener.is_some() {
                self.relaunch_beside(&mut worker, now, &mut stop).await
            } else {
                self.relaunch_after(&mut worker, now, &mut stop).await
            };
            match outcome {
                Relaunch::Done(new) => worker = new,
                Relaunch::Abandoned(why) => {
                    warn!(
                        pid = worker.pid,
                        "relaunch abandoned, the running command stays: {why}"
                    );
                    // Not again for this generation and percentage: the next change retries.
                    worker.started = wanted;
                }
                Relaunch::Failed(err) => {
                    return Err(err.context("relaunching: the old command stopped"));
                }
                Relaunch::Interrupted => {
                    let status = self.stop(&mut worker).await;
                    return Ok(exit_code(status));
                }
            }
        }
    }

    /// Asks the daemon; reconnects first when the last connection broke.
    async fn watch(&self, client: &mut Option<Client>) -> anyhow::Result<Watched> {
        if client.is_none() {
            *client = Some(Client::connect(&self.socket).await?);
        }
        let request = Request::Watch {
            pool: self.pool.clone(),
        };
        let answer = client
            .as_mut()
            .expect("connected above")
            .call(&request)
            .await;
        match answer {
            Ok(Response::Watching {
                generation,
                env,
                refused,
            }) => Ok(Watched {
                started: StartedWith::new(generation, &env),
                env,
                refused,
            }),
            Ok(other) => anyhow::bail!("unexpected answer from the daemon: {other:?}"),
            Err(err) => {
                *client = None;
                Err(err.into())
            }
        }
    }

    /// Starts the command; with a listener, also the notify socket it reports READY=1 on.
    fn start(
        &self,
        started: StartedWith,
        env: &[(String, String)],
    ) -> anyhow::Result<(Worker, Option<UnixDatagram>)> {
        let socket = self.socket.to_string_lossy();
        let launcher = std::process::id() as libc::pid_t;
        let mut command;
        let mut notify = None;
        match &self.listener {
            Some(listener) => {
                // This launcher's own image, even if the enforcer's file was replaced since
                // (an upgrade): the link follows the inode, not the path.
                command = Command::new("/proc/self/exe");
                command.arg(EXEC_LISTENING).arg("--").args(&self.command);
                let fd = listener.as_raw_fd();
                // SAFETY: only async-signal-safe calls (prctl, getppid, fcntl, dup2).
                unsafe {
                    command.pre_exec(move || {
                        end_with_launcher(launcher)?;
                        pass_listener(fd)
                    })
                };
                command.env("LISTEN_FDS", "1").env("LISTEN_FDNAMES", "http");
                let (socket, address) = super::notify::socket(started.generation)?;
                command.env("NOTIFY_SOCKET", address);
                notify = Some(socket);
            }
            None => {
                command = Command::new(&self.command[0]);
                command.args(&self.command[1..]);
                // SAFETY: only async-signal-safe calls (prctl, getppid).
                unsafe { command.pre_exec(move || end_with_launcher(launcher)) };
            }
        }
        command
            .env(SOCKET_ENV, socket.as_ref())
            .env(POOL_ENV, &self.pool)
            .envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(identity) = &self.options.identity {
            identity.apply(command.as_std_mut());
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {:?}", self.command[0]))?;
        let pid = child.id().context("the command exited at once")?;
        info!(pid, percentage = started.percentage, "command started");
        Ok((
            Worker {
                child,
                pid,
                started,
            },
            notify,
        ))
    }

    /// The new command first; the old one stops once the new one is ready.
    async fn relaunch_beside(&self, old: &mut Worker, now: Watched, stop: &mut Stop) -> Relaunch {
        let (mut new, notify) = match self.start(now.started, &now.env) {
            Ok(started) => started,
            Err(err) => return Relaunch::Abandoned(format!("{err:#}")),
        };
        let notify = notify.expect("a listener gives a notify socket");
        let timeout = self.options.ready_timeout;
        let ready = tokio::select! {
            ready = super::notify::wait_ready(&notify, &mut new.child, timeout) => ready,
            () = stop.requested() => {
                self.stop(&mut new).await;
                return Relaunch::Interrupted;
            }
        };
        if let Err(why) = ready {
            self.stop(&mut new).await;
            return Relaunch::Abandoned(format!("the new command (pid {}) {why}", new.pid));
        }
        let status = self.stop(old).await;
        info!(
            "relaunched: pid {} serves; pid {} drained and exited ({status})",
            new.pid, old.pid
        );
        Relaunch::Done(new)
    }

    /// The old command stops first (an offline worker checkpoints), then the new one starts.
    async fn relaunch_after(&self, old: &mut Worker, now: Watched, stop: &mut Stop) -> Relaunch {
        let status = tokio::select! {
            status = self.stop(old) => status,
            () = stop.requested() => return Relaunch::Interrupted,
        };
        match self.start(now.started, &now.env) {
            Ok((new, _)) => {
                info!(
                    "relaunched: pid {} exited ({status}); pid {} runs",
                    old.pid, new.pid
                );
                Relaunch::Done(new)
            }
            Err(err) => Relaunch::Failed(err),
        }
    }

    /// SIGTERM, then SIGKILL after the stop timeout; returns how the command ended.
    async fn stop(&self, worker: &mut Worker) -> ExitStatus {
        if let Ok(Some(status)) = worker.child.try_wait() {
            return status;
        }
        // SAFETY: kill(2) on our own child, not yet reaped: its pid cannot be reused.
        unsafe { libc::kill(worker.pid as i32, libc::SIGTERM) };
        let waited = tokio::time::timeout(self.options.stop_timeout, worker.child.wait()).await;
        if let Ok(Ok(status)) = waited {
            return status;
        }
        warn!(
            pid = worker.pid,
            "still running {}s after SIGTERM: SIGKILL",
            self.options.stop_timeout.as_secs_f64()
        );
        let _ = worker.child.start_kill();
        worker
            .child
            .wait()
            .await
            .unwrap_or_else(|_| ExitStatus::from_raw(libc::SIGKILL))
    }
}

/// In the child, between fork and exec: a launcher that dies, even by SIGKILL, takes its
/// command with it (SIGTERM), as the command would have died with a plain `launch`, which
/// execs it. The death signal outlives exec; a launcher already gone before it was set is
/// seen by the parent pid.
fn end_with_launcher(launcher: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of ours.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != launcher {
            return Err(std::io::Error::other("the launcher exited"));
        }
    }
    Ok(())
}

/// In the child, between fork and exec: puts the listening socket at fd 3, without
/// close-on-exec.
fn pass_listener(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl and dup2 on fds this process owns; both are async-signal-safe.
    unsafe {
        if fd == LISTEN_FD {
            // dup2 onto itself would keep FD_CLOEXEC.
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        } else if libc::dup2(fd, LISTEN_FD) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `enforcer exec-listening -- CMD`: execs CMD with `LISTEN_PID` set to this pid, which CMD
/// keeps. Returns only on failure.
pub(crate) fn exec_listening(command: &[String]) -> anyhow::Error {
    let pid = std::process::id().to_string();
    exec(command, &[("LISTEN_PID", pid.as_str())], None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(percentage: &str) -> Vec<(String, String)> {
        vec![(PERCENTAGE_ENV.to_owned(), percentage.to_owned())]
    }

    #[test]
    fn the_started_percentage_comes_from_the_mps_variable_and_no_limit_is_100() {
        assert_eq!(StartedWith::new(3, &env("10")).percentage, 10);
        assert_eq!(StartedWith::new(3, &[]).percentage, 100);
        assert_eq!(StartedWith::new(3, &env("100")), StartedWith::new(3, &[]));
    }

    #[test]
    fn a_new_percentage_or_a_raised_generation_relaunches_nothing_else_does() {
        let mut running = StartedWith::new(2, &env("100"));
        assert_eq!(
            relaunch_reason(&mut running, StartedWith::new(2, &[])),
            None
        );
        let retarget = relaunch_reason(&mut running, StartedWith::new(2, &env("10"))).unwrap();
        assert!(retarget.contains("percentage of 10"), "{retarget}");
        let asked = relaunch_reason(&mut running, StartedWith::new(3, &env("100"))).unwrap();
        assert!(asked.contains("generation 3"), "{asked}");
    }

    #[test]
    fn after_a_daemon_restart_its_first_relaunch_request_counts() {
        let mut running = StartedWith::new(5, &[]);
        // The restarted daemon starts again at 0: no reason by itself.
        assert_eq!(
            relaunch_reason(&mut running, StartedWith::new(0, &[])),
            None
        );
        assert!(relaunch_reason(&mut running, StartedWith::new(1, &[])).is_some());
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
