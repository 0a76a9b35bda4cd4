//! This machine's side of a config: the cgroups and processes its groups name exist, and none
//! of them is the enforcer itself where a pool would take it in. Apart from the text's checks,
//! which are pure (`Config::parse_for` with `Machine::Elsewhere`).

use std::{
    ops::Range,
    path::{Path, PathBuf},
};

use super::{Config, ConfigError, position::invalid_field};

impl Config {
    /// This machine's side of the groups: each cgroup a cgroup directory and each pid a
    /// process, and none of them the enforcer itself where a pool would take it in.
    pub(super) fn check_members(&self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let invalid = |span: Range<usize>, field: &str, message: String| {
            invalid_field(path, text, span, field, message)
        };
        let groups = self.training.iter().map(|g| ("training", g));
        let pools = self.pool.iter().map(|p| ("pool", p));
        for (section, group) in groups.chain(pools) {
            if let Some(cgroup) = &group.cgroup
                && let Err(err) = check_cgroup(cgroup.get_ref())
            {
                return Err(invalid(cgroup.span(), "cgroup", err.to_string()));
            }
            // A pool moves its members into its cgroup, idle class or frozen: the enforcer
            // among them would starve or stop itself.
            let own_pid = std::process::id();
            let in_pool = |pids: &[u32]| section == "pool" && pids.contains(&own_pid);
            if let Some(cgroup) = &group.cgroup {
                let procs = std::fs::read_to_string(cgroup.get_ref().join("cgroup.procs"))
                    .unwrap_or_default();
                let pids: Vec<u32> = procs
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                if in_pool(&pids) {
                    let message = format!(
                        "{} holds the enforcer itself (pid {own_pid}): the pool would take it \
                         in; run the enforcer in another cgroup, or name the pool's own",
                        cgroup.get_ref().display()
                    );
                    return Err(invalid(cgroup.span(), "cgroup", message));
                }
            }
            for pid in &group.pids {
                let pid_value = *pid.get_ref();
                if pid_value == 0 || !Path::new(&format!("/proc/{pid_value}")).exists() {
                    return Err(invalid(
                        pid.span(),
                        "pids",
                        format!("no process with pid {pid_value}"),
                    ));
                }
                if in_pool(&[pid_value]) {
                    let message = format!("pid {pid_value} is the enforcer itself");
                    return Err(invalid(pid.span(), "pids", message));
                }
            }
        }
        Ok(())
    }
}

/// A path that is not a cgroup directory.
#[derive(Debug, thiserror::Error)]
pub enum NotACgroup {
    #[error("cgroup {} must be an absolute path", .0.display())]
    Relative(PathBuf),
    #[error("{} is not a cgroup directory (no cgroup.procs)", .0.display())]
    NoProcs(PathBuf),
}

/// A cgroup directory is one with a `cgroup.procs` file, on v1 or v2.
pub fn check_cgroup(dir: &Path) -> Result<(), NotACgroup> {
    if !dir.is_absolute() {
        return Err(NotACgroup::Relative(dir.to_owned()));
    }
    if !dir.join("cgroup.procs").is_file() {
        return Err(NotACgroup::NoProcs(dir.to_owned()));
    }
    Ok(())
}
