//! The writes the kubelet and its runtime (runc) make into a node's cgroups, in their order and
//! checked as they check them, for the tests that hold reamer to never making one fail. Where
//! each comes from (the kubelet's and runc's code; docs/kubernetes.md, "What the kubelet
//! writes", names the files):
//!
//! - **The QoS tiers.** `kubepods/burstable` gets the sum of its pods' CPU requests as its
//!   weight, `kubepods/besteffort` the least: at the kubelet's start, at each pod's admission
//!   and removal, and every minute.
//! - **A pod's group.** Made once, with its weight and quota (a kubelet restart finds it there
//!   and leaves it); written again at an in-place resize, before its containers where CPU
//!   grows and after them where it shrinks; lowered to the least weight by the orphan cleanup
//!   of a deleted pod whose volumes are still mounted.
//! - **A container's group.** Made by runc with its weight, quota and CPUs, and written whole
//!   at every update: a resize, or the CPU manager's shared pool changing, and the CPU
//!   manager's first reconcile after a kubelet restart (the runtime passes the container's
//!   whole resources, and runc writes each one it is given). With runc's systemd driver on v1,
//!   a container not frozen already is frozen around the update and thawed after.
//!
//! On v1, runc reads `cpu.shares` back after writing it and fails where it differs
//! (libcontainer's fs/cpu.go), so `write_weight` does too.

use super::kubelet::{dir, kubelet_mkdir, v2_host};

/// The kubelet's CFS period, µs.
const PERIOD_US: u64 = 100_000;
/// `MinShares`: a BestEffort pod's, and the QoS BestEffort tier's.
pub const MIN_SHARES: u64 = 2;

/// A pod's or container's CPU, as the kubelet turns it into cgroup values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpu {
    /// The request, in thousandths of a CPU (0: none, BestEffort).
    pub request_milli: u64,
    /// The limit, in thousandths of a CPU.
    pub limit_milli: Option<u64>,
}

impl Cpu {
    pub const BEST_EFFORT: Self = Self {
        request_milli: 0,
        limit_milli: None,
    };

    /// The kubelet's `MilliCPUToShares`: 1024 per CPU, at least `MIN_SHARES`.
    pub fn shares(self) -> u64 {
        (self.request_milli * 1024 / 1000).clamp(MIN_SHARES, 262_144)
    }

    /// The kubelet's `MilliCPUToQuota`, µs per period; None: no limit.
    fn quota_us(self) -> Option<u64> {
        self.limit_milli
            .map(|milli| (milli * PERIOD_US / 1000).max(1000))
    }
}

/// v2's weight for `shares`, as the kubelet converts it (`getCPUWeight`, the OCI conversion).
pub fn v2_weight(shares: u64) -> u64 {
    1 + ((shares - 2) * 9999) / 262_142
}

/// The weight file of this host, and the value it holds for `shares`.
pub fn weight_for(shares: u64) -> (&'static str, u64) {
    if v2_host() {
        ("cpu.weight", v2_weight(shares))
    } else {
        ("cpu.shares", shares)
    }
}

/// Group `relative`'s weight now (`cpu.shares` on v1, `cpu.weight` on v2).
pub fn weight_of(relative: &str) -> u64 {
    let path = dir("cpu", relative).join(weight_for(MIN_SHARES).0);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

/// Writes `value` into `file` of group `relative` (`controller`'s directory), as the kubelet
/// and runc do: an error names the file, the value and the kernel's answer.
pub fn write(controller: &str, relative: &str, file: &str, value: &str) -> Result<(), String> {
    let path = dir(controller, relative).join(file);
    std::fs::write(&path, value)
        .map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

/// The weight for `shares` on group `relative`: `cpu.shares`, read back as runc reads it (v1),
/// or `cpu.weight` (v2).
pub fn write_weight(relative: &str, shares: u64) -> Result<(), String> {
    if v2_host() {
        return write(
            "cpu",
            relative,
            "cpu.weight",
            &v2_weight(shares).to_string(),
        );
    }
    write("cpu", relative, "cpu.shares", &shares.to_string())?;
    let path = dir("cpu", relative).join("cpu.shares");
    let read =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    match read.trim().parse::<u64>() {
        Ok(back) if back == shares => Ok(()),
        // runc's own words for it.
        Ok(back) if back < shares => Err(format!("the maximum allowed cpu-shares is {back}")),
        Ok(back) => Err(format!("the minimum allowed cpu-shares is {back}")),
        Err(e) => Err(format!("reading {}: {read:?}: {e}", path.display())),
    }
}

/// A group's weight and quota for `cpu`.
fn write_cpu(relative: &str, cpu: Cpu) -> Result<(), String> {
    write_weight(relative, cpu.shares())?;
    if v2_host() {
        let max = cpu.quota_us().map_or("max".to_owned(), |q| q.to_string());
        write("cpu", relative, "cpu.max", &format!("{max} {PERIOD_US}"))
    } else {
        write("cpu", relative, "cpu.cfs_period_us", &PERIOD_US.to_string())?;
        let quota = cpu.quota_us().map_or("-1".to_owned(), |q| q.to_string());
        write("cpu", relative, "cpu.cfs_quota_us", &quota)
    }
}

/// The QoS tiers under `root` (the kubelet's `--cgroup-root`), with `burstable` the sum of
/// the Burstable pods' CPU.
pub fn write_qos_tiers(root: &str, burstable: Cpu) -> Result<(), String> {
    let tier = |name: &str| format!("{root}/kubepods/{name}");
    kubelet_mkdir(&tier("burstable"));
    kubelet_mkdir(&tier("besteffort"));
    write_weight(&tier("burstable"), burstable.shares())?;
    write_weight(&tier("besteffort"), MIN_SHARES)
}

/// A new pod's group, with its weight and quota.
pub fn make_pod_group(pod: &str, cpu: Cpu) -> Result<(), String> {
    kubelet_mkdir(pod);
    write_cpu(pod, cpu)
}

/// A new container's group, as runc makes it: its weight, quota and CPUs (`cpus`; empty: its
/// parent's), before any process enters it.
pub fn make_container(container: &str, cpu: Cpu, cpus: &str) -> Result<(), String> {
    kubelet_mkdir(container);
    update_container(container, cpu, cpus, false)
}

/// runc's update of a container: each resource written again, its CPUs included where the
/// runtime passes them (`cpus` not empty). `systemd_v1`: as runc's systemd driver on v1, which
/// freezes the container around the writes where it is not frozen already, and thaws it
/// after (systemd/devices.go, freezeBeforeSet).
pub fn update_container(
    container: &str,
    cpu: Cpu,
    cpus: &str,
    systemd_v1: bool,
) -> Result<(), String> {
    let around = systemd_v1 && !v2_host() && !frozen_v1(container)?;
    if around {
        write("freezer", container, "freezer.state", "FROZEN")?;
    }
    let written = write_cpu(container, cpu).and_then(|()| {
        if cpus.is_empty() {
            Ok(())
        } else {
            write("cpuset", container, "cpuset.cpus", cpus)
        }
    });
    if around {
        write("freezer", container, "freezer.state", "THAWED")?;
    }
    written
}

/// runc's systemd driver on v1 whose read of the freezer came before someone else froze the
/// container: it updates and thaws what it believes it froze.
pub fn update_container_after_a_stale_read(
    container: &str,
    cpu: Cpu,
    cpus: &str,
) -> Result<(), String> {
    write("freezer", container, "freezer.state", "FROZEN")?;
    let written = update_container(container, cpu, cpus, false);
    write("freezer", container, "freezer.state", "THAWED")?;
    written
}

/// An in-place resize of pod `pod` from `from` to `to`, its `containers` given their new CPU:
/// the pod's group first where its CPU grows, last where it shrinks.
pub fn resize(
    pod: &str,
    from: Cpu,
    to: Cpu,
    containers: &[(&str, Cpu)],
    cpus: &str,
) -> Result<(), String> {
    let grows = to.shares() > from.shares()
        || to.quota_us().unwrap_or(u64::MAX) > from.quota_us().unwrap_or(u64::MAX);
    if grows {
        write_cpu(pod, to)?;
    }
    for (container, cpu) in containers {
        update_container(container, *cpu, cpus, false)?;
    }
    if !grows {
        write_cpu(pod, to)?;
    }
    Ok(())
}

/// The orphan cleanup's write on a deleted pod's group whose volumes are still mounted.
pub fn reduce_cpu_limits(pod: &str) -> Result<(), String> {
    write_weight(pod, MIN_SHARES)
}

fn frozen_v1(container: &str) -> Result<bool, String> {
    let read = |file: &str| {
        let path = dir("freezer", container).join(file);
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
    };
    // As runc reads it (fs/freezer.go, GetState): FREEZING is waited out, and FROZEN counts
    // only where the group itself is frozen, not an ancestor.
    loop {
        match read("freezer.state")?.trim() {
            "FREEZING" => std::thread::sleep(std::time::Duration::from_millis(1)),
            "FROZEN" => return Ok(read("freezer.self_freezing")?.trim() == "1"),
            _ => return Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_becomes_the_kubelets_values() {
        assert_eq!(Cpu::BEST_EFFORT.shares(), 2);
        let half = Cpu {
            request_milli: 500,
            limit_milli: Some(1000),
        };
        assert_eq!(half.shares(), 512);
        assert_eq!(half.quota_us(), Some(100_000));
        assert_eq!(v2_weight(2), 1);
        assert_eq!(v2_weight(1024), 39);
        assert_eq!(v2_weight(262_144), 10_000);
    }
}
