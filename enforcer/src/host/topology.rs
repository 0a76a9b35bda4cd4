//! The machine's CPUs and their SMT siblings, from sysfs.

use std::collections::BTreeSet;

use enforcer_common::cpu_list::{self, CpuListError};

/// Online CPUs and, for each, the CPUs sharing its physical core (itself included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    pub cpus: BTreeSet<u32>,
    /// Groups of SMT siblings; every online CPU is in exactly one.
    pub cores: Vec<BTreeSet<u32>>,
}

const ONLINE: &str = "/sys/devices/system/cpu/online";

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {ONLINE}: {0}")]
    Read(std::io::Error),
    #[error("{ONLINE}: {0}")]
    Parse(#[from] CpuListError),
}

impl Topology {
    /// Reads /sys/devices/system/cpu.
    pub(crate) fn detect() -> Result<Self, TopologyError> {
        let online = std::fs::read_to_string(ONLINE).map_err(TopologyError::Read)?;
        let cpus = cpu_list::parse(&online)?;
        let mut cores: Vec<BTreeSet<u32>> = Vec::new();
        for &cpu in &cpus {
            if cores.iter().any(|core| core.contains(&cpu)) {
                continue;
            }
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
            let siblings = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| cpu_list::parse(&t).ok())
                .unwrap_or_else(|| BTreeSet::from([cpu]));
            cores.push(siblings.intersection(&cpus).copied().collect());
        }
        Ok(Self { cpus, cores })
    }

    /// A topology of `n` CPUs without SMT (for tests).
    pub(crate) fn flat(n: u32) -> Self {
        Self {
            cpus: (0..n).collect(),
            cores: (0..n).map(|c| BTreeSet::from([c])).collect(),
        }
    }

    /// CPUs per physical core (1 without SMT, 2 with two siblings each).
    pub(crate) fn threads_per_core(&self) -> f64 {
        self.cpus.len() as f64 / self.cores.len().max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_cpus_each_in_one_core() {
        let topology = Topology::detect().unwrap();
        assert!(!topology.cpus.is_empty());
        for &cpu in &topology.cpus {
            assert_eq!(
                topology
                    .cores
                    .iter()
                    .filter(|core| core.contains(&cpu))
                    .count(),
                1
            );
        }
    }
}
