//! A failure the daemon cannot go on from ends it, loudly, and leaves nothing frozen: a panic
//! in any thread or task, or the event path lost. Before, a panic in a request's task or in the
//! event thread was swallowed, and the daemon stayed half-alive with a poisoned lock, which
//! `Restart=on-failure` never sees. Now the process exits with `EXIT_FATAL`, the service
//! manager starts the next daemon, and that one adopts the pins, the pools and the launched
//! jobs as after any crash.

use tracing::error;

use crate::actuate::freezer;

/// The exit status of a daemon that failed (EX_SOFTWARE).
pub(crate) const EXIT_FATAL: i32 = 70;

/// From now on, a panic anywhere in the process thaws `instance`'s pools and exits.
pub(crate) fn exit_on_panic(instance: &str) {
    let instance = instance.to_owned();
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        exit(&instance, &format!("a panic: {info}"));
    }));
}

/// Ends the daemon after `why`: thaws every pool of `instance` and every pod container a pool
/// froze first, without a lock (the
/// panicking thread may hold any of them), then exits with `EXIT_FATAL`. The next daemon
/// restores the rest.
pub(crate) fn exit(instance: &str, why: &str) -> ! {
    let thawed = freezer::thaw_instance(instance) + freezer::thaw_members();
    error!(
        thawed_pools = thawed,
        "the daemon cannot go on after {why}: exiting"
    );
    eprintln!("enforcer: the daemon cannot go on after {why}: exiting ({thawed} pools thawed)");
    std::process::exit(EXIT_FATAL);
}
