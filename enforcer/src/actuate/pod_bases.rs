//! The CPUs the kubelet gave each container reamer writes, kept in a file beside the socket,
//! so that a daemon that starts after one that died (a crash, an OOM kill: nothing released
//! its pods) takes the kubelet's CPUs as each container's base, not the pool's CPUs the dead
//! one left in its `cpuset.cpus`. A daemon stopped cleanly releases every pod and leaves the
//! file empty; the next one finds the same bases in the groups themselves.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use tracing::warn;

/// Container group (relative to the hierarchies' root) → the kubelet's CPUs ("" where its
/// file was empty).
pub struct PodBases {
    file: PathBuf,
    bases: BTreeMap<String, String>,
}

impl PodBases {
    /// The bases a previous daemon of this instance left at `file`, if any.
    pub fn open(file: PathBuf) -> Self {
        let bases = std::fs::read_to_string(&file)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        Self { file, bases }
    }

    /// The base noted for `group`.
    pub fn get(&self, group: &Path) -> Option<&str> {
        self.bases.get(&key(group)).map(String::as_str)
    }

    pub fn remember(&mut self, group: &Path, base: String) {
        if self.bases.insert(key(group), base.clone()) != Some(base) {
            self.save();
        }
    }

    pub fn forget(&mut self, group: &Path) {
        if self.bases.remove(&key(group)).is_some() {
            self.save();
        }
    }

    /// Written whole to a temporary file, then renamed over the old one: a daemon killed
    /// mid-write leaves the old file, never half a new one.
    fn save(&self) {
        let Ok(text) = serde_json::to_string(&self.bases) else {
            return;
        };
        let temporary = self.file.with_extension("tmp");
        let saved =
            std::fs::write(&temporary, text).and_then(|()| std::fs::rename(&temporary, &self.file));
        if let Err(err) = saved {
            warn!(
                file = %self.file.display(),
                "the pods' CPUs from the kubelet are not kept for a restarted daemon: {err}"
            );
        }
    }
}

fn key(group: &Path) -> String {
    group.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_outlive_the_daemon_that_noted_them() {
        let file = std::env::temp_dir().join(format!("reamer-bases-{}.json", std::process::id()));
        let group = Path::new("kubepods/besteffort/pod1/c1");
        let mut bases = PodBases::open(file.clone());
        assert_eq!(bases.get(group), None);
        bases.remember(group, "0-7".to_owned());
        assert_eq!(PodBases::open(file.clone()).get(group), Some("0-7"));
        bases.forget(group);
        assert_eq!(PodBases::open(file.clone()).get(group), None);
        std::fs::remove_file(&file).unwrap();
    }
}
