//! The open-file limit of a server process.

/// Raises RLIMIT_NOFILE's soft limit to its hard limit and returns the open files this
/// process may hold. Every connection takes one. At the usual soft limit of 1,024, a local
/// user holding idle connections to the enforcer used them all, and then freezer writes and
/// the journal failed too. The connection caps of the enforcer and the worker are sized
/// within what this returns.
pub fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to rlimits.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}
