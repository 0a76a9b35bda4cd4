//! What a failed cgroup operation reports: the group, what was being done, and why. Shared by
//! a pool's cgroups (`cgroup`) and its freezer (`freezer`).

/// A cgroup operation that failed, with the group and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup {path}: {what}: {error}")]
    Op {
        path: String,
        what: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cgroup {path}: {what}: no {controller} controller")]
    NoController {
        path: String,
        what: &'static str,
        controller: &'static str,
    },
}

impl CgroupError {
    /// `what` on the group at `path` failed with `error` (cgroups-rs's, or the kernel's).
    pub fn op(
        path: &str,
        what: impl Into<String>,
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Op {
            path: path.to_owned(),
            what: what.into(),
            error: error.into(),
        }
    }
}
