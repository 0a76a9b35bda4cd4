//! An offline pod's own group held at the least weight the kernel takes, and given the
//! kubelet's weight back when reamer lets go.
//!
//! Why the weight, and not `cpu.idle` (docs/experiments/2026-11-26-idle-class-in-pods.md):
//! the kernel refuses a weight write to a group whose `cpu.idle` is 1 (EINVAL), and the
//! kubelet writes a pod group's weight at every in-place resize (and at its orphan cleanup),
//! so an idle pod group fails the kubelet's writes. The least weight fails none of them: the
//! kubelet's write lands, and `pod_in_place::check` keeps it as the kubelet's weight once two
//! checks in a row have read it (the kubelet reads its write back at once, and must find it),
//! then holds the least again: within two reconciles. A BestEffort pod's group already
//! has it (the kubelet gives it 2 shares): nothing is written there.
//!
//! What that costs against `cpu.idle`: only where training's pod is a sibling of the offline
//! pod's (the same QoS tier), the idle flag's immediate wakeup preemption. Measured with a
//! loader-bound training job beside a Burstable sibling on the 2-vCPU VM: training lost 4.7%
//! with the least weight, 1.2% with `cpu.idle`, 38% with SCHED_IDLE threads alone. A BestEffort
//! pod is ranked at its tier, `kubepods/besteffort` (2 shares), where its own group's idle flag
//! changes nothing: the same 5-6% either way.
//!
//! An earlier version made offline pods' groups idle; its ledger entries are given back the
//! same way, `cpu.idle` cleared first. What the kernel does there (`sched_group_set_idle`,
//! kernel/sched/fair.c): `cpu.idle = 0` resets the weight to the default (1024 shares, v2
//! weight 100), not to what it was, so the kubelet's weight is written after it.

use std::path::{Path, PathBuf};

use cgroups_rs::fs::{Cgroup, Controller as _, cpu::CpuController, hierarchies};
use serde::{Deserialize, Serialize};

/// v1's weight file and the range the kernel accepts there (`MIN_SHARES`..`MAX_SHARES`).
const SHARES: (&str, u64, u64) = ("cpu.shares", 2, 262_144);
/// v2's weight file and its range (`CGROUP_WEIGHT_MIN`..`CGROUP_WEIGHT_MAX`).
const WEIGHT: (&str, u64, u64) = ("cpu.weight", 1, 10_000);
/// What the kernel gives a new group: 1024 shares on v1, which v2 reads as weight 100.
const NEW_GROUP_SHARES: u64 = 1024;
const NEW_GROUP_WEIGHT: u64 = 100;

/// A pod group's weight as the kubelet wrote it: the one given back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KubeletWeight {
    /// `cpu.shares` (v1) or `cpu.weight` (v2).
    pub file: String,
    pub value: u64,
}

impl KubeletWeight {
    /// The file's range: (least, most).
    fn range(&self) -> Option<(u64, u64)> {
        [SHARES, WEIGHT]
            .into_iter()
            .find(|(file, _, _)| *file == self.file)
            .map(|(_, least, most)| (least, most))
    }

    /// Whether the kernel would take it: a known file, a value within its range. A ledger
    /// entry is checked before root writes it back.
    pub(crate) fn check(&self) -> Result<(), String> {
        let (least, most) = self
            .range()
            .ok_or_else(|| format!("{:?} is not a weight file", self.file))?;
        if (least..=most).contains(&self.value) {
            Ok(())
        } else {
            Err(format!(
                "{} {} is outside {least}..={most}",
                self.file, self.value
            ))
        }
    }

    /// The least weight its file takes: where reamer holds an offline pod's group.
    pub(crate) fn is_least(&self) -> bool {
        self.range().is_some_and(|(least, _)| self.value == least)
    }

    /// The weight the kernel gives a new group: read just after the kubelet made the group,
    /// it may not be the kubelet's yet (the kubelet writes its weight right after its mkdir).
    pub(crate) fn is_new_groups(&self) -> bool {
        self.value
            == if self.file == WEIGHT.0 {
                NEW_GROUP_WEIGHT
            } else {
                NEW_GROUP_SHARES
            }
    }
}

/// A pod group's weight file.
pub(crate) struct PodWeight {
    dir: PathBuf,
    v2: bool,
}

impl PodWeight {
    /// The `cpu` files of group `relative` (under the hierarchies' root), whether or not the
    /// group is there yet. None where the host has no cpu controller.
    pub(crate) fn of(relative: &Path) -> Option<Self> {
        let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
        let dir = cgroup.controller_of::<CpuController>()?.path().to_owned();
        Some(Self {
            dir,
            v2: cgroup.v2(),
        })
    }

    fn file_name(&self) -> &'static str {
        if self.v2 { WEIGHT.0 } else { SHARES.0 }
    }

    pub(crate) fn file(&self) -> PathBuf {
        self.dir.join(self.file_name())
    }

    /// The group's weight now; an error where it cannot be read (not there yet).
    pub(crate) fn read(&self) -> Result<KubeletWeight, String> {
        let value = read_value(&self.file())?;
        Ok(KubeletWeight {
            file: self.file_name().to_owned(),
            value,
        })
    }

    /// Writes the least weight the kernel takes.
    pub(crate) fn hold_least(&self) -> Result<(), String> {
        let least = if self.v2 { WEIGHT.1 } else { SHARES.1 };
        let file = self.file();
        std::fs::write(&file, least.to_string())
            .map_err(|e| format!("writing {}: {e}", file.display()))
    }

    /// Clears `cpu.idle` where it is 1 (an earlier version of reamer made the group idle, and
    /// its ledger was lost); returns whether it was. The group's weight is then the kernel's
    /// reset value, not the kubelet's.
    pub(crate) fn clear_idle(&self) -> Result<bool, String> {
        let idle = self.dir.join("cpu.idle");
        if !std::fs::read_to_string(&idle).is_ok_and(|v| v.trim() == "1") {
            return Ok(false);
        }
        std::fs::write(&idle, "0").map_err(|e| format!("writing {}: {e}", idle.display()))?;
        Ok(true)
    }

    /// The kubelet's weight written back (and `cpu.idle` cleared first where an earlier
    /// version set it). A group already removed has nothing to give back.
    pub(crate) fn give_back(&self, kubelet: &KubeletWeight) -> Result<(), String> {
        if !self.dir.exists() {
            return Ok(());
        }
        kubelet.check()?;
        self.clear_idle()?;
        let weight = self.dir.join(&kubelet.file);
        std::fs::write(&weight, kubelet.value.to_string())
            .map_err(|e| format!("writing {}: {e}", weight.display()))
    }
}

/// What weight file `file` holds where it is not the least (someone wrote it); None where it
/// is, or cannot be read.
pub(crate) fn not_least(file: &Path) -> Option<u64> {
    let weight = KubeletWeight {
        file: file.file_name()?.to_str()?.to_owned(),
        value: read_value(file).ok()?,
    };
    (!weight.is_least()).then_some(weight.value)
}

/// A weight file's value.
fn read_value(file: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("reading {}: {text:?}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weight(file: &str, value: u64) -> KubeletWeight {
        KubeletWeight {
            file: file.to_owned(),
            value,
        }
    }

    #[test]
    fn a_weight_is_checked_against_the_kernels_range_before_it_is_written_back() {
        assert_eq!(weight("cpu.shares", 2).check(), Ok(()));
        assert_eq!(weight("cpu.weight", 10_000).check(), Ok(()));
        assert!(
            weight("cpu.shares", 1)
                .check()
                .unwrap_err()
                .contains("2..=262144")
        );
        assert!(weight("cpu.weight", 0).check().is_err());
        assert!(
            weight("../../release_agent", 2)
                .check()
                .unwrap_err()
                .contains("not a weight file")
        );
    }

    #[test]
    fn the_least_weight_and_a_new_groups_are_told_apart_per_file() {
        assert!(weight("cpu.shares", 2).is_least());
        assert!(weight("cpu.weight", 1).is_least());
        assert!(!weight("cpu.weight", 2).is_least());
        assert!(weight("cpu.shares", 1024).is_new_groups());
        assert!(weight("cpu.weight", 100).is_new_groups());
        assert!(!weight("cpu.shares", 100).is_new_groups());
    }

    #[test]
    fn a_pod_group_is_held_at_the_least_weight_and_given_the_kubelets_back() {
        // A real group under the tests' `reamer` subtree; skipped where cgroups cannot be
        // written (not root).
        let relative = Path::new("reamer/unit-pod-weight");
        let Some(group) = PodWeight::of(relative) else {
            return;
        };
        if std::fs::create_dir_all(&group.dir).is_err() {
            eprintln!("SKIPPED: cannot make {}", group.dir.display());
            return;
        }
        let kubelet = if group.v2 {
            weight("cpu.weight", 20)
        } else {
            weight("cpu.shares", 512)
        };
        let given = group.give_back(&kubelet);
        let held = group.hold_least().and_then(|()| group.read());
        let back = group.give_back(&kubelet).and_then(|()| group.read());
        let _ = std::fs::remove_dir(&group.dir);
        given.unwrap();
        assert!(held.unwrap().is_least());
        assert_eq!(back.unwrap(), kubelet);
    }
}
