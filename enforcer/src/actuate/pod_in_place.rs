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
//! - an offline pod's own group's `cpu.idle`: the kernel ranks an idle group against its
//!   siblings, which for a pod's group are the other pods of its QoS class. The kubelet never
//!   writes `cpu.idle`; the kernel refuses a `cpu.weight` for an idle group (EINVAL), so a
//!   resize of the pod in place fails while reamer holds it. Its weight is given back when
//!   reamer lets go (`pod_idle` says why the kernel does not).
//!
//! Every change is written down in the ledger (`pod_ledger`) before it is made, so that the
//! next daemon undoes it whatever ends this one. A pod is enforced only when every part of it
//! is: each container recorded, narrowed and in step with its pool's freezer, and the pod's
//! group idle. What failed (a group the runtime makes later, as runc on v1 makes the freezer
//! group after the cpu group) is retried when a container appears and at every check, and
//! status says `failing` until then.
//!
//! An online pod's weight stays the kubelet's (from its requests): that file is the kubelet's
//! to write, and writing it would fight every resize.
//!
//! Someone else may write the same `cpuset.cpus`: the kubelet when the CPU manager's shared
//! pool changes, or another agent (koordlet). `check` reads it back; a value reamer did not
//! write is taken as the container's new base and the pool's CPUs are applied within it.
//! More than `CONTESTED_REWRITES` such rewrites within `CONTESTED_WINDOW` is another agent
//! steering the same file: reamer stops writing the pod, thaws it, and reports it, rather
//! than flap against it.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use cgroups_rs::fs::{Cgroup, Controller as _, cpuset::CpuSetController, hierarchies};
use enforcer_common::cpu_list;

use super::{
    freezer::{self, Freezer},
    pod_idle::PodIdle,
    pod_ledger::PodLedger,
};

/// Rewrites by someone else, within `CONTESTED_WINDOW`, past which the file is contested. The
/// kubelet rewrites a container's cpuset when the CPU manager's shared pool changes, which is
/// when a Guaranteed pod with exclusive CPUs comes or goes: a few times a minute at most.
pub const CONTESTED_REWRITES: usize = 3;
pub const CONTESTED_WINDOW: Duration = Duration::from_secs(60);

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

/// Gives container group `relative` the kubelet's CPUs `base` back. A group already removed
/// has nothing left to give back.
pub fn restore_cpus(relative: &Path, base: &BTreeSet<u32>) -> Result<(), String> {
    let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
    let Some(file) = cgroup
        .controller_of::<CpuSetController>()
        .map(|c| c.path().join("cpuset.cpus"))
    else {
        return Ok(());
    };
    match std::fs::write(&file, restore_value(base)) {
        Err(err) if file.exists() => Err(format!("restoring {}: {err}", file.display())),
        _ => Ok(()),
    }
}

/// What gives a container its kubelet's CPUs back: the list, or on cgroup v2 where the file
/// was empty (inheriting its pod's), a lone newline. A write of no bytes at all never
/// reaches the kernel's handler, and would leave the pool's CPUs in place.
fn restore_value(base: &BTreeSet<u32>) -> String {
    if base.is_empty() {
        "\n".to_owned()
    } else {
        cpu_list::format(base)
    }
}

/// A `cpuset.cpus` as a set; None where it cannot be read.
fn read_cpus(file: &Path) -> Option<BTreeSet<u32>> {
    let text = std::fs::read_to_string(file).ok()?;
    cpu_list::parse(text.trim()).ok()
}

/// The files `PodInPlace::check` compares, taken under the daemon's lock.
pub struct Readback {
    /// (container group, its `cpuset.cpus`, what reamer wrote there).
    cpusets: Vec<(PathBuf, PathBuf, BTreeSet<u32>)>,
    /// (container group, its freezer's state file).
    freezers: Vec<(PathBuf, PathBuf)>,
    /// The pod's `cpu.idle`, where reamer wrote it.
    idle_file: Option<PathBuf>,
}

/// What those files held.
pub struct Readings {
    /// (container group, what reamer had written, what the file holds now). A group removed
    /// meanwhile reads as nothing and is left out: its removal event is on its way.
    cpusets: Vec<(PathBuf, BTreeSet<u32>, BTreeSet<u32>)>,
    /// (container group, whether its freezer is frozen; None where it cannot be read).
    freezers: Vec<(PathBuf, Option<bool>)>,
    /// The pod's `cpu.idle`, where it reads 0.
    idle_cleared: Option<PathBuf>,
}

impl Readback {
    /// Reads the files, with no lock held.
    pub fn read(self) -> Readings {
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
        let idle_cleared = self
            .idle_file
            .filter(|file| std::fs::read_to_string(file).is_ok_and(|v| v.trim() == "0"));
        Readings {
            cpusets,
            freezers,
            idle_cleared,
        }
    }
}

/// How a pod stands, for `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
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
    pub fn label(&self) -> &'static str {
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
pub struct PodInPlace {
    pub key: String,
    /// The pod's own group, under the hierarchies' root.
    group: PathBuf,
    /// The pod's own group's `cpu` files (offline pods: made idle).
    idle: Option<PodIdle>,
    /// Whether reamer made it idle (a write the kernel took).
    idle_written: bool,
    /// Its pool's freezer, whose members its containers are while reamer writes them.
    freezer: Option<Arc<Freezer>>,
    containers: BTreeMap<PathBuf, ContainerInPlace>,
    state: PodState,
    /// When someone else rewrote one of its files, within the last `CONTESTED_WINDOW`.
    rewrites: VecDeque<Instant>,
    /// Every rewrite seen, for /metrics.
    pub foreign_writes: u64,
}

impl PodInPlace {
    /// Takes pod `key`, whose group is `relative` in each hierarchy. `write` false: observed
    /// only. An offline pod's group is made idle at once where it is there.
    #[allow(clippy::too_many_arguments)]
    pub fn attach(
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
            idle: offline.then(|| PodIdle::of(relative)).flatten(),
            idle_written: false,
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

    pub fn state(&self) -> &PodState {
        &self.state
    }

    pub fn containers(&self) -> usize {
        self.containers.len()
    }

    /// Brings every part of the pod to its pool's `cpus` and pause: what is done already is
    /// not written again. Enforced only where every part is; else failing, with the last
    /// error, and retried by the next call.
    fn enforce(&mut self, cpus: &BTreeSet<u32>, ledger: &mut PodLedger) {
        if !self.writes() {
            return;
        }
        let mut failed = None;
        if let Some(idle) = &self.idle
            && !self.idle_written
        {
            match make_idle(idle, &self.group, ledger) {
                Ok(()) => self.idle_written = true,
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
    pub fn add_container(&mut self, relative: &Path, cpus: &BTreeSet<u32>, ledger: &mut PodLedger) {
        if self.containers.contains_key(relative) {
            return;
        }
        let container = ContainerInPlace::load(relative, ledger);
        self.containers.insert(relative.to_owned(), container);
        self.enforce(cpus, ledger);
    }

    /// A container group went away.
    pub fn remove_container(&mut self, relative: &Path, ledger: &mut PodLedger) {
        if self.containers.remove(relative).is_some()
            && let Some(freezer) = &self.freezer
        {
            // The group is gone: there is nothing to thaw, only a member to forget.
            let _ = freezer.remove_member(relative);
        }
        ledger.forget_container(relative);
    }

    /// The pool's new CPUs, written into every container (its pause reaches them through
    /// the pool's freezer).
    pub fn apply(&mut self, cpus: &BTreeSet<u32>, ledger: &mut PodLedger) {
        self.enforce(cpus, ledger);
    }

    /// The files to read back for `check`: each container's `cpuset.cpus` with what reamer
    /// wrote there and its freezer's state, and the pod's `cpu.idle`. None where reamer does
    /// not write the pod. Read without the daemon's lock (`Readback::read`), which the fast
    /// path needs.
    pub fn readback(&self) -> Option<Readback> {
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
            idle_file: self
                .idle
                .as_ref()
                .filter(|_| self.idle_written)
                .map(PodIdle::idle_file),
        })
    }

    /// What was read back, at `now`. A value someone else wrote becomes the container's
    /// base (the kubelet's new CPUs), or cpu.idle is written again, until the rewrites make the
    /// pod contested. A container reamer itself wrote since the reading is left to the next.
    /// A container whose freezer is out of step with its pool's (its group made after the
    /// pool froze) is brought in step. Returns what to log: each rewrite, and a contest.
    pub fn check(
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
        let mut seen = Vec::new();
        for (relative, written_then, now_there) in readings.cpusets {
            let Some(container) = self.containers.get_mut(&relative) else {
                continue;
            };
            if container.written.as_ref() != Some(&written_then) || now_there == written_then {
                continue;
            }
            seen.push(format!(
                "{} was rewritten to [{}] (reamer wrote [{}])",
                container
                    .cpuset_file
                    .as_deref()
                    .unwrap_or(Path::new("cpuset.cpus"))
                    .display(),
                cpu_list::format(&now_there),
                cpu_list::format(&written_then)
            ));
            container.base = now_there;
            container.recorded = false;
            container.written = None;
        }
        if let Some(file) = readings.idle_cleared {
            seen.push(format!("{} was set back to 0", file.display()));
            self.idle_written = false;
            // Whoever cleared it may have written the weight they want since: that is the
            // one to give back. The kernel's own reset value says nothing.
            if let Some(weight) = self.idle.as_ref().and_then(|idle| idle.weight().ok())
                && !weight.is_reset_value()
                && let Err(err) = ledger.record_weight(&self.group, weight)
            {
                tracing::warn!("pod {}: {err}", self.key);
            }
        }
        if seen.is_empty() {
            let behind = matches!(self.state, PodState::Failing(_))
                || self.containers.values().any(|c| !c.joined);
            if behind {
                self.enforce(cpus, ledger);
            }
            return Vec::new();
        }
        self.foreign_writes += seen.len() as u64;
        for _ in &seen {
            self.rewrites.push_back(now);
        }
        while self
            .rewrites
            .front()
            .is_some_and(|at| now.duration_since(*at) > CONTESTED_WINDOW)
        {
            self.rewrites.pop_front();
        }
        if self.rewrites.len() > CONTESTED_REWRITES {
            let why = format!(
                "another agent keeps writing its groups ({} rewrites within {} s; the last: {})",
                self.rewrites.len(),
                CONTESTED_WINDOW.as_secs(),
                seen.last().map_or("", String::as_str)
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
            .map(|what| format!("pod {}: {what}: applied again", self.key))
            .collect()
    }

    /// Lets go of the pod: out of its pool's freezer (thawed), its containers' CPUs the
    /// kubelet's again, not idle, with the weight it had. What was undone leaves the ledger.
    /// Returns what failed (a group already gone is not a failure).
    pub fn release(&mut self, ledger: &mut PodLedger) -> Vec<String> {
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
        if let Some(idle) = &self.idle
            && let Some(before) = ledger.weight_before(&self.group)
        {
            match idle.give_back(before) {
                Ok(()) => ledger.forget_pod(&self.group),
                Err(err) => errors.push(err),
            }
        }
        self.idle_written = false;
        errors
    }
}

/// Makes pod group `group` idle, its weight written down first. A group already idle that the
/// ledger says nothing of was made so by someone else (or by a daemon whose ledger was lost):
/// there is no weight of the kubelet's to keep, and it is left idle when reamer lets go.
fn make_idle(idle: &PodIdle, group: &Path, ledger: &mut PodLedger) -> Result<(), String> {
    if ledger.weight_before(group).is_none() && !idle.is_idle()? {
        ledger.record_weight(group, idle.weight()?)?;
    }
    idle.make_idle()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cpus: &[u32]) -> BTreeSet<u32> {
        cpus.iter().copied().collect()
    }

    #[test]
    fn the_pools_cpus_are_taken_within_what_the_kubelet_gave_the_container() {
        let mut container = ContainerInPlace {
            cpuset_file: None,
            freezer_state: None,
            base: BTreeSet::new(),
            recorded: false,
            written: None,
            joined: false,
        };
        assert_eq!(
            container.wanted(&set(&[2, 3])),
            set(&[2, 3]),
            "empty base: inherits"
        );
        container.base = set(&[0, 1, 2]);
        assert_eq!(container.wanted(&set(&[2, 3])), set(&[2]));
        assert_eq!(
            container.wanted(&set(&[5])),
            set(&[5]),
            "nothing shared: the pool's own, for the kernel to refuse and the log to say"
        );
    }

    #[test]
    fn an_empty_base_is_given_back_as_a_newline_not_as_nothing() {
        assert_eq!(restore_value(&BTreeSet::new()), "\n");
        assert_eq!(restore_value(&set(&[0, 1, 2, 5])), "0-2,5");
    }

    #[test]
    fn states_read_as_status_says_them() {
        assert_eq!(PodState::Enforced.to_string(), "enforced");
        assert!(
            PodState::Exclusive("main: 2-3".to_owned())
                .to_string()
                .contains("exclusive CPUs (main: 2-3)")
        );
    }
}
