//! The contract between the compiled eBPF object and userspace, checked without privilege:
//! program names, map names (the kernel keeps 15 characters), map shapes and value sizes
//! against the shared `#[repr(C)]` types, and where the maps are pinned.

use std::mem::size_of;

use enforcer::sensor::object::object;
use enforcer_common::{
    CpuState, EVENTS_RING_BYTES, JobStats, MAX_CPUS, MAX_JOBS, MAX_POOL_THREADS, MAX_THREADS,
    NR_COUNTERS, Settings, TaskCache, ThreadState, maps,
};

/// BPF_MAP_TYPE_TASK_STORAGE and BPF_F_NO_PREALLOC, which the kernel requires of it.
const MAP_TYPE_TASK_STORAGE: u32 = 29;
const F_NO_PREALLOC: u32 = 1;

/// Kernel object names hold 15 characters and a NUL (BPF_OBJ_NAME_LEN).
const KERNEL_NAME_MAX: usize = 15;

fn parsed() -> aya_obj::Object {
    let bytes = object().expect(
        "the eBPF object is empty: this build used AYA_BUILD_SKIP; build with `cargo xtask test`",
    );
    aya_obj::Object::parse(bytes).expect("the eBPF object parses")
}

#[test]
fn object_has_every_program_with_a_kernel_sized_name() {
    let object = parsed();
    for (name, _) in maps::PROGRAMS {
        assert!(
            object.programs.contains_key(name),
            "program {name} missing; have {:?}",
            object.programs.keys()
        );
        assert!(
            name.len() <= KERNEL_NAME_MAX,
            "program name {name} is truncated by the kernel"
        );
    }
    let mut calibration: Vec<&str> = maps::CALIBRATION_PROGRAMS.to_vec();
    calibration.extend(maps::FLOOR_PROGRAMS.map(|(name, _)| name));
    calibration.sort_unstable();
    calibration.dedup();
    for name in &calibration {
        assert!(
            object.programs.contains_key(*name),
            "calibration program {name} missing"
        );
        assert!(
            name.len() <= KERNEL_NAME_MAX,
            "program name {name} is truncated by the kernel"
        );
    }
    assert_eq!(
        object.programs.len(),
        maps::PROGRAMS.len() + calibration.len(),
        "{:?}",
        object.programs.keys()
    );
}

#[test]
fn the_floor_has_a_no_op_on_every_tracepoint_the_sensor_uses_and_only_there() {
    let tracepoints = |programs: [(&'static str, &'static str); 5]| programs.map(|(_, tp)| tp);
    assert_eq!(
        tracepoints(maps::FLOOR_PROGRAMS),
        tracepoints(maps::PROGRAMS)
    );
}

#[test]
fn maps_have_kernel_sized_names_and_shared_type_sizes() {
    let object = parsed();
    let expected: [(&str, usize, usize, u32); 9] = [
        (
            maps::THREAD_STATE,
            size_of::<u32>(),
            size_of::<ThreadState>(),
            MAX_THREADS,
        ),
        (
            maps::POOL_THREADS,
            size_of::<u32>(),
            size_of::<ThreadState>(),
            MAX_POOL_THREADS,
        ),
        (
            maps::JOB_STATS,
            size_of::<u32>(),
            size_of::<JobStats>(),
            MAX_JOBS,
        ),
        (
            maps::CPU_STATE,
            size_of::<u32>(),
            size_of::<CpuState>(),
            MAX_CPUS,
        ),
        (
            maps::COUNTERS,
            size_of::<u32>(),
            size_of::<u64>(),
            NR_COUNTERS,
        ),
        (maps::SETTINGS, size_of::<u32>(), size_of::<Settings>(), 1),
        (maps::CLASSIFY_GEN, size_of::<u32>(), size_of::<u64>(), 1),
        (maps::EVENTS, 0, 0, EVENTS_RING_BYTES),
        (
            maps::RESERVED_CPUS,
            size_of::<u32>(),
            size_of::<u32>(),
            MAX_CPUS,
        ),
    ];
    for (name, key_size, value_size, max_entries) in expected {
        assert!(
            name.len() <= KERNEL_NAME_MAX,
            "map name {name} is truncated by the kernel"
        );
        let map = object
            .maps
            .get(name)
            .unwrap_or_else(|| panic!("map {name} missing"));
        assert_eq!(map.key_size() as usize, key_size, "{name} key size");
        assert_eq!(map.value_size() as usize, value_size, "{name} value size");
        assert_eq!(map.max_entries(), max_entries, "{name} max entries");
    }
    for name in object.maps.keys() {
        // Sections such as .rodata and the aya-log ring are the loader's own, not ours.
        if name.starts_with('.') || name == "AYA_LOGS" || name == maps::TASK_CACHE {
            continue;
        }
        assert!(
            maps::ALL_MAPS.contains(&name.as_str()),
            "unexpected map {name}"
        );
    }
}

#[test]
fn every_offset_global_the_loader_sets_exists_in_the_object() {
    let bytes = object().expect("eBPF object built");
    let needle = |name: &str| bytes.windows(name.len()).any(|w| w == name.as_bytes());
    for name in maps::globals::ALL {
        assert!(needle(name), "global {name} is not in the object's symbols");
    }
}

#[test]
fn task_cache_is_task_storage_of_the_shared_type() {
    let object = parsed();
    let map = object
        .maps
        .get(maps::TASK_CACHE)
        .unwrap_or_else(|| panic!("map {} missing", maps::TASK_CACHE));
    assert_eq!(map.map_type(), MAP_TYPE_TASK_STORAGE);
    assert_eq!(map.map_flags() & F_NO_PREALLOC, F_NO_PREALLOC);
    assert_eq!(map.max_entries(), 0);
    // The key is the int (a pidfd) that syscalls pass; programs pass the task.
    assert_eq!(map.key_size() as usize, size_of::<i32>());
    assert_eq!(map.value_size() as usize, size_of::<TaskCache>());
    assert!(maps::TASK_CACHE.len() <= KERNEL_NAME_MAX);
}

/// The privileged tests look for a daemon's pins where the daemon puts them: the layout version
/// is spelled twice (the tests crate cannot depend on the enforcer), and a bump must change both.
#[test]
fn the_test_harness_finds_pins_where_the_daemon_puts_them() {
    assert_eq!(
        reamer_tests::harness::pin_dir_of("contract"),
        enforcer::host::paths::pin_dir("contract")
    );
}

/// Likewise for the decision log the tests and benchmarks read.
#[test]
fn the_test_harness_finds_the_decision_log_where_the_daemon_writes_it() {
    assert_eq!(
        reamer_tests::harness::decision_log_of("contract"),
        enforcer::host::paths::decision_log("contract")
    );
}
