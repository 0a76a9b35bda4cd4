//! What reamer changed in pods' groups, written down before each change, so that whatever ends
//! a daemon (a crash, an OOM kill, the watchdog's SIGKILL) the next one can undo it.
//!
//! A daemon that dies leaves its pods as they were at that instant: containers frozen,
//! cpusets narrowed to a pool's CPUs, offline pods' groups at the least weight. On cgroup v1 a
//! frozen task ignores even SIGKILL, so a pod deleted meanwhile would hang in Terminating with its
//! memory and GPU memory. The pod may be gone from the API, unlabelled, or in a pool that left the
//! config by the time the next daemon starts, and the API server may be unreachable then: the pods
//! the next daemon lists cannot tell it what to undo. This file can. It holds:
//!
//! - each container group reamer writes (narrows, and freezes with its pool), with the CPUs
//!   the kubelet gave it;
//! - each pod group reamer holds at the least weight, with the kubelet's weight
//!   (`pod_weight`). An earlier version made such groups idle instead, under the same entry;
//!   it is given back the same way.
//!
//! An entry is written before the change it covers (a container is neither narrowed nor
//! frozen, a pod group's weight not lowered, until the file holding it is saved), and dropped
//! once the change is undone. At start (`release_left`) the next daemon undoes every entry it
//! finds, whether or not the pod is still there: thawed, its CPUs and weight the kubelet's.
//! The pods still marked are taken again as their events arrive.
//!
//! The file is `/run/reamer/<instance>.pod-groups.json` (tmpfs: nothing in it outlives a
//! reboot, which leaves no group behind either). It is rewritten whole, through a temporary
//! file of the writing process renamed over it, so a daemon killed mid-write leaves the
//! previous version. A file that cannot be read or holds entries that fail their checks is
//! kept aside (`.unreadable`), the error names it, and the daemon falls back to the
//! container's parent group for the kubelet's CPUs (`parent_fallback`).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Component, Path, PathBuf},
};

use enforcer_common::cpu_list;
use serde::{Deserialize, Serialize};
use tracing::{error, info};

use super::{
    container_cpuset, freezer,
    pod_weight::{KubeletWeight, PodWeight},
};

/// The file's layout; bumped when an entry changes meaning.
const VERSION: u32 = 1;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entries {
    version: u32,
    /// Container group (relative to the hierarchies' root) → the kubelet's CPUs ("" where
    /// its file was empty: v2, inheriting its pod's).
    containers: BTreeMap<String, String>,
    /// Pod group → the kubelet's weight, while reamer holds the least there (an earlier
    /// version: while it made the group idle).
    pods: BTreeMap<String, KubeletWeight>,
}

pub(crate) struct PodLedger {
    file: PathBuf,
    entries: Entries,
    /// The previous daemon's file could not be read whole: the groups it named may still be
    /// narrowed, and the CPUs read from a container now may be a pool's.
    lost: bool,
}

impl PodLedger {
    /// The ledger a previous daemon of this instance left at `file`, checked entry by entry.
    /// What cannot be used is kept aside and logged as an error.
    pub(crate) fn open(file: PathBuf) -> Self {
        let (entries, lost) = match std::fs::read(&file) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => (Entries::default(), false),
            Err(err) => {
                error!(file = %file.display(), "cannot read the pods' ledger: {err}");
                (Entries::default(), true)
            }
            Ok(bytes) => match parse(&bytes) {
                Ok(entries) => (entries, false),
                Err((entries, why)) => {
                    let aside = file.with_extension("json.unreadable");
                    let kept = std::fs::copy(&file, &aside)
                        .map(|_| format!("kept at {}", aside.display()))
                        .unwrap_or_else(|e| format!("not kept aside: {e}"));
                    error!(
                        file = %file.display(),
                        "the pods' ledger is damaged ({why}; {kept}): groups a previous daemon \
                         froze or narrowed and that it does not name may stay so. Containers \
                         are given their parent group's CPUs as the kubelet's until the \
                         kubelet rewrites them"
                    );
                    (entries, true)
                }
            },
        };
        Self {
            file,
            entries,
            lost,
        }
    }

    /// Takes in the CPUs an earlier version of reamer kept at `legacy` (container group → the
    /// kubelet's CPUs, `<instance>.pod-cpus.json`), so that a daemon upgraded after one that
    /// died still gives those containers their CPUs back. The file goes once its entries are
    /// in the ledger.
    pub(crate) fn adopt_legacy(&mut self, legacy: &Path) {
        let Ok(bytes) = std::fs::read(legacy) else {
            return;
        };
        let read: Result<BTreeMap<String, String>, _> = serde_json::from_slice(&bytes);
        let Ok(bases) = read else {
            self.lost = true;
            error!(file = %legacy.display(), "an earlier version's pods' CPUs file is not valid JSON; it is left in place");
            return;
        };
        for (group, cpus) in bases {
            if check_group(&group).is_ok() && cpu_list::parse(&cpus).is_ok() {
                self.entries.containers.entry(group).or_insert(cpus);
            } else {
                self.lost = true;
                error!(file = %legacy.display(), group, cpus, "an entry of an earlier version's pods' CPUs file is refused");
            }
        }
        match self.save() {
            Ok(()) => {
                let _ = std::fs::remove_file(legacy);
            }
            Err(err) => error!("{err}"),
        }
    }

    /// Where the ledger could not be read whole: the kubelet's CPUs for a container the
    /// ledger does not name are taken from its parent group, not from the container's own
    /// file, which may hold a pool's CPUs.
    pub(crate) fn parent_fallback(&self) -> bool {
        self.lost
    }

    /// The kubelet's CPUs noted for container `group`.
    pub(crate) fn base(&self, group: &Path) -> Option<BTreeSet<u32>> {
        let text = self.entries.containers.get(&key(group))?;
        cpu_list::parse(text).ok()
    }

    /// Notes `base` as container `group`'s CPUs from the kubelet, before reamer writes it.
    pub(crate) fn record_base(&mut self, group: &Path, base: &BTreeSet<u32>) -> Result<(), String> {
        let text = cpu_list::format(base);
        if self.entries.containers.get(&key(group)) == Some(&text) {
            return Ok(());
        }
        self.entries.containers.insert(key(group), text);
        self.save()
    }

    pub(crate) fn forget_container(&mut self, group: &Path) {
        if self.entries.containers.remove(&key(group)).is_some() {
            self.save_or_log();
        }
    }

    /// The kubelet's weight noted for pod group `group`.
    pub(crate) fn kubelet_weight(&self, group: &Path) -> Option<&KubeletWeight> {
        self.entries.pods.get(&key(group))
    }

    /// Notes `weight` as pod group `group`'s from the kubelet, before reamer lowers it.
    pub(crate) fn record_weight(
        &mut self,
        group: &Path,
        weight: KubeletWeight,
    ) -> Result<(), String> {
        if self.entries.pods.get(&key(group)) == Some(&weight) {
            return Ok(());
        }
        self.entries.pods.insert(key(group), weight);
        self.save()
    }

    pub(crate) fn forget_pod(&mut self, group: &Path) {
        if self.entries.pods.remove(&key(group)).is_some() {
            self.save_or_log();
        }
    }

    /// Undoes what a previous daemon of this instance left: every container it names thawed
    /// and given the kubelet's CPUs, every pod group given the kubelet's weight back. An entry
    /// whose group is gone is dropped; one that could not be undone stays for the next try (its
    /// pod, taken again, keeps the kubelet's CPUs from it). Returns what was undone and what
    /// failed.
    pub(crate) fn release_left(&mut self) -> (usize, Vec<String>) {
        let mut undone = 0;
        let mut errors = Vec::new();
        let containers = std::mem::take(&mut self.entries.containers);
        for (group, text) in containers {
            let relative = PathBuf::from(&group);
            let base = cpu_list::parse(&text).unwrap_or_default();
            let thawed = freezer::thaw_group(&relative);
            let restored = container_cpuset::restore_cpus(&relative, &base);
            match thawed.and(restored) {
                Ok(()) => undone += 1,
                Err(err) => {
                    errors.push(err);
                    self.entries.containers.insert(group, text);
                }
            }
        }
        let pods = std::mem::take(&mut self.entries.pods);
        for (group, weight) in pods {
            let given_back =
                PodWeight::of(Path::new(&group)).map_or(Ok(()), |pod| pod.give_back(&weight));
            match given_back {
                Ok(()) => undone += 1,
                Err(err) => {
                    errors.push(err);
                    self.entries.pods.insert(group, weight);
                }
            }
        }
        if undone > 0 {
            info!(
                undone,
                "pods' groups a previous daemon left written were given back (thawed, the \
                 kubelet's CPUs, their weight); those still marked are taken again"
            );
            self.save_or_log();
        }
        (undone, errors)
    }

    /// Written whole to a temporary file of this process, then renamed over the old one. An
    /// empty ledger removes the file.
    fn save(&self) -> Result<(), String> {
        if self.entries.containers.is_empty() && self.entries.pods.is_empty() {
            return match std::fs::remove_file(&self.file) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(format!(
                    "removing the pods' ledger {}: {err}",
                    self.file.display()
                )),
                _ => Ok(()),
            };
        }
        let entries = Entries {
            version: VERSION,
            ..self.entries.clone()
        };
        let temporary = self
            .file
            .with_extension(format!("json.tmp.{}", std::process::id()));
        serde_json::to_vec_pretty(&entries)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&temporary, bytes))
            .and_then(|()| std::fs::rename(&temporary, &self.file))
            .map_err(|err| {
                let _ = std::fs::remove_file(&temporary);
                format!(
                    "saving the pods' ledger {} (what reamer changes in a pod's groups is \
                     written there first, for a restarted daemon to undo): {err}",
                    self.file.display()
                )
            })
    }

    /// Saves a removal: an entry left in the file only makes the next daemon write a group
    /// back to what the kubelet gave it once more.
    fn save_or_log(&self) {
        if let Err(err) = self.save() {
            error!("{err}");
        }
    }
}

fn key(group: &Path) -> String {
    group.to_string_lossy().into_owned()
}

/// The entries of a ledger file, checked before root acts on them: a group is a relative path
/// that stays under the hierarchies' root, CPUs a CPU list, a weight within the kernel's
/// range. On an error: the entries that passed, and why the rest did not.
fn parse(bytes: &[u8]) -> Result<Entries, (Entries, String)> {
    let read: Entries = serde_json::from_slice(bytes)
        .map_err(|e| (Entries::default(), format!("not a ledger: {e}")))?;
    if read.version != VERSION {
        return Err((
            Entries::default(),
            format!(
                "layout version {} (this daemon reads {VERSION})",
                read.version
            ),
        ));
    }
    let mut entries = Entries::default();
    let mut refused = Vec::new();
    for (group, cpus) in read.containers {
        match check_group(&group).and_then(|()| {
            cpu_list::parse(&cpus)
                .map(|_| ())
                .map_err(|e| format!("CPUs {cpus:?}: {e}"))
        }) {
            Ok(()) => {
                entries.containers.insert(group, cpus);
            }
            Err(why) => refused.push(format!("container {group:?}: {why}")),
        }
    }
    for (group, weight) in read.pods {
        match check_group(&group).and_then(|()| weight.check()) {
            Ok(()) => {
                entries.pods.insert(group, weight);
            }
            Err(why) => refused.push(format!("pod {group:?}: {why}")),
        }
    }
    if refused.is_empty() {
        Ok(entries)
    } else {
        Err((entries, format!("entries refused: {}", refused.join("; "))))
    }
}

/// A group named by the ledger: relative, and made of plain names only (no `..`, no root).
fn check_group(group: &str) -> Result<(), String> {
    let path = Path::new(group);
    let plain = !group.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err("not a group under the hierarchies' root".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("reamer-ledger-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("pod-groups.json")
    }

    fn set(cpus: &[u32]) -> BTreeSet<u32> {
        cpus.iter().copied().collect()
    }

    #[test]
    fn entries_outlive_the_daemon_that_wrote_them_and_an_empty_ledger_leaves_no_file() {
        let file = scratch("outlive");
        let container = Path::new("kubepods/burstable/pod1/c1");
        let pod = Path::new("kubepods/burstable/pod1");
        let shares = KubeletWeight {
            file: "cpu.shares".to_owned(),
            value: 512,
        };
        let mut ledger = PodLedger::open(file.clone());
        assert_eq!(ledger.base(container), None);
        ledger.record_base(container, &set(&[0, 1, 2, 3])).unwrap();
        ledger.record_weight(pod, shares.clone()).unwrap();
        let again = PodLedger::open(file.clone());
        assert!(!again.parent_fallback());
        assert_eq!(again.base(container), Some(set(&[0, 1, 2, 3])));
        assert_eq!(again.kubelet_weight(pod), Some(&shares));
        ledger.forget_container(container);
        ledger.forget_pod(pod);
        assert!(!file.exists(), "nothing left to undo: no file");
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_damaged_ledger_is_kept_aside_and_said_and_its_sound_entries_are_used() {
        let file = scratch("damaged");
        std::fs::write(
            &file,
            "{\"version\":1,\"containers\":{\"kubepods/pod1/c1\":\"0-3\"",
        )
        .unwrap();
        let ledger = PodLedger::open(file.clone());
        assert!(ledger.parent_fallback());
        assert!(file.with_extension("json.unreadable").exists());

        // Entries that would make root write outside the hierarchies, or write what the
        // kernel would refuse, are refused one by one.
        let text = r#"{"version":1,
            "containers":{"kubepods/pod1/c1":"0-3","../../etc":"0","kubepods/pod2/c2":"zero"},
            "pods":{"kubepods/pod1":{"file":"cpu.shares","value":2},
                    "kubepods/pod3":{"file":"release_agent","value":2}}}"#;
        std::fs::write(&file, text).unwrap();
        let ledger = PodLedger::open(file.clone());
        assert!(ledger.parent_fallback());
        assert_eq!(
            ledger.base(Path::new("kubepods/pod1/c1")),
            Some(set(&[0, 1, 2, 3]))
        );
        assert_eq!(ledger.base(Path::new("../../etc")), None);
        assert_eq!(ledger.base(Path::new("kubepods/pod2/c2")), None);
        assert!(ledger.kubelet_weight(Path::new("kubepods/pod1")).is_some());
        assert!(ledger.kubelet_weight(Path::new("kubepods/pod3")).is_none());
        assert_eq!(
            std::fs::read_to_string(file.with_extension("json.unreadable")).unwrap(),
            text
        );

        std::fs::write(&file, r#"{"version":9,"containers":{},"pods":{}}"#).unwrap();
        assert!(PodLedger::open(file.clone()).parent_fallback());
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_ledger_that_cannot_be_saved_says_so_and_the_change_is_not_made() {
        let file = std::env::temp_dir()
            .join(format!("reamer-ledger-missing-{}", std::process::id()))
            .join("pod-groups.json");
        let mut ledger = PodLedger::open(file);
        let err = ledger
            .record_base(Path::new("kubepods/pod1/c1"), &set(&[0]))
            .unwrap_err();
        assert!(err.contains("saving the pods' ledger"), "{err}");
    }

    #[test]
    fn an_earlier_versions_file_is_taken_in_and_removed() {
        let file = scratch("legacy");
        let legacy = file.with_file_name("pod-cpus.json");
        std::fs::write(
            &legacy,
            r#"{"kubepods/pod1/c1":"0-3","kubepods/pod1/c2":""}"#,
        )
        .unwrap();
        let mut ledger = PodLedger::open(file.clone());
        ledger.adopt_legacy(&legacy);
        assert!(!legacy.exists());
        let again = PodLedger::open(file.clone());
        assert_eq!(
            again.base(Path::new("kubepods/pod1/c1")),
            Some(set(&[0, 1, 2, 3]))
        );
        assert_eq!(again.base(Path::new("kubepods/pod1/c2")), Some(set(&[])));
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn groups_are_plain_relative_paths() {
        assert!(check_group("kubepods/besteffort/pod1/c1").is_ok());
        for bad in ["", "/sys/fs/cgroup/x", "kubepods/../../x", "./x"] {
            assert!(check_group(bad).is_err(), "{bad:?}");
        }
    }
}
