//! The online request queue: bounded in items, so memory never grows with the offered load,
//! and popped in batches: a worker takes the oldest request and waits up to the batching
//! delay, counted from that request's arrival, for more to fill the batch.

use std::{
    collections::VecDeque,
    sync::{Condvar, Mutex},
    time::{Duration, Instant},
};

use crate::session::{InferenceFailed, ItemOutputs};

/// What a request gets back: the model version that answered and one entry per item.
pub type JobResult = Result<(u64, Vec<ItemOutputs>), InferenceFailed>;

/// One inference request: `items` items back to back in `input`.
pub struct Job {
    pub input: Vec<f32>,
    pub items: usize,
    pub enqueued: Instant,
    pub reply: tokio::sync::oneshot::Sender<JobResult>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The queue holds `capacity` items already.
    Full { capacity: usize },
    /// The worker is shutting down.
    Closed,
}

struct State {
    jobs: VecDeque<Job>,
    items: usize,
    closed: bool,
}

pub struct JobQueue {
    state: Mutex<State>,
    arrived: Condvar,
    capacity_items: usize,
}

impl JobQueue {
    pub fn new(capacity_items: usize) -> Self {
        Self {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                items: 0,
                closed: false,
            }),
            arrived: Condvar::new(),
            capacity_items: capacity_items.max(1),
        }
    }

    pub fn capacity_items(&self) -> usize {
        self.capacity_items
    }

    /// Queues `job`, or refuses it at once when the queue is full or closed.
    pub fn push(&self, job: Job) -> Result<(), Rejected> {
        let mut state = self.state.lock().expect("queue lock");
        if state.closed {
            return Err(Rejected::Closed);
        }
        // A request larger than the whole queue is still taken when the queue is empty, so
        // that the body limit, not the queue, decides the largest request.
        if state.items > 0 && state.items + job.items > self.capacity_items {
            return Err(Rejected::Full {
                capacity: self.capacity_items,
            });
        }
        state.items += job.items;
        state.jobs.push_back(job);
        drop(state);
        self.arrived.notify_one();
        Ok(())
    }

    /// Items waiting.
    pub fn depth(&self) -> usize {
        self.state.lock().expect("queue lock").items
    }

    pub fn is_closed_and_empty(&self) -> bool {
        let state = self.state.lock().expect("queue lock");
        state.closed && state.jobs.is_empty()
    }

    /// Refuses new jobs and wakes every waiting worker; jobs already queued are still served.
    pub fn close(&self) {
        self.state.lock().expect("queue lock").closed = true;
        self.arrived.notify_all();
    }

    /// Takes a batch of at most `max_items` items (or one larger job on its own), waiting up
    /// to `max_delay` after the oldest job's arrival for the batch to fill. Returns None when
    /// nothing arrived within `idle`, or when the queue is closed and empty, so the caller can
    /// look at its configuration again.
    pub fn pop_batch(
        &self,
        max_items: usize,
        max_delay: Duration,
        idle: Duration,
    ) -> Option<Vec<Job>> {
        let mut state = self.state.lock().expect("queue lock");
        if state.jobs.is_empty() {
            if state.closed {
                return None;
            }
            state = self
                .arrived
                .wait_timeout_while(state, idle, |s| s.jobs.is_empty() && !s.closed)
                .expect("queue lock")
                .0;
        }
        let first = state.jobs.pop_front()?;
        let deadline = first.enqueued + max_delay;
        let mut items = first.items;
        state.items -= first.items;
        let mut batch = vec![first];
        loop {
            while let Some(next) = state.jobs.front() {
                if items + next.items > max_items {
                    break;
                }
                let next = state.jobs.pop_front().expect("front exists");
                items += next.items;
                state.items -= next.items;
                batch.push(next);
            }
            let now = Instant::now();
            let full = items >= max_items
                || state
                    .jobs
                    .front()
                    .is_some_and(|next| items + next.items > max_items);
            if full || now >= deadline || state.closed {
                break;
            }
            state = self
                .arrived
                .wait_timeout(state, deadline - now)
                .expect("queue lock")
                .0;
        }
        // Another job may be waiting for a worker that is now free.
        if !state.jobs.is_empty() {
            self.arrived.notify_one();
        }
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(items: usize) -> (Job, tokio::sync::oneshot::Receiver<JobResult>) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        (
            Job {
                input: vec![0.0; items],
                items,
                enqueued: Instant::now(),
                reply,
            },
            rx,
        )
    }

    #[test]
    fn refuses_beyond_capacity_and_accepts_again_after_a_pop() {
        let queue = JobQueue::new(3);
        let mut receivers = Vec::new();
        for _ in 0..3 {
            let (j, rx) = job(1);
            queue.push(j).unwrap();
            receivers.push(rx);
        }
        assert_eq!(queue.push(job(1).0), Err(Rejected::Full { capacity: 3 }));
        let batch = queue
            .pop_batch(2, Duration::ZERO, Duration::from_millis(10))
            .unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(queue.depth(), 1);
        queue.push(job(1).0).unwrap();
        queue.close();
        assert_eq!(queue.push(job(1).0), Err(Rejected::Closed));
    }

    #[test]
    fn batches_fill_up_to_the_limit_and_wait_no_longer_than_the_delay() {
        let queue = JobQueue::new(100);
        for items in [2, 1, 3, 1] {
            queue.push(job(items).0).unwrap();
        }
        // 2 + 1 fit in 4; the 3 does not, so the batch closes without waiting.
        let started = Instant::now();
        let batch = queue
            .pop_batch(4, Duration::from_secs(5), Duration::from_millis(10))
            .unwrap();
        assert_eq!(
            batch.iter().map(|j| j.items).collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        // 3 + 1 = 4 exactly.
        let batch = queue
            .pop_batch(4, Duration::from_secs(5), Duration::from_millis(10))
            .unwrap();
        assert_eq!(
            batch.iter().map(|j| j.items).collect::<Vec<_>>(),
            vec![3, 1]
        );
        // A lone job waits out the delay, then goes alone.
        queue.push(job(1).0).unwrap();
        let started = Instant::now();
        let batch = queue
            .pop_batch(4, Duration::from_millis(30), Duration::from_millis(10))
            .unwrap();
        assert_eq!(batch.len(), 1);
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert!(
            queue
                .pop_batch(4, Duration::ZERO, Duration::from_millis(5))
                .is_none()
        );
    }
}
