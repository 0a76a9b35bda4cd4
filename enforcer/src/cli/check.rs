//! `enforcer check`: a preflight report of what the enforcer needs from this machine, each
//! line saying what is missing and how to fix it. Exit status 1 if anything required is.

use std::path::Path;

use crate::{
    actuate::thread_policy,
    config::{SensorClock, gpu::MPS_CONTROL_PROGRAM},
    host::{
        cgroup_support::cgroup_support,
        paths,
        preflight::{BPF_FS_MAGIC, TRACEFS_MAGIC, fs_magic, read_trimmed as read},
    },
    sensor::{btf::Btf, object, offsets},
};

/// A check's finding as the report prints it: what is there (Ok), or what is missing and how
/// to get it (Err). Both are only ever printed.
type Finding = Result<String, String>;

/// One line of the report.
pub(crate) struct Item {
    pub name: &'static str,
    pub ok: bool,
    /// Optional items only warn.
    pub required: bool,
    pub detail: String,
}

fn item(name: &'static str, required: bool, result: Finding) -> Item {
    match result {
        Ok(detail) => Item {
            name,
            ok: true,
            required,
            detail,
        },
        Err(detail) => Item {
            name,
            ok: false,
            required,
            detail,
        },
    }
}

/// CAP_SYS_NICE's bit in the capability sets: real-time policies and other threads' policies.
const CAP_SYS_NICE: u32 = 23;

/// Effective capability bits of this process.
fn effective_caps() -> u64 {
    read("/proc/self/status")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn kernel() -> Finding {
    let release = read("/proc/sys/kernel/osrelease").ok_or("cannot read the kernel release")?;
    let mut parts = release
        .split(['.', '-'])
        .filter_map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) >= (5, 18) {
        Ok(release)
    } else {
        Err(format!(
            "{release}: the sensor needs 5.18+ (sched_switch passes prev_state) and cpu.idle needs 5.15+"
        ))
    }
}

/// The clock the checks assume: the config's default.
const DEFAULT_CLOCK: SensorClock = SensorClock::RunQueue;

fn btf() -> Finding {
    let btf = Btf::from_sys_fs().map_err(|e| e.to_string())?;
    let values = offsets::resolve(&btf, DEFAULT_CLOCK).map_err(|e| e.to_string())?;
    let shown: Vec<String> = values.iter().map(|(n, v)| format!("{n}={v}")).collect();
    Ok(format!(
        "/sys/kernel/btf/vmlinux; tracepoint prototypes match; {}; sensor clock by default: {}",
        shown.join(", "),
        offsets::clock_in_use(&values, DEFAULT_CLOCK)
    ))
}

fn privileges() -> Finding {
    // CAP_SYS_ADMIN 21, CAP_PERFMON 38, CAP_BPF 39.
    let caps = effective_caps();
    let missing: Vec<&str> = [(21, "CAP_SYS_ADMIN"), (38, "CAP_PERFMON"), (39, "CAP_BPF")]
        .into_iter()
        .filter(|(bit, _)| caps & (1 << bit) == 0)
        .map(|(_, name)| name)
        .collect();
    // SAFETY: no preconditions.
    let euid = unsafe { libc::geteuid() };
    match (euid, missing.is_empty()) {
        (0, true) => Ok("root with CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN".to_owned()),
        (0, false) => Err(format!(
            "root, but without {}: grant them to the service",
            missing.join(", ")
        )),
        _ => Err(format!(
            "uid {euid}: run `enforcer run` as root (sudo, or the systemd unit in deploy/)"
        )),
    }
}

/// Capabilities the daemon runs without, at a cost: each missing one is named with what it
/// costs.
fn optional_capabilities() -> Finding {
    // CAP_KILL 5.
    let caps = effective_caps();
    let missing: Vec<&str> = [
        (
            CAP_SYS_NICE,
            "CAP_SYS_NICE (the event thread stays SCHED_OTHER, with the shortest time slice: \
             reactions may wait behind busy CPUs; offline inference threads are not given \
             SCHED_OTHER back at shutdown)",
        ),
        (
            5,
            "CAP_KILL (GPU eviction cannot signal inference processes of other users)",
        ),
    ]
    .into_iter()
    .filter(|(bit, _)| caps & (1 << bit) == 0)
    .map(|(_, what)| what)
    .collect();
    match missing.is_empty() {
        true => Ok("CAP_SYS_NICE, CAP_KILL".to_owned()),
        false => Err(format!(
            "without {}: grant them (deploy/enforcer.service does)",
            missing.join(", ")
        )),
    }
}

/// Whether this process's cpu cgroup lets a thread run SCHED_FIFO, tried on a short-lived
/// thread of its own; where it does not, what the event thread does instead.
fn real_time() -> Finding {
    let tried = std::thread::spawn(|| thread_policy::fifo_or_shortest_slice(1))
        .join()
        .map_err(|_| "the probing thread panicked".to_owned())?;
    match tried {
        Ok(()) => Ok("SCHED_FIFO allowed here: the event thread runs real-time".to_owned()),
        // The `capabilities` line says what its absence costs.
        Err(_) if effective_caps() & (1 << CAP_SYS_NICE) == 0 => Err(
            "SCHED_FIFO refused: this process lacks CAP_SYS_NICE (see `capabilities`)".to_owned(),
        ),
        Err(thread_policy::Refused {
            err: refused,
            slice,
        }) => Err(format!(
            "SCHED_FIFO refused here ({refused}): with CONFIG_RT_GROUP_SCHED a cpu cgroup needs \
             real-time runtime (cgroup v1 `cpu.rt_runtime_us`, 0 below the root unless set; \
             cgroup v2: the root group only). The event thread then stays SCHED_OTHER {}; to \
             run it real-time, start the daemon in a group with real-time runtime",
            match slice {
                Ok(()) => "with the shortest time slice (0.1 ms)".to_owned(),
                Err(err) => format!("with the default time slice ({err})"),
            }
        )),
    }
}

fn program_types() -> Finding {
    let object = object::object()
        .ok_or("this binary was built without the eBPF object (AYA_BUILD_SKIP): rebuild it")?;
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("cannot try loading tp_btf programs without root".to_owned());
    }
    // With this kernel's offsets, as the daemon loads them: the verifier then checks every
    // field the programs read, the run-queue clock's included.
    let offsets = offsets::resolve(
        &Btf::from_sys_fs().map_err(|e| e.to_string())?,
        DEFAULT_CLOCK,
    )
    .map_err(|e| e.to_string())?;
    let mut ebpf = offsets::loader_with(&offsets)
        .load(object)
        .map_err(|e| format!("loading the object's maps: {e}"))?;
    let btf = aya::Btf::from_sys_fs().map_err(|e| e.to_string())?;
    for (name, tracepoint) in enforcer_common::maps::PROGRAMS {
        let program: &mut aya::programs::BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or(format!("no program {name}"))?
            .try_into()
            .map_err(|e| format!("{name}: {e}"))?;
        program
            .load(tracepoint, &btf)
            .map_err(|e| format!("{name} rejected: {e}"))?;
    }
    Ok("the five tp_btf sensor programs pass the verifier (loaded, not attached)".to_owned())
}

fn mounts() -> Finding {
    let mounted = |path: &str, magic| fs_magic(Path::new(path)) == Some(magic);
    let bpffs = mounted(paths::BPFFS, BPF_FS_MAGIC);
    let tracefs = mounted(paths::TRACEFS, TRACEFS_MAGIC);
    let state = |m: bool| {
        if m {
            "mounted"
        } else {
            "not mounted (`enforcer run` mounts it)"
        }
    };
    Ok(format!(
        "bpffs {}; tracefs {}",
        state(bpffs),
        state(tracefs)
    ))
}

/// NVML, the GPUs it sees, and whether the MPS control program is on PATH.
fn gpu() -> Finding {
    let telemetry = crate::gpu::telemetry::GpuTelemetry::open()
        .map_err(|reason| format!("GPU features disabled: {reason}; CPU enforcement unaffected"))?;
    let mps = crate::gpu::mps::MpsControl::new(MPS_CONTROL_PROGRAM, None);
    let mps_state = if mps.is_running() {
        "an MPS control daemon answers"
    } else {
        "no MPS control daemon answers (MPS limits off unless [gpu] mps = \"start\")"
    };
    Ok(format!(
        "{} GPU(s) through NVML, driver {}; {mps_state}",
        telemetry.device_count(),
        telemetry.driver_version()
    ))
}

/// Kubernetes, as the default config (`/etc/reamer/enforcer.toml`, else the built-in one)
/// has it: whether the daemon would follow the node's pods, and whether the kubelet's groups
/// and the CPU manager's checkpoint are where it would look. The API server is not contacted
/// (`enforcer pods` does).
fn kubernetes() -> Finding {
    use crate::{
        config::{Config, Machine},
        kubernetes::{cpu_manager::ExclusivePods, pod_cgroup::kubelet_hierarchy},
    };
    let default = Path::new(paths::DEFAULT_CONFIG);
    let config = match default.exists() {
        true => Config::load(default, Machine::This).map_err(|e| e.to_string())?,
        false => Config::default(),
    };
    let section = &config.kubernetes;
    if !section.is_enabled() {
        return Ok(
            "off: not in a pod ($KUBERNETES_SERVICE_HOST unset) and [kubernetes] enabled is not \
             true; pods are not followed"
                .to_owned(),
        );
    }
    let node = section.node_name().ok_or(
        "on, but no node name: set NODE_NAME (the downward API) or [kubernetes] node_name",
    )?;
    let (root, driver) = section
        .layout()
        .resolve(&kubelet_hierarchy())
        .map_err(|err| format!("on for node {node}, but {err}"))?;
    let exclusive = match ExclusivePods::read(&section.cpu_manager_state) {
        Ok(pods) if pods == ExclusivePods::default() => "no pod has exclusive CPUs".to_owned(),
        Ok(_) => "the CPU manager's exclusive pods are left alone".to_owned(),
        Err(err) => format!("the CPU manager's checkpoint cannot be read: {err}"),
    };
    Ok(format!(
        "on for node {node}: the kubelet's groups under {} ({driver:?} driver); {exclusive}",
        root.display()
    ))
}

/// Runs every check.
pub(crate) fn run_checks() -> Vec<Item> {
    vec![
        item("kernel", true, kernel()),
        item("btf", true, btf()),
        item("privileges", true, privileges()),
        item("capabilities", false, optional_capabilities()),
        item("real time", false, real_time()),
        item("program types", true, program_types()),
        item("mounts", true, mounts()),
        item("cgroups", true, cgroup_support().map_err(|e| e.to_string())),
        item("gpu", false, gpu()),
        item("kubernetes", false, kubernetes()),
    ]
}

/// Prints the report; Err if anything required is missing.
pub(crate) fn report() -> anyhow::Result<()> {
    let items = run_checks();
    for item in &items {
        let mark = match (item.ok, item.required) {
            (true, _) => "ok     ",
            (false, true) => "MISSING",
            (false, false) => "note   ",
        };
        println!("{mark} {:<14} {}", item.name, item.detail);
    }
    let missing = items.iter().filter(|i| i.required && !i.ok).count();
    if missing > 0 {
        anyhow::bail!("{missing} requirement(s) missing: see the lines marked MISSING");
    }
    Ok(())
}
