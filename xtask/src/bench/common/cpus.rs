//! The machine's CPUs as the benchmarks count and split them.

/// The CPUs online: the whole machine, whatever this process's affinity, which is what the
/// benchmarks' groups and partitions divide.
pub(crate) fn machine_cpus() -> usize {
    reamer_tests::harness::online_cpu_count()
}

/// The upper half of the CPUs (at least one): where the static partition pins inference.
pub(crate) fn upper_half_cpus(cpus: usize) -> String {
    let first = cpus / 2;
    if first + 1 >= cpus {
        format!("{}", cpus - 1)
    } else {
        format!("{first}-{}", cpus - 1)
    }
}
