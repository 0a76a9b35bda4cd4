//! Whose budget a control-socket peer spends (`daemon::admission`): the user behind it, seen
//! through user namespaces.
//!
//! The kernel reports a peer's uid as this daemon's user namespace sees it. A process in a
//! user namespace runs as whatever uids its map gives it: a user with a subordinate uid range
//! (`/etc/subuid`, rootless containers) appears as thousands of users, and with 8 of them one
//! user filled the budget that every other user's workers share. So a peer inside a user
//! namespace spends the budget of the namespace's owner: the uid that created the outermost
//! namespace it is in, below this daemon's. Only root can create a namespace owned by root
//! (a container runtime's, a pod's with `hostUsers: false`); each such namespace has a budget
//! of its own, so that one pod cannot spend another's, and none of them spends root's.

use std::{
    fs::File,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
};

/// `ioctl_ns(2)`: the parent of a user namespace, and its owner (`_IO(0xb7, 2)`, `_IO(0xb7, 4)`).
const NS_GET_PARENT: libc::c_ulong = 0xb702;
const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;
/// How deep user namespaces nest, at most (the kernel's limit is 32).
const MAX_DEPTH: usize = 33;

/// Whose connections a peer's count with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Root in this daemon's own user namespace.
    Root,
    /// A user: the peer's uid where it is in this daemon's user namespace, else the owner of
    /// the namespace it is in. u32::MAX where the kernel gave no credentials.
    User(u32),
    /// A user namespace that root created (below this daemon's), by its inode.
    RootsNamespace(u64),
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Root => write!(f, "root"),
            Self::User(uid) => write!(f, "uid {uid} (its user namespaces included)"),
            Self::RootsNamespace(inode) => write!(f, "the user namespace {inode} root made"),
        }
    }
}

/// The budget of a peer whose credentials say `uid` and `pid`. Where its namespace cannot be
/// read (it exited, or no pid was given), its uid decides.
pub fn budget_of(uid: Option<u32>, pid: Option<i32>) -> Budget {
    let by_uid = match uid {
        Some(0) => Budget::Root,
        Some(uid) => Budget::User(uid),
        None => Budget::User(u32::MAX),
    };
    let Some(pid) = pid.filter(|&pid| pid > 0) else {
        return by_uid;
    };
    match outermost_namespace(pid) {
        Ok(None) | Err(_) => by_uid,
        Ok(Some((inode, 0))) => Budget::RootsNamespace(inode),
        Ok(Some((_, owner))) => Budget::User(owner),
    }
}

/// The outermost user namespace below this process's that `pid` is in, as (inode, owner uid);
/// None where `pid` is in this process's own.
fn outermost_namespace(pid: i32) -> std::io::Result<Option<(u64, u32)>> {
    let own = std::fs::metadata("/proc/self/ns/user")?.ino();
    let mut namespace: OwnedFd = File::open(format!("/proc/{pid}/ns/user"))?.into();
    if inode(&namespace)? == own {
        return Ok(None);
    }
    for _ in 0..MAX_DEPTH {
        // SAFETY: an ioctl on a namespace file that this function owns; on success it returns
        // a new file descriptor, which is then owned here.
        let parent = unsafe { libc::ioctl(namespace.as_raw_fd(), NS_GET_PARENT) };
        if parent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `parent` is a new descriptor that nothing else owns.
        let parent = unsafe { OwnedFd::from_raw_fd(parent) };
        if inode(&parent)? == own {
            let mut owner: libc::uid_t = 0;
            // SAFETY: NS_GET_OWNER_UID writes one uid_t through the pointer.
            let done = unsafe {
                libc::ioctl(
                    namespace.as_raw_fd(),
                    NS_GET_OWNER_UID,
                    &mut owner as *mut libc::uid_t,
                )
            };
            if done < 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(Some((inode(&namespace)?, owner)));
        }
        namespace = parent;
    }
    Err(std::io::Error::other(
        "user namespaces nested deeper than the kernel allows",
    ))
}

fn inode(fd: &OwnedFd) -> std::io::Result<u64> {
    let file = File::from(fd.try_clone()?);
    Ok(file.metadata()?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_in_this_namespace_is_its_uid() {
        let me = std::process::id() as i32;
        assert_eq!(budget_of(Some(0), Some(me)), Budget::Root);
        assert_eq!(budget_of(Some(1000), Some(me)), Budget::User(1000));
        assert_eq!(budget_of(None, None), Budget::User(u32::MAX));
        assert_eq!(
            budget_of(Some(1000), Some(4_194_305)),
            Budget::User(1000),
            "a peer gone: its uid"
        );
    }
}
