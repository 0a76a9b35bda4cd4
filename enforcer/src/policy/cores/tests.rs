//! Unit tests of `cores`.

use super::*;
use crate::config::OnlinePool;

const MS: u64 = 1_000_000;

/// An online pool guaranteed `min_cores`.
fn online(min_cores: usize) -> PoolKind {
    PoolKind::Online(OnlinePool {
        min_cores,
        slo_ms: None,
        cpu_weight: 50,
        min_cpu_weight: 10,
    })
}

fn config() -> PolicySettings {
    PolicySettings {
        demand_window_ns: 1000 * MS,
        give_back_after_ns: 2000 * MS,
        headroom_cpus: 0.25,
        training_cores_share: 0.0,
        pause_offline_when_training_short: false,
        harvest: None,
    }
}

fn pools() -> Vec<PoolSpec> {
    vec![
        PoolSpec {
            name: "web".into(),
            kind: online(1),
        },
        PoolSpec {
            name: "batch".into(),
            kind: PoolKind::Offline,
        },
    ]
}

/// Replays (time ms, demand) samples; returns the reserved core count after each.
fn replay(policy: &mut Policy, trace: &[(u64, f64)]) -> Vec<usize> {
    trace
        .iter()
        .map(|&(ms, demand)| {
            policy.observe_demand(ms * MS, demand);
            policy.allocation().training.len()
        })
        .collect()
}

/// A window's worth of 100 ms ticks at `demand`, ending at `end_ms`: the estimate is then
/// `demand` (clamped to the machine).
fn settle(policy: &mut Policy, end_ms: u64, demand: f64) {
    for ms in (end_ms.saturating_sub(1000)..=end_ms).step_by(100) {
        policy.observe_demand(ms * MS, demand);
    }
}

/// 100 ms ticks from `from` (in ticks) to `to`, excluded, at `demand`.
fn ticks(from: u64, to: u64, demand: f64) -> impl Iterator<Item = (u64, f64)> {
    (from..to).map(move |i| (i * 100, demand))
}

#[test]
fn demand_rise_is_taken_within_half_a_window_and_the_fall_at_once_after_the_hold() {
    let mut policy = Policy::new(config(), Topology::flat(8), pools());
    // 1 s idle, a 3.2-CPU level for 2 s, idle for 6 s.
    let trace: Vec<(u64, f64)> = ticks(0, 10, 0.0)
        .chain(ticks(10, 30, 3.2))
        .chain(ticks(30, 90, 0.0))
        .collect();
    let reserved = replay(&mut policy, &trace);
    assert_eq!(reserved[9], 0, "nothing reserved while idle");
    // The window holds 11 ticks: the sixth at the new level moves the median.
    assert_eq!(reserved[14], 0, "{reserved:?}");
    assert_eq!(reserved[15], 4, "ceil(3.2 + 0.25) cores: {reserved:?}");
    assert!(reserved[15..35].iter().all(|&r| r == 4), "{reserved:?}");
    // The estimate falls half a window after the demand, and the cores go back a hold
    // later, all at once.
    let back = reserved.iter().rposition(|&r| r == 4).unwrap();
    assert!((54..=56).contains(&back), "{reserved:?}");
    assert!(reserved[back + 1..].iter().all(|&r| r == 0), "{reserved:?}");
}

#[test]
fn a_burst_above_the_level_reserves_nothing_for_itself() {
    let mut policy = Policy::new(config(), Topology::flat(16), pools());
    // The server's ResNet-50 job in miniature: a 3-CPU level, bursts of 13 every fourth
    // tick, and a long-slice artefact of 28 once.
    let mut trace: Vec<(u64, f64)> = (0..100)
        .map(|i| (i * 100, if i % 4 == 3 { 13.0 } else { 3.0 }))
        .collect();
    trace[50].1 = 28.1;
    let reserved = replay(&mut policy, &trace);
    assert!(reserved.iter().all(|&r| r == 4), "{reserved:?}");
    assert!(policy.estimate_cpus() <= 16.0);
}

#[test]
fn no_estimate_is_above_the_machine() {
    let mut policy = Policy::new(config(), Topology::flat(16), pools());
    settle(&mut policy, 1000, 28.1);
    assert_eq!(policy.estimate_cpus(), 16.0);
    assert_eq!(policy.allocation().training.len(), 15, "all but web's core");
}

#[test]
fn every_core_comes_back_after_training_stops() {
    let mut policy = Policy::new(config(), Topology::flat(4), pools());
    let trace: Vec<(u64, f64)> = ticks(0, 10, 2.5).chain(ticks(10, 60, 0.0)).collect();
    let reserved = replay(&mut policy, &trace);
    assert_eq!(reserved[9], 3);
    assert_eq!(*reserved.last().unwrap(), 0, "a core is held: {reserved:?}");
}

#[test]
fn many_unused_cores_go_back_in_one_step() {
    let mut policy = Policy::new(config(), Topology::flat(16), pools());
    // A level of 8 CPUs, then 2: nine cores, then three, in one decision after the hold.
    settle(&mut policy, 1000, 8.0);
    assert_eq!(policy.allocation().training.len(), 9);
    let decisions: Vec<Decision> = (11..60)
        .filter_map(|i| policy.observe_demand(i * 100 * MS, 2.0))
        .collect();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].training_cores_before, 9);
    assert_eq!(decisions[0].training_cores_after, 3);
}

#[test]
fn a_noisy_demand_around_a_core_boundary_does_not_oscillate() {
    let mut policy = Policy::new(config(), Topology::flat(8), pools());
    // Demand alternating 1.7 / 2.9 every 100 ms for 10 s.
    let trace: Vec<(u64, f64)> = (0..100)
        .map(|i| (i * 100, if i % 2 == 0 { 1.7 } else { 2.9 }))
        .collect();
    let reserved = replay(&mut policy, &trace);
    let changes = reserved.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        changes <= 2,
        "the grants changed {changes} times: {reserved:?}"
    );
    assert_eq!(*reserved.last().unwrap(), 4);
}

#[test]
fn contention_claims_the_core_at_once_and_holds_it() {
    let mut policy = Policy::new(config(), Topology::flat(4), pools());
    policy.observe_demand(0, 0.0);
    let decision = policy.contended(2).expect("a decision");
    assert_eq!(decision.trigger, Trigger::Contended { cpu: 2 });
    assert!(decision.allocation.training.contains(&2));
    assert!(!decision.allocation.pools["batch"].contains(&2));
    assert!(!decision.allocation.pools["web"].contains(&2));
    // The same CPU again changes nothing.
    assert!(policy.contended(2).is_none());
    // Low samples do not give it back within the hold, and do after it.
    let back = (1..40)
        .find(|i| policy.observe_demand(i * 100 * MS, 0.0).is_some())
        .expect("given back");
    assert!((21..=22).contains(&back), "given back after {back} ticks");
    assert!(policy.allocation().training.is_empty());
}

#[test]
fn contentions_spread_over_many_cpus_claim_one_core_above_the_estimate() {
    // The server's case: 16 CPUs, 2 guaranteed to online inference, a job at a level of
    // 3 CPUs whose threads are queued behind inference on every CPU within a second.
    let server_pools = vec![
        PoolSpec {
            name: "web".into(),
            kind: online(2),
        },
        PoolSpec {
            name: "batch".into(),
            kind: PoolKind::Offline,
        },
    ];
    let mut policy = Policy::new(config(), Topology::flat(16), server_pools);
    settle(&mut policy, 1000, 3.0);
    assert_eq!(policy.allocation().training.len(), 4);
    let claimed = (0..16)
        .filter(|&cpu| policy.contended(cpu).is_some())
        .count();
    assert_eq!(claimed, 1, "one core above ceil(3 + 0.25)");
    assert_eq!(policy.allocation().training.len(), 5);
    // With no demand yet, a contention still claims a core, and one more.
    let mut fresh = Policy::new(config(), Topology::flat(16), pools());
    let claimed = (0..16)
        .filter(|&cpu| fresh.contended(cpu).is_some())
        .count();
    assert_eq!(claimed, 2);
}

/// For every CPU: whether `contended` would decline there, on a copy of the policy.
fn declined_cpus(policy: &Policy) -> BTreeSet<u32> {
    policy
        .topology
        .cpus
        .iter()
        .copied()
        .filter(|&cpu| policy.clone().contended(cpu).is_none())
        .collect()
}

#[test]
fn the_sensor_is_quiet_exactly_where_contention_would_change_nothing() {
    // Six cores, one guaranteed to the online pool: training may take five, and the fast
    // path two while the estimate asks for none.
    let mut policy = Policy::new(config(), Topology::flat(6), pools());
    policy.observe_demand(0, 0.0);
    assert!(policy.quiet_cpus().is_empty(), "training holds nothing yet");
    let mut quiet_sizes = Vec::new();
    for cpu in [0, 1] {
        assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
        policy.contended(cpu).expect("a free core is taken");
        quiet_sizes.push(policy.quiet_cpus().len());
    }
    // At the fast path's limit a report from anywhere would change nothing.
    assert_eq!(quiet_sizes, [1, 6]);
    assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
    // A higher estimate raises the limit: the sensor speaks again off training's cores.
    settle(&mut policy, 1000, 2.0);
    assert_eq!(policy.allocation().training.len(), 3);
    assert_eq!(policy.quiet_cpus().len(), 3);
    assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));

    // Every core guaranteed to online pools: no report could ever be acted on.
    let all_online = vec![PoolSpec {
        name: "web".into(),
        kind: online(2),
    }];
    let policy = Policy::new(config(), Topology::flat(2), all_online);
    assert_eq!(policy.quiet_cpus(), BTreeSet::from([0, 1]));
    assert_eq!(policy.quiet_cpus(), declined_cpus(&policy));
}

#[test]
fn online_minimum_is_guaranteed_and_offline_keeps_off_training_with_no_free_core() {
    let mut policy = Policy::new(config(), Topology::flat(4), pools());
    policy.observe_demand(0, 10.0);
    let allocation = policy.allocation();
    assert_eq!(
        allocation.training.len(),
        3,
        "all but the online pool's guaranteed core"
    );
    assert_eq!(allocation.pools["web"].len(), 1);
    assert!(allocation.pools["web"].is_disjoint(&allocation.training));
    // No free core left: offline shares the online pool's core under cpu.idle, and only
    // that one.
    assert_eq!(allocation.pools["batch"], allocation.pools["web"]);
    // Where the operator chose offline throughput, it shares every core, training's too.
    let sharing = PolicySettings {
        training_cores_share: 1.0,
        ..config()
    };
    let mut shared = Policy::new(sharing, Topology::flat(4), pools());
    shared.observe_demand(0, 10.0);
    assert_eq!(
        shared.allocation().pools["batch"],
        (0..4).collect::<BTreeSet<u32>>()
    );
    // Training holding every core (no online pool): offline shares them all rather than
    // stop, still under cpu.idle.
    let offline_only = pools()
        .into_iter()
        .filter(|pool| pool.kind == PoolKind::Offline)
        .collect();
    let mut everything = Policy::new(config(), Topology::flat(4), offline_only);
    everything.observe_demand(0, 10.0);
    let all_training = everything.allocation();
    assert_eq!(all_training.training.len(), 4);
    assert_eq!(all_training.pools["batch"], all_training.training);
    // Contention on the online pool's own core cannot take it: the guarantee holds.
    let web_cpu = *allocation.pools["web"].iter().next().unwrap();
    assert!(policy.contended(web_cpu).is_none());
    assert_eq!(policy.allocation().pools["web"], allocation.pools["web"]);
}

#[test]
fn a_part_time_share_puts_offline_on_trainings_cores_for_that_part_of_each_second() {
    // A quarter: offline on every CPU for the first 250 ms of each second, on the online
    // pool's core alone for the rest, each flip a decision that says so.
    let quarter = PolicySettings {
        training_cores_share: 0.25,
        ..config()
    };
    let mut policy = Policy::new(quarter, Topology::flat(4), pools());
    let all: BTreeSet<u32> = (0..4).collect();
    let mut on_training = Vec::new();
    let mut flips = 0;
    for tick in 0..30u64 {
        let decision = policy.observe_demand(tick * 100 * MS, 10.0);
        if let Some(Decision {
            trigger: Trigger::TrainingCoresShare { share },
            ..
        }) = decision
        {
            assert_eq!(share, 0.25);
            flips += 1;
        }
        let allocation = policy.allocation();
        assert_eq!(allocation.training.len(), 3);
        on_training.push(allocation.pools["batch"] == all);
    }
    // Ticks 0-2 of each 10 are the first 250 ms: 0, 100 and 200 ms.
    let expected: Vec<bool> = (0..30).map(|tick| tick % 10 < 3).collect();
    assert_eq!(on_training, expected);
    assert_eq!(
        flips, 5,
        "off at 300 ms, on at 1 s, off, on, off: the first tick grew training"
    );
    // The controller's level overrides it: none, then all of the time.
    policy.share_training_cores(0.0);
    assert_eq!(policy.allocation().pools["batch"].len(), 1);
    policy.share_training_cores(1.0);
    assert_eq!(policy.allocation().pools["batch"], all);
    assert!(
        policy.observe_demand(3000 * MS, 10.0).is_none(),
        "no flips at a share of 1"
    );
}

#[test]
fn offline_shares_the_online_cores_beside_the_free_ones_but_never_trainings() {
    // 16 CPUs, 8 guaranteed to online inference, training on 2: offline gets the 6 free
    // CPUs and the 8 online ones, where the kernel preempts it for online inference.
    let pools = vec![
        PoolSpec {
            name: "web".into(),
            kind: online(8),
        },
        PoolSpec {
            name: "batch".into(),
            kind: PoolKind::Offline,
        },
    ];
    let mut policy = Policy::new(config(), Topology::flat(16), pools);
    policy.observe_demand(0, 1.5);
    let allocation = policy.allocation();
    assert_eq!(allocation.training.len(), 2);
    assert_eq!(allocation.pools["web"].len(), 8);
    let batch = &allocation.pools["batch"];
    assert_eq!(batch.len(), 14);
    assert!(batch.is_superset(&allocation.pools["web"]));
    assert!(batch.is_disjoint(&allocation.training));
}

#[test]
fn an_online_slo_need_takes_free_cores_and_yields_them_to_training_but_not_the_minimum() {
    let mut policy = Policy::new(config(), Topology::flat(4), pools());
    policy.observe_demand(0, 0.0);
    assert_eq!(policy.allocation().pools["web"].len(), 1);
    // The workers need 3 cores: web grows to 3, offline keeps the one left (and shares
    // web's under SCHED_IDLE).
    let decision = policy.set_online_need("web", 3).expect("a decision");
    assert_eq!(
        decision.trigger,
        Trigger::OnlineNeed {
            pool: "web".into(),
            cores: 3
        }
    );
    let web = &decision.allocation.pools["web"];
    assert_eq!(web.len(), 3);
    let batch = &decision.allocation.pools["batch"];
    assert_eq!(batch.difference(web).count(), 1, "offline's own core");
    assert!(batch.is_superset(web), "offline does not share web's cores");
    assert!(policy.set_online_need("web", 3).is_none(), "no change");
    // Training wants 2 cores: they come out of web's extra cores, not its minimum.
    settle(&mut policy, 2000, 1.5);
    let allocation = policy.allocation();
    assert_eq!(allocation.training.len(), 2);
    assert_eq!(allocation.pools["web"].len(), 2);
    assert!(allocation.training.is_disjoint(&allocation.pools["web"]));
    // Training wants everything: web keeps its guaranteed core.
    settle(&mut policy, 4000, 10.0);
    let allocation = policy.allocation();
    assert_eq!(allocation.training.len(), 3);
    assert_eq!(allocation.pools["web"].len(), 1);
    // Offline pools state no need; an unknown pool neither.
    assert!(policy.set_online_need("batch", 4).is_none());
    assert!(policy.set_online_need("nope", 4).is_none());
}

#[test]
fn offline_pauses_while_training_is_short_and_resumes_first_after_the_hold() {
    let pausing = PolicySettings {
        pause_offline_when_training_short: true,
        ..config()
    };
    // Two cores, one guaranteed to the online pool: training may reserve one CPU.
    let mut policy = Policy::new(pausing, Topology::flat(2), pools());
    // 1 s at 0.6 CPUs, 2 s at 1.6 (more than the one it may have), then idle.
    let trace: Vec<(u64, f64)> = ticks(0, 10, 0.6)
        .chain(ticks(10, 30, 1.6))
        .chain(ticks(30, 150, 0.0))
        .collect();
    let states: Vec<(usize, bool)> = trace
        .iter()
        .map(|&(ms, demand)| {
            policy.observe_demand(ms * MS, demand);
            let allocation = policy.allocation();
            (allocation.training.len(), allocation.offline_paused)
        })
        .collect();
    assert_eq!(states[9], (1, false), "one core covers 0.6 + 0.25");
    assert_eq!(states[14], (1, false), "{states:?}");
    assert_eq!(
        states[15],
        (1, true),
        "short once the median is: {states:?}"
    );
    let paused_until = states.iter().rposition(|s| s.1).unwrap();
    let core_until = states.iter().rposition(|s| s.0 == 1).unwrap();
    // The pause outlasts the level by half a window and the hold, and goes before the
    // core does, a hold later.
    assert!(paused_until >= 29 + 5 + 20, "{states:?}");
    assert!(core_until >= paused_until + 20, "{states:?}");
    assert_eq!(*states.last().unwrap(), (0, false));
    // The offline pool keeps its CPUs while paused: it resumes where it was.
    let mut short = Policy::new(pausing, Topology::flat(2), pools());
    short.observe_demand(0, 1.6);
    let allocation = short.allocation();
    assert!(allocation.offline_paused);
    assert_eq!(allocation.pools["batch"], allocation.pools["web"]);

    // The same trace without the option never pauses.
    let mut policy = Policy::new(config(), Topology::flat(2), pools());
    assert!(replay(&mut policy, &trace).iter().all(|&cores| cores <= 1));
    assert!(!policy.allocation().offline_paused);
    // Demand that one core covers, with the headroom past it: no pause. Training is short
    // of its headroom, not of CPUs.
    let mut level = Policy::new(pausing, Topology::flat(2), pools());
    settle(&mut level, 1000, 0.95);
    assert_eq!(level.allocation().training.len(), 1);
    assert!(!level.allocation().offline_paused);
    // Training short of no core, with the option: no pause. Four cores, one online:
    // 2.6 + 0.25 wants three, all it may have.
    let mut roomy = Policy::new(pausing, Topology::flat(4), pools());
    roomy.observe_demand(0, 2.6);
    assert_eq!(roomy.allocation().training.len(), 3);
    assert!(!roomy.allocation().offline_paused);
}

#[test]
fn the_pause_lifted_by_the_pace_controller_ends_at_once_and_returns_when_restored() {
    let pausing = PolicySettings {
        pause_offline_when_training_short: true,
        ..config()
    };
    // Two cores, one online: training at 1.6 CPUs is short of the one it may reserve.
    let mut policy = Policy::new(pausing, Topology::flat(2), pools());
    policy.observe_demand(0, 1.6);
    assert!(policy.allocation().offline_paused);
    policy.pause_when_short(false);
    assert!(
        !policy.allocation().offline_paused,
        "lifted: offline runs now"
    );
    for ms in 1..=20 {
        policy.observe_demand(ms * 100 * MS, 1.6);
        assert!(!policy.allocation().offline_paused, "lifted, at {ms}00 ms");
    }
    // Tight but not short (the duty cycle's case): no pause either while lifted.
    let mut tight = Policy::new(pausing, Topology::flat(2), pools());
    tight.pause_when_short(false);
    for ms in 0..20 {
        tight.observe_demand(ms * 100 * MS, 0.95);
        assert!(!tight.allocation().offline_paused, "lifted, at {ms}00 ms");
    }
    // Restored: the next tick short of cores pauses again.
    policy.pause_when_short(true);
    policy.observe_demand(2_100 * MS, 1.6);
    assert!(policy.allocation().offline_paused);
}

#[test]
fn offline_runs_a_duty_cycle_while_training_fits_its_cores_but_not_its_headroom() {
    let pausing = PolicySettings {
        pause_offline_when_training_short: true,
        ..config()
    };
    // Two cores, one online: training may reserve one CPU. At 0.95 CPUs its estimate
    // fits, its 0.25 headroom does not: 0.2 of it is missing, so offline is paused for
    // 80% of each second.
    let mut policy = Policy::new(pausing, Topology::flat(2), pools());
    let mut paused = Vec::new();
    let mut decisions = Vec::new();
    for i in 0..50u64 {
        if let Some(decision) = policy.observe_demand(i * 100 * MS, 0.95) {
            decisions.push(decision);
        }
        paused.push(policy.allocation().offline_paused);
    }
    assert_eq!(policy.allocation().training.len(), 1);
    // In whole ticks of 100 ms: 0.2 s running is two or three of them.
    let share = paused[10..].iter().filter(|&&p| p).count() as f64 / 40.0;
    assert!((0.7..=0.8).contains(&share), "paused {share}: {paused:?}");
    // Runs first in each period, then pauses: a flip each way per second.
    let flips = paused.windows(2).filter(|w| w[0] != w[1]).count();
    assert!((8..=10).contains(&flips), "{flips} flips: {paused:?}");
    assert!(decisions.iter().any(|d| matches!(
        d.trigger,
        Trigger::OfflineDuty { paused_fraction } if (paused_fraction - 0.8).abs() < 1e-9
    )));
    assert!(decisions.iter().all(|d| d.training_cores_after == 1));

    // Where the headroom fits, or training may take more cores, no duty cycle.
    let mut fits = Policy::new(pausing, Topology::flat(2), pools());
    let mut roomy = Policy::new(pausing, Topology::flat(8), pools());
    for i in 0..20u64 {
        fits.observe_demand(i * 100 * MS, 0.7);
        roomy.observe_demand(i * 100 * MS, 0.95);
        assert!(!fits.allocation().offline_paused);
        assert!(!roomy.allocation().offline_paused);
    }
    // Without the pause, none either.
    let mut running = Policy::new(config(), Topology::flat(2), pools());
    for i in 0..20u64 {
        running.observe_demand(i * 100 * MS, 0.95);
        assert!(!running.allocation().offline_paused);
    }
}

#[test]
fn smt_siblings_are_reserved_together() {
    let topology = Topology {
        cpus: (0..4).collect(),
        cores: vec![BTreeSet::from([0, 2]), BTreeSet::from([1, 3])],
    };
    let mut policy = Policy::new(
        config(),
        topology,
        vec![PoolSpec {
            name: "batch".into(),
            kind: PoolKind::Offline,
        }],
    );
    let decision = policy.contended(2).expect("a decision");
    assert_eq!(decision.allocation.training, BTreeSet::from([0, 2]));
    assert_eq!(decision.allocation.pools["batch"], BTreeSet::from([1, 3]));
}
