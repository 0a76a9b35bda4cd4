//! Whose budget a control-socket peer spends, with real user namespaces: a user's processes
//! in namespaces of its own, mapped to uids of a subordinate range as rootless containers map
//! them, spend that one user's budget; a namespace root made has a budget of its own. Before,
//! each mapped uid was a user of its own, and 8 of them filled the budget every other user's
//! workers share. Privileged (root makes the maps): skips with a reason elsewhere (fails with
//! REAMER_REQUIRE_PRIVILEGED=1).

use std::time::{Duration, Instant};

use enforcer::{
    daemon::admission::{Admission, Refused},
    host::user_namespace::{Budget, budget_of},
};
use reamer_tests::harness::privileged;

/// The user whose namespaces the test makes, and the first uid of its subordinate range.
const USER: u32 = 1000;
const SUBORDINATE: u32 = 200_000;

/// A process in a user namespace of its own, killed and reaped when dropped.
struct InNamespace {
    pid: i32,
}

impl Drop for InNamespace {
    fn drop(&mut self) {
        // SAFETY: signals and reaps the test's own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

fn own_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/user").unwrap().ino()
}

fn namespace_of(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(format!("/proc/{pid}/ns/user"))
        .ok()
        .map(|m| m.ino())
}

/// The host uid `/proc/<pid>/status` gives the process.
fn uid_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A child that creates a user namespace as `creator` (root or `USER`), whose uid 0 root then
/// maps to host uid `mapped`, and that becomes that uid 0.
fn in_namespace(creator: u32, mapped: u32) -> InNamespace {
    let mut go = [0; 2];
    // SAFETY: a pipe for the child to wait on until its map is written.
    assert_eq!(unsafe { libc::pipe(go.as_mut_ptr()) }, 0);
    // SAFETY: the child calls only async-signal-safe functions, then pauses until killed.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: the child, before anything else runs in it.
        unsafe {
            let fail = || libc::_exit(1);
            if creator != 0
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(creator, creator, creator) != 0
                    || libc::setresuid(creator, creator, creator) != 0)
            {
                fail();
            }
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                fail();
            }
            let mut byte = 0u8;
            if libc::read(go[0], (&raw mut byte).cast(), 1) != 1 || libc::setresuid(0, 0, 0) != 0 {
                fail();
            }
            loop {
                libc::pause();
            }
        }
    }
    let child = InNamespace { pid };
    eventually("the child in a namespace of its own", || {
        namespace_of(pid).is_some_and(|ns| ns != own_namespace())
    });
    std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {mapped} 1\n"))
        .expect("root writes the child's uid map");
    // SAFETY: writes one byte to the pipe made above, then closes both ends here.
    unsafe {
        assert_eq!(libc::write(go[1], [1u8].as_ptr().cast(), 1), 1);
        libc::close(go[0]);
        libc::close(go[1]);
    }
    eventually("the child running as its mapped uid", || {
        uid_of(pid) == Some(mapped)
    });
    child
}

#[test]
fn a_users_namespaces_spend_its_budget_and_roots_namespaces_each_their_own() {
    if !privileged("a_users_namespaces_spend_its_budget_and_roots_namespaces_each_their_own") {
        return;
    }
    let admission = Admission::new(2, 512);
    let mut held = Vec::new();
    // Three of the user's containers, each running as a uid of its subordinate range.
    let children: Vec<InNamespace> = (0..3)
        .map(|n| in_namespace(USER, SUBORDINATE + 10 * n))
        .collect();
    for (n, child) in children.iter().enumerate() {
        let uid = uid_of(child.pid).unwrap();
        let who = budget_of(Some(uid), Some(child.pid));
        assert_eq!(who, Budget::User(USER), "uid {uid} runs for uid {USER}");
        let admitted = admission.admit(who);
        if n < 2 {
            held.push(admitted.expect("within the user's budget"));
        } else {
            let refused = admitted.unwrap_err();
            assert!(
                matches!(
                    refused,
                    Refused::User {
                        who: Budget::User(USER),
                        limit: 2
                    }
                ),
                "{refused}"
            );
        }
    }

    // Two namespaces root made (a runtime's, one per pod): a budget each, neither root's.
    let first = in_namespace(0, SUBORDINATE + 1_000);
    let second = in_namespace(0, SUBORDINATE + 2_000);
    let budgets = [first.pid, second.pid].map(|pid| budget_of(uid_of(pid), Some(pid)));
    assert!(
        matches!(budgets, [Budget::RootsNamespace(a), Budget::RootsNamespace(b)] if a != b),
        "{budgets:?}"
    );
    let me = std::process::id() as i32;
    assert_eq!(budget_of(Some(0), Some(me)), Budget::Root);
}
