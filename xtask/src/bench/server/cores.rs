//! Which CPUs the frontier's scenarios confine inference to: whole cores, taken from the top
//! of the machine, so that training keeps the lower CPUs and no core is split between the two
//! (SMT siblings share a core's caches and execution units: confining inference to one
//! sibling of training's core would not keep it off training's core).

use std::{collections::BTreeSet, path::Path};

use enforcer_common::cpu_list;

/// The machine's cores, each the set of its CPUs (its SMT siblings), ordered by their lowest
/// CPU. A CPU whose topology sysfs does not say is a core of its own.
pub fn cores(sys_cpu: &Path, cpus: usize) -> Vec<BTreeSet<u32>> {
    let mut cores: Vec<BTreeSet<u32>> = Vec::new();
    for cpu in 0..cpus as u32 {
        let topology = sys_cpu.join(format!("cpu{cpu}/topology"));
        // core_cpus_list since Linux 5.8; thread_siblings_list before it.
        let siblings = ["core_cpus_list", "thread_siblings_list"]
            .iter()
            .find_map(|file| std::fs::read_to_string(topology.join(file)).ok())
            .and_then(|text| cpu_list::parse(text.trim()).ok())
            .filter(|set| set.contains(&cpu))
            .unwrap_or_else(|| BTreeSet::from([cpu]));
        let siblings: BTreeSet<u32> = siblings
            .into_iter()
            .filter(|&c| (c as usize) < cpus)
            .collect();
        if !cores.contains(&siblings) {
            cores.push(siblings);
        }
    }
    cores.sort_by_key(|core| core.first().copied());
    cores
}

/// Whether any core has more than one CPU.
pub fn has_smt(cores: &[BTreeSet<u32>]) -> bool {
    cores.iter().any(|core| core.len() > 1)
}

/// Whole cores from the top until they hold `fraction` of the CPUs (rounded to the nearest
/// CPU), at least one core and never every core: training keeps one at the least.
pub fn upper_cores(cores: &[BTreeSet<u32>], fraction: f64) -> BTreeSet<u32> {
    let cpus: usize = cores.iter().map(BTreeSet::len).sum();
    let wanted = ((cpus as f64 * fraction).round() as usize).max(1);
    let mut taken = BTreeSet::new();
    for core in cores
        .iter()
        .rev()
        .take(cores.len().saturating_sub(1).max(1))
    {
        if taken.len() >= wanted {
            break;
        }
        taken.extend(core.iter().copied());
    }
    taken
}

#[cfg(test)]
mod tests {
    use reamer_tests::harness::worker::scratch;

    use super::*;

    /// A fake `/sys/devices/system/cpu` for `test`: one `core_cpus_list` per CPU.
    fn sysfs(test: &str, siblings: &[&str]) -> std::path::PathBuf {
        let dir = scratch(test);
        for (cpu, list) in siblings.iter().enumerate() {
            let topology = dir.join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&topology).unwrap();
            std::fs::write(topology.join("core_cpus_list"), format!("{list}\n")).unwrap();
        }
        dir
    }

    fn set(cpus: &[u32]) -> BTreeSet<u32> {
        cpus.iter().copied().collect()
    }

    #[test]
    fn without_smt_a_quarter_of_sixteen_is_the_top_four() {
        let lists: Vec<String> = (0..16).map(|c| c.to_string()).collect();
        let lists: Vec<&str> = lists.iter().map(String::as_str).collect();
        let dir = sysfs("cores-no-smt", &lists);
        let cores = cores(&dir, 16);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(cores.len(), 16);
        assert!(!has_smt(&cores));
        assert_eq!(upper_cores(&cores, 0.25), set(&[12, 13, 14, 15]));
        assert_eq!(upper_cores(&cores, 0.5), (8..16).collect());
        assert_eq!(upper_cores(&cores, 0.75), (4..16).collect());
    }

    #[test]
    fn with_smt_siblings_go_together_and_training_keeps_a_core() {
        // Linux's usual numbering: CPU n and n + 4 are one core's two threads.
        let dir = sysfs(
            "cores-smt",
            &["0,4", "1,5", "2,6", "3,7", "0,4", "1,5", "2,6", "3,7"],
        );
        let cores = cores(&dir, 8);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            cores,
            vec![set(&[0, 4]), set(&[1, 5]), set(&[2, 6]), set(&[3, 7])]
        );
        assert!(has_smt(&cores));
        // A quarter of 8 CPUs: 2, one whole core.
        assert_eq!(upper_cores(&cores, 0.25), set(&[3, 7]));
        // Three quarters: 6 CPUs, three cores.
        assert_eq!(upper_cores(&cores, 0.75), set(&[1, 2, 3, 5, 6, 7]));
        // All of it: every core but the first.
        assert_eq!(upper_cores(&cores, 1.0), set(&[1, 2, 3, 5, 6, 7]));
    }

    #[test]
    fn a_cpu_sysfs_says_nothing_of_is_a_core_of_its_own() {
        let dir = sysfs("cores-untold", &["0-1", "0-1"]);
        let cores = cores(&dir, 3);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(cores, vec![set(&[0, 1]), set(&[2])]);
        // Two CPUs: a quarter rounds to one CPU, and the top core gives it.
        assert_eq!(upper_cores(&cores, 0.25), set(&[2]));
        // The 2-vCPU VM: three quarters is still one CPU, training keeps the other.
        assert_eq!(upper_cores(&[set(&[0]), set(&[1])], 0.75), set(&[1]));
    }
}
