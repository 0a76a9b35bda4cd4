//! Whether this machine's cgroups can hold the inference pools: the controllers the enforcer
//! writes (cpu, cpuset; the freezer on v1, where it is a controller of its own), in the mode
//! the host runs, whether this process may create groups in them, and how to get what is
//! missing. `enforcer check` prints it, and the daemon refuses to start with pools it could
//! not create, before it loads anything.

use std::path::Path;

use super::preflight::{fs_magic, read_trimmed};

/// statfs(2) magic of a cgroup2 mount (include/uapi/linux/magic.h).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// What the pools would miss here, and how to get it.
#[derive(Debug, thiserror::Error)]
pub enum CgroupUnsupported {
    #[error("cgroup v2 without the {} controller(s): {}", missing.join(", "), why.join("; "))]
    V2Controllers {
        missing: Vec<&'static str>,
        /// For each, why the kernel does not offer it and how to change that.
        why: Vec<String>,
    },
    #[error("cgroup v1 without the {} hierarchy: mount it", .0.join(", "))]
    V1Hierarchies(Vec<&'static str>),
    #[error(
        "this process cannot create groups in {}: run it as root with CAP_DAC_OVERRIDE \
         (deploy/enforcer.service grants it)",
        .0.join(", ")
    )]
    NotWritable(Vec<String>),
    #[error("cgroup v1 without cpu.idle (kernel 5.15+): offline pools cannot be made idle")]
    NoCpuIdle,
}

/// What the pools have to work with, or what is missing and how to fix it.
pub(crate) fn cgroup_support() -> Result<String, CgroupUnsupported> {
    if fs_magic(Path::new(CGROUP_ROOT)) == Some(CGROUP2_SUPER_MAGIC) {
        let controllers =
            read_trimmed(&format!("{CGROUP_ROOT}/cgroup.controllers")).unwrap_or_default();
        let missing: Vec<&str> = ["cpu", "cpuset"]
            .into_iter()
            .filter(|c| !controllers.split(' ').any(|x| x == *c))
            .collect();
        if missing.is_empty() {
            require_writable(&[CGROUP_ROOT])?;
            return Ok(format!("cgroup v2 (controllers: {controllers})"));
        }
        let proc_cgroups = read_trimmed("/proc/cgroups").unwrap_or_default();
        let why: Vec<String> = missing
            .iter()
            .map(|c| why_missing_from_v2(c, &proc_cgroups))
            .collect();
        return Err(CgroupUnsupported::V2Controllers { missing, why });
    }
    let missing: Vec<&str> = ["cpu", "cpuset", "freezer"]
        .into_iter()
        .filter(|c| !Path::new(&format!("{CGROUP_ROOT}/{c}/cgroup.procs")).exists())
        .collect();
    if !missing.is_empty() {
        return Err(CgroupUnsupported::V1Hierarchies(missing));
    }
    let roots = ["cpu", "cpuset", "freezer"].map(|c| format!("{CGROUP_ROOT}/{c}"));
    require_writable(&roots.each_ref().map(String::as_str))?;
    let idle = Path::new(&format!("{CGROUP_ROOT}/cpu/cpu.idle")).exists();
    let hybrid = Path::new(&format!("{CGROUP_ROOT}/unified")).exists();
    match idle {
        true => Ok(format!(
            "cgroup v1{} with cpu, cpuset, freezer; cpu.idle supported",
            if hybrid { " (hybrid)" } else { "" }
        )),
        false => Err(CgroupUnsupported::NoCpuIdle),
    }
}

/// The daemon creates its groups at the top of each hierarchy it writes. Root alone may not be
/// enough: where a cgroup v1 hierarchy's root is a read-only directory (mode 555, as on the
/// development VM), only CAP_DAC_OVERRIDE lets root create a directory there, and a service
/// with a reduced capability set would otherwise fail at its first pool instead of here.
fn require_writable(roots: &[&str]) -> Result<(), CgroupUnsupported> {
    let denied: Vec<String> = roots
        .iter()
        .filter(|r| !writable(r))
        .map(|r| (*r).to_owned())
        .collect();
    if denied.is_empty() {
        return Ok(());
    }
    Err(CgroupUnsupported::NotWritable(denied))
}

/// Whether this process, with its effective ids and capabilities, may write in `dir`.
fn writable(dir: &str) -> bool {
    let Ok(path) = std::ffi::CString::new(dir) else {
        return false;
    };
    // SAFETY: a valid C string; AT_EACCESS checks with the effective credentials, as mkdir(2)
    // will.
    unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// Why `controller` is not offered at the cgroup2 root, from /proc/cgroups (columns:
/// subsys_name, hierarchy, num_cgroups, enabled; hierarchy 0 is the cgroup2 one).
fn why_missing_from_v2(controller: &str, proc_cgroups: &str) -> String {
    let row = proc_cgroups
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&controller));
    match row.as_deref() {
        Some([_, hierarchy, _, enabled, ..]) if *enabled == "0" => format!(
            "{controller} is disabled at boot (hierarchy {hierarchy}): remove \
             cgroup_disable={controller} from the kernel command line"
        ),
        Some([_, hierarchy, ..]) if *hierarchy != "0" => format!(
            "{controller} is bound to cgroup v1 hierarchy {hierarchy}: run the enforcer with \
             that v1 hierarchy as /sys/fs/cgroup/{controller}, or boot with \
             cgroup_no_v1={controller} so that cgroup2 gets it"
        ),
        Some(_) => format!(
            "{controller} is free but not offered at the root: check \
             /sys/fs/cgroup/cgroup.controllers"
        ),
        None => format!(
            "this kernel has no {controller} controller (CONFIG_CGROUP_SCHED, CONFIG_CPUSETS)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This host's /proc/cgroups: hybrid, cpu and cpuset on v1 hierarchies.
    const HYBRID: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
                          cpuset\t3\t2\t1\ncpu\t1\t4\t1\nfreezer\t6\t2\t1\nhugetlb\t0\t2\t1\n";

    #[test]
    fn a_controller_bound_to_v1_says_which_hierarchy_and_how_to_free_it() {
        let why = why_missing_from_v2("cpu", HYBRID);
        assert!(why.contains("bound to cgroup v1 hierarchy 1"), "{why}");
        assert!(why.contains("cgroup_no_v1=cpu"), "{why}");
    }

    #[test]
    fn a_controller_disabled_at_boot_names_the_kernel_parameter() {
        let why = why_missing_from_v2("cpuset", "#h\ncpuset\t0\t1\t0\n");
        assert!(why.contains("cgroup_disable=cpuset"), "{why}");
    }

    #[test]
    fn a_controller_the_kernel_lacks_names_the_config_options() {
        let why = why_missing_from_v2("cpuset", "#h\ncpu\t0\t1\t1\n");
        assert!(why.contains("no cpuset controller"), "{why}");
    }
}
