//! Privileged tests of `enforcer launch --user`: the command runs as the user, with no
//! capability left, in the pool it was launched into, whether the launcher execs it or stays
//! as its parent (`--relaunch`); root and unknown users are refused before anything starts.

use std::process::Command;

use reamer_tests::harness::{Daemon, enforcer_bin, privileged, remove_test_cgroups};

const OFFLINE_POOL: &str = "[[pool]]\nname = \"batch\"\nkind = \"offline\"\n";
/// What the command reports: its uid, its gid, its effective capabilities, its cpu cgroup.
const REPORT: &str = "echo \"$(id -u) $(id -g) $(grep CapEff /proc/self/status | cut -f2) $(grep -E ':cpu[,:]|^0::' /proc/self/cgroup | head -1 | cut -d: -f3)\"";

fn launch_as(daemon: &Daemon, user: &str, relaunch: bool) -> std::process::Output {
    let mut command = Command::new(enforcer_bin());
    command.args(["launch", "--pool", "batch", "--instance", &daemon.instance]);
    command.args(["--user", user]);
    if relaunch {
        command.arg("--relaunch");
    }
    command
        .args(["--", "/bin/sh", "-c", REPORT])
        .output()
        .expect("run enforcer launch")
}

#[test]
fn a_command_launched_as_a_user_runs_unprivileged_in_its_pool() {
    let instance = "it-launch-user";
    if !privileged("a_command_launched_as_a_user_runs_unprivileged_in_its_pool") {
        return;
    }
    let daemon = Daemon::start(instance, OFFLINE_POOL);
    for relaunch in [false, true] {
        let output = launch_as(&daemon, "nobody", relaunch);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "relaunch {relaunch}: {stderr}");
        let fields: Vec<&str> = stdout.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "relaunch {relaunch}: {stdout:?}");
        assert_eq!(fields[0], "65534", "not nobody's uid: {stdout}");
        assert_ne!(fields[1], "0", "root's group kept: {stdout}");
        assert_eq!(fields[2], "0000000000000000", "capabilities kept: {stdout}");
        assert_eq!(
            fields[3],
            format!("/reamer/{instance}/batch"),
            "not in its pool: {stdout}"
        );
    }
    for (user, says) in [("root", "is root"), ("no-such-user-here", "no such user")] {
        let output = launch_as(&daemon, user, false);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "--user {user} was taken");
        assert!(stderr.contains(says), "--user {user}: {stderr}");
    }
    daemon.stop();
    remove_test_cgroups(instance, "batch");
}
