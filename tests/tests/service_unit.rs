//! The systemd unit in deploy/ runs the daemon as root with a reduced capability set. This runs
//! it with exactly that set, read from the unit file, on this kernel: the preflight passes, a
//! pool's cgroups are created and filled, the event thread is real-time, and it stops cleanly.
//! (The set the unit first shipped failed here on the first pool: this host's cgroup v1
//! hierarchy roots are read-only directories, mode 555, even to root without
//! CAP_DAC_OVERRIDE.) And where a daemon is refused real time (a cpu cgroup without real-time
//! runtime), its event thread keeps the shortest time slice instead.

use std::{
    os::unix::process::CommandExt as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use reamer_tests::harness::{Daemon, enforcer_bin, eventually, privileged, status_text};

/// Numbers of the capabilities the unit may name (include/uapi/linux/capability.h).
const CAPABILITY_NUMBERS: [(&str, u32); 7] = [
    ("CAP_DAC_OVERRIDE", 1),
    ("CAP_KILL", 5),
    ("CAP_SYS_ADMIN", 21),
    ("CAP_SYS_NICE", 23),
    ("CAP_SYS_RESOURCE", 24),
    ("CAP_PERFMON", 38),
    ("CAP_BPF", 39),
];

/// Whether this process, root with all its capabilities, may make a thread SCHED_FIFO here
/// (tried on a thread of its own that exits right after).
fn root_may_run_realtime() -> bool {
    std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets this short-lived thread's own policy.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    })
    .join()
    .unwrap_or(false)
}

/// The unit's `CapabilityBoundingSet`, as capability numbers.
fn unit_capabilities() -> Vec<u32> {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/enforcer.service");
    let text = std::fs::read_to_string(&unit)
        .unwrap_or_else(|e| panic!("reading {}: {e}", unit.display()));
    let names = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap_or_else(|| panic!("{} has no CapabilityBoundingSet", unit.display()));
    names
        .split_whitespace()
        .map(|name| {
            CAPABILITY_NUMBERS
                .iter()
                .find(|(known, _)| *known == name)
                .unwrap_or_else(|| panic!("the unit grants {name}: add its number here"))
                .1
        })
        .collect()
}

/// The enforcer binary, to be run with only `keep` in its capability bounding set. Root's
/// capabilities after exec are its bounding set (the inheritable set is empty), which is
/// what systemd's CapabilityBoundingSet makes of a service running as root.
fn enforcer_with_only(keep: &[u32]) -> Command {
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .expect("cap_last_cap")
        .trim()
        .parse()
        .expect("a number");
    let drop: Vec<u32> = (0..=last).filter(|cap| !keep.contains(cap)).collect();
    let mut command = Command::new(enforcer_bin());
    // SAFETY: prctl is async-signal-safe, and the closure allocates nothing.
    unsafe {
        command.pre_exec(move || {
            for &cap in &drop {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command
}

/// The thread of process `pid` named `name`.
fn thread_named(pid: u32, name: &str) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == name)
        })
        .and_then(|task| task.file_name().to_str()?.parse().ok())
}

/// The daemon's event thread, waited for: the daemon answers on its socket, which is what
/// starting it waits for, just before it spawns that thread (a CI run read the task list in
/// between and found none).
fn event_thread(pid: u32) -> u32 {
    let mut found = None;
    eventually("the daemon's event thread", Duration::from_secs(5), || {
        found = thread_named(pid, "reamer-events");
        found.is_some()
    });
    found.expect("found above")
}

#[test]
fn the_service_units_capabilities_are_all_the_daemon_needs() {
    if !privileged("the_service_units_capabilities_are_all_the_daemon_needs") {
        return;
    }
    let capabilities = unit_capabilities();

    let check = enforcer_with_only(&capabilities)
        .arg("check")
        .output()
        .expect("run enforcer check");
    let report = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(
        check.status.success() && !report.contains("MISSING"),
        "enforcer check with the unit's capabilities:\n{report}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok      capabilities")),
        "{report}"
    );

    let instance = "svc-caps";
    let daemon = Daemon::start_command(
        enforcer_with_only(&capabilities),
        instance,
        "[[pool]]\nname = \"batch\"\nkind = \"offline\"\n\n\
         [[pool]]\nname = \"serve\"\nkind = \"online\"\nmin_cores = 1\n",
    );
    let events = event_thread(daemon.pid());
    // SAFETY: no preconditions; a thread id of a live process.
    let policy = || unsafe { libc::sched_getscheduler(events as i32) };
    let realtime = root_may_run_realtime();
    if realtime {
        // The thread asks for SCHED_FIFO as it starts, which may be just after it appears.
        eventually(
            "the event thread in SCHED_FIFO",
            Duration::from_secs(5),
            || policy() == libc::SCHED_FIFO,
        );
        assert_eq!(
            daemon.snapshot().event_thread.as_deref(),
            Some("SCHED_FIFO 10")
        );
    } else {
        // Where even root with every capability is refused (a cgroup v2 host whose group has
        // no real-time runtime), the daemon must say so, not fail.
        eprintln!("this host refuses SCHED_FIFO to root itself: checking the daemon's warning");
        eventually(
            "a warning that the event thread is not real-time",
            Duration::from_secs(5),
            || daemon.log().contains("event thread stays SCHED_OTHER"),
        );
        // Kept in the normal class with the shortest slice (thread_policy::run_as_fifo), on a
        // kernel with custom slices.
        if let Some(slice) = slice_ns(daemon.pid(), events)
            && !daemon.log().contains("custom slices need Linux 6.12+")
        {
            assert_eq!(slice, 100_000, "the event thread's se.slice");
        }
        let how = daemon.snapshot().event_thread;
        assert!(
            how.as_deref().is_some_and(|h| h.starts_with("SCHED_OTHER")),
            "status's event thread: {how:?}"
        );
    }

    let mut member = daemon.launch("--pool", "batch", "/bin/sleep", &["30"]);
    let pool_dir = format!("/reamer/{instance}/batch");
    let deadline = Instant::now() + Duration::from_secs(10);
    let in_pool = loop {
        let cgroups =
            std::fs::read_to_string(format!("/proc/{}/cgroup", member.id())).unwrap_or_default();
        if cgroups.lines().any(|l| l.ends_with(&pool_dir)) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = member.kill();
    let _ = member.wait();
    let log = daemon.stop();
    assert!(
        in_pool,
        "the launched process never reached {pool_dir}:\n{log}"
    );
    let mut troubles = vec!["Permission denied", "ERROR"];
    if realtime {
        troubles.push("stays SCHED_OTHER");
    }
    for trouble in troubles {
        assert!(!log.contains(trouble), "{trouble:?} in the log:\n{log}");
    }
}

/// Removes `reamer/<instance>/daemon` and what holds it, in every hierarchy, when dropped.
struct RemovedOnDrop(&'static str);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        reamer_tests::harness::cgroups::remove_groups(self.0, &["daemon"]);
    }
}

/// `command`, started in cpu cgroup `group` (its directory), before it runs anything.
fn in_cpu_group(mut command: Command, group: &Path) -> Command {
    let procs = std::ffi::CString::new(group.join("cgroup.procs").to_str().expect("utf-8"))
        .expect("no NUL");
    // SAFETY: open, write and close are async-signal-safe; nothing is allocated.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            // "0": the writing process itself.
            let moved = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            if fd >= 0 {
                libc::close(fd);
            }
            match moved {
                true => Ok(()),
                false => Err(std::io::Error::last_os_error()),
            }
        });
    }
    command
}

/// The time slice the kernel keeps for thread `tid` of `pid` (`se.slice`, ns), where
/// /proc shows it (CONFIG_SCHED_DEBUG).
fn slice_ns(pid: u32, tid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched"))
        .ok()?
        .lines()
        .find_map(|line| {
            line.strip_prefix("se.slice")?
                .split(':')
                .nth(1)?
                .trim()
                .parse()
                .ok()
        })
}

/// A daemon started in a cpu cgroup without real-time runtime, as under a service manager on a
/// kernel with CONFIG_RT_GROUP_SCHED, is refused SCHED_FIFO for its event thread: the thread
/// stays SCHED_OTHER with the shortest time slice, and the log says so. Runs where cgroup v1's
/// cpu hierarchy has `cpu.rt_runtime_us` (a group made below the root gets 0 of it).
#[test]
fn an_event_thread_refused_real_time_runs_with_the_shortest_slice() {
    let test = "an_event_thread_refused_real_time_runs_with_the_shortest_slice";
    if !privileged(test) {
        return;
    }
    let cpu_root = Path::new("/sys/fs/cgroup/cpu");
    if !cpu_root.join("cpu.rt_runtime_us").exists() {
        eprintln!("SKIPPED {test}: no cgroup v1 cpu hierarchy with real-time group runtime here");
        return;
    }
    let instance = "it-rt-refused";
    let group = cpu_root.join(format!("reamer/{instance}/daemon"));
    std::fs::create_dir_all(&group).expect("the daemon's cpu group");
    // Removed however the test ends, once the daemon (dropped first) has left it.
    let _group_removed = RemovedOnDrop(instance);
    // `enforcer check` from the same group says what the daemon will do there.
    let check = in_cpu_group(Command::new(enforcer_bin()), &group)
        .arg("check")
        .output()
        .expect("run enforcer check");
    let report = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("note    real time") && l.contains("SCHED_FIFO refused here")),
        "enforcer check in a group without real-time runtime:\n{report}"
    );
    let command = in_cpu_group(Command::new(enforcer_bin()), &group);
    let daemon = Daemon::start_command(command, instance, "");
    let events = event_thread(daemon.pid());
    eventually(
        "the warning that the event thread is not real-time",
        Duration::from_secs(5),
        || daemon.log().contains("event thread stays SCHED_OTHER"),
    );
    // SAFETY: no preconditions; a thread id of a live process.
    let policy = unsafe { libc::sched_getscheduler(events as i32) };
    let slice = slice_ns(daemon.pid(), events);
    let status = status_text(instance);
    let log = daemon.stop();
    assert_eq!(
        policy,
        libc::SCHED_OTHER,
        "the event thread's policy:\n{log}"
    );
    if log.contains("custom slices need Linux 6.12+") {
        eprintln!("{test}: this kernel keeps no custom slice; the warning says so");
        return;
    }
    assert!(
        log.contains("with the shortest time slice (100 µs)"),
        "the fallback's warning:\n{log}"
    );
    if let Some(slice) = slice {
        assert_eq!(slice, 100_000, "the event thread's se.slice:\n{log}");
    }
    assert!(
        status.contains("| event thread SCHED_OTHER, 0.1 ms slice"),
        "enforcer status says how the event thread runs:\n{status}"
    );
}
