//! `enforcer health`: exits 0 while the daemon's event path is alive, and 1, saying why, when it
//! is not or when no daemon answers in time. The Kubernetes probes run it. It asks over the
//! control socket, where root holds a budget of connections that no other user can take. An
//! HTTP probe of `/metrics` shares that server's connections with every client that can reach
//! the port, and unfinished requests from one of them held every slot, so that the kubelet
//! restarted a healthy daemon.

use std::{path::Path, process::ExitCode, time::Duration};

use enforcer_common::protocol::{Request, Response};

use super::client::{Client, ClientError};

pub(crate) async fn run(socket: &Path, timeout: Duration) -> anyhow::Result<ExitCode> {
    let asked = tokio::time::timeout(timeout, async {
        let mut client = Client::connect(socket).await?;
        client.call(&Request::Health).await
    })
    .await;
    let problem = match asked {
        Err(_) => format!(
            "the daemon did not answer within {:.1} s",
            timeout.as_secs_f64()
        ),
        Ok(Err(err)) => err.to_string(),
        Ok(Ok(Response::Health { problem: None })) => {
            println!("healthy: the event path is alive");
            return Ok(ExitCode::SUCCESS);
        }
        Ok(Ok(Response::Health {
            problem: Some(problem),
        })) => problem,
        Ok(Ok(other)) => ClientError::Unexpected(Box::new(other)).to_string(),
    };
    println!("unhealthy: {problem}");
    Ok(ExitCode::FAILURE)
}
