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
//!   resize of the pod in place fails while reamer holds it.
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

use cgroups_rs::fs::{
    Cgroup, Controller as _, cpu::CpuController, cpuset::CpuSetController, hierarchies,
};
use enforcer_common::cpu_list;

use super::{freezer::Freezer, pod_bases::PodBases};

/// Rewrites by someone else, within `CONTESTED_WINDOW`, past which the file is contested. The
/// kubelet rewrites a container's cpuset when the CPU manager's shared pool changes, which is
/// when a Guaranteed pod with exclusive CPUs comes or goes: a few times a minute at most.
pub const CONTESTED_REWRITES: usize = 3;
pub const CONTESTED_WINDOW: Duration = Duration::from_secs(60);

/// One container's group.
struct ContainerInPlace {
    cpuset_file: Option<PathBuf>,
    /// The CPUs the kubelet gave it; empty where its file is empty (v2: inherits).
    base: BTreeSet<u32>,
    /// What reamer last wrote into its `cpuset.cpus`.
    written: Option<BTreeSet<u32>>,
}

impl ContainerInPlace {
    /// The container's group at `relative`. Its base is the one `bases` kept where a daemon
    /// that died left the group written, else its `cpuset.cpus` now (noted in `bases` where
    /// reamer `writes` it).
    fn load(relative: &Path, bases: &mut PodBases, writes: bool) -> Self {
        let cgroup = Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref());
        let cpuset_file = cgroup
            .controller_of::<CpuSetController>()
            .map(|c| c.path().join("cpuset.cpus"));
        let kept = bases
            .get(relative)
            .and_then(|text| cpu_list::parse(text).ok());
        let base = kept
            .or_else(|| cpuset_file.as_deref().and_then(read_cpus))
            .unwrap_or_default();
        if writes {
            bases.remember(relative, cpu_list::format(&base));
        }
        Self {
            cpuset_file,
            base,
            written: None,
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

    fn apply(&mut self, cpus: &BTreeSet<u32>) -> Result<(), String> {
        let wanted = self.wanted(cpus);
        if self.written.as_ref() != Some(&wanted)
            && let Some(file) = &self.cpuset_file
        {
            std::fs::write(file, cpu_list::format(&wanted))
                .map_err(|e| format!("writing {}: {e}", file.display()))?;
            self.written = Some(wanted);
        }
        Ok(())
    }

    /// Its CPUs back to the kubelet's.
    fn release(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.written.take().is_some()
            && let Some(file) = &self.cpuset_file
            && let Err(err) = std::fs::write(file, restore_value(&self.base))
        {
            // A group already removed has nothing left to release.
            if file.exists() {
                errors.push(format!("restoring {}: {err}", file.display()));
            }
        }
        errors
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
    idle_file: Option<PathBuf>,
}

/// What those files held.
pub struct Readings {
    /// (container group, what reamer had written, what the file holds now). A group removed
    /// meanwhile reads as nothing and is left out: its removal event is on its way.
    cpusets: Vec<(PathBuf, BTreeSet<u32>, BTreeSet<u32>)>,
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
        let idle_cleared = self
            .idle_file
            .filter(|file| std::fs::read_to_string(file).is_ok_and(|v| v.trim() == "0"));
        Readings {
            cpusets,
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
    /// The pod's own group's `cpu.idle` (offline pods).
    idle_file: Option<PathBuf>,
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
    /// only. An offline pod's group is made idle at once.
    pub fn attach(
        key: &str,
        relative: &Path,
        offline: bool,
        exclusive_cpus: Option<&str>,
        write: bool,
        freezer: Option<Arc<Freezer>>,
    ) -> Self {
        let state = match (exclusive_cpus, write) {
            (Some(cpus), _) => PodState::Exclusive(cpus.to_owned()),
            (None, false) => PodState::ObserveOnly,
            (None, true) => PodState::Enforced,
        };
        let idle_file = offline
            .then(|| {
                Cgroup::load(hierarchies::auto(), relative.to_string_lossy().as_ref())
                    .controller_of::<CpuController>()
                    .map(|cpu| cpu.path().join("cpu.idle"))
            })
            .flatten();
        let mut pod = Self {
            key: key.to_owned(),
            idle_file,
            freezer,
            containers: BTreeMap::new(),
            state,
            rewrites: VecDeque::new(),
            foreign_writes: 0,
        };
        if pod.writes()
            && let Some(file) = &pod.idle_file
            && let Err(err) = std::fs::write(file, "1")
        {
            pod.state = PodState::Failing(format!("writing {}: {err}", file.display()));
        }
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

    /// A container group appeared: the pool's CPUs are written into it at once, and it joins
    /// the pool's freezer (frozen at once where the pool is).
    pub fn add_container(&mut self, relative: &Path, cpus: &BTreeSet<u32>, bases: &mut PodBases) {
        if self.containers.contains_key(relative) {
            return;
        }
        let mut container = ContainerInPlace::load(relative, bases, self.writes());
        if self.writes() {
            let mut result = container.apply(cpus);
            if let Some(freezer) = &self.freezer
                && let Err(err) = freezer.add_member(relative)
            {
                result = Err(err);
            }
            self.note(result);
        }
        self.containers.insert(relative.to_owned(), container);
    }

    /// A container group went away.
    pub fn remove_container(&mut self, relative: &Path, bases: &mut PodBases) {
        if self.containers.remove(relative).is_some()
            && let Some(freezer) = &self.freezer
        {
            // The group is gone: there is nothing to thaw, only a member to forget.
            let _ = freezer.remove_member(relative);
        }
        bases.forget(relative);
    }

    /// The pool's new CPUs, written into every container (its pause reaches them through
    /// the pool's freezer).
    pub fn apply(&mut self, cpus: &BTreeSet<u32>) {
        if !self.writes() {
            return;
        }
        let mut result = Ok(());
        for container in self.containers.values_mut() {
            if let Err(err) = container.apply(cpus) {
                result = Err(err);
            }
        }
        self.note(result);
    }

    /// Every container joins its pool's freezer again: where freezing one failed, retried.
    fn rejoin_freezer(&mut self) {
        let Some(freezer) = &self.freezer else {
            return;
        };
        // Every container is tried, whichever fail.
        let mut failed = None;
        for relative in self.containers.keys() {
            if let Err(err) = freezer.add_member(relative) {
                failed = Some(err);
            }
        }
        if let Some(err) = failed {
            self.state = PodState::Failing(err);
        }
    }

    fn note(&mut self, result: Result<(), String>) {
        self.state = match result {
            Ok(()) => PodState::Enforced,
            Err(err) => PodState::Failing(err),
        };
    }

    /// The files to read back for `check`: each container's `cpuset.cpus` with what reamer
    /// wrote there, and the pod's `cpu.idle`. None where reamer does not write the pod. Read
    /// without the daemon's lock (`Readback::read`), which the fast path needs.
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
        Some(Readback {
            cpusets,
            idle_file: self.idle_file.clone(),
        })
    }

    /// What was read back, at `now`. A value someone else wrote becomes the container's
    /// base (the kubelet's new CPUs), or cpu.idle is written again, until the rewrites make the
    /// pod contested. A container reamer itself wrote since the reading is left to the next.
    /// Returns what to log: each rewrite, and a contest.
    pub fn check(
        &mut self,
        now: Instant,
        cpus: &BTreeSet<u32>,
        readings: Readings,
        bases: &mut PodBases,
    ) -> Vec<String> {
        if !self.writes() {
            return Vec::new();
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
            bases.remember(&relative, cpu_list::format(&now_there));
            container.base = now_there;
            container.written = None;
        }
        if let Some(file) = readings.idle_cleared {
            seen.push(format!("{} was set back to 0", file.display()));
        }
        if seen.is_empty() {
            // A write that failed (a v1 hierarchy's group made after the others) is retried.
            if matches!(self.state, PodState::Failing(_)) {
                self.apply(cpus);
                self.rejoin_freezer();
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
            self.release(bases);
            self.state = PodState::Contested(why.clone());
            return vec![format!(
                "pod {}: {why}: reamer no longer writes them",
                self.key
            )];
        }
        if let Some(file) = &self.idle_file
            && let Err(err) = std::fs::write(file, "1")
        {
            self.state = PodState::Failing(format!("writing {}: {err}", file.display()));
        }
        self.apply(cpus);
        seen.into_iter()
            .map(|what| format!("pod {}: {what}: applied again", self.key))
            .collect()
    }

    /// Lets go of the pod: out of its pool's freezer (thawed), its containers' CPUs the
    /// kubelet's again, not idle.
    /// Returns what failed (a group already gone is not a failure).
    pub fn release(&mut self, bases: &mut PodBases) -> Vec<String> {
        if !self.writes() {
            return Vec::new();
        }
        let mut errors = Vec::new();
        for (relative, container) in &mut self.containers {
            if let Some(freezer) = &self.freezer
                && let Err(err) = freezer.remove_member(relative)
            {
                errors.push(err);
            }
            let failed = container.release();
            // A container whose CPUs could not be given back keeps its base for the next try.
            if failed.is_empty() {
                bases.forget(relative);
            }
            errors.extend(failed);
        }
        if let Some(file) = &self.idle_file
            && let Err(err) = std::fs::write(file, "0")
            && file.exists()
        {
            errors.push(format!("writing {}: {err}", file.display()));
        }
        errors
    }
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
            base: BTreeSet::new(),
            written: None,
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
