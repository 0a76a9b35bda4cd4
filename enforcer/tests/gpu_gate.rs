//! The GPU duty cycle on real cgroups: a pool's process is frozen within one write of a
//! clamp, runs about its share of each period while gated, and is thawed when gating stops.
//! No GPU is needed: the freezer is the same for any process, and a frozen process issues no
//! kernels. Privileged: skips with a reason elsewhere (fails with REAMER_REQUIRE_PRIVILEGED=1).

use std::{
    collections::BTreeSet,
    process::{Child, Command},
    time::Duration,
};

use enforcer::{
    actuate::cgroup::{CpuClass, DEFAULT_CPU_WEIGHT, PoolCgroup, release_tree},
    gpu::duty_cycle::DutyCycle,
};
use reamer_tests::{
    harness::privileged,
    measure::proc_stats::{JIFFIES_PER_S, node_jiffies, process_jiffies},
};

mod support;

const INSTANCE: &str = "it-gpu-gate";

/// A busy shell loop, killed on drop: the stand-in for a GPU inference process.
struct Spinner(Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a spinner.
fn spin() -> Spinner {
    Spinner(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    )
}

/// CPUs the process used over `window`, per CPU the host left this VM. The hypervisor's steal
/// comes and goes within seconds here (a spinner measured 0.32 CPUs ungated in one run), and
/// the share of each period the gate lets the spinner run is only seen net of it. The
/// correction is rough: steal is counted for the whole VM, not for the spinner's vCPU.
fn cpus_over(pid: u32, window: Duration) -> f64 {
    let (before, node_before) = (process_jiffies(pid), node_jiffies().unwrap());
    std::thread::sleep(window);
    let used = (process_jiffies(pid) - before) as f64 / JIFFIES_PER_S / window.as_secs_f64();
    let steal_pct = node_jiffies().unwrap().steal_pct_since(&node_before);
    used / (1.0 - steal_pct / 100.0).max(0.05)
}

#[test]
fn the_duty_cycle_freezes_at_once_gates_to_its_share_and_thaws_at_stop() {
    if !privileged("the_duty_cycle_freezes_at_once_gates_to_its_share_and_thaws_at_stop") {
        return;
    }
    let class = CpuClass::Weight(DEFAULT_CPU_WEIGHT);
    let pool = PoolCgroup::create_or_adopt(INSTANCE, "gpu", class).expect("pool cgroup");
    let all: BTreeSet<u32> =
        (0..std::thread::available_parallelism().unwrap().get() as u32).collect();
    pool.set_cpus(&all).unwrap();
    let spinner = spin();
    let pid = spinner.0.id();
    pool.add_process(pid).unwrap();
    let freezer = pool.freezer().expect("the pool's freezer").clone();
    let gate = DutyCycle::start(vec![freezer.clone()], Duration::from_millis(100), 0).unwrap();

    let ungated = cpus_over(pid, Duration::from_millis(1000));
    gate.set(0.0);
    std::thread::sleep(Duration::from_millis(50));
    let frozen = cpus_over(pid, Duration::from_millis(500));
    gate.set(0.3);
    let gated = cpus_over(pid, Duration::from_millis(2000));
    let stats = gate.stats();
    gate.stop();
    let thawed_state = freezer.is_thawed().unwrap();
    let thawed = cpus_over(pid, Duration::from_millis(500));
    println!(
        "spinner CPUs, net of the host's steal: ungated {ungated:.2}, frozen {frozen:.2}, gated at 30% {gated:.2}, after \
         stop {thawed:.2}; {} freezes, last freeze write {:.0} µs",
        stats.freezes, stats.last_freeze_write_us
    );
    drop(spinner);
    pool.remove_if_empty();
    release_tree(INSTANCE).unwrap();

    assert!(
        ungated > 0.3,
        "the spinner did not run ungated: {ungated:.2}"
    );
    // One jiffy of slack: the freeze may land just after the window opens.
    assert!(
        frozen <= 0.02,
        "not frozen at a 0 run fraction: {frozen:.2} CPUs"
    );
    let share = gated / ungated;
    assert!(
        (0.1..=0.6).contains(&share),
        "gated at 30% of each 100 ms period, the spinner ran {:.0}% of its ungated rate",
        share * 100.0
    );
    // 20 periods were due; the cycles keep to the clock, so only a thread stalled for whole
    // periods (the host taking the VM's CPU) falls short.
    assert!(
        stats.freezes >= 15,
        "only {} freezes in 2 s at 100 ms",
        stats.freezes
    );
    assert!(thawed_state, "the pool's freezer is not thawed after stop");
    assert!(thawed > 0.3, "not running after stop: {thawed:.2} CPUs");
}

#[test]
fn a_pods_container_is_gated_and_paused_with_its_pool_and_thawed_when_it_leaves() {
    if !privileged("a_pods_container_is_gated_and_paused_with_its_pool_and_thawed_when_it_leaves") {
        return;
    }
    let instance = "it-gpu-gate-pod";
    let class = CpuClass::Weight(DEFAULT_CPU_WEIGHT);
    let pool = PoolCgroup::create_or_adopt(instance, "gpu", class).expect("pool cgroup");
    let freezer = pool.freezer().expect("the pool's freezer").clone();
    // The pod's container, where the kubelet would put it (not in the pool's group).
    let node = format!("reamer/{instance}-node");
    let container = format!("{node}/kubepods/besteffort/pod1/c1");
    support::kubelet_mkdir(&container);
    let spinner = spin();
    let pid = spinner.0.id();
    support::kubelet_move(pid, &container);
    freezer
        .add_member(std::path::Path::new(&container))
        .expect("joining the pool's freezer");

    let gate = DutyCycle::start(vec![freezer.clone()], Duration::from_millis(100), 0).unwrap();
    gate.set(0.0);
    std::thread::sleep(Duration::from_millis(50));
    let gated = cpus_over(pid, Duration::from_millis(500));
    gate.stop();
    let after_gate = cpus_over(pid, Duration::from_millis(500));
    freezer.set_paused(true).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let paused = cpus_over(pid, Duration::from_millis(500));
    // The pod leaves while its pool is paused: thawed, though the pool stays frozen.
    freezer
        .remove_member(std::path::Path::new(&container))
        .unwrap();
    let left = cpus_over(pid, Duration::from_millis(500));
    println!(
        "the pod's spinner, CPUs net of steal: gated {gated:.2}, after the gate {after_gate:.2}, \
         paused {paused:.2}, after leaving {left:.2}"
    );
    freezer.set_paused(false).unwrap();
    drop(spinner);
    std::thread::sleep(Duration::from_millis(100));
    for controller in support::hierarchies() {
        support::remove_tree(&support::dir(controller, &node));
    }
    pool.remove_if_empty();
    release_tree(instance).unwrap();

    assert!(gated <= 0.02, "not frozen by the gate: {gated:.2} CPUs");
    assert!(
        after_gate > 0.3,
        "not thawed after the gate: {after_gate:.2}"
    );
    assert!(paused <= 0.02, "not frozen by the pause: {paused:.2} CPUs");
    assert!(left > 0.3, "still frozen after leaving its pool: {left:.2}");
}
