//! `enforcer launch`: runs a command as part of a training job or an inference pool.
//!
//! The launcher registers its own pid with the daemon and then execs the command, so the
//! command keeps that pid and is classified before its first instruction; its threads and
//! children are classified by the sensor at fork.

pub(crate) mod identity;
pub(crate) mod notify;
pub(crate) mod supervise;

use std::{os::unix::process::CommandExt as _, path::Path};

use anyhow::Context as _;
use enforcer_common::protocol::{GroupKind, POOL_ENV, Request, Response, SOCKET_ENV};

use super::client::{Client, ClientError};

/// Registers this process; returns the environment the daemon wants the command to start
/// with (a GPU pool's MPS limits; for training, where the MPS control daemon listens).
pub(crate) async fn register_self(
    socket: &Path,
    kind: GroupKind,
    name: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut client = Client::connect(socket).await?;
    let request = Request::Register {
        kind,
        name: name.to_owned(),
        pid: std::process::id(),
    };
    match client.call(&request).await? {
        Response::Registered { env, .. } => Ok(env),
        other => Err(ClientError::Unexpected(Box::new(other)).into()),
    }
}

/// Replaces this process with `command`, with `envs` added, as `identity` where one is given.
/// Returns only on failure.
pub(crate) fn exec(
    command: &[String],
    envs: &[(&str, &str)],
    identity: Option<&identity::Identity>,
) -> anyhow::Error {
    let Some((program, args)) = command.split_first() else {
        return anyhow::anyhow!("no command given after `--`");
    };
    let mut process = std::process::Command::new(program);
    process.args(args).envs(envs.iter().copied());
    if let Some(identity) = identity {
        identity.apply(&mut process);
    }
    let err = process.exec();
    anyhow::Error::new(err).context(format!("cannot execute {program:?}"))
}

/// Registers, then execs (as `identity`, where one is given).
pub(crate) fn run(
    socket: &Path,
    kind: GroupKind,
    name: &str,
    command: &[String],
    identity: Option<&identity::Identity>,
) -> anyhow::Result<()> {
    if command.is_empty() {
        anyhow::bail!("no command given: use `enforcer launch --training NAME -- CMD [ARGS...]`");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let daemon_env = runtime.block_on(register_self(socket, kind, name))?;
    // The runtime's threads must be gone before exec; a current-thread runtime has none.
    drop(runtime);
    let socket = socket.to_string_lossy();
    let mut envs = vec![(SOCKET_ENV, socket.as_ref())];
    if kind == GroupKind::Pool {
        envs.push((POOL_ENV, name));
    }
    envs.extend(
        daemon_env
            .iter()
            .filter(|(key, _)| !keeps_its_own(kind, key, |k| std::env::var_os(k).is_some()))
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    Err(exec(command, &envs, identity))
}

/// Whether the command keeps its own value of `key` over the daemon's. A pool's worker takes
/// the daemon's (its MPS limits are the pool's); training keeps what its environment set: one
/// that names its MPS control daemon on purpose reaches that one.
fn keeps_its_own(kind: GroupKind, key: &str, is_set: impl Fn(&str) -> bool) -> bool {
    kind == GroupKind::Training && is_set(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_keeps_its_own_environment_and_a_pool_takes_the_daemons() {
        let set = |key: &str| key == "CUDA_MPS_PIPE_DIRECTORY";
        let unset = |_: &str| false;
        assert!(keeps_its_own(
            GroupKind::Training,
            "CUDA_MPS_PIPE_DIRECTORY",
            set
        ));
        assert!(!keeps_its_own(
            GroupKind::Training,
            "CUDA_MPS_PIPE_DIRECTORY",
            unset
        ));
        assert!(!keeps_its_own(
            GroupKind::Pool,
            "CUDA_MPS_PIPE_DIRECTORY",
            set
        ));
    }
}
