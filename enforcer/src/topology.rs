//! The machine's CPUs and their SMT siblings, from sysfs.

use std::collections::BTreeSet;

/// Online CPUs and, for each, the CPUs sharing its physical core (itself included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub cpus: BTreeSet<u32>,
    /// Groups of SMT siblings; every online CPU is in exactly one.
    pub cores: Vec<BTreeSet<u32>>,
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Result<BTreeSet<u32>, String> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("bad CPU list {text:?}");
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (u32, u32) = (
                    lo.parse().map_err(|_| bad())?,
                    hi.parse().map_err(|_| bad())?,
                );
                if lo > hi {
                    return Err(bad());
                }
                cpus.extend(lo..=hi);
            }
            None => {
                cpus.insert(part.parse().map_err(|_| bad())?);
            }
        }
    }
    Ok(cpus)
}

/// Formats a CPU set the way cpuset files want it.
pub fn format_cpu_list(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

impl Topology {
    /// Reads /sys/devices/system/cpu.
    pub fn detect() -> Result<Self, String> {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .map_err(|e| format!("reading /sys/devices/system/cpu/online: {e}"))?;
        let cpus = parse_cpu_list(&online)?;
        let mut cores: Vec<BTreeSet<u32>> = Vec::new();
        for &cpu in &cpus {
            if cores.iter().any(|core| core.contains(&cpu)) {
                continue;
            }
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
            let siblings = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| parse_cpu_list(&t).ok())
                .unwrap_or_else(|| BTreeSet::from([cpu]));
            cores.push(siblings.intersection(&cpus).copied().collect());
        }
        Ok(Self { cpus, cores })
    }

    /// A topology of `n` CPUs without SMT (for tests).
    pub fn flat(n: u32) -> Self {
        Self {
            cpus: (0..n).collect(),
            cores: (0..n).map(|c| BTreeSet::from([c])).collect(),
        }
    }

    /// The physical core holding `cpu`.
    pub fn core_of(&self, cpu: u32) -> BTreeSet<u32> {
        self.cores
            .iter()
            .find(|core| core.contains(&cpu))
            .cloned()
            .unwrap_or_else(|| BTreeSet::from([cpu]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        let cpus = parse_cpu_list("0-3,8,10-11\n").unwrap();
        assert_eq!(cpus, BTreeSet::from([0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(format_cpu_list(&cpus), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&BTreeSet::new()), "");
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
    }

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
