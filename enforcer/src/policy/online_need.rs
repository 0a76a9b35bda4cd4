//! What an online pool's workers say their SLO needs: each worker's CPUs at its current load,
//! summed over the pool and rounded up to whole cores for the core policy. Offline pools have
//! no SLO and get what is left, so their workers' needs are not kept.

use std::collections::BTreeMap;

/// pool → worker pid → CPUs it needs.
#[derive(Debug, Default)]
pub(crate) struct OnlineNeeds {
    needs: BTreeMap<String, BTreeMap<u32, usize>>,
}

impl OnlineNeeds {
    /// Worker `pid` of online pool `pool` needs `cpus` CPUs (None: it went away). Returns the
    /// pool's need in whole cores of `threads_per_core` CPUs where it changed.
    pub(crate) fn set(
        &mut self,
        pool: &str,
        pid: u32,
        cpus: Option<usize>,
        threads_per_core: usize,
    ) -> Option<usize> {
        let needs = self.needs.entry(pool.to_owned()).or_default();
        let changed = match cpus {
            Some(cpus) => needs.insert(pid, cpus) != Some(cpus),
            None => needs.remove(&pid).is_some(),
        };
        changed.then(|| self.cpus(pool).div_ceil(threads_per_core.max(1)))
    }

    /// The CPUs `pool`'s workers need together. Saturating: a worker may claim any number;
    /// the policy caps it at the free cores.
    pub(crate) fn cpus(&self, pool: &str) -> usize {
        self.needs.get(pool).map_or(0, |needs| {
            needs.values().fold(0usize, |sum, n| sum.saturating_add(*n))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pools_need_is_its_workers_sum_in_whole_cores_and_changes_only_when_one_does() {
        let mut needs = OnlineNeeds::default();
        assert_eq!(needs.set("web", 1, Some(3), 2), Some(2));
        assert_eq!(needs.set("web", 1, Some(3), 2), None, "no change");
        assert_eq!(needs.set("web", 2, Some(2), 2), Some(3));
        assert_eq!(needs.cpus("web"), 5);
        assert_eq!(needs.set("web", 1, None, 2), Some(1));
        assert_eq!(needs.set("web", 1, None, 2), None, "already gone");
        assert_eq!(needs.set("web", 3, Some(usize::MAX), 1), Some(usize::MAX));
    }
}
