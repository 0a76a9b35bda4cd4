//! How fast the fast path reacts: from each sensor event to its completed cgroup write, in
//! the sensor's histogram layout, for `status` and `/metrics`.

use enforcer_common::histogram::{NR_BUCKETS, bucket_of, percentile};

pub(crate) struct Reactions {
    hist: Vec<u64>,
    sum_ns: u64,
}

impl Default for Reactions {
    fn default() -> Self {
        Self {
            hist: vec![0; NR_BUCKETS],
            sum_ns: 0,
        }
    }
}

impl Reactions {
    pub(crate) fn record(&mut self, event_to_write_ns: u64) {
        self.hist[bucket_of(event_to_write_ns)] += 1;
        self.sum_ns = self.sum_ns.saturating_add(event_to_write_ns);
    }

    pub(crate) fn count(&self) -> u64 {
        self.hist.iter().sum()
    }

    pub(crate) fn percentile(&self, q: f64) -> Option<u64> {
        percentile(&self.hist, q)
    }

    pub(crate) fn hist(&self) -> &[u64] {
        &self.hist
    }

    pub(crate) fn sum_ns(&self) -> u64 {
        self.sum_ns
    }
}
