//! Grants to workers: each pool's subscribed workers hear of every change of its CPUs or pause
//! before the cgroup holds them to it.
//!
//! Each subscription's queue holds `GRANT_BACKLOG` grants. A worker that falls that far behind
//! (it does not read its socket) is dropped rather than queued for without end: its connection
//! closes, and when it subscribes again it gets the pool's current grant at once.

use std::collections::BTreeMap;

use enforcer_common::protocol::Grant;
use tokio::sync::mpsc::Sender;

/// Grants queued for one worker at most: a few seconds of the busiest duty cycle.
pub(crate) const GRANT_BACKLOG: usize = 64;

/// The workers subscribed to each pool's grants.
#[derive(Default)]
pub(crate) struct GrantBoard {
    subscribers: BTreeMap<String, Vec<Sender<Grant>>>,
}

/// The worker's end of its subscription is gone.
#[derive(Debug, thiserror::Error)]
#[error("worker went away")]
pub(crate) struct WorkerGone;

impl GrantBoard {
    /// Subscribes a worker of `current.pool`, sending it `current` at once.
    pub(crate) fn subscribe(
        &mut self,
        current: Grant,
        worker: Sender<Grant>,
    ) -> Result<(), WorkerGone> {
        let pool = current.pool.clone();
        worker.try_send(current).map_err(|_| WorkerGone)?;
        let workers = self.subscribers.entry(pool).or_default();
        workers.retain(|w| !w.is_closed());
        workers.push(worker);
        Ok(())
    }

    /// Sends `grant` to its pool's workers, dropping those gone and those `GRANT_BACKLOG`
    /// grants behind (their subscription ends: see the module's comment).
    pub(crate) fn publish(&mut self, grant: &Grant) {
        if let Some(workers) = self.subscribers.get_mut(&grant.pool) {
            workers.retain(|worker| worker.try_send(grant.clone()).is_ok());
        }
    }

    /// Workers of `pool` whose subscription is still open.
    pub(crate) fn subscribers(&self, pool: &str) -> usize {
        self.subscribers.get(pool).map_or(0, |workers| {
            workers.iter().filter(|w| !w.is_closed()).count()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(cpus: Vec<u32>) -> Grant {
        Grant {
            pool: "batch".into(),
            cpus,
            shrinking: false,
            paused: false,
        }
    }

    #[test]
    fn a_subscriber_gets_the_current_grant_then_every_change_until_it_goes() {
        let mut board = GrantBoard::default();
        let (worker, mut received) = tokio::sync::mpsc::channel(GRANT_BACKLOG);
        board.subscribe(grant(vec![0, 1]), worker).unwrap();
        board.publish(&grant(vec![1]));
        assert_eq!(received.try_recv().unwrap().cpus, [0, 1]);
        assert_eq!(received.try_recv().unwrap().cpus, [1]);
        assert_eq!(board.subscribers("batch"), 1);
        drop(received);
        assert_eq!(board.subscribers("batch"), 0);
        board.publish(&grant(vec![0]));
        assert!(board.subscribers.get("batch").unwrap().is_empty());
    }

    #[test]
    fn a_worker_that_reads_no_grant_is_dropped_when_its_backlog_is_full() {
        let mut board = GrantBoard::default();
        let (worker, received) = tokio::sync::mpsc::channel(GRANT_BACKLOG);
        board.subscribe(grant(vec![0, 1]), worker).unwrap();
        for _ in 1..GRANT_BACKLOG {
            board.publish(&grant(vec![1]));
        }
        assert_eq!(board.subscribers("batch"), 1, "its backlog is just full");
        board.publish(&grant(vec![0]));
        assert_eq!(received.len(), GRANT_BACKLOG);
        assert!(
            board.subscribers.get("batch").unwrap().is_empty(),
            "dropped, not queued for without end"
        );
    }
}
