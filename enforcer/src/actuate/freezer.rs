//! The one owner of a pool's freezer. Two parts of the daemon stop a pool's processes: the
//! CPU policy pauses offline pools while training is short of cores, and the GPU duty cycle
//! gates GPU pools for part of each period. Both go through this handle, which keeps what
//! each of them wants and freezes the pool while either does: neither can thaw what the other
//! froze, and a write is made only when the outcome changes.
//!
//! A handle of its own per pool, shared (`Arc`) by the enforcement and the GPU gating
//! thread: freezing one pool never waits on the daemon's other locks.

use std::sync::Mutex;

use cgroups_rs::{
    FreezerState,
    fs::{Cgroup, Controller as _, freezer::FreezerController, hierarchies},
};

use super::cgroup::CgroupError;

/// Who wants the pool stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Wanted {
    /// The CPU policy's pause (`[policy] pause_offline_when_training_short`).
    paused: bool,
    /// The GPU duty cycle's frozen phase.
    gated: bool,
}

impl Wanted {
    fn frozen(self) -> bool {
        self.paused || self.gated
    }
}

pub struct Freezer {
    /// The pool's name, for errors and logs.
    pub pool: String,
    cgroup: Cgroup,
    /// What each owner wants, and (its `frozen()`) what the kernel was last told.
    wanted: Mutex<Wanted>,
}

impl Freezer {
    /// The freezer of `cgroup` (a pool's group, loaded with the freezer: v1's controller or
    /// v2's `cgroup.freeze`), thawed if a previous daemon left it frozen: no daemon holds it
    /// frozen any more. None where the group has no freezer.
    pub fn adopt(pool: &str, cgroup: Cgroup) -> Result<Option<Self>, CgroupError> {
        let Some(freezer) = cgroup.controller_of::<FreezerController>() else {
            return Ok(None);
        };
        if !matches!(freezer.state(), Ok(FreezerState::Thawed)) {
            freezer
                .thaw()
                .map_err(|e| CgroupError::op(pool, "thawing", e))?;
            tracing::warn!(
                pool,
                "the pool was left frozen by a previous daemon: thawed"
            );
        }
        Ok(Some(Self {
            pool: pool.to_owned(),
            cgroup,
            wanted: Mutex::new(Wanted::default()),
        }))
    }

    fn controller(&self) -> &FreezerController {
        self.cgroup
            .controller_of()
            .expect("checked in adopt: the group has a freezer")
    }

    /// Changes what one owner wants; writes the freezer where the outcome changes. On a failed
    /// write the owner's wish is not recorded, so the next call tries again.
    fn update(&self, change: impl FnOnce(&mut Wanted)) -> Result<(), CgroupError> {
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = *wanted;
        change(&mut next);
        if next.frozen() != wanted.frozen() {
            let result = if next.frozen() {
                self.controller().freeze()
            } else {
                self.controller().thaw()
            };
            let what = if next.frozen() { "freezing" } else { "thawing" };
            result.map_err(|e| CgroupError::op(&self.pool, what, e))?;
        }
        *wanted = next;
        Ok(())
    }

    /// The CPU policy pauses the pool, or resumes it.
    pub fn set_paused(&self, paused: bool) -> Result<(), CgroupError> {
        self.update(|wanted| wanted.paused = paused)
    }

    /// The GPU duty cycle freezes the pool for its gated phase, or lets it run.
    pub fn set_gated(&self, gated: bool) -> Result<(), CgroupError> {
        self.update(|wanted| wanted.gated = gated)
    }

    /// Nobody wants the pool stopped any more (shutdown): thawed, whatever was asked before.
    /// The write is made even where the pool should be thawed already.
    pub fn release(&self) -> Result<(), CgroupError> {
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        *wanted = Wanted::default();
        self.controller()
            .thaw()
            .map_err(|e| CgroupError::op(&self.pool, "thawing", e))
    }

    /// Whether the kernel reports the pool thawed (not frozen, nor on its way there).
    pub fn is_thawed(&self) -> Result<bool, CgroupError> {
        let state = self
            .controller()
            .state()
            .map_err(|e| CgroupError::op(&self.pool, "reading the freezer state", e))?;
        Ok(matches!(state, FreezerState::Thawed))
    }
}

/// Thaws every pool group of `instance`, without any handle or lock: what a daemon that is
/// about to die (a panic, the event path lost) does, whatever state its locks are in, so that
/// no pool stays frozen until the next daemon adopts it. Returns how many groups it thawed;
/// errors are left out (nothing more can be done about them on the way out).
pub fn thaw_instance(instance: &str) -> usize {
    let tree = format!("reamer/{instance}");
    let Some(dir) = Cgroup::load(hierarchies::auto(), tree.as_str())
        .controller_of::<FreezerController>()
        .map(|freezer| freezer.path().to_owned())
    else {
        return 0;
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .filter(|entry| {
            let path = format!("{tree}/{}", entry.file_name().to_string_lossy());
            let cgroup = Cgroup::load(hierarchies::auto(), path.as_str());
            cgroup
                .controller_of::<FreezerController>()
                .is_some_and(|freezer| freezer.thaw().is_ok())
        })
        .count()
}
