//! Who may hold a control-socket connection: every user other than root within a cap of its
//! own and a cap of them all together, root within a budget of its own. A user is who is
//! behind the peer, through user namespaces (`host::user_namespace`): the uids of a user's
//! subordinate range count as that user. A connection holds one
//! of the daemon's file descriptors for as long as it stays open, so without caps a local user
//! holding idle connections ran the daemon out of them (about 1,100 at the usual limit).
//!
//! Admission is counted when a connection is accepted and given back when its `Admitted`
//! drops, however the connection ends.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use crate::host::user_namespace::Budget;

/// Why a connection was refused: the answer it gets before the daemon closes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "too many connections from {who}: {limit} at most per user ([control] \
         max_connections_per_user); close some and retry"
    )]
    User { who: Budget, limit: usize },
    #[error(
        "too many connections from users other than root: {limit} at most ([control] \
         max_connections); retry later"
    )]
    Others { limit: usize },
    #[error("too many connections from root: {limit} at most ([control] max_connections)")]
    Root { limit: usize },
}

#[derive(Debug, Default)]
struct Counts {
    root: usize,
    others: usize,
    by_user: HashMap<Budget, usize>,
}

#[derive(Debug)]
pub struct Admission {
    per_user: usize,
    per_class: usize,
    counts: Mutex<Counts>,
}

/// One admitted connection; dropping it gives its place back.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    who: Budget,
}

impl Admission {
    /// `per_user` connections for each user other than root, `per_class` for all of them
    /// together, and `per_class` for root.
    pub fn new(per_user: usize, per_class: usize) -> Arc<Self> {
        Arc::new(Self {
            per_user,
            per_class,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Admits a connection that spends `who`'s budget (`user_namespace::budget_of`).
    pub fn admit(self: &Arc<Self>, who: Budget) -> Result<Admitted, Refused> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if who == Budget::Root {
            if counts.root >= self.per_class {
                return Err(Refused::Root {
                    limit: self.per_class,
                });
            }
            counts.root += 1;
        } else {
            let held = counts.by_user.get(&who).copied().unwrap_or(0);
            if held >= self.per_user {
                return Err(Refused::User {
                    who,
                    limit: self.per_user,
                });
            }
            if counts.others >= self.per_class {
                return Err(Refused::Others {
                    limit: self.per_class,
                });
            }
            counts.others += 1;
            counts.by_user.insert(who, held + 1);
        }
        Ok(Admitted {
            admission: self.clone(),
            who,
        })
    }

    /// Connections open now: root's, and everyone else's.
    pub fn open(&self) -> (usize, usize) {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        (counts.root, counts.others)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self
            .admission
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.who == Budget::Root {
            counts.root = counts.root.saturating_sub(1);
            return;
        }
        counts.others = counts.others.saturating_sub(1);
        if let Some(held) = counts.by_user.get_mut(&self.who) {
            *held -= 1;
            if *held == 0 {
                counts.by_user.remove(&self.who);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_capped_alone_and_others_together_while_root_keeps_its_own_budget() {
        let admission = Admission::new(2, 3);
        let first = admission.admit(Budget::User(1000)).unwrap();
        let _second = admission.admit(Budget::User(1000)).unwrap();
        assert_eq!(
            admission.admit(Budget::User(1000)).unwrap_err(),
            Refused::User {
                who: Budget::User(1000),
                limit: 2
            }
        );
        let _third = admission.admit(Budget::RootsNamespace(7)).unwrap();
        assert_eq!(
            admission.admit(Budget::User(1002)).unwrap_err(),
            Refused::Others { limit: 3 },
            "every user but root shares one cap, root's namespaces included"
        );
        let roots: Vec<_> = (0..3)
            .map(|_| admission.admit(Budget::Root).unwrap())
            .collect();
        assert_eq!(
            admission.admit(Budget::Root).unwrap_err(),
            Refused::Root { limit: 3 }
        );
        assert_eq!(admission.open(), (3, 3));
        drop(first);
        drop(roots);
        assert_eq!(admission.open(), (0, 2));
        assert!(
            admission.admit(Budget::User(1000)).is_ok(),
            "a closed connection gives its place back"
        );
    }

    #[test]
    fn a_refusal_names_whose_budget_it_is() {
        let admission = Admission::new(1, 4);
        let _held = admission.admit(Budget::User(1000)).unwrap();
        let refused = admission.admit(Budget::User(1000)).unwrap_err().to_string();
        assert!(
            refused.contains("from uid 1000 (its user namespaces included)"),
            "{refused}"
        );
    }
}
