//! An offline pod's own group made idle (`cpu.idle = 1`), and given back with the weight it
//! had.
//!
//! What the kernel does (`sched_group_set_idle`, kernel/sched/fair.c; checked on this
//! project's kernel with a v1 group):
//! - `cpu.idle = 1` gives the group the least weight (`cpu.shares` then reads 3);
//! - while the group is idle, a weight write fails with EINVAL;
//! - `cpu.idle = 0` resets the weight to the default (1024 shares, v2 weight 100), not to
//!   what it was.
//!
//! The kubelet gives a BestEffort pod's group 2 shares. Let go with `cpu.idle = 0` alone, it
//! would weigh 512 times its siblings. So the weight is read, and written down in the ledger
//! (`pod_ledger`), before the group is made idle, and written back once it is not.

use std::path::{Path, PathBuf};

use cgroups_rs::fs::{Cgroup, Controller as _, cpu::CpuController, hierarchies};
use serde::{Deserialize, Serialize};

/// v1's weight file and the range the kernel accepts there (`MIN_SHARES`..`MAX_SHARES`).
const SHARES: (&str, u64, u64) = ("cpu.shares", 2, 262_144);
/// v2's weight file and its range (`CGROUP_WEIGHT_MIN`..`CGROUP_WEIGHT_MAX`).
const WEIGHT: (&str, u64, u64) = ("cpu.weight", 1, 10_000);
/// The weights the kernel resets a group to when it stops being idle: 1024 shares on v1,
/// which v2 reads as weight 100.
const RESET_SHARES: u64 = 1024;
const RESET_WEIGHT: u64 = 100;

/// A pod group's weight before reamer made it idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightBefore {
    /// `cpu.shares` (v1) or `cpu.weight` (v2).
    pub file: String,
    pub value: u64,
}

impl WeightBefore {
    /// Whether the kernel would take it: a known file, a value within its range. A ledger
    /// entry is checked before root writes it back.
    pub fn check(&self) -> Result<(), String> {
        let (_, min, max) = [SHARES, WEIGHT]
            .into_iter()
            .find(|(file, _, _)| *file == self.file)
            .ok_or_else(|| format!("{:?} is not a weight file", self.file))?;
        if (min..=max).contains(&self.value) {
            Ok(())
        } else {
            Err(format!(
                "{} {} is outside {min}..={max}",
                self.file, self.value
            ))
        }
    }

    /// Whether it is the value the kernel resets a group to when it stops being idle: read
    /// just after someone set `cpu.idle` back to 0, it says nothing about what the kubelet
    /// wants.
    pub fn is_reset_value(&self) -> bool {
        self.value
            == if self.file == WEIGHT.0 {
                RESET_WEIGHT
            } else {
                RESET_SHARES
            }
    }
}

/// A pod group's `cpu` files.
pub struct PodIdle {
    dir: PathBuf,
    v2: bool,
}

impl PodIdle {
    /// The `cpu` files of group `relative` (under the hierarchies' root), whether or not the
    /// group is there yet. None where the host has no cpu controller.
    pub fn of(relative: &Path) -> Option<Self> {
        let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
        let dir = cgroup.controller_of::<CpuController>()?.path().to_owned();
        Some(Self {
            dir,
            v2: cgroup.v2(),
        })
    }

    pub fn idle_file(&self) -> PathBuf {
        self.dir.join("cpu.idle")
    }

    fn weight_file(&self) -> &'static str {
        if self.v2 { WEIGHT.0 } else { SHARES.0 }
    }

    /// Whether the group is idle now; an error where it cannot be read (not there yet).
    pub fn is_idle(&self) -> Result<bool, String> {
        let file = self.idle_file();
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        Ok(text.trim() == "1")
    }

    /// The group's weight now.
    pub fn weight(&self) -> Result<WeightBefore, String> {
        let file = self.dir.join(self.weight_file());
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        let value = text
            .trim()
            .parse()
            .map_err(|e| format!("reading {}: {text:?}: {e}", file.display()))?;
        Ok(WeightBefore {
            file: self.weight_file().to_owned(),
            value,
        })
    }

    pub fn make_idle(&self) -> Result<(), String> {
        let file = self.idle_file();
        std::fs::write(&file, "1").map_err(|e| format!("writing {}: {e}", file.display()))
    }

    /// Not idle any more, with its weight `before` written back. A group already removed has
    /// nothing to give back.
    pub fn give_back(&self, before: &WeightBefore) -> Result<(), String> {
        if !self.dir.exists() {
            return Ok(());
        }
        before.check()?;
        let idle = self.idle_file();
        std::fs::write(&idle, "0").map_err(|e| format!("writing {}: {e}", idle.display()))?;
        let weight = self.dir.join(&before.file);
        std::fs::write(&weight, before.value.to_string())
            .map_err(|e| format!("writing {}: {e}", weight.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_is_checked_against_the_kernels_range_before_it_is_written_back() {
        let weight = |file: &str, value| WeightBefore {
            file: file.to_owned(),
            value,
        };
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
        assert!(weight("cpu.shares", 1024).is_reset_value());
        assert!(weight("cpu.weight", 100).is_reset_value());
        assert!(!weight("cpu.shares", 2).is_reset_value());
    }
}
