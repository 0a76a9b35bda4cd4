//! The one owner of a pool's freezer. Two parts of the daemon stop a pool's processes: the
//! CPU policy pauses offline pools while training is short of cores, and the GPU duty cycle
//! gates GPU pools for part of each period. Both go through this handle, which keeps what
//! each of them wants and freezes the pool while either does: neither can thaw what the other
//! froze, and a write is made only when the outcome changes.
//!
//! A handle of its own per pool, shared (`Arc`) by the enforcement and the GPU gating
//! thread: freezing one pool never waits on the daemon's other locks.
//!
//! A pool's Kubernetes pods are frozen with it: their containers' groups, where the kubelet
//! put them, are members of the pool's freezer (`pod_in_place` says why in place), so that
//! both the pause and the GPU gate reach them through the one owner.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Mutex,
};

use cgroups_rs::{
    FreezerState,
    fs::{Cgroup, Controller as _, freezer::FreezerController, hierarchies},
};

use super::cgroup_error::CgroupError;

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
    /// Groups frozen and thawed with the pool's own, by their path under the hierarchies'
    /// root: its pods' containers. Taken after `wanted`.
    members: Mutex<BTreeMap<PathBuf, Cgroup>>,
}

/// The freezer files of the member groups frozen now, and what thaws each: for a dying daemon
/// to thaw without its locks (`thaw_members`). A pod frozen by a daemon that is gone stays
/// stopped until the next one adopts it, and on cgroup v1 a frozen process does not even die
/// of SIGKILL, so the kubelet could not stop it.
static FROZEN_MEMBERS: Mutex<BTreeSet<(PathBuf, &'static str)>> = Mutex::new(BTreeSet::new());

/// Thaws every member group a pool froze; returns how many. For the way out of a failed
/// daemon: the set's lock is only held to insert or remove, and is not waited for.
pub(crate) fn thaw_members() -> usize {
    let Ok(frozen) = FROZEN_MEMBERS.try_lock() else {
        return 0;
    };
    frozen
        .iter()
        .filter(|(file, thawed)| std::fs::write(file, thawed).is_ok())
        .count()
}

/// A member group's freezer file, and what thaws it: v1's `freezer.state`, v2's
/// `cgroup.freeze`.
fn thaw_file(cgroup: &Cgroup) -> Option<(PathBuf, &'static str)> {
    let dir = cgroup
        .controller_of::<FreezerController>()?
        .path()
        .to_owned();
    Some(if cgroup.v2() {
        (dir.join("cgroup.freeze"), "0")
    } else {
        (dir.join("freezer.state"), "THAWED")
    })
}

/// Thaws group `relative` (under the hierarchies' root) without a pool's handle: what a
/// previous daemon froze and the ledger names (`pod_ledger`). A group already removed has
/// nothing to thaw.
pub(crate) fn thaw_group(relative: &Path) -> Result<(), String> {
    let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
    let Some((file, thawed)) = thaw_file(&cgroup) else {
        return Ok(());
    };
    match std::fs::write(&file, thawed) {
        Err(err) if file.exists() => Err(format!("thawing {}: {err}", file.display())),
        _ => Ok(()),
    }
}

/// The file that says whether group `relative` is frozen, for reading without any lock
/// (`frozen_in`).
pub(crate) fn state_file(relative: &Path) -> Option<PathBuf> {
    let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
    let dir = cgroup
        .controller_of::<FreezerController>()?
        .path()
        .to_owned();
    Some(if cgroup.v2() {
        dir.join("cgroup.freeze")
    } else {
        dir.join("freezer.state")
    })
}

/// Whether `state_file` says frozen: v1's FROZEN or FREEZING (a task enters the freezer
/// only when it next runs), v2's 1. None where it cannot be read (the group is not there).
pub(crate) fn frozen_in(state_file: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(state_file).ok()?;
    Some(matches!(text.trim(), "FROZEN" | "FREEZING" | "1"))
}

/// Freezes or thaws member `cgroup`, and notes it for `thaw_members`.
fn set_member(cgroup: &Cgroup, frozen: bool) -> Result<(), String> {
    let freezer = cgroup
        .controller_of::<FreezerController>()
        .ok_or("no freezer for the group")?;
    let result = if frozen {
        freezer.freeze()
    } else {
        freezer.thaw()
    };
    let verb = if frozen { "freezing" } else { "thawing" };
    result.map_err(|e| format!("{verb} {}: {e}", freezer.path().display()))?;
    if let Some(file) = thaw_file(cgroup) {
        let mut set = FROZEN_MEMBERS.lock().unwrap_or_else(|e| e.into_inner());
        if frozen {
            set.insert(file);
        } else {
            set.remove(&file);
        }
    }
    Ok(())
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
            members: Mutex::new(BTreeMap::new()),
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
            // A member removed underneath (its pod is going) is not the pool's failure: its
            // removal event is on its way.
            for (path, member) in self
                .members
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
            {
                if let Err(err) = set_member(member, next.frozen()) {
                    tracing::debug!(pool = self.pool, member = %path.display(), "{err}");
                }
            }
        }
        *wanted = next;
        Ok(())
    }

    /// Group `relative` (under the hierarchies' root) is frozen and thawed with the pool from
    /// now on: frozen at once where the pool is, thawed where a daemon that is gone left it
    /// frozen. Joined even where that write fails (on v1 the runtime makes a container's
    /// freezer group after its cpu group): calling again retries it.
    pub fn add_member(&self, relative: &Path) -> Result<(), String> {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
        let state = cgroup
            .controller_of::<FreezerController>()
            .ok_or("no freezer for the group")?
            .state();
        let result = match state {
            Ok(FreezerState::Thawed) if !wanted.frozen() => Ok(()),
            // Not there yet: it is made thawed, which is right unless the pool is frozen.
            Err(_) if !wanted.frozen() => Ok(()),
            _ => set_member(&cgroup, wanted.frozen()),
        };
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(relative.to_owned(), cgroup);
        result
    }

    /// Group `relative` leaves the pool's freezer, thawed where the pool had it frozen and it
    /// is still there (a pod let go of while the pool is paused).
    pub fn remove_member(&self, relative: &Path) -> Result<(), String> {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        let removed = self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(relative);
        let Some(cgroup) = removed else {
            return Ok(());
        };
        if !wanted.frozen() {
            return Ok(());
        }
        let thawed = set_member(&cgroup, false);
        let gone = thaw_file(&cgroup).is_none_or(|(file, _)| !file.exists());
        if let Some(file) = thaw_file(&cgroup) {
            FROZEN_MEMBERS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&file);
        }
        if gone { Ok(()) } else { thawed }
    }

    /// Whether the pool is meant to be frozen now, by either owner.
    pub fn wants_frozen(&self) -> bool {
        self.wanted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frozen()
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
        for member in self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            let _ = set_member(member, false);
        }
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
pub(crate) fn thaw_instance(instance: &str) -> usize {
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
