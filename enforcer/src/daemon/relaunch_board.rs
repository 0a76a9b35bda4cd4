//! The daemon's side of relaunching: which launchers started with `--relaunch` watch which
//! pool, and each pool's relaunch generation, which `enforcer relaunch --pool P` raises.
//!
//! The launchers poll (`Request::Watch`, every `WATCH_EVERY`), so the daemon keeps no
//! connection per launcher and a launcher that dies simply stops being listed once it has
//! been silent for `GONE_AFTER`. Pure bookkeeping: the clock is passed in.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

/// How often a relaunching launcher asks the daemon what its pool's new workers start with.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(500);
/// A launcher silent this long no longer counts as watching: six missed polls.
pub(crate) const GONE_AFTER: Duration = Duration::from_secs(3);

/// Whether a launcher that last asked at `seen_ns` still counts at `now_ns`.
fn still_watching(seen_ns: u64, now_ns: u64) -> bool {
    now_ns.saturating_sub(seen_ns) < GONE_AFTER.as_nanos() as u64
}

#[derive(Debug, Default)]
struct PoolWatch {
    generation: u64,
    /// Launcher pid -> when it last asked, ns on the caller's clock.
    watchers: BTreeMap<u32, u64>,
}

/// A watch or a relaunch the board refuses.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RelaunchError {
    #[error(
        "no pool named {pool:?} in the daemon's config (pools: {})",
        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
    )]
    UnknownPool { pool: String, known: Vec<String> },
    #[error(
        "no launcher of pool {pool:?} was started with --relaunch (or none has asked the \
         daemon in the last {}s): only those can relaunch their command. Start workers with \
         `enforcer launch --pool {pool} --relaunch [--listen ADDR] -- CMD`",
        GONE_AFTER.as_secs()
    )]
    NoLauncher { pool: String },
}

#[derive(Debug)]
pub(crate) struct RelaunchBoard {
    pools: HashMap<String, PoolWatch>,
}

impl RelaunchBoard {
    /// A board for the daemon's configured pools; any other name is refused.
    pub(crate) fn new(pools: impl IntoIterator<Item = String>) -> Self {
        Self {
            pools: pools
                .into_iter()
                .map(|p| (p, PoolWatch::default()))
                .collect(),
        }
    }

    /// Launcher `pid` watches `pool`; answers the pool's relaunch generation.
    pub(crate) fn watch(
        &mut self,
        pool: &str,
        pid: u32,
        now_ns: u64,
    ) -> Result<u64, RelaunchError> {
        let watch = self.pool_mut(pool)?;
        watch.watchers.insert(pid, now_ns);
        Ok(watch.generation)
    }

    /// Raises `pool`'s generation, so that each of its watching launchers relaunches its
    /// command at its next poll; answers the new generation and those launchers' pids.
    /// Refused when no launcher watches: nothing would happen, and the operator should know.
    pub(crate) fn relaunch(
        &mut self,
        pool: &str,
        now_ns: u64,
    ) -> Result<(u64, Vec<u32>), RelaunchError> {
        let watch = self.pool_mut(pool)?;
        watch
            .watchers
            .retain(|_, seen| still_watching(*seen, now_ns));
        if watch.watchers.is_empty() {
            return Err(RelaunchError::NoLauncher {
                pool: pool.to_owned(),
            });
        }
        watch.generation += 1;
        Ok((watch.generation, watch.watchers.keys().copied().collect()))
    }

    /// `pool`'s generation and the launchers watching it now (none for an unknown pool).
    pub(crate) fn watching(&self, pool: &str, now_ns: u64) -> (u64, Vec<u32>) {
        self.pools.get(pool).map_or((0, Vec::new()), |watch| {
            let live = watch
                .watchers
                .iter()
                .filter(|(_, seen)| still_watching(**seen, now_ns))
                .map(|(pid, _)| *pid)
                .collect();
            (watch.generation, live)
        })
    }

    fn pool_mut(&mut self, pool: &str) -> Result<&mut PoolWatch, RelaunchError> {
        if !self.pools.contains_key(pool) {
            let mut known: Vec<String> = self.pools.keys().cloned().collect();
            known.sort_unstable();
            return Err(RelaunchError::UnknownPool {
                pool: pool.to_owned(),
                known,
            });
        }
        Ok(self.pools.get_mut(pool).expect("checked above"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn board() -> RelaunchBoard {
        RelaunchBoard::new(["serve".to_owned(), "batch".to_owned()])
    }

    #[test]
    fn a_relaunch_raises_the_generation_its_watchers_see_and_lists_them() {
        let mut board = board();
        assert_eq!(board.watch("serve", 10, 0), Ok(0));
        assert_eq!(board.watch("serve", 11, S), Ok(0));
        assert_eq!(board.relaunch("serve", 2 * S), Ok((1, vec![10, 11])));
        assert_eq!(board.watch("serve", 10, 2 * S), Ok(1));
        // Another pool's generation is its own.
        assert_eq!(board.watch("batch", 12, 2 * S), Ok(0));
    }

    #[test]
    fn a_pool_nobody_watches_is_refused_and_its_generation_stays() {
        let mut board = board();
        let refused = board.relaunch("serve", 0).unwrap_err().to_string();
        assert!(refused.contains("--relaunch"), "{refused}");
        assert_eq!(board.watch("serve", 10, 0), Ok(0));
    }

    #[test]
    fn a_launcher_silent_past_the_limit_no_longer_counts() {
        let mut board = board();
        board.watch("serve", 10, 0).unwrap();
        board.watch("serve", 11, 2 * S).unwrap();
        // pid 10 last asked 3 s before: gone; pid 11 is listed.
        assert_eq!(board.watching("serve", 3 * S), (0, vec![11]));
        assert_eq!(board.relaunch("serve", 3 * S), Ok((1, vec![11])));
        assert!(board.relaunch("serve", 6 * S).is_err());
    }

    #[test]
    fn an_unknown_pool_is_refused_with_the_known_ones() {
        let mut board = board();
        let refused = board.watch("srve", 1, 0).unwrap_err().to_string();
        assert!(refused.contains("\"srve\""), "{refused}");
        assert!(refused.contains("batch, serve"), "{refused}");
        assert!(board.relaunch("srve", 0).is_err());
    }
}
