//! Running a real enforcer daemon for a test: its own instance (pins and socket), its own
//! config, stopped with SIGTERM when the test ends. Requests and answers are the control
//! protocol's types (`enforcer_common::protocol`).

pub mod cgroups;
pub mod gpu;
pub mod kube_api;
pub mod kubelet;
pub mod kubelet_writer;
pub mod worker;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use enforcer_common::protocol::{
    self, JobTotals, PoolInfo, PoolStatus, Request, Response, Snapshot,
};
use serde_json::Value;

/// Set to 1 to make a privileged test that cannot run fail instead of skipping.
pub const REQUIRE_PRIVILEGED: &str = "REAMER_REQUIRE_PRIVILEGED";

/// Where a daemon of `instance` pins its maps (the enforcer's `paths::pin_dir`).
pub fn pin_dir_of(instance: &str) -> PathBuf {
    PathBuf::from(format!("/sys/fs/bpf/reamer/v8/{instance}"))
}

/// Mounts bpffs at /sys/fs/bpf where it is not (a fresh boot here), as the daemon does at
/// start: for a test that plants pins before any daemon ran.
pub fn mount_bpffs_if_missing() {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
    let mounted = mounts.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&"/sys/fs/bpf") && fields.get(2) == Some(&"bpf")
    });
    if !mounted {
        let status = Command::new("mount")
            .args(["-t", "bpf", "bpf", "/sys/fs/bpf"])
            .status()
            .expect("run mount");
        assert!(status.success(), "mounting bpffs at /sys/fs/bpf: {status}");
    }
}

/// Where a daemon of `instance` writes its decision log by default (the enforcer's
/// `paths::decision_log`).
pub fn decision_log_of(instance: &str) -> PathBuf {
    PathBuf::from(format!("/run/reamer/{instance}.decisions.jsonl"))
}

/// What `enforcer status` prints for the daemon of `instance`, which must answer.
pub fn status_text(instance: &str) -> String {
    let output = Command::new(enforcer_bin())
        .args(["status", "--instance", instance])
        .output()
        .expect("run enforcer status");
    assert!(output.status.success(), "enforcer status failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The control socket of a daemon of `instance`, running or not.
pub fn socket_of(instance: &str) -> PathBuf {
    PathBuf::from(format!("/run/reamer/{instance}.sock"))
}

/// Whether privileged tests can run here; prints why not. Panics instead of returning false
/// when REAMER_REQUIRE_PRIVILEGED=1.
pub fn privileged(test: &str) -> bool {
    let reason = if unsafe { libc::geteuid() } != 0 {
        Some("not root".to_owned())
    } else if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("kernel has no BTF (/sys/kernel/btf/vmlinux)".to_owned())
    } else if !enforcer_bin().exists() {
        Some(format!(
            "{} is not built (run `cargo xtask test`)",
            enforcer_bin().display()
        ))
    } else {
        None
    };
    match reason {
        None => {
            hold_machine_for_this_test();
            true
        }
        Some(reason) if std::env::var(REQUIRE_PRIVILEGED).is_ok_and(|v| v == "1") => {
            panic!("{test}: cannot run ({reason}) and {REQUIRE_PRIVILEGED}=1")
        }
        Some(reason) => {
            report_skip(test, &reason);
            false
        }
    }
}

/// Where `cargo xtask test` asks skipped tests to be listed, for its summary.
pub const SKIP_LOG: &str = "REAMER_SKIP_LOG";

/// A skipped test says so where it is seen: on the real stderr (libtest captures `eprintln!`
/// of a passing test, and a skipped test passes), and in `SKIP_LOG`'s file where one is set.
fn report_skip(test: &str, reason: &str) {
    use std::io::Write as _;
    let line = format!("SKIPPED {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os(SKIP_LOG) {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(err) = appended {
            let _ = std::io::stderr().write_all(format!("listing the skip: {err}\n").as_bytes());
        }
    }
}

/// The lock file that serializes privileged tests across threads and processes.
const MACHINE_LOCK: &str = "/run/reamer-tests.lock";

thread_local! {
    /// This thread's hold on [`MACHINE_LOCK`], released when the thread (the test) ends.
    static MACHINE_HELD: std::cell::RefCell<Option<std::fs::File>> = const { std::cell::RefCell::new(None) };
}

/// Waits until no other privileged test runs on this machine, and keeps it so until the
/// calling thread ends. Privileged tests share the machine: the top `reamer` cgroup, the
/// scheduler, and the CPUs whose timing several of them measure (run-queue waits against
/// schedstat, training's pace beside a hog). Side by side, one test's daemon and load are
/// another's noise. `cargo xtask test` runs them one at a time (`--test-threads=1`); this
/// lock does the same for `cargo test`'s default threads and for nextest's processes.
/// libtest runs each test on a thread of its own, and nextest in a process of its own: either
/// way the hold ends with the test. An exclusive `flock` is per open file, so it excludes
/// other threads of this process as well as other processes, and the kernel drops it with the
/// process however it ends.
fn hold_machine_for_this_test() {
    MACHINE_HELD.with(|held| {
        let mut held = held.borrow_mut();
        if held.is_some() {
            return;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(MACHINE_LOCK)
            .unwrap_or_else(|e| panic!("opening {MACHINE_LOCK}: {e}"));
        // SAFETY: flock on a descriptor this function owns.
        let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
        assert_eq!(
            locked,
            0,
            "locking {MACHINE_LOCK}: {}",
            std::io::Error::last_os_error()
        );
        *held = Some(file);
    });
}

/// The directory cargo put this test binary's sibling binaries in (target/<profile>).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("exe dir");
    if deps.ends_with("deps") {
        deps.parent().expect("profile dir").to_owned()
    } else {
        deps.to_owned()
    }
}

/// The enforcer binary built beside the tests.
pub fn enforcer_bin() -> PathBuf {
    target_dir().join("enforcer")
}

/// A daemon started for one test.
pub struct Daemon {
    pub instance: String,
    enforcer: PathBuf,
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Starts `enforcer run` with `config` (TOML text) and waits until its socket answers.
    pub fn start(instance: &str, config: &str) -> Self {
        Self::start_bin(&enforcer_bin(), instance, config)
    }

    /// Like `start`, with the enforcer binary at `enforcer`.
    pub fn start_bin(enforcer: &std::path::Path, instance: &str, config: &str) -> Self {
        Self::start_command(Command::new(enforcer), instance, config)
    }

    /// Like `start_bin`, after removing the instance's decision log, so that the log holds
    /// this daemon's decisions only (what a benchmark reads back).
    pub fn start_bin_with_fresh_log(
        enforcer: &std::path::Path,
        instance: &str,
        config: &str,
    ) -> Self {
        let _ = std::fs::remove_file(decision_log_of(instance));
        Self::start_bin(enforcer, instance, config)
    }

    /// Like `start`, with `command` (the enforcer binary, and whatever the test set up for the
    /// process, such as a reduced capability set) given `run` and its arguments.
    pub fn start_command(mut command: Command, instance: &str, config: &str) -> Self {
        let enforcer = PathBuf::from(command.get_program());
        let dir = std::env::temp_dir();
        let config_path = dir.join(format!("reamer-test-{instance}.toml"));
        std::fs::write(&config_path, config).expect("write config");
        let log = dir.join(format!("reamer-test-{instance}.log"));
        let log_file = std::fs::File::create(&log).expect("create log");
        let child = command
            .args(["run", "--instance", instance, "--config"])
            .arg(&config_path)
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file)
            .spawn()
            .expect("spawn enforcer run");
        let mut daemon = Self {
            instance: instance.to_owned(),
            enforcer,
            child: Some(child),
            log,
        };
        daemon.wait_ready();
        daemon
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn socket(&self) -> PathBuf {
        socket_of(&self.instance)
    }

    pub fn pin_dir(&self) -> PathBuf {
        pin_dir_of(&self.instance)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("enforcer exited early ({status}):\n{}", self.log());
            }
            if UnixStream::connect(self.socket()).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("enforcer did not answer within 20 s:\n{}", self.log());
    }

    /// One request over the control socket.
    pub fn call(&self, request: &Request) -> Response {
        let line = String::from_utf8(protocol::to_line(request)).expect("JSON is UTF-8");
        self.call_line(line.trim_end())
    }

    /// One line over the control socket, whatever it holds (a request the protocol does not
    /// know, to see it refused), and the daemon's answer.
    pub fn call_line(&self, line: &str) -> Response {
        let mut stream = UnixStream::connect(self.socket()).expect("connect to daemon");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        writeln!(stream, "{line}").expect("send request");
        let mut answer = String::new();
        BufReader::new(stream)
            .read_line(&mut answer)
            .expect("read answer");
        protocol::from_line(answer.as_bytes())
            .unwrap_or_else(|e| panic!("bad answer {answer:?}: {e}"))
    }

    pub fn snapshot(&self) -> Snapshot {
        match self.call(&Request::Snapshot) {
            Response::Snapshot(snapshot) => *snapshot,
            other => panic!("no snapshot: {other:?}"),
        }
    }

    /// `enforcer launch --training|--pool NAME -- program args...`
    pub fn launch(&self, group_flag: &str, name: &str, program: &str, args: &[&str]) -> Child {
        Command::new(&self.enforcer)
            .args([
                "launch",
                group_flag,
                name,
                "--instance",
                &self.instance,
                "--",
                program,
            ])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn enforcer launch")
    }

    /// Kills the daemon with SIGKILL, as a crash or the OOM killer would: it cleans up
    /// nothing. Returns its log.
    pub fn crash(mut self) -> String {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL the enforcer");
        child.wait().expect("wait for the killed enforcer");
        self.log()
    }

    /// Sends SIGTERM and waits for a clean exit; returns the log.
    pub fn stop(mut self) -> String {
        let child = self.child.take().expect("running");
        let status = terminate(child);
        assert!(
            status.success(),
            "enforcer exited with {status}:\n{}",
            self.log()
        );
        self.log()
    }
}

/// A child process killed and reaped when this goes out of scope, a failing test's included:
/// a test that panics halfway leaves no hog running into the next one (a 60 s offline hog left
/// so made the next runs of offline_pause.rs fail to freeze their pool in time).
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
    }
}

/// Sends `signal` to `pid`, a process the test started and has not reaped.
pub fn send_signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with the pid of a child this test holds and has not reaped.
    assert_eq!(
        unsafe { libc::kill(pid as libc::pid_t, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

fn terminate(mut child: Child) -> std::process::ExitStatus {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().expect("wait for enforcer")
}

/// The job named `name` in a snapshot.
pub fn job<'a>(snapshot: &'a Snapshot, name: &str) -> &'a JobTotals {
    snapshot
        .job(name)
        .unwrap_or_else(|| panic!("no job {name} in {snapshot:?}"))
}

/// A u64 field of a JSON object.
pub fn u64_of(value: &Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no u64 {field} in {value}"))
}

/// Waits for a workload process to finish successfully; kills it after 60 s so that a hung
/// workload fails its test instead of hanging the suite.
pub fn wait_ok(mut child: Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                assert!(status.success(), "{what} exited with {status}");
                return;
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} still running after 60 s: killed");
            }
            Err(err) => panic!("{what}: {err}"),
        }
    }
}

/// Removes what a test's instance left in the cgroup hierarchies (its processes gone by now):
/// the pool's cgroup, the instance's, and the `reamer` parent once empty.
pub fn remove_test_cgroups(instance: &str, pool: &str) {
    cgroups::remove_groups(instance, &[pool]);
}

/// The cgroup path of `pid` for `controller`: its v1 hierarchy, or the unified one on v2.
pub fn cgroup_of(pid: u32, controller: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let entries: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((names, path))
        })
        .collect();
    // The v1 hierarchy that holds the controller; on a cgroup v2 host, the one unified
    // hierarchy ("0::/path"), which holds them all.
    entries
        .iter()
        .find(|(names, _)| names.split(',').any(|n| n == controller))
        .or_else(|| entries.iter().find(|(names, _)| names.is_empty()))
        .map(|(_, path)| (*path).to_owned())
        .unwrap_or_default()
}

/// The scheduling policy of each thread of `pid` (`SCHED_OTHER`, `SCHED_IDLE`, ...); a thread
/// gone meanwhile is left out. Panics naming `pid` where its threads cannot be listed.
pub fn thread_policies(pid: u32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap_or_else(|e| {
        panic!("listing the threads of {pid}: {e}");
    });
    tasks
        .flatten()
        .filter_map(|task| task.file_name().to_str()?.parse::<libc::pid_t>().ok())
        // SAFETY: sched_getscheduler only reads; a thread gone meanwhile gives -1, left out.
        .map(|tid| unsafe { libc::sched_getscheduler(tid) })
        .filter(|&policy| policy >= 0)
        .collect()
}

/// Whether every thread of `pid` has the SCHED_IDLE policy (and it has threads left).
pub fn threads_idle_class(pid: u32) -> bool {
    let policies = thread_policies(pid);
    !policies.is_empty() && policies.iter().all(|&policy| policy == libc::SCHED_IDLE)
}

/// The directory of cgroup `group` (a path as `cgroup_of` gives it: "/reamer/x/pool") that
/// holds `controller`'s files: in that controller's v1 hierarchy, or in the one tree on a
/// cgroup v2 host.
pub fn cgroup_dir(controller: &str, group: &str) -> PathBuf {
    if cgroups::is_v2_host() {
        PathBuf::from(format!("/sys/fs/cgroup{group}"))
    } else {
        PathBuf::from(format!("/sys/fs/cgroup/{controller}{group}"))
    }
}

/// One of `controller`'s files of cgroup `group` (`cgroup_dir`), trimmed; panics naming it
/// when it cannot be read.
pub fn cgroup_value(controller: &str, group: &str, file: &str) -> String {
    let path = cgroup_dir(controller, group).join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// `bpftool -j ARGS…`, parsed.
pub fn bpftool(args: &[&str]) -> Value {
    let output = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run bpftool ({e}): the tests inspect the pinned maps with it; \
                 `cargo xtask test` installs it (Debian/Ubuntu: apt-get install bpftool)"
            )
        });
    assert!(
        output.status.success(),
        "bpftool {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("bpftool JSON")
}

/// The kernel's list of online CPUs ("0-15"): `cgroups::online_cpus`, unwrapped for a test.
pub fn online_cpus() -> String {
    cgroups::online_cpus().expect("read /sys/devices/system/cpu/online")
}

/// How many CPUs are online: the whole machine, whatever this process's affinity or quota.
pub fn online_cpu_count() -> usize {
    enforcer_common::cpu_list::count(&online_cpus())
}

/// Polls `check` every 100 ms until it holds; panics after `within`.
pub fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not within {within:?}");
}

/// Pool `name` in a snapshot: (its enforcement status, its classification).
pub fn pool_in(snapshot: &Snapshot, name: &str) -> (PoolStatus, PoolInfo) {
    match (snapshot.pool_status(name), snapshot.pool(name)) {
        (Some(status), Some(info)) => (status.clone(), info.clone()),
        _ => panic!("no pool {name} in {snapshot:?}"),
    }
}
