//! Grants to workers: each pool's subscribed workers hear of every change of its CPUs or pause
//! before the cgroup holds them to it.

use std::collections::BTreeMap;

use enforcer_common::protocol::Grant;
use tokio::sync::mpsc::UnboundedSender;

/// The workers subscribed to each pool's grants.
#[derive(Default)]
pub struct GrantBoard {
    subscribers: BTreeMap<String, Vec<UnboundedSender<Grant>>>,
}

/// The worker's end of its subscription is gone.
#[derive(Debug, thiserror::Error)]
#[error("worker went away")]
pub struct WorkerGone;

impl GrantBoard {
    /// Subscribes a worker of `current.pool`, sending it `current` at once.
    pub fn subscribe(
        &mut self,
        current: Grant,
        worker: UnboundedSender<Grant>,
    ) -> Result<(), WorkerGone> {
        let pool = current.pool.clone();
        worker.send(current).map_err(|_| WorkerGone)?;
        let workers = self.subscribers.entry(pool).or_default();
        workers.retain(|w| !w.is_closed());
        workers.push(worker);
        Ok(())
    }

    /// Sends `grant` to its pool's workers, dropping those gone.
    pub fn publish(&mut self, grant: &Grant) {
        if let Some(workers) = self.subscribers.get_mut(&grant.pool) {
            workers.retain(|worker| worker.send(grant.clone()).is_ok());
        }
    }

    /// Workers of `pool` whose subscription is still open.
    pub fn subscribers(&self, pool: &str) -> usize {
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
        let (worker, mut received) = tokio::sync::mpsc::unbounded_channel();
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
}
