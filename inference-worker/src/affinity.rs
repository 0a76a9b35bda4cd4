//! CPU lists ("0-3,6") and pinning the calling thread to a set of CPUs.

use enforcer_common::cpu_list::{self, CpuListError};

/// A `--cpus` list that names no CPU to run on.
#[derive(Debug, thiserror::Error)]
pub enum BadCpus {
    #[error(transparent)]
    List(#[from] CpuListError),
    #[error("CPU list '{0}' names no CPU")]
    Empty(String),
}

/// Parses a CPU list as the kernel writes them (cpuset.cpus, /sys/.../online): comma-separated
/// numbers and inclusive ranges, at least one CPU; sorted, each CPU once.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, BadCpus> {
    let cpus = cpu_list::parse(text)?;
    if cpus.is_empty() {
        return Err(BadCpus::Empty(text.trim().to_owned()));
    }
    Ok(cpus.into_iter().collect())
}

/// CPUs online on the machine: the most a worker can ever be granted. (Not
/// `available_parallelism`, which counts only the CPUs this process's cpuset allows.)
pub fn machine_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).unwrap_or(1).max(1)
}

/// The CPUs this process may run on now.
pub fn allowed_cpus() -> std::io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as u32)
        // SAFETY: the index is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu as usize, &set) })
        .collect())
}

/// Pins the calling thread to `cpus`. The kernel refuses CPUs outside the thread's cpuset
/// (EINVAL when none is left): the cgroup always has the last word.
pub fn pin_current_thread(cpus: &[u32]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus
        .iter()
        .filter(|&&c| (c as usize) < libc::CPU_SETSIZE as usize)
    {
        // SAFETY: the index is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("1,1,0").unwrap(), vec![0, 1]);
        let error = |text| parse_cpu_list(text).unwrap_err().to_string();
        assert!(error("").contains("names no CPU"));
        assert!(error("3-1").contains("backwards"));
        assert!(error("a").contains("'a'"));
    }

    #[test]
    fn a_thread_pinned_to_one_allowed_cpu_reports_only_that_cpu() {
        let first = allowed_cpus().unwrap()[0];
        std::thread::spawn(move || {
            pin_current_thread(&[first]).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![first]);
        })
        .join()
        .unwrap();
    }
}
