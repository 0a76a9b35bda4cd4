//! `enforcer relaunch --pool P`: asks the daemon to have the pool's relaunching launchers
//! start their command anew, and says which launchers will.

use std::path::Path;

use enforcer_common::protocol::{Request, Response};

use super::client::{Client, ClientError};
use crate::daemon::relaunch_board::WATCH_EVERY;

pub(crate) async fn run(socket: &Path, pool: &str) -> anyhow::Result<()> {
    let mut client = Client::connect(socket).await?;
    let request = Request::Relaunch {
        pool: pool.to_owned(),
    };
    match client.call(&request).await? {
        Response::Relaunching {
            pool,
            generation,
            launchers,
        } => {
            let pids: Vec<String> = launchers.iter().map(u32::to_string).collect();
            println!(
                "pool {pool}: {} launcher(s) (pid {}) relaunch their command within {} ms \
                 (generation {generation}); each logs `relaunched` once the new command runs",
                launchers.len(),
                pids.join(", "),
                WATCH_EVERY.as_millis()
            );
            Ok(())
        }
        other => Err(ClientError::Unexpected(Box::new(other)).into()),
    }
}
