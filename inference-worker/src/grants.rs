//! Where the worker's CPUs come from: the enforcer's control socket (a subscription for its
//! pool), or a fixed list when it runs alone.
//!
//! The enforcer speaks JSON lines; a grant reads
//! `{"status":"grant","pool":"P","cpus":[2,3],"shrinking":false}`. `shrinking: true` comes
//! just before the pool's cpuset is rewritten, so the worker moves its threads first. The
//! enforcer accepts a subscription only from a process inside the pool's cgroup (it checks the
//! socket's peer credentials): start the worker with `enforcer launch --pool P -- …`.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    time::Duration,
};

use serde::Deserialize;

#[derive(Debug, Clone)]
pub enum GrantSource {
    Fixed(Vec<u32>),
    Enforcer { socket: PathBuf, pool: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Grant {
    pub cpus: Vec<u32>,
    #[serde(default)]
    pub shrinking: bool,
}

#[derive(Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Message {
    Grant(Grant),
    Error { message: String },
}

/// How long to wait before connecting again after the enforcer went away.
const RECONNECT: Duration = Duration::from_secs(1);

/// Waits for the first grant from the enforcer (up to `timeout`), then keeps following it on a
/// thread of its own, calling `apply` for every later grant. A fixed source grants once.
pub fn follow(
    source: &GrantSource,
    timeout: Duration,
    apply: impl Fn(&Grant) + Send + 'static,
) -> anyhow::Result<Grant> {
    let (socket, pool) = match source {
        GrantSource::Fixed(cpus) => {
            return Ok(Grant {
                cpus: cpus.clone(),
                shrinking: false,
            });
        }
        GrantSource::Enforcer { socket, pool } => (socket.clone(), pool.clone()),
    };
    let mut reader = subscribe(&socket, &pool)?;
    let first = next_grant(&mut reader, Some(timeout)).map_err(|e| {
        anyhow::anyhow!("no grant for pool '{pool}' from {}: {e}", socket.display())
    })?;
    std::thread::Builder::new()
        .name("grants".into())
        .spawn(move || {
            loop {
                match next_grant(&mut reader, None) {
                    Ok(grant) => apply(&grant),
                    Err(err) => {
                        tracing::warn!(
                            "lost the enforcer's grants ({err}); keeping the current CPUs and reconnecting"
                        );
                        loop {
                            std::thread::sleep(RECONNECT);
                            match subscribe(&socket, &pool) {
                                Ok(new) => {
                                    reader = new;
                                    break;
                                }
                                Err(err) => tracing::debug!("reconnecting: {err:#}"),
                            }
                        }
                    }
                }
            }
        })?;
    Ok(first)
}

fn subscribe(socket: &PathBuf, pool: &str) -> anyhow::Result<BufReader<UnixStream>> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        anyhow::anyhow!(
            "cannot reach the enforcer at {}: {e}; run the worker without --enforcer-socket \
             (and with --cpus) when no enforcer runs",
            socket.display()
        )
    })?;
    let request = serde_json::json!({"op": "subscribe", "pool": pool});
    writeln!(stream, "{request}")?;
    Ok(BufReader::new(stream))
}

fn next_grant(
    reader: &mut BufReader<UnixStream>,
    timeout: Option<Duration>,
) -> anyhow::Result<Grant> {
    reader.get_ref().set_read_timeout(timeout)?;
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        anyhow::bail!("the enforcer closed the connection");
    }
    match serde_json::from_str::<Message>(&line) {
        Ok(Message::Grant(grant)) if !grant.cpus.is_empty() => Ok(grant),
        Ok(Message::Grant(_)) => anyhow::bail!("the enforcer granted no CPU"),
        Ok(Message::Error { message }) => anyhow::bail!("the enforcer refused: {message}"),
        Err(err) => anyhow::bail!(
            "unexpected message from the enforcer ({err}): {}",
            line.trim()
        ),
    }
}
