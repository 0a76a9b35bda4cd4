//! A container's `cpuset.cpus`, as reamer reads it and gives the kubelet's CPUs back: for the
//! pods written in place (`pod_in_place`) and for what a dead daemon left (`pod_ledger`).

use std::{collections::BTreeSet, path::Path};

use cgroups_rs::fs::{Cgroup, Controller as _, cpuset::CpuSetController, hierarchies};
use enforcer_common::cpu_list;

/// Gives container group `relative` the kubelet's CPUs `base` back. A group already removed
/// has nothing left to give back.
pub(crate) fn restore_cpus(relative: &Path, base: &BTreeSet<u32>) -> Result<(), String> {
    let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
    let Some(file) = cgroup
        .controller_of::<CpuSetController>()
        .map(|c| c.path().join("cpuset.cpus"))
    else {
        return Ok(());
    };
    match std::fs::write(&file, restore_value(base)) {
        Err(err) if file.exists() => Err(format!("restoring {}: {err}", file.display())),
        _ => Ok(()),
    }
}

/// What gives a container its kubelet's CPUs back: the list, or on cgroup v2 where the file
/// was empty (inheriting its pod's), a lone newline. A write of no bytes at all never
/// reaches the kernel's handler, and would leave the pool's CPUs in place.
fn restore_value(base: &BTreeSet<u32>) -> String {
    if base.is_empty() {
        "\n".to_owned()
    } else {
        cpu_list::format(base)
    }
}

/// A `cpuset.cpus` as a set; None where it cannot be read.
pub(crate) fn read_cpus(file: &Path) -> Option<BTreeSet<u32>> {
    let text = std::fs::read_to_string(file).ok()?;
    cpu_list::parse(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_base_is_given_back_as_a_newline_not_as_nothing() {
        assert_eq!(restore_value(&BTreeSet::new()), "\n");
        assert_eq!(restore_value(&[0, 1, 2, 5].into_iter().collect()), "0-2,5");
    }
}
