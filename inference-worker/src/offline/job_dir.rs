//! A job directory opened the way a worker that may run as root must open it: a directory
//! that only the worker's own user can change, and every file in it opened relative to it,
//! never through a link, and only if it is a regular file.
//!
//! Why: a root worker that opened `DIR/results.jsonl` by path would truncate and write
//! whatever file a link planted there points to, with result lines whose `id` the input
//! chose; one that created `DIR/worker.lock` through a dangling link would create the file
//! the link names. Opening relative to the directory's descriptor also pins the directory:
//! a path component swapped after the check leads nowhere new.

use std::{
    ffi::CString,
    fs::File,
    io::Write as _,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    },
    path::{Path, PathBuf},
};

/// Why a job directory or one of its files was refused.
#[derive(Debug, thiserror::Error)]
pub enum JobDirError {
    #[error("cannot open the job directory {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the job directory {} can be changed by {who}, and this worker runs as uid {uid}: \
         another user could swap its files for links to files of the worker's. Give the \
         directory to the worker's user (chmod go-w; chown), or run the worker as its owner",
        path.display()
    )]
    WritableByOthers {
        path: PathBuf,
        who: String,
        uid: u32,
    },
    #[error(
        "{} is {what}, not a regular file: a job's files are never followed through links",
        path.display()
    )]
    NotRegular { path: PathBuf, what: &'static str },
}

/// How a job file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only; it must exist.
    Read,
    /// Read and write, created where missing (mode 0644), never truncated here.
    ReadWriteCreate,
}

/// An open job directory.
pub struct JobDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn c_name(name: &str) -> CString {
    CString::new(name).expect("a job file's name has no NUL")
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl JobDir {
    /// Opens `path` (its last component not through a link) and checks that no other user
    /// than the worker's can change it: its owner is the worker's effective user (or root,
    /// who can change anything anyway), and neither its group nor others may write it.
    pub fn open(path: &Path) -> Result<Self, JobDirError> {
        let open_error = |source| JobDirError::Open {
            path: path.to_owned(),
            source,
        };
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| open_error(std::io::Error::other("the path holds a NUL byte")))?;
        // SAFETY: a C string this function owns; the descriptor is taken into an OwnedFd.
        let raw = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            let error = last_error();
            // O_NOFOLLOW on a link answers ELOOP, O_DIRECTORY on a link ENOTDIR: say which.
            return Err(
                if error.raw_os_error() == Some(libc::ELOOP)
                    || std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
                {
                    JobDirError::NotRegular {
                        path: path.to_owned(),
                        what: "a symbolic link",
                    }
                } else {
                    open_error(error)
                },
            );
        }
        // SAFETY: `raw` is a descriptor this function just opened.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let dir = Self {
            fd,
            path: path.to_owned(),
        };
        let metadata = dir.as_file()?.metadata().map_err(open_error)?;
        // SAFETY: geteuid has no failure mode.
        let uid = unsafe { libc::geteuid() };
        let mut who = Vec::new();
        if metadata.uid() != uid && metadata.uid() != 0 {
            who.push(format!("its owner, uid {}", metadata.uid()));
        }
        if metadata.mode() & 0o020 != 0 {
            who.push(format!("its group, gid {}", metadata.gid()));
        }
        if metadata.mode() & 0o002 != 0 {
            who.push("every user".to_owned());
        }
        if !who.is_empty() {
            return Err(JobDirError::WritableByOthers {
                path: path.to_owned(),
                who: who.join(" and "),
                uid,
            });
        }
        Ok(dir)
    }

    /// The directory as a `File`, for its metadata and fsync (a second descriptor).
    fn as_file(&self) -> Result<File, JobDirError> {
        let fd = self.fd.try_clone().map_err(|source| JobDirError::Open {
            path: self.path.clone(),
            source,
        })?;
        Ok(File::from(fd))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in the directory, for messages.
    pub fn file_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens `name` in the directory: never through a link, and only a regular file (a FIFO
    /// or device would block or read forever; it is opened non-blocking, then checked).
    pub fn open_file(&self, name: &str, access: Access) -> Result<File, JobDirError> {
        let flags = libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | match access {
                Access::Read => libc::O_RDONLY,
                Access::ReadWriteCreate => libc::O_RDWR | libc::O_CREAT,
            };
        // SAFETY: a descriptor this struct owns and a C string that outlives the call.
        let raw = unsafe { libc::openat(self.fd.as_raw_fd(), c_name(name).as_ptr(), flags, 0o644) };
        let path = self.file_path(name);
        if raw < 0 {
            let error = last_error();
            if error.raw_os_error() == Some(libc::ELOOP) {
                return Err(JobDirError::NotRegular {
                    path,
                    what: "a symbolic link",
                });
            }
            return Err(JobDirError::Open {
                path,
                source: error,
            });
        }
        // SAFETY: `raw` is a descriptor this function just opened.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        let metadata = file.metadata().map_err(|source| JobDirError::Open {
            path: path.clone(),
            source,
        })?;
        let file_type = metadata.file_type();
        if !file_type.is_file() {
            let what = if file_type.is_dir() {
                "a directory"
            } else {
                "a FIFO, socket or device"
            };
            return Err(JobDirError::NotRegular { path, what });
        }
        // A file the worker writes that has another name elsewhere would be written there too.
        if access == Access::ReadWriteCreate && metadata.nlink() > 1 {
            return Err(JobDirError::NotRegular {
                path,
                what: "a hard link to a file with another name",
            });
        }
        // Back to blocking reads and writes on the regular file.
        // SAFETY: fcntl on a descriptor `file` owns.
        unsafe {
            let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
        Ok(file)
    }

    /// The contents of `name`, or None where it does not exist; never through a link.
    pub fn read_optional(&self, name: &str) -> Result<Option<String>, JobDirError> {
        let mut file = match self.open_file(name, Access::Read) {
            Ok(file) => file,
            Err(JobDirError::Open { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).map_err(|source| {
            JobDirError::Open {
                path: self.file_path(name),
                source,
            }
        })?;
        Ok(Some(text))
    }

    /// Replaces `name` with `bytes` atomically and durably: written to a file of this
    /// process's own, created afresh (never through a link or into a file someone left
    /// there), synced, renamed over `name`, and the directory synced.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = format!("{name}.{}.tmp", std::process::id());
        let dirfd = self.fd.as_raw_fd();
        // A leftover of this pid's earlier run, or a planted link: the entry itself goes.
        // SAFETY: a descriptor this struct owns and C strings that outlive the calls.
        unsafe { libc::unlinkat(dirfd, c_name(&tmp).as_ptr(), 0) };
        // SAFETY: as above.
        let raw = unsafe {
            libc::openat(
                dirfd,
                c_name(&tmp).as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            )
        };
        if raw < 0 {
            return Err(last_error());
        }
        // SAFETY: `raw` is a descriptor this function just opened.
        let mut file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        file.write_all(bytes)?;
        file.sync_all()?;
        // SAFETY: as above.
        if unsafe { libc::renameat(dirfd, c_name(&tmp).as_ptr(), dirfd, c_name(name).as_ptr()) }
            != 0
        {
            return Err(last_error());
        }
        self.as_file()
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .sync_all()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("reamer-job-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn a_link_in_the_directory_is_refused_and_its_target_left_untouched() {
        let dir = scratch("links");
        let victim = dir.with_extension("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        symlink(&victim, dir.join("results.jsonl")).unwrap();
        let missing = dir.with_extension("created-through-a-link");
        symlink(&missing, dir.join("worker.lock")).unwrap();

        let job = JobDir::open(&dir).unwrap();
        for name in ["results.jsonl", "worker.lock"] {
            let err = job.open_file(name, Access::ReadWriteCreate).unwrap_err();
            assert!(
                err.to_string()
                    .contains("is a symbolic link, not a regular file"),
                "{err}"
            );
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(
            !missing.exists(),
            "nothing was created through the dangling link"
        );
        assert!(matches!(
            job.read_optional("results.jsonl"),
            Err(JobDirError::NotRegular { .. })
        ));
        // Nor through a second name of a file.
        std::fs::remove_file(dir.join("results.jsonl")).unwrap();
        std::fs::hard_link(&victim, dir.join("results.jsonl")).unwrap();
        let err = job
            .open_file("results.jsonl", Access::ReadWriteCreate)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a hard link"), "{err}");
        // The checkpoint's replacement goes around a link planted at its temporary name.
        let planted = dir.join(format!("checkpoint.json.{}.tmp", std::process::id()));
        symlink(&victim, &planted).unwrap();
        job.replace("checkpoint.json", b"{}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(
            job.read_optional("checkpoint.json").unwrap().unwrap(),
            "{}\n"
        );
        assert_eq!(job.read_optional("absent").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&victim).unwrap();
    }

    #[test]
    fn a_directory_another_user_can_change_or_that_is_a_link_is_refused() {
        let dir = scratch("writable");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = JobDir::open(&dir).err().expect("refused").to_string();
        assert!(
            err.contains("can be changed by its group") && err.contains("every user"),
            "{err}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        JobDir::open(&dir).expect("the worker's own directory");
        // SAFETY: geteuid has no failure mode.
        if unsafe { libc::geteuid() } == 0 {
            // Another user's directory, which only root can give away.
            std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
            let err = JobDir::open(&dir).err().expect("refused").to_string();
            assert!(err.contains("its owner, uid 65534"), "{err}");
            std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
        }

        let link = dir.with_extension("link");
        symlink(&dir, &link).unwrap();
        let err = JobDir::open(&link).err().expect("refused").to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        std::fs::remove_file(&link).unwrap();

        // A FIFO would block a reader for ever: refused without blocking.
        let fifo = dir.join("inputs.jsonl");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a C string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let err = JobDir::open(&dir)
            .unwrap()
            .open_file("inputs.jsonl", Access::Read)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a FIFO, socket or device"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
