//! Who may hold a control-socket connection: every user other than root within a cap of its
//! own and a cap of them all together, root within a budget of its own. A connection holds one
//! of the daemon's file descriptors for as long as it stays open, so without caps a local user
//! holding idle connections ran the daemon out of them (about 1,100 at the usual limit).
//!
//! Admission is counted when a connection is accepted and given back when its `Admitted`
//! drops, however the connection ends.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// Why a connection was refused: the answer it gets before the daemon closes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "too many connections from uid {uid}: {limit} at most per user ([control] \
         max_connections_per_user); close some and retry"
    )]
    User { uid: u32, limit: usize },
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
    by_uid: HashMap<u32, usize>,
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
    uid: u32,
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

    /// Admits a connection of `uid` (None: the kernel gave no credentials, counted as a user
    /// other than root that is nobody else).
    pub fn admit(self: &Arc<Self>, uid: Option<u32>) -> Result<Admitted, Refused> {
        let uid = uid.unwrap_or(u32::MAX);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if uid == 0 {
            if counts.root >= self.per_class {
                return Err(Refused::Root {
                    limit: self.per_class,
                });
            }
            counts.root += 1;
        } else {
            let held = counts.by_uid.get(&uid).copied().unwrap_or(0);
            if held >= self.per_user {
                return Err(Refused::User {
                    uid,
                    limit: self.per_user,
                });
            }
            if counts.others >= self.per_class {
                return Err(Refused::Others {
                    limit: self.per_class,
                });
            }
            counts.others += 1;
            counts.by_uid.insert(uid, held + 1);
        }
        Ok(Admitted {
            admission: self.clone(),
            uid,
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
        if self.uid == 0 {
            counts.root = counts.root.saturating_sub(1);
            return;
        }
        counts.others = counts.others.saturating_sub(1);
        if let Some(held) = counts.by_uid.get_mut(&self.uid) {
            *held -= 1;
            if *held == 0 {
                counts.by_uid.remove(&self.uid);
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
        let first = admission.admit(Some(1000)).unwrap();
        let _second = admission.admit(Some(1000)).unwrap();
        assert_eq!(
            admission.admit(Some(1000)).unwrap_err(),
            Refused::User {
                uid: 1000,
                limit: 2
            }
        );
        let _third = admission.admit(Some(1001)).unwrap();
        assert_eq!(
            admission.admit(Some(1002)).unwrap_err(),
            Refused::Others { limit: 3 },
            "every user but root shares one cap"
        );
        let roots: Vec<_> = (0..3).map(|_| admission.admit(Some(0)).unwrap()).collect();
        assert_eq!(
            admission.admit(Some(0)).unwrap_err(),
            Refused::Root { limit: 3 }
        );
        assert_eq!(admission.open(), (3, 3));
        drop(first);
        drop(roots);
        assert_eq!(admission.open(), (0, 2));
        assert!(
            admission.admit(Some(1000)).is_ok(),
            "a closed connection gives its place back"
        );
    }

    #[test]
    fn a_peer_without_credentials_counts_as_one_more_user() {
        let admission = Admission::new(1, 4);
        let _unknown = admission.admit(None).unwrap();
        assert!(admission.admit(None).is_err());
        assert!(admission.admit(Some(1000)).is_ok());
    }
}
