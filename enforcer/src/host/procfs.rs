//! What /proc says of a process: whether it lives, when it started, whose it is.

/// The fields of `/proc/<pid>/stat` after the command name (field 2), which may hold spaces
/// and parentheses: they start after its last ')'. None where the process is gone.
fn stat_fields_after_comm(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` is a live process: not gone, not a zombie waiting to be reaped.
pub(crate) fn is_alive(pid: u32) -> bool {
    stat_fields_after_comm(pid)
        .and_then(|fields| fields.first().cloned())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Whether `/proc/<pid>` exists (a zombie included); pid 0 never does.
pub(crate) fn exists(pid: u32) -> bool {
    pid != 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// When `pid` started (field 22 of its stat line: clock ticks after boot), or None if it does
/// not exist or is a zombie. With the pid, it names one process: a pid reused later has
/// another start time.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let fields = stat_fields_after_comm(pid)?;
    let state = fields.first()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // After the state (field 3), field 22 is the 20th.
    fields.get(19)?.parse().ok()
}

/// The uid a process runs under (the owner of its /proc directory).
pub(crate) fn uid_of(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_lives_and_has_a_start_time_and_an_exited_one_neither() {
        let me = std::process::id();
        assert!(is_alive(me) && exists(me));
        assert!(start_time(me).is_some());
        assert_eq!(uid_of(me), Some(unsafe { libc::geteuid() }));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!is_alive(pid));
        assert_eq!(start_time(pid), None);
        assert!(!exists(0));
    }
}
