//! `enforcer launch --user USER [--group GROUP]`: the command runs as that user, not as root.
//! The launcher itself stays root only as long as it must (registering with the daemon, which
//! only root may do, and, with `--relaunch`, supervising); a network-facing worker it starts
//! holds none of root's power.
//!
//! Names are resolved before the fork (the C library reads /etc/passwd and /etc/group, which
//! is not safe between fork and exec); the child then only makes the three system calls that
//! drop root: its groups (the user's, from the group database), its group, its user. In that
//! order: once the user is not root, neither can be changed any more.

use std::{ffi::CString, os::unix::process::CommandExt as _, process::Command};

/// A user the command runs as, with the groups it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    /// Supplementary groups, the primary one included.
    pub groups: Vec<libc::gid_t>,
    /// From the user database, when the user is in it: HOME, USER and LOGNAME for the command.
    pub name: Option<String>,
    pub home: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    #[error("--user {0:?}: no such user (a name from the user database, or a numeric uid)")]
    NoUser(String),
    #[error("--group {0:?}: no such group (a name from the group database, or a numeric gid)")]
    NoGroup(String),
    #[error(
        "--user {0:?} is root: leave --user out to run the command as root, which a \
         network-facing worker should not be"
    )]
    Root(String),
}

/// A passwd entry's fields this needs.
struct PasswdEntry {
    uid: libc::uid_t,
    gid: libc::gid_t,
    name: String,
    home: String,
}

/// Resolves `user` (a name, or a uid) and `group` (a name, or a gid; default: the user's
/// primary group).
pub(crate) fn resolve(user: &str, group: Option<&str>) -> Result<Identity, IdentityError> {
    let entry = passwd(user);
    let uid = match (&entry, user.parse::<libc::uid_t>()) {
        (Some(entry), _) => entry.uid,
        (None, Ok(uid)) => uid,
        (None, Err(_)) => return Err(IdentityError::NoUser(user.to_owned())),
    };
    if uid == 0 {
        return Err(IdentityError::Root(user.to_owned()));
    }
    let gid = match group {
        Some(group) => group_id(group).ok_or_else(|| IdentityError::NoGroup(group.to_owned()))?,
        // A uid outside the database: its own number as its group, as `setpriv` would.
        None => entry.as_ref().map_or(uid, |e| e.gid),
    };
    let mut groups = entry
        .as_ref()
        .map(|e| group_list(&e.name, e.gid))
        .unwrap_or_default();
    if !groups.contains(&gid) {
        groups.push(gid);
    }
    Ok(Identity {
        uid,
        gid,
        groups,
        name: entry.as_ref().map(|e| e.name.clone()),
        home: entry.map(|e| e.home),
    })
}

impl Identity {
    /// Makes `command` run as this identity: its environment names the user, and the child
    /// drops root right before exec.
    pub(crate) fn apply(&self, command: &mut Command) {
        if let Some(name) = &self.name {
            command.env("USER", name).env("LOGNAME", name);
        }
        if let Some(home) = &self.home {
            command.env("HOME", home);
        }
        let (uid, gid, groups) = (self.uid, self.gid, self.groups.clone());
        // SAFETY: setgroups, setgid and setuid are async-signal-safe; `groups` was allocated
        // before the fork and is only read.
        unsafe {
            command.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }
}

/// The user database's entry for `user` (a name, or a uid).
fn passwd(user: &str) -> Option<PasswdEntry> {
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live buffer of the size given; the result points into
    // `entry` and `buffer`, which outlive its use below.
    let status = unsafe {
        match user.parse::<libc::uid_t>() {
            Ok(uid) => libc::getpwuid_r(
                uid,
                &raw mut entry,
                buffer.as_mut_ptr(),
                buffer.len(),
                &raw mut found,
            ),
            Err(_) => {
                let name = CString::new(user).ok()?;
                libc::getpwnam_r(
                    name.as_ptr(),
                    &raw mut entry,
                    buffer.as_mut_ptr(),
                    buffer.len(),
                    &raw mut found,
                )
            }
        }
    };
    if status != 0 || found.is_null() {
        return None;
    }
    // SAFETY: the C library filled `entry` with strings in `buffer`.
    let text = |field: *const libc::c_char| unsafe {
        std::ffi::CStr::from_ptr(field)
            .to_string_lossy()
            .into_owned()
    };
    Some(PasswdEntry {
        uid: entry.pw_uid,
        gid: entry.pw_gid,
        name: text(entry.pw_name),
        home: text(entry.pw_dir),
    })
}

/// The gid of `group` (a name, or a gid).
fn group_id(group: &str) -> Option<libc::gid_t> {
    if let Ok(gid) = group.parse::<libc::gid_t>() {
        return Some(gid);
    }
    let name = CString::new(group).ok()?;
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 64 * 1024];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `passwd`.
    let status = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &raw mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &raw mut found,
        )
    };
    (status == 0 && !found.is_null()).then_some(entry.gr_gid)
}

/// The groups of user `name` in the group database, `primary` included.
fn group_list(name: &str, primary: libc::gid_t) -> Vec<libc::gid_t> {
    let Ok(name) = CString::new(name) else {
        return vec![primary];
    };
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut count = groups.len() as libc::c_int;
    // SAFETY: `groups` holds `count` entries; the call writes at most that many.
    let listed =
        unsafe { libc::getgrouplist(name.as_ptr(), primary, groups.as_mut_ptr(), &raw mut count) };
    if listed < 0 {
        return vec![primary];
    }
    groups.truncate(count.max(0) as usize);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_resolves_by_name_or_number_and_root_or_nobody_unknown_is_refused() {
        // nobody is in every user database this runs on.
        let by_name = resolve("nobody", None).unwrap();
        assert_ne!(by_name.uid, 0);
        assert_eq!(by_name.name.as_deref(), Some("nobody"));
        assert!(by_name.groups.contains(&by_name.gid));
        let by_number = resolve(&by_name.uid.to_string(), None).unwrap();
        assert_eq!(by_number.uid, by_name.uid);
        let numbered_group = resolve("nobody", Some("4242")).unwrap();
        assert_eq!(numbered_group.gid, 4242);
        let outside = resolve("4242424", None).unwrap();
        assert_eq!((outside.uid, outside.gid), (4_242_424, 4_242_424));
        assert!(matches!(resolve("root", None), Err(IdentityError::Root(_))));
        assert!(matches!(resolve("0", None), Err(IdentityError::Root(_))));
        assert!(matches!(
            resolve("no-such-user-here", None),
            Err(IdentityError::NoUser(_))
        ));
        assert!(matches!(
            resolve("nobody", Some("no-such-group-here")),
            Err(IdentityError::NoGroup(_))
        ));
    }
}
