//! Unit tests of `pod_in_place`.

use super::*;

fn set(cpus: &[u32]) -> BTreeSet<u32> {
    cpus.iter().copied().collect()
}

#[test]
fn the_pools_cpus_are_taken_within_what_the_kubelet_gave_the_container() {
    let mut container = ContainerInPlace {
        cpuset_file: None,
        freezer_state: None,
        base: BTreeSet::new(),
        recorded: false,
        written: None,
        joined: false,
    };
    assert_eq!(
        container.wanted(&set(&[2, 3])),
        set(&[2, 3]),
        "empty base: inherits"
    );
    container.base = set(&[0, 1, 2]);
    assert_eq!(container.wanted(&set(&[2, 3])), set(&[2]));
    assert_eq!(
        container.wanted(&set(&[5])),
        set(&[5]),
        "nothing shared: the pool's own, for the kernel to refuse and the log to say"
    );
}

#[test]
fn new_values_contest_a_pod_sooner_than_restatements_and_a_minute_forgets() {
    let start = Instant::now();
    let mut rewrites = VecDeque::new();
    let at = |s: u64| start + Duration::from_secs(s);
    // The runtime restating a container's CPUs at each update, and two resizes: no contest.
    rewrites.extend([
        (at(0), false),
        (at(1), false),
        (at(2), true),
        (at(3), false),
    ]);
    rewrites.push_back((at(4), true));
    assert_eq!(contested(&mut rewrites, at(4)), None);
    // A fourth and fifth new value within the minute: another agent.
    rewrites.extend([(at(5), true), (at(6), true)]);
    assert_eq!(
        contested(&mut rewrites, at(6)).as_deref(),
        Some("4 rewrites within 60 s")
    );
    // A minute later the old ones are forgotten.
    assert_eq!(contested(&mut rewrites, at(64)), None);
    // Restating every second: contested at the eleventh.
    let mut restated = VecDeque::new();
    for s in 0..10 {
        restated.push_back((at(100 + s), false));
        assert_eq!(contested(&mut restated, at(100 + s)), None);
    }
    restated.push_back((at(110), false));
    assert_eq!(
        contested(&mut restated, at(110)).as_deref(),
        Some("11 rewrites within 60 s, 11 of them restating the kubelet's CPUs")
    );
}

#[test]
fn states_read_as_status_says_them() {
    assert_eq!(PodState::Enforced.to_string(), "enforced");
    assert!(
        PodState::Exclusive("main: 2-3".to_owned())
            .to_string()
            .contains("exclusive CPUs (main: 2-3)")
    );
}
