//! The enforcer's command line as a user meets it: clear errors for bad config, a missing
//! daemon, a missing privilege, and a second daemon of the same instance; a first start on a
//! freshly booted node.

use std::process::{Command, Output};

use enforcer_common::protocol::{GroupKind, Request, Response};
use reamer_tests::harness::{Daemon, enforcer_bin, pin_dir_of, privileged};

fn enforcer(args: &[&str]) -> Output {
    Command::new(enforcer_bin())
        .args(args)
        .output()
        .expect("run enforcer")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn built() -> bool {
    if enforcer_bin().exists() {
        return true;
    }
    assert!(
        std::env::var("REAMER_REQUIRE_PRIVILEGED").is_err(),
        "{} not built",
        enforcer_bin().display()
    );
    eprintln!(
        "SKIPPED: {} not built (run `cargo xtask test`)",
        enforcer_bin().display()
    );
    false
}

#[test]
fn bad_config_names_file_line_and_field() {
    if !built() {
        return;
    }
    let path = std::env::temp_dir().join("reamer-cli-bad.toml");
    std::fs::write(
        &path,
        "[sensor]\nwait_threshold_us = 10\n\n[[training]]\nname = \"job\"\npids = [4194305]\n",
    )
    .unwrap();
    let output = enforcer(&[
        "run",
        "--config",
        path.to_str().unwrap(),
        "--instance",
        "cli-bad",
    ]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "{}:6: field `pids`: no process with pid 4194305",
            path.display()
        )),
        "{err}"
    );
}

#[test]
fn launch_without_daemon_says_how_to_start_one() {
    if !built() {
        return;
    }
    let output = enforcer(&[
        "launch",
        "--training",
        "x",
        "--instance",
        "cli-nodaemon",
        "--",
        "true",
    ]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains("no enforcer daemon answers at /run/reamer/cli-nodaemon.sock"),
        "{err}"
    );
    assert!(err.contains("enforcer run"), "{err}");
}

#[test]
fn launch_needs_a_group_and_a_command() {
    if !built() {
        return;
    }
    let err = stderr(&enforcer(&["launch", "--", "true"]));
    assert!(
        err.contains("--training") && err.contains("--pool"),
        "{err}"
    );
    let err = stderr(&enforcer(&["launch", "--training", "x"]));
    assert!(err.contains("required"), "{err}");
}

#[test]
fn run_as_non_root_is_refused_clearly() {
    if !built() || !privileged("run_as_non_root_is_refused_clearly") {
        return;
    }
    // Drop to nobody (65534) in the child before exec.
    use std::os::unix::process::CommandExt as _;
    let output = Command::new(enforcer_bin())
        .args(["run", "--instance", "cli-nonroot"])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run enforcer as nobody");
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains("must run as root") && err.contains("uid is 65534"),
        "{err}"
    );
}

/// Whether this host's cpu controller is bound to a cgroup v1 hierarchy (/proc/cgroups:
/// subsys_name, hierarchy, ...; hierarchy 0 is cgroup2's), so that a cgroup2 mount lacks it.
fn cpu_controller_on_v1() -> bool {
    std::fs::read_to_string("/proc/cgroups")
        .unwrap_or_default()
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .any(|fields| fields.first() == Some(&"cpu") && fields.get(1).is_some_and(|h| *h != "0"))
}

#[test]
fn pools_on_a_cgroup2_without_their_controllers_are_refused_before_anything_is_pinned() {
    let test = "pools_on_a_cgroup2_without_their_controllers_are_refused_before_anything_is_pinned";
    if !privileged(test) {
        return;
    }
    if !cpu_controller_on_v1() {
        eprintln!("SKIPPED {test}: the cpu controller is not on a cgroup v1 hierarchy here");
        return;
    }
    // In a mount namespace of its own, the daemon sees cgroup2 at /sys/fs/cgroup, as on a
    // v2 host, but one whose cpu and cpuset controllers this host's v1 hierarchies hold.
    let instance = "cli-v2-bare";
    let config = std::env::temp_dir().join("reamer-cli-v2-bare.toml");
    std::fs::write(&config, "[[pool]]\nname = \"batch\"\nkind = \"offline\"\n").unwrap();
    let script = format!(
        "mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && exec {} run \
         --instance {instance} --config {}",
        enforcer_bin().display(),
        config.display()
    );
    let output = Command::new("unshare")
        .args(["--mount", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let err = stderr(&output);
    assert!(!output.status.success(), "the daemon started: {err}");
    assert!(
        err.contains("pools need cgroups") && err.contains("without the cpu"),
        "{err}"
    );
    assert!(err.contains("cgroup_no_v1=cpu"), "no fix named: {err}");
    assert!(
        !pin_dir_of(instance).exists(),
        "a refused daemon left pins at {}",
        pin_dir_of(instance).display()
    );
    std::fs::remove_file(&config).unwrap();
}

#[test]
fn a_daemon_starts_on_a_freshly_booted_node_without_its_run_directory() {
    let test = "a_daemon_starts_on_a_freshly_booted_node_without_its_run_directory";
    if !privileged(test) {
        return;
    }
    // /run is a tmpfs that a boot starts empty. In a mount namespace of its own the daemon
    // gets an empty /run, without /run/reamer, where its socket, launch journal and decision
    // log go by default; the host's /run is left alone. A daemon that opened its decision log
    // before creating that directory failed on the first start after every boot.
    let instance = "cli-fresh-run";
    let config = std::env::temp_dir().join("reamer-cli-fresh-run.toml");
    std::fs::write(&config, "").unwrap();
    let enforcer = enforcer_bin();
    let script = format!(
        "mount --make-rprivate / && mount -t tmpfs none /run || exit 90
         {bin} run --instance {instance} --config {config} & daemon=$!
         i=0; while [ ! -S /run/reamer/{instance}.sock ] && [ $i -lt 400 ]; do
             kill -0 $daemon 2>/dev/null || break; sleep 0.05; i=$((i+1)); done
         {bin} status --instance {instance}; status=$?
         kill -INT $daemon; wait $daemon; echo \"daemon exited $?\"
         ls /run/reamer
         exit $status",
        bin = enforcer.display(),
        config = config.display()
    );
    let output = Command::new("unshare")
        .args(["--mount", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let out = String::from_utf8_lossy(&output.stdout);
    let err = stderr(&output);
    assert!(
        output.status.success(),
        "the daemon did not answer `enforcer status` ({}):\n{out}\n{err}",
        output.status
    );
    assert!(out.contains("daemon exited 0"), "{out}\n{err}");
    assert!(
        out.contains(&format!("{instance}.decisions.jsonl")),
        "no decision log in the new /run/reamer:\n{out}\n{err}"
    );
    std::fs::remove_file(&config).unwrap();
}

#[test]
fn second_daemon_of_an_instance_is_refused_and_first_keeps_running() {
    if !privileged("second_daemon_of_an_instance_is_refused_and_first_keeps_running") {
        return;
    }
    let daemon = Daemon::start("cli-twice", "");
    let output = enforcer(&["run", "--instance", "cli-twice"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("already running"),
        "{}",
        stderr(&output)
    );
    assert!(
        daemon.pin_dir().join("thread_state").exists(),
        "the first daemon's pins were removed"
    );
    daemon.snapshot();
    daemon.stop();
}

#[test]
fn unknown_pool_and_bad_requests_get_errors_and_the_daemon_keeps_serving() {
    if !privileged("unknown_pool_and_bad_requests_get_errors_and_the_daemon_keeps_serving") {
        return;
    }
    let daemon = Daemon::start("cli-bad-requests", "");
    let output = enforcer(&[
        "launch",
        "--pool",
        "nope",
        "--instance",
        "cli-bad-requests",
        "--",
        "true",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("unknown pool \"nope\""),
        "{}",
        stderr(&output)
    );
    let answer = daemon.call_line(r#"{"op": "dance"}"#);
    assert!(matches!(answer, Response::Error { .. }), "{answer:?}");
    let answer = daemon.call(&Request::Register {
        kind: GroupKind::Training,
        name: "x".into(),
        pid: 4194305,
    });
    assert!(
        matches!(&answer, Response::Error { message } if message.contains("no process with pid 4194305")),
        "{answer:?}"
    );
    daemon.snapshot();
    daemon.stop();
}

#[test]
fn check_reports_every_requirement_and_fails_without_privilege() {
    if !built() || !privileged("check_reports_every_requirement_and_fails_without_privilege") {
        return;
    }
    let output = enforcer(&["check"]);
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    for name in [
        "kernel",
        "btf",
        "privileges",
        "capabilities",
        "real time",
        "program types",
        "mounts",
        "cgroups",
        "gpu",
    ] {
        assert!(
            report.lines().any(|l| l[8..].starts_with(name)),
            "no `{name}` line:\n{report}"
        );
    }
    assert!(
        output.status.success(),
        "check failed as root here:\n{report}{}",
        stderr(&output)
    );

    use std::os::unix::process::CommandExt as _;
    let output = Command::new(enforcer_bin())
        .arg("check")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!output.status.success());
    assert!(
        report.contains("MISSING privileges") && report.contains("uid 65534"),
        "{report}"
    );
    assert!(
        stderr(&output).contains("requirement(s) missing"),
        "{}",
        stderr(&output)
    );
}
