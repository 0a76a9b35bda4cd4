//! Start-up checks and fixes: privilege, bpffs and tracefs mounts, the memlock limit.

use std::{ffi::CString, path::Path};

use tracing::info;

/// statfs(2) magic numbers (include/uapi/linux/magic.h).
pub(crate) const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
pub(crate) const TRACEFS_MAGIC: i64 = 0x7472_6163;

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "the enforcer must run as root (it loads eBPF programs and writes cgroups); \
         your effective uid is {euid}. Run it with sudo, or through `cargo xtask run -- ...`"
    )]
    NotRoot { euid: u32 },
    #[error("cannot mount {fstype} at {path}: {source}")]
    Mount {
        fstype: &'static str,
        path: String,
        source: std::io::Error,
    },
}

/// Fails unless the effective uid is 0.
pub(crate) fn require_root() -> Result<(), PreflightError> {
    // SAFETY: no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        Ok(())
    } else {
        Err(PreflightError::NotRoot { euid })
    }
}

/// A small kernel file's contents without surrounding whitespace, if it can be read.
pub(crate) fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The filesystem magic of `path`, if it can be statfs'd.
pub(crate) fn fs_magic(path: &Path) -> Option<i64> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: zeroed statfs is a valid out-parameter; c_path is NUL-terminated.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut stat) };
    (rc == 0).then_some(stat.f_type as i64)
}

/// Mounts `fstype` at `path` unless it is there already, mode 0700: the pins and the trace
/// files are root's (mounted without a mode, bpffs is 0755 and tracefs 0755, and any user
/// could list the pinned maps' names). Returns whether it mounted.
fn ensure_mounted(path: &str, fstype: &'static str, magic: i64) -> Result<bool, PreflightError> {
    if fs_magic(Path::new(path)) == Some(magic) {
        return Ok(false);
    }
    let error = |source| PreflightError::Mount {
        fstype,
        path: path.to_owned(),
        source,
    };
    std::fs::create_dir_all(path).map_err(error)?;
    let c_path = CString::new(path).expect("constant path has no NUL");
    let c_type = CString::new(fstype).expect("constant fstype has no NUL");
    let options = CString::new("mode=0700").expect("constant options have no NUL");
    // SAFETY: NUL-terminated strings; the data argument is the options string both file
    // systems parse.
    let rc = unsafe {
        libc::mount(
            c_type.as_ptr(),
            c_path.as_ptr(),
            c_type.as_ptr(),
            0,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(error(std::io::Error::last_os_error()));
    }
    info!("mounted {fstype} at {path}");
    Ok(true)
}

/// bpffs for the pins, tracefs for the tracepoint formats and attachment.
pub(crate) fn ensure_mounts() -> Result<(), PreflightError> {
    ensure_mounted(super::paths::BPFFS, "bpf", BPF_FS_MAGIC)?;
    ensure_mounted(super::paths::TRACEFS, "tracefs", TRACEFS_MAGIC)?;
    Ok(())
}

/// Lifts RLIMIT_MEMLOCK: kernels before 5.11 charge BPF maps to it, and its default (8 MiB)
/// is below what the sensor's maps take on a large machine. Kernels from 5.11 charge the
/// memory cgroup instead and ignore it, so failing to raise it is only worth a note there
/// (seen here: root without CAP_SYS_RESOURCE in a sandbox cannot raise the hard limit).
pub(crate) fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: valid pointer to a rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
        return;
    }
    let err = std::io::Error::last_os_error();
    // Raise the soft limit to the hard one at least.
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to rlimits.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut current) == 0 {
            current.rlim_cur = current.rlim_max;
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &current);
        }
    }
    tracing::debug!(
        "RLIMIT_MEMLOCK stays at {} bytes ({err}); kernels >= 5.11 ignore it",
        current.rlim_max
    );
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_bpffs_it_mounts_is_roots_alone() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED a_bpffs_it_mounts_is_roots_alone: not root (mounting needs it)");
            return;
        }
        // A mount point of this test's own, not the machine's /sys/fs/bpf.
        let dir = std::env::temp_dir().join(format!("reamer-bpffs-{}", std::process::id()));
        let path = dir
            .to_str()
            .expect("a UTF-8 temporary directory")
            .to_owned();
        assert!(ensure_mounted(&path, "bpf", BPF_FS_MAGIC).unwrap());
        let mode = std::fs::metadata(&dir).map(|m| m.permissions().mode() & 0o777);
        assert!(
            !ensure_mounted(&path, "bpf", BPF_FS_MAGIC).unwrap(),
            "mounted twice"
        );
        let c_path = CString::new(path).unwrap();
        // SAFETY: unmounts the file system this test mounted, by its NUL-terminated path.
        assert_eq!(unsafe { libc::umount2(c_path.as_ptr(), 0) }, 0);
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(mode.unwrap(), 0o700);
    }
}
