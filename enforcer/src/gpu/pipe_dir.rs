//! The MPS pipe directory, and whether the daemon may trust whatever answers in it.
//!
//! MPS clients and the control program find the control daemon through named pipes in one
//! directory, `/tmp/nvidia-mps` unless `CUDA_MPS_PIPE_DIRECTORY` says otherwise. Whoever can
//! create or replace that directory can stand in for the control daemon: the enforcer (root)
//! would take its replies for the MPS state, and every CUDA client of the node would connect
//! to it. Under world-writable /tmp any local user can create `/tmp/nvidia-mps` before root
//! does. So the enforcer talks to a control daemon only through a directory that is a real
//! directory (not a symlink), owned by root or by the enforcer's own user, and writable by
//! nobody else; and a control daemon it starts itself gets a directory under /run/reamer,
//! which only root can write.

use std::{
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

/// Where CUDA looks when `CUDA_MPS_PIPE_DIRECTORY` is unset.
pub(crate) const NVIDIA_DEFAULT: &str = "/tmp/nvidia-mps";

/// Mode of a pipe directory the enforcer creates: MPS clients of every uid must reach the
/// pipes (MPS runs one server per uid), none but root may change them.
const CREATED_MODE: u32 = 0o755;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PipeDirError {
    #[error(
        "the MPS pipe directory {} is not safe to use: {why}. A local user who controls it \
         can stand in for the MPS control daemon; remove it, or set [gpu] mps_pipe_dir to a \
         directory only root can write (with mps = \"start\" the default, {}, is one)",
        dir.display(),
        crate::host::paths::MPS_PIPE_DIR
    )]
    Untrusted { dir: PathBuf, why: String },
    #[error("creating the MPS pipe directory {}: {error}", dir.display())]
    Create { dir: PathBuf, error: std::io::Error },
    #[error("reading the MPS pipe directory {}: {error}", dir.display())]
    Inspect { dir: PathBuf, error: std::io::Error },
}

/// Checks a pipe directory that exists; a missing one is Ok(false) (no daemon can answer
/// there, and nobody can have planted one).
pub(crate) fn check(dir: &Path) -> Result<bool, PipeDirError> {
    // SAFETY: geteuid cannot fail and touches no memory.
    check_for(dir, unsafe { libc::geteuid() })
}

/// `check` for a daemon running as `own_uid`.
fn check_for(dir: &Path, own_uid: u32) -> Result<bool, PipeDirError> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => {
            return Err(PipeDirError::Inspect {
                dir: dir.to_owned(),
                error,
            });
        }
    };
    let untrusted = |why: String| PipeDirError::Untrusted {
        dir: dir.to_owned(),
        why,
    };
    if meta.file_type().is_symlink() {
        return Err(untrusted("it is a symbolic link".to_owned()));
    }
    if !meta.is_dir() {
        return Err(untrusted("it is not a directory".to_owned()));
    }
    if meta.uid() != 0 && meta.uid() != own_uid {
        return Err(untrusted(format!("it belongs to uid {}", meta.uid())));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(untrusted(format!(
            "its mode {mode:04o} lets other users write to it"
        )));
    }
    Ok(true)
}

/// Creates `dir` (and missing parents) with mode 0755 whatever the umask (the unit's is 0077,
/// which would lock out every MPS client but root's), then checks it as `check` does: a
/// directory someone else created first is refused, not adopted.
pub(crate) fn create(dir: &Path) -> Result<(), PipeDirError> {
    let created = match std::fs::DirBuilder::new()
        .recursive(false)
        .mode(CREATED_MODE)
        .create(dir)
    {
        Ok(()) => true,
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let parent = dir.parent().unwrap_or(Path::new("/"));
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(CREATED_MODE)
                .create(parent)
                .and_then(|()| std::fs::DirBuilder::new().mode(CREATED_MODE).create(dir))
                .map_err(|error| PipeDirError::Create {
                    dir: dir.to_owned(),
                    error,
                })?;
            true
        }
        Err(error) => {
            return Err(PipeDirError::Create {
                dir: dir.to_owned(),
                error,
            });
        }
    };
    if created {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(CREATED_MODE)).map_err(
            |error| PipeDirError::Create {
                dir: dir.to_owned(),
                error,
            },
        )?;
    }
    check(dir).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("reamer-pipe-dir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&dir);
        dir
    }

    #[test]
    fn a_missing_directory_is_no_daemon_and_a_created_one_is_0755_and_trusted() {
        let dir = scratch("create");
        assert!(!check(&dir).unwrap());
        create(&dir.join("nested")).unwrap();
        let mode = std::fs::metadata(dir.join("nested"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "mode {mode:o}");
        assert!(check(&dir.join("nested")).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_others_may_write_a_symlink_or_a_file_is_refused_by_name() {
        let dir = scratch("writable");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = check(&dir).unwrap_err().to_string();
        assert!(err.contains("mode 1777 lets other users write"), "{err}");
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(err.contains("mps_pipe_dir"), "{err}");
        // create() adopts nothing it did not make safe: the planted directory stays refused.
        assert!(create(&dir).is_err());

        let link = scratch("link");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = check(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");

        let file = scratch("file");
        std::fs::write(&file, b"").unwrap();
        assert!(
            check(&file)
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );

        std::fs::remove_file(&link).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        let dir = scratch("foreign");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let owner = std::fs::metadata(&dir).unwrap().uid();
        // Seen from a daemon of another uid, or from root if this test runs as another user.
        let viewer = if owner == 0 { 4242 } else { 0 };
        if owner == 0 {
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        }
        let owner = std::fs::metadata(&dir).unwrap().uid();
        let err = check_for(&dir, viewer).unwrap_err().to_string();
        assert!(err.contains(&format!("belongs to uid {owner}")), "{err}");
        assert!(check_for(&dir, owner).unwrap(), "its owner may use it");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
