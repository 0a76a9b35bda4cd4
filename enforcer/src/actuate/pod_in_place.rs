//! An inference pod's groups, enforced where the kubelet put them. A pool's decisions reach
//! a pod by writing its containers' own groups, not by moving its processes into the pool's
//! group: moved, they would leave the pod's memory and PID limits and the kubelet's
//! accounting, and the kubelet would find its groups empty. What is written:
//!
//! - each container's `cpuset.cpus`: the pool's CPUs, within the CPUs the kubelet gave the
//!   container (its "base": the CPU manager's shared pool; on v2 an empty file, which
//!   inherits). Written per container, because cgroup v1 refuses a pod-level cpuset that
//!   does not hold its children's;
//! - each container's freezer, while the CPU policy pauses the pool or the GPU duty cycle
//!   gates it: the containers are members of the pool's freezer (`freezer`), its one owner;
//! - an offline pod's own group's weight, held at the least the kernel takes (`pod_weight`
//!   says why not `cpu.idle`): the kernel ranks a pod's group against its siblings, the other
//!   pods of its QoS tier. Its threads get SCHED_IDLE each, like every offline thread. A
//!   BestEffort pod's group has the least weight from the kubelet already, and is not
//!   written.
//!
//! Every change is written down in the ledger (`pod_ledger`) before it is made, so that the
//! next daemon undoes it whatever ends this one. A pod is enforced only when every part of it
//! is: each container recorded, narrowed and in step with its pool's freezer, and the pod's
//! group at the least weight. What failed (a group the runtime makes later, as runc on v1 makes the
//! freezer group after the cpu group) is retried when a container appears and at every check, and
//! status says `failing` until then.
//!
//! An online pod's weight stays the kubelet's (from its requests): it is not reamer's to
//! lower.
//!
//! Someone else may write the same files. The kubelet writes a container's `cpuset.cpus`
//! through the runtime when the CPU manager's shared pool changes, and restates it at every
//! update of the container (runc writes all of a container's resources), and it writes an
//! offline pod group's weight at an in-place resize; another agent (koordlet) may steer
//! either. Every write succeeds: reamer holds nothing the kernel would refuse them for.
//! `check` reads each file back within a reconcile. A value reamer did not write is taken as
//! the kubelet's (the container's new base CPUs, the pod's new weight) and reamer's is applied
//! again. More than `CONTESTED_REWRITES` rewrites to something new within `CONTESTED_WINDOW`
//! is another agent steering the same file: reamer stops writing the pod, thaws it, and
//! reports it, rather than flap against it. A container's CPUs restated as they were (the
//! base) are the runtime's update, not a contest.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use cgroups_rs::fs::{Cgroup, Controller as _, cpuset::CpuSetController, hierarchies};
use enforcer_common::cpu_list;

use super::{
    container_cpuset::{read_cpus, restore_cpus},
    freezer::{self, Freezer},
    pod_ledger::PodLedger,
    pod_weight::{self, PodWeight},
};

/// Rewrites to something new by someone else, within `CONTESTED_WINDOW`, past which the pod's
/// files are contested. The kubelet gives a container new CPUs when the CPU manager's shared
/// pool changes, which is when a Guaranteed pod with exclusive CPUs comes or goes, and a pod
/// a new weight at an in-place resize: a few times a minute at most.
pub(crate) const CONTESTED_REWRITES: usize = 3;
/// Rewrites of any kind within `CONTESTED_WINDOW`, past which the pod's files are contested:
/// restatements of a container's CPUs as the kubelet gave them included. The runtime restates
/// them at each update of the container (a resize, a kubelet restart), a few times an hour;
/// an agent that restores them every second would otherwise be fought for ever.
pub(crate) const CONTESTED_RESTATEMENTS: usize = 10;
pub(crate) const CONTESTED_WINDOW: Duration = Duration::from_secs(60);

/// One container's group.
struct ContainerInPlace {
    cpuset_file: Option<PathBuf>,
    /// Where its freezer says whether it is frozen.
    freezer_state: Option<PathBuf>,
    /// The CPUs the kubelet gave it; empty where its file is empty (v2: inherits).
    base: BTreeSet<u32>,
    /// Whether `base` is in the ledger: nothing is written before it is.
    recorded: bool,
    /// What reamer last wrote into its `cpuset.cpus`.
    written: Option<BTreeSet<u32>>,
    /// Whether its freezer was last found in step with its pool's.
    joined: bool,
}

impl ContainerInPlace {
    /// The container's group at `relative`. Its base is the one the ledger kept where a
    /// previous daemon's write could not be undone at start; where the ledger was lost, its
    /// parent's CPUs (its own file may hold a pool's); else its `cpuset.cpus` now.
    fn load(relative: &Path, ledger: &PodLedger) -> Self {
        let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
        let cpuset_file = cgroup
            .controller_of::<CpuSetController>()
            .map(|c| c.path().join("cpuset.cpus"));
        let kept = ledger.base(relative);
        let recorded = kept.is_some();
        let fallback = || {
            ledger.parent_fallback().then(|| {
                if cgroup.v2() {
                    // An empty file inherits its pod's CPUs.
                    Some(BTreeSet::new())
                } else {
                    cpuset_file
                        .as_deref()
                        .and_then(|file| read_cpus(&file.parent()?.parent()?.join("cpuset.cpus")))
                }
            })?
        };
        let base = kept
            .or_else(fallback)
            .or_else(|| cpuset_file.as_deref().and_then(read_cpus))
            .unwrap_or_default();
        Self {
            cpuset_file,
            freezer_state: freezer::state_file(relative),
            base,
            recorded,
            written: None,
            joined: false,
        }
    }

    /// The pool's `cpus` within the container's base. Where they share none, the pool's own:
    /// the write then fails where the kernel holds the container to its pod's CPUs (v1), and
    /// says so.
    fn wanted(&self, cpus: &BTreeSet<u32>) -> BTreeSet<u32> {
        if self.base.is_empty() {
            return cpus.clone();
        }
        let within: BTreeSet<u32> = cpus.intersection(&self.base).copied().collect();
        if within.is_empty() {
            cpus.clone()
        } else {
            within
        }
    }

    /// Every part of the container brought to its pool: its base written down, the pool's
    /// CPUs written, its freezer in step with the pool's.
    fn enforce(
        &mut self,
        relative: &Path,
        cpus: &BTreeSet<u32>,
        ledger: &mut PodLedger,
        freezer: Option<&Freezer>,
    ) -> Result<(), String> {
        if !self.recorded {
            ledger.record_base(relative, &self.base)?;
            self.recorded = true;
        }
        let wanted = self.wanted(cpus);
        if self.written.as_ref() != Some(&wanted)
            && let Some(file) = &self.cpuset_file
        {
            std::fs::write(file, cpu_list::format(&wanted))
                .map_err(|e| format!("writing {}: {e}", file.display()))?;
            self.written = Some(wanted);
        }
        if !self.joined {
            if let Some(freezer) = freezer {
                freezer.add_member(relative)?;
            }
            self.joined = true;
        }
        Ok(())
    }

    /// Its CPUs back to the kubelet's.
    fn release(&mut self, relative: &Path) -> Result<(), String> {
        if self.written.take().is_none() {
            return Ok(());
        }
        restore_cpus(relative, &self.base)
    }
}

/// The files `PodInPlace::check` compares, taken under the daemon's lock.
pub(crate) struct Readback {
    /// (container group, its `cpuset.cpus`, what reamer wrote there).
    cpusets: Vec<(PathBuf, PathBuf, BTreeSet<u32>)>,
    /// (container group, its freezer's state file).
    freezers: Vec<(PathBuf, PathBuf)>,
    /// The pod group's weight file, where reamer holds it at the least.
    weight_file: Option<PathBuf>,
}

/// What those files held.
pub(crate) struct Readings {
    /// (container group, what reamer had written, what the file holds now). A group removed
    /// meanwhile reads as nothing and is left out: its removal event is on its way.
    cpusets: Vec<(PathBuf, BTreeSet<u32>, BTreeSet<u32>)>,
    /// (container group, whether its freezer is frozen; None where it cannot be read).
    freezers: Vec<(PathBuf, Option<bool>)>,
    /// The pod group's weight, where it is no longer the least: (its file, what it holds).
    weight_rewritten: Option<(PathBuf, u64)>,
}

impl Readback {
    /// Reads the files, with no lock held.
    pub(crate) fn read(self) -> Readings {
        let cpusets = self
            .cpusets
            .into_iter()
            .filter_map(|(relative, file, written)| Some((relative, written, read_cpus(&file)?)))
            .collect();
        let freezers = self
            .freezers
            .into_iter()
            .map(|(relative, file)| (relative, freezer::frozen_in(&file)))
            .collect();
        let weight_rewritten = self.weight_file.and_then(|file| {
            let value = pod_weight::not_least(&file)?;
            Some((file, value))
        });
        Readings {
            cpusets,
            freezers,
            weight_rewritten,
        }
    }
}

/// How a pod stands, for `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodState {
    /// Its groups hold the pool's CPUs (and pause).
    Enforced,
    /// `[policy] enforce = false`: seen, never written.
    ObserveOnly,
    /// The CPU manager gave it CPUs of its own: the kubelet's alone.
    Exclusive(String),
    /// Another agent keeps writing its groups: reamer let go of it.
    Contested(String),
    /// The last write failed; retried at the next check.
    Failing(String),
}

impl PodState {
    /// One word, for a metric's label.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Enforced => "enforced",
            Self::ObserveOnly => "observe_only",
            Self::Exclusive(_) => "exclusive",
            Self::Contested(_) => "contested",
            Self::Failing(_) => "failing",
        }
    }
}

impl std::fmt::Display for PodState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Enforced => write!(f, "enforced"),
            Self::ObserveOnly => write!(f, "observed only (policy.enforce = false)"),
            Self::Exclusive(cpus) => write!(
                f,
                "left alone: the CPU manager gave it exclusive CPUs ({cpus})"
            ),
            Self::Contested(why) => write!(f, "left alone: {why}"),
            Self::Failing(why) => write!(f, "failing: {why}"),
        }
    }
}

/// An inference pod's groups, as the pool's decisions are written into them.
pub(crate) struct PodInPlace {
    pub key: String,
    /// The pod's own group, under the hierarchies' root.
    group: PathBuf,
    /// The pod's own group's weight (offline pods: held at the least).
    weight: Option<PodWeight>,
    /// Whether it holds the least weight (written by reamer, or the kubelet's already).
    weight_held: bool,
    /// Whether its weight was read as a new group's once: the kubelet may not have written
    /// its own yet, so it is taken as the kubelet's only when read so again.
    new_groups_weight_seen: bool,
    /// Whether the last check found a weight someone else wrote: acted on when the next check
    /// finds it still there. On v1 the kubelet reads `cpu.shares` back right after writing
    /// it and fails the resize where it differs (runc's fs/cpu.go); reamer's least weight,
    /// written at once, could land in between.
    weight_rewrite_seen: bool,
    /// Its pool's freezer, whose members its containers are while reamer writes them.
    freezer: Option<Arc<Freezer>>,
    containers: BTreeMap<PathBuf, ContainerInPlace>,
    state: PodState,
    /// When someone else rewrote one of its files, within the last `CONTESTED_WINDOW`, and
    /// whether to something new (not a restatement).
    rewrites: VecDeque<(Instant, bool)>,
    /// Every rewrite seen, for /metrics.
    pub foreign_writes: u64,
}

impl PodInPlace {
    /// Takes pod `key`, whose group is `relative` in each hierarchy. `write` false: observed
    /// only. An offline pod's group is held at the least weight at once where it is there.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attach(
        key: &str,
        relative: &Path,
        offline: bool,
        exclusive_cpus: Option<&str>,
        write: bool,
        freezer: Option<Arc<Freezer>>,
        cpus: &BTreeSet<u32>,
        ledger: &mut PodLedger,
    ) -> Self {
        let state = match (exclusive_cpus, write) {
            (Some(cpus), _) => PodState::Exclusive(cpus.to_owned()),
            (None, false) => PodState::ObserveOnly,
            (None, true) => PodState::Enforced,
        };
        let mut pod = Self {
            key: key.to_owned(),
            group: relative.to_owned(),
            weight: offline.then(|| PodWeight::of(relative)).flatten(),
            weight_held: false,
            new_groups_weight_seen: false,
            weight_rewrite_seen: false,
            freezer,
            containers: BTreeMap::new(),
            state,
            rewrites: VecDeque::new(),
            foreign_writes: 0,
        };
        pod.enforce(cpus, ledger);
        pod
    }

    /// Whether reamer writes its groups now.
    fn writes(&self) -> bool {
        matches!(self.state, PodState::Enforced | PodState::Failing(_))
    }

    pub(crate) fn state(&self) -> &PodState {
        &self.state
    }

    /// Brings every part of the pod to its pool's `cpus` and pause: what is done already is
    /// not written again. Enforced only where every part is; else failing, with the last
    /// error, and retried by the next call.
    fn enforce(&mut self, cpus: &BTreeSet<u32>, ledger: &mut PodLedger) {
        self.enforce_parts(cpus, ledger, true);
    }

    /// `enforce`, the group's weight left out where `with_weight` is false: the fast path
    /// (`apply`) moves CPUs and pauses, and a weight not held yet (a read, a ledger save and a
    /// write) waits for the reconcile, which holds no fast-path deadline. Left out, a weight
    /// not held keeps the pod failing with what its last try said.
    fn enforce_parts(&mut self, cpus: &BTreeSet<u32>, ledger: &mut PodLedger, with_weight: bool) {
        if !self.writes() {
            return;
        }
        let mut failed = None;
        if !with_weight && self.weight.is_some() && !self.weight_held {
            failed = Some(match &self.state {
                PodState::Failing(why) => why.clone(),
                _ => "its group's weight is not held yet".to_owned(),
            });
        } else if let Some(weight) = &self.weight
            && !self.weight_held
        {
            match hold_least_weight(
                weight,
                &self.group,
                &mut self.new_groups_weight_seen,
                ledger,
            ) {
                Ok(true) => self.weight_held = true,
                Ok(false) => {
                    failed = Some(format!(
                        "{} reads as a new group's: taken as the kubelet's at the next check",
                        weight.file().display()
                    ));
                }
                Err(err) => failed = Some(err),
            }
        }
        for (relative, container) in &mut self.containers {
            if let Err(err) = container.enforce(relative, cpus, ledger, self.freezer.as_deref()) {
                failed = Some(err);
            }
        }
        self.state = match failed {
            None => PodState::Enforced,
            Some(err) => PodState::Failing(err),
        };
    }

    /// A container group appeared: the pool's CPUs are written into it at once, and it joins
    /// the pool's freezer (frozen at once where the pool is). What failed before on the pod
    /// (its own group made later than the API said it) is tried again with it.
    pub(crate) fn add_container(
        &mut self,
        relative: &Path,
        cpus: &BTreeSet<u32>,
        ledger: &mut PodLedger,
    ) {
        if self.containers.contains_key(relative) {
            return;
        }
        let container = ContainerInPlace::load(relative, ledger);
        self.containers.insert(relative.to_owned(), container);
        self.enforce(cpus, ledger);
    }

    /// A container group went away.
    pub(crate) fn remove_container(&mut self, relative: &Path, ledger: &mut PodLedger) {
        if self.containers.remove(relative).is_some()
            && let Some(freezer) = &self.freezer
        {
            // The group is gone: there is nothing to thaw, only a member to forget.
            let _ = freezer.remove_member(relative);
        }
        ledger.forget_container(relative);
    }

    /// The pool's new CPUs, written into every container (its pause reaches them through
    /// the pool's freezer). On the fast path: the group's weight is left to `check`.
    pub(crate) fn apply(&mut self, cpus: &BTreeSet<u32>, ledger: &mut PodLedger) {
        self.enforce_parts(cpus, ledger, false);
    }

    /// The files to read back for `check`: each container's `cpuset.cpus` with what reamer
    /// wrote there and its freezer's state, and the pod group's weight. None where reamer does
    /// not write the pod. Read without the daemon's lock (`Readback::read`), which the fast
    /// path needs.
    pub(crate) fn readback(&self) -> Option<Readback> {
        if !self.writes() {
            return None;
        }
        let cpusets = self
            .containers
            .iter()
            .filter_map(|(relative, container)| {
                let file = container.cpuset_file.clone()?;
                Some((relative.clone(), file, container.written.clone()?))
            })
            .collect();
        let freezers = self
            .freezer
            .as_ref()
            .map(|_| {
                self.containers
                    .iter()
                    .filter_map(|(relative, container)| {
                        Some((relative.clone(), container.freezer_state.clone()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Readback {
            cpusets,
            freezers,
            weight_file: self
                .weight
                .as_ref()
                .filter(|_| self.weight_held)
                .map(PodWeight::file),
        })
    }

    /// What was read back, at `now`. A value someone else wrote becomes the container's
    /// base (the kubelet's new CPUs) or the pod's kubelet weight, and reamer's is written again,
    /// until rewrites to something new make the pod contested. A container reamer itself wrote
    /// since the reading is left to the next. A container whose freezer is out of step with its
    /// pool's (its group made after the pool froze) is brought in step. Returns what to log: each
    /// rewrite, and a contest.
    pub(crate) fn check(
        &mut self,
        now: Instant,
        cpus: &BTreeSet<u32>,
        readings: Readings,
        ledger: &mut PodLedger,
    ) -> Vec<String> {
        if !self.writes() {
            return Vec::new();
        }
        if let Some(freezer) = &self.freezer {
            let wanted = freezer.wants_frozen();
            for (relative, frozen) in readings.freezers {
                // A group not there reads as thawed: it is made so, which is right unless the
                // pool is frozen.
                if frozen.unwrap_or(false) != wanted
                    && let Some(container) = self.containers.get_mut(&relative)
                {
                    container.joined = false;
                }
            }
        }
        // (what was seen, whether it is something new: a restatement is no contest).
        let mut seen: Vec<(String, bool)> = Vec::new();
        for (relative, written_then, now_there) in readings.cpusets {
            let Some(container) = self.containers.get_mut(&relative) else {
                continue;
            };
            if container.written.as_ref() != Some(&written_then) || now_there == written_then {
                continue;
            }
            let file = container
                .cpuset_file
                .as_deref()
                .unwrap_or(Path::new("cpuset.cpus"))
                .display();
            let restated = now_there == container.base;
            seen.push(if restated {
                (
                    format!(
                        "{file} was restated as the kubelet gave it, [{}] (reamer wrote [{}])",
                        cpu_list::format(&now_there),
                        cpu_list::format(&written_then)
                    ),
                    false,
                )
            } else {
                (
                    format!(
                        "{file} was rewritten to [{}] (reamer wrote [{}])",
                        cpu_list::format(&now_there),
                        cpu_list::format(&written_then)
                    ),
                    true,
                )
            });
            container.base = now_there;
            container.recorded = restated && container.recorded;
            container.written = None;
        }
        let weight_rewritten = match readings.weight_rewritten {
            None => {
                self.weight_rewrite_seen = false;
                None
            }
            Some(found) => std::mem::replace(&mut self.weight_rewrite_seen, true).then_some(found),
        };
        if let Some((file, value)) = weight_rewritten {
            self.weight_rewrite_seen = false;
            seen.push((
                format!(
                    "{} was rewritten to {value} (the kubelet's weight from now on; reamer \
                     holds the least)",
                    file.display()
                ),
                true,
            ));
            // The kubelet's new weight is the one to give back: written down before reamer
            // holds the least again (`enforce`).
            self.weight_held = false;
            self.new_groups_weight_seen = true;
        }
        if seen.is_empty() {
            let behind = matches!(self.state, PodState::Failing(_))
                || self.containers.values().any(|c| !c.joined)
                || (self.weight.is_some() && !self.weight_held);
            if behind {
                self.enforce(cpus, ledger);
            }
            return Vec::new();
        }
        self.foreign_writes += seen.len() as u64;
        self.rewrites
            .extend(seen.iter().map(|(_, new)| (now, *new)));
        if let Some(rewrites) = contested(&mut self.rewrites, now) {
            let why = format!(
                "another agent keeps writing its groups ({rewrites}; the last: {})",
                seen.last().map_or("", |(what, _)| what.as_str())
            );
            self.release(ledger);
            self.state = PodState::Contested(why.clone());
            return vec![format!(
                "pod {}: {why}: reamer no longer writes them",
                self.key
            )];
        }
        self.enforce(cpus, ledger);
        seen.into_iter()
            .map(|(what, _)| format!("pod {}: {what}: applied again", self.key))
            .collect()
    }

    /// Lets go of the pod: out of its pool's freezer (thawed), its containers' CPUs and its
    /// group's weight the kubelet's again. What was undone leaves the ledger.
    /// Returns what failed (a group already gone is not a failure).
    pub(crate) fn release(&mut self, ledger: &mut PodLedger) -> Vec<String> {
        if !self.writes() {
            return Vec::new();
        }
        let mut errors = Vec::new();
        for (relative, container) in &mut self.containers {
            let thawed = self
                .freezer
                .as_ref()
                .map_or(Ok(()), |freezer| freezer.remove_member(relative));
            // A container not given back stays in the ledger, for the next daemon to undo.
            match thawed.and(container.release(relative)) {
                Ok(()) => ledger.forget_container(relative),
                Err(err) => errors.push(err),
            }
            container.joined = false;
        }
        if let Some(weight) = &self.weight
            && let Some(kubelet) = ledger.kubelet_weight(&self.group)
        {
            match weight.give_back(kubelet) {
                Ok(()) => ledger.forget_pod(&self.group),
                Err(err) => errors.push(err),
            }
        }
        self.weight_held = false;
        errors
    }
}

/// Whether the rewrites of the last `CONTESTED_WINDOW` (older ones dropped) make a pod
/// contested: what they were, where they do.
fn contested(rewrites: &mut VecDeque<(Instant, bool)>, now: Instant) -> Option<String> {
    while rewrites
        .front()
        .is_some_and(|(at, _)| now.duration_since(*at) > CONTESTED_WINDOW)
    {
        rewrites.pop_front();
    }
    let new = rewrites.iter().filter(|(_, new)| *new).count();
    let window = CONTESTED_WINDOW.as_secs();
    if new > CONTESTED_REWRITES {
        Some(format!("{new} rewrites within {window} s"))
    } else if rewrites.len() > CONTESTED_RESTATEMENTS {
        Some(format!(
            "{} rewrites within {window} s, {} of them restating the kubelet's CPUs",
            rewrites.len(),
            rewrites.len() - new
        ))
    } else {
        None
    }
}

/// Holds pod group `group` at the least weight, the kubelet's written down first. Returns
/// whether it holds it now. A group at the least weight already (BestEffort: the kubelet's
/// own) is not written. A new group's weight (`is_new_groups`) is taken as the kubelet's only
/// when read so a second time (`new_groups_weight_seen`), a check later: the kubelet writes
/// its own right after making the group, and one read between the two would otherwise give a
/// BestEffort pod 1024 shares back when reamer lets go. A group left idle by an earlier
/// version whose ledger was lost is made not idle first (the kubelet's writes fail on it); its
/// kubelet weight is unknown then, and nothing is given back for it.
fn hold_least_weight(
    weight: &PodWeight,
    group: &Path,
    new_groups_weight_seen: &mut bool,
    ledger: &mut PodLedger,
) -> Result<bool, String> {
    if weight.clear_idle()? {
        tracing::warn!(
            group = %group.display(),
            "a pod group left idle (cpu.idle = 1) by an earlier version, with no ledger entry: \
             made not idle, held at the least weight; its kubelet weight is unknown and is not \
             given back"
        );
        weight.hold_least()?;
        return Ok(true);
    }
    let now = weight.read()?;
    if now.is_least() {
        return Ok(true);
    }
    if now.is_new_groups() && !std::mem::replace(new_groups_weight_seen, true) {
        return Ok(false);
    }
    ledger.record_weight(group, now)?;
    weight.hold_least()?;
    Ok(true)
}

#[cfg(test)]
mod tests;
