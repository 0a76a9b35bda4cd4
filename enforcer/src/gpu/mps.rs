//! The conversation with NVIDIA's MPS control daemon, through its own client program
//! `nvidia-cuda-mps-control`: each command is one run of the program with the command line on
//! its stdin, and the reply is what it prints. This is the only interface NVIDIA documents
//! (the daemon's pipe protocol is private), and it is what an operator types by hand, so a
//! failure here can be reproduced with `echo CMD | nvidia-cuda-mps-control`.
//!
//! NVIDIA documents that a new active-thread percentage or pinned-memory limit applies only to
//! clients (CUDA contexts) created afterwards: running clients keep what they started with.
//! The enforcer therefore sets both for the future (defaults and per server) and clamps the
//! running ones with the freezer (`duty_cycle`).

use std::{
    io::{Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use enforcer_common::protocol::gpu::{LimitsInForce, MemLimitMib, ServerLimits};

use super::pipe_dir::{self, PipeDirError};

/// How long one command may take. The control daemon answers in milliseconds; one that does
/// not answer in seconds is wedged, and the enforcer must not wait on it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a freshly started control daemon has to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub(crate) enum MpsError {
    #[error("cannot run {program}: {source} (is the NVIDIA driver's compute package installed?)")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the MPS control daemon refused `{command}`: {reply}")]
    Refused { command: String, reply: String },
    #[error("the MPS control daemon did not answer `{command}` within {timeout:?}")]
    Timeout { command: String, timeout: Duration },
    #[error("unexpected reply to `{command}`: {reply:?}")]
    Unparsable { command: String, reply: String },
    #[error("one command per line, not {0:?}")]
    MultiLine(String),
    #[error(
        "no MPS control daemon answers{}; start one with `{program} -d` or set \
         [gpu] mps = \"start\"",
        pipe_dir.as_ref().map_or(String::new(), |d| format!(" on {}", d.display()))
    )]
    NoDaemon {
        program: String,
        pipe_dir: Option<PathBuf>,
    },
    #[error(transparent)]
    PipeDir(#[from] PipeDirError),
    #[error("an active-thread percentage must be 1 to 100, not {0}")]
    Percentage(u32),
}

/// A pinned-memory limit as MPS takes it: an integer with an `M` or `G` suffix.
fn command_value(limit: MemLimitMib) -> String {
    format!("{}M", limit.0)
}

/// Parses a memory-limit reply such as `2048M`, `10G`, `900 MB` or a plain MiB count.
/// Returns Ok(None) for a limit that is not set.
fn parse_mem_limit(reply: &str) -> Result<Option<MemLimitMib>, ()> {
    let text = reply.trim();
    let lower = text.to_ascii_lowercase();
    if lower.is_empty() || ["0", "none", "n/a", "unlimited", "disabled"].contains(&lower.as_str()) {
        return Ok(None);
    }
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(lower.len());
    let number: f64 = lower[..digits_end].parse().map_err(|_| ())?;
    let unit = lower[digits_end..]
        .trim()
        .trim_end_matches("ib")
        .trim_end_matches('b');
    let mib = match unit {
        "" | "m" => number,
        "g" => number * 1024.0,
        "t" => number * 1024.0 * 1024.0,
        "k" => number / 1024.0,
        _ => return Err(()),
    };
    Ok(Some(MemLimitMib(mib.round() as u64)))
}

/// The control program and the pipe directory its daemon uses.
#[derive(Debug, Clone)]
pub(crate) struct MpsControl {
    program: PathBuf,
    /// `CUDA_MPS_PIPE_DIRECTORY`; None: NVIDIA's default (/tmp/nvidia-mps).
    pipe_dir: Option<PathBuf>,
}

/// The umask a control daemon the enforcer starts runs with. The unit's 0077 would make its
/// pipes root's alone, and MPS clients of other uids could not reach it.
const STARTED_DAEMON_UMASK: libc::mode_t = 0o022;

impl MpsControl {
    pub(crate) fn new(program: impl Into<PathBuf>, pipe_dir: Option<PathBuf>) -> Self {
        Self {
            program: program.into(),
            pipe_dir,
        }
    }

    fn command_for(&self) -> Command {
        let mut command = Command::new(&self.program);
        if let Some(dir) = &self.pipe_dir {
            command.env(PIPE_DIRECTORY_ENV, dir);
        }
        command
    }

    fn program_name(&self) -> String {
        self.program.display().to_string()
    }

    /// Sends one command line; returns the reply, trimmed. The control program prints an error
    /// and exits non-zero when no daemon runs; a daemon that rejects a command says so in
    /// words that this turns into `Refused`.
    pub(crate) fn command(&self, line: &str) -> Result<String, MpsError> {
        if line.contains('\n') {
            return Err(MpsError::MultiLine(line.to_owned()));
        }
        let mut child = self
            .command_for()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| MpsError::Spawn {
                program: self.program_name(),
                source,
            })?;
        // The command fits the pipe buffer, so this write never blocks; closing stdin ends
        // the client's session after this one command.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = writeln!(stdin, "{line}");
        }
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(MpsError::Timeout {
                        command: line.to_owned(),
                        timeout: COMMAND_TIMEOUT,
                    });
                }
            }
        };
        let mut reply = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut reply);
        }
        let mut errors = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut errors);
        }
        let reply = reply.trim().to_owned();
        let refused = |reply: String| MpsError::Refused {
            command: line.to_owned(),
            reply,
        };
        if !status.success() {
            let said = [reply.as_str(), errors.trim()].join(" ").trim().to_owned();
            return Err(refused(if said.is_empty() {
                format!("{} exited with {status}", self.program_name())
            } else {
                said
            }));
        }
        let lower = reply.to_ascii_lowercase();
        if ["invalid", "error", "unknown command", "failed", "cannot"]
            .iter()
            .any(|word| lower.contains(word))
        {
            return Err(refused(reply));
        }
        Ok(reply)
    }

    /// Whether a control daemon answers on this pipe directory.
    pub(crate) fn is_running(&self) -> bool {
        self.command("get_server_list").is_ok()
    }

    /// The directory of the pipes this control program talks through.
    fn effective_pipe_dir(&self) -> PathBuf {
        self.pipe_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(pipe_dir::NVIDIA_DEFAULT))
    }

    /// Attaches to a running control daemon, or starts one (`-d`) when `may_start`. Returns
    /// whether this call started it. Refuses, before saying a word to it, a daemon whose pipe
    /// directory another user could have planted (`pipe_dir.rs`).
    pub(crate) fn start_or_attach(&self, may_start: bool) -> Result<bool, MpsError> {
        let dir = self.effective_pipe_dir();
        if pipe_dir::check(&dir)? && self.is_running() {
            return Ok(false);
        }
        if !may_start {
            return Err(MpsError::NoDaemon {
                program: self.program_name(),
                pipe_dir: self.pipe_dir.clone(),
            });
        }
        pipe_dir::create(&dir)?;
        let mut command = self.command_for();
        command.arg("-d").stdin(Stdio::null());
        // SAFETY: umask is async-signal-safe and touches no memory of the parent.
        unsafe {
            use std::os::unix::process::CommandExt as _;
            command.pre_exec(|| {
                libc::umask(STARTED_DAEMON_UMASK);
                Ok(())
            });
        }
        let status = command.status().map_err(|source| MpsError::Spawn {
            program: self.program_name(),
            source,
        })?;
        if !status.success() {
            return Err(MpsError::Refused {
                command: "-d (start the control daemon)".to_owned(),
                reply: format!("{} -d exited with {status}", self.program_name()),
            });
        }
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.is_running() {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(MpsError::Timeout {
            command: "get_server_list (after starting the control daemon)".to_owned(),
            timeout: START_TIMEOUT,
        })
    }

    fn pids(&self, command: &str) -> Result<Vec<u32>, MpsError> {
        let reply = self.command(command)?;
        reply
            .split_whitespace()
            .map(|word| {
                word.parse().map_err(|_| MpsError::Unparsable {
                    command: command.to_owned(),
                    reply: reply.clone(),
                })
            })
            .collect()
    }

    /// The pids of the running MPS servers (one per user id with clients).
    pub(crate) fn server_list(&self) -> Result<Vec<u32>, MpsError> {
        self.pids("get_server_list")
    }

    /// The pids of the clients of server `server`.
    pub(crate) fn client_list(&self, server: u32) -> Result<Vec<u32>, MpsError> {
        self.pids(&format!("get_client_list {server}"))
    }

    fn percentage(&self, command: &str) -> Result<f64, MpsError> {
        let reply = self.command(command)?;
        reply
            .trim_end_matches('%')
            .trim()
            .parse()
            .map_err(|_| MpsError::Unparsable {
                command: command.to_owned(),
                reply,
            })
    }

    fn check_percentage(percentage: u32) -> Result<(), MpsError> {
        if (1..=100).contains(&percentage) {
            Ok(())
        } else {
            Err(MpsError::Percentage(percentage))
        }
    }

    fn mem_limit(&self, command: &str) -> Result<Option<MemLimitMib>, MpsError> {
        let reply = self.command(command)?;
        parse_mem_limit(&reply).map_err(|()| MpsError::Unparsable {
            command: command.to_owned(),
            reply,
        })
    }

    /// For servers started from now on.
    pub(crate) fn set_default_thread_percentage(&self, percentage: u32) -> Result<(), MpsError> {
        Self::check_percentage(percentage)?;
        self.command(&format!(
            "set_default_active_thread_percentage {percentage}"
        ))
        .map(drop)
    }

    pub(crate) fn default_thread_percentage(&self) -> Result<f64, MpsError> {
        self.percentage("get_default_active_thread_percentage")
    }

    /// For clients that server `server` creates from now on.
    pub(crate) fn set_thread_percentage(
        &self,
        server: u32,
        percentage: u32,
    ) -> Result<(), MpsError> {
        Self::check_percentage(percentage)?;
        self.command(&format!(
            "set_active_thread_percentage {server} {percentage}"
        ))
        .map(drop)
    }

    pub(crate) fn thread_percentage(&self, server: u32) -> Result<f64, MpsError> {
        self.percentage(&format!("get_active_thread_percentage {server}"))
    }

    pub(crate) fn set_default_mem_limit(
        &self,
        device: u32,
        limit: MemLimitMib,
    ) -> Result<(), MpsError> {
        self.command(&format!(
            "set_default_device_pinned_mem_limit {device} {}",
            command_value(limit)
        ))
        .map(drop)
    }

    pub(crate) fn default_mem_limit(&self, device: u32) -> Result<Option<MemLimitMib>, MpsError> {
        self.mem_limit(&format!("get_default_device_pinned_mem_limit {device}"))
    }

    pub(crate) fn set_mem_limit(
        &self,
        server: u32,
        device: u32,
        limit: MemLimitMib,
    ) -> Result<(), MpsError> {
        self.command(&format!(
            "set_device_pinned_mem_limit {server} {device} {}",
            command_value(limit)
        ))
        .map(drop)
    }

    pub(crate) fn mem_limit_of(
        &self,
        server: u32,
        device: u32,
    ) -> Result<Option<MemLimitMib>, MpsError> {
        self.mem_limit(&format!("get_device_pinned_mem_limit {server} {device}"))
    }

    /// Reads back the defaults and every server's settings for `devices`.
    pub(crate) fn limits_in_force(&self, devices: &[u32]) -> Result<LimitsInForce, MpsError> {
        let default_mem_limits = devices
            .iter()
            .map(|&d| Ok((d, self.default_mem_limit(d)?)))
            .collect::<Result<_, MpsError>>()?;
        let servers = self
            .server_list()?
            .into_iter()
            .map(|pid| {
                Ok(ServerLimits {
                    pid,
                    thread_percentage: self.thread_percentage(pid)?,
                    mem_limits: devices
                        .iter()
                        .map(|&d| Ok((d, self.mem_limit_of(pid, d)?)))
                        .collect::<Result<_, MpsError>>()?,
                })
            })
            .collect::<Result<_, MpsError>>()?;
        Ok(LimitsInForce {
            default_thread_percentage: self.default_thread_percentage()?,
            default_mem_limits,
            servers,
        })
    }

    pub(crate) fn pipe_dir(&self) -> Option<&Path> {
        self.pipe_dir.as_deref()
    }
}

/// A new MPS client's active-thread percentage (NVIDIA's client-side variable).
pub(crate) const PERCENTAGE_ENV: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

/// Where MPS clients and the control program find the control daemon.
pub(crate) const PIPE_DIRECTORY_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";

/// The environment that gives one new MPS client its own limits (NVIDIA's client-side
/// variables: they can only tighten what the control daemon allows).
/// With `pipe_dir` (a control daemon on its own pipe directory) the client is told where it
/// is: without `CUDA_MPS_PIPE_DIRECTORY` CUDA looks in /tmp/nvidia-mps, finds no daemon, and
/// runs outside MPS, where none of these limits apply.
pub(crate) fn client_env(
    percentage: u32,
    mem_limits: &[(u32, MemLimitMib)],
    pipe_dir: Option<&Path>,
) -> Vec<(String, String)> {
    let mut env = vec![(PERCENTAGE_ENV.to_owned(), percentage.to_string())];
    if let Some(dir) = pipe_dir {
        env.push((PIPE_DIRECTORY_ENV.to_owned(), dir.display().to_string()));
    }
    if !mem_limits.is_empty() {
        let value = mem_limits
            .iter()
            .map(|(device, limit)| format!("{device}={}", command_value(*limit)))
            .collect::<Vec<_>>()
            .join(",");
        env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), value));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `nvidia-cuda-mps-control`, which cannot exist without the NVIDIA driver:
    /// it keeps the daemon's settings in files of its pipe directory and answers the commands
    /// the enforcer sends, in the real program's shape (nothing for a set, the value for a
    /// get, an error and exit 1 when no daemon runs).
    const FAKE_CONTROL: &str = r#"#!/bin/sh
dir="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-d" ]; then umask > "$dir/umask"; touch "$dir/running"; echo 4242 > "$dir/servers"; exit 0; fi
if [ ! -e "$dir/running" ]; then echo "Cannot find MPS control daemon process" >&2; exit 1; fi
read -r cmd a b c
echo "$cmd $a $b $c" >> "$dir/log"
get() { if [ -e "$dir/$1" ]; then cat "$dir/$1"; else echo "$2"; fi; }
case "$cmd" in
  get_server_list) get servers "" ;;
  get_client_list) echo "5001"; echo "5002" ;;
  set_default_active_thread_percentage) echo "$a" > "$dir/default_pct" ;;
  get_default_active_thread_percentage) get default_pct 100.0 ;;
  set_active_thread_percentage) echo "$b" > "$dir/pct_$a" ;;
  get_active_thread_percentage) get "pct_$a" 100.0 ;;
  set_default_device_pinned_mem_limit) echo "$b" > "$dir/mem_default_$a" ;;
  get_default_device_pinned_mem_limit) get "mem_default_$a" 0 ;;
  set_device_pinned_mem_limit) echo "$c" > "$dir/mem_${a}_$b" ;;
  get_device_pinned_mem_limit) get "mem_${a}_$b" 0 ;;
  *) echo "Invalid command: $cmd" ;;
esac
"#;

    fn fake() -> (tempdir::Dir, MpsControl) {
        let dir = tempdir::Dir::new("mps");
        let program = dir.path.join("nvidia-cuda-mps-control");
        std::fs::write(&program, FAKE_CONTROL).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let control = MpsControl::new(program, Some(dir.path.clone()));
        (dir, control)
    }

    /// A directory removed on drop.
    mod tempdir {
        pub(super) struct Dir {
            pub path: std::path::PathBuf,
        }
        impl Dir {
            pub(super) fn new(tag: &str) -> Self {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path =
                    std::env::temp_dir().join(format!("reamer-{tag}-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap();
                Self { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    #[test]
    fn attach_refuses_without_a_daemon_and_start_brings_one_up() {
        let (_dir, control) = fake();
        assert!(!control.is_running());
        let err = control.start_or_attach(false).unwrap_err().to_string();
        assert!(err.contains("no MPS control daemon answers"), "{err}");
        assert!(err.contains("mps = \"start\""), "{err}");
        assert!(
            control.start_or_attach(true).unwrap(),
            "should have started it"
        );
        assert!(
            !control.start_or_attach(false).unwrap(),
            "should attach now"
        );
        assert_eq!(control.server_list().unwrap(), vec![4242]);
        assert_eq!(control.client_list(4242).unwrap(), vec![5001, 5002]);
        let umask = std::fs::read_to_string(_dir.path.join("umask")).unwrap();
        assert_eq!(
            umask.trim(),
            "0022",
            "the daemon's pipes must reach every uid"
        );
    }

    #[test]
    fn a_pipe_directory_other_users_may_write_is_refused_before_any_command() {
        use std::os::unix::fs::PermissionsExt as _;
        let (dir, control) = fake();
        control.start_or_attach(true).unwrap();
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let before = std::fs::read_to_string(dir.path.join("log")).unwrap_or_default();
        for may_start in [false, true] {
            let err = control.start_or_attach(may_start).unwrap_err().to_string();
            assert!(err.contains("lets other users write"), "{err}");
        }
        let after = std::fs::read_to_string(dir.path.join("log")).unwrap_or_default();
        assert_eq!(
            before, after,
            "nothing may be sent through a planted directory"
        );
    }

    #[test]
    fn settings_are_sent_in_nvidias_syntax_and_read_back() {
        let (dir, control) = fake();
        control.start_or_attach(true).unwrap();
        control.set_default_thread_percentage(40).unwrap();
        control.set_thread_percentage(4242, 25).unwrap();
        control.set_default_mem_limit(0, MemLimitMib(2048)).unwrap();
        control.set_mem_limit(4242, 0, MemLimitMib(900)).unwrap();
        let log = std::fs::read_to_string(dir.path.join("log")).unwrap();
        for line in [
            "set_default_active_thread_percentage 40",
            "set_active_thread_percentage 4242 25",
            "set_default_device_pinned_mem_limit 0 2048M",
            "set_device_pinned_mem_limit 4242 0 900M",
        ] {
            assert!(
                log.lines().any(|l| l.trim() == line),
                "{line} not sent:\n{log}"
            );
        }
        let force = control.limits_in_force(&[0, 1]).unwrap();
        assert_eq!(force.default_thread_percentage, 40.0);
        assert_eq!(
            force.default_mem_limits,
            vec![(0, Some(MemLimitMib(2048))), (1, None)]
        );
        assert_eq!(
            force.servers,
            vec![ServerLimits {
                pid: 4242,
                thread_percentage: 25.0,
                mem_limits: vec![(0, Some(MemLimitMib(900))), (1, None)],
            }]
        );
    }

    #[test]
    fn bad_values_and_refusals_are_errors_that_name_the_command() {
        let (_dir, control) = fake();
        let err = control.server_list().unwrap_err().to_string();
        assert!(err.contains("Cannot find MPS control daemon"), "{err}");
        control.start_or_attach(true).unwrap();
        for percentage in [0, 101] {
            let err = control
                .set_default_thread_percentage(percentage)
                .unwrap_err();
            assert!(err.to_string().contains("1 to 100"), "{err}");
        }
        let err = control
            .command("start_server -uid")
            .unwrap_err()
            .to_string();
        assert!(err.contains("refused `start_server -uid`"), "{err}");
        assert!(control.command("a\nquit").is_err());
        let missing = MpsControl::new("/nonexistent/nvidia-cuda-mps-control", None);
        let err = missing.server_list().unwrap_err().to_string();
        assert!(err.contains("cannot run /nonexistent"), "{err}");
    }

    #[test]
    fn memory_limit_replies_parse_in_every_unit() {
        let parse = parse_mem_limit;
        assert_eq!(parse("2048M"), Ok(Some(MemLimitMib(2048))));
        assert_eq!(parse("10G"), Ok(Some(MemLimitMib(10240))));
        assert_eq!(parse("900 MB"), Ok(Some(MemLimitMib(900))));
        assert_eq!(parse("1.5GiB"), Ok(Some(MemLimitMib(1536))));
        assert_eq!(parse("0"), Ok(None));
        assert_eq!(parse("N/A"), Ok(None));
        assert_eq!(parse("lots"), Err(()));
    }

    #[test]
    fn client_env_uses_nvidias_variables() {
        let limits = [(0, MemLimitMib(4096)), (1, MemLimitMib(1024))];
        let percentage = (
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
            "30".to_owned(),
        );
        let memory = (
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
            "0=4096M,1=1024M".to_owned(),
        );
        assert_eq!(
            client_env(30, &limits, None),
            vec![percentage.clone(), memory.clone()]
        );
        // A control daemon on its own pipe directory: the client must be told where, or it
        // runs outside MPS and no limit applies.
        let pipe = (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            "/run/reamer-mps".to_owned(),
        );
        assert_eq!(
            client_env(30, &limits, Some(Path::new("/run/reamer-mps"))),
            vec![percentage, pipe, memory]
        );
    }
}
