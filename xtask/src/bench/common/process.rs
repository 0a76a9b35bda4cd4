//! Commands the benchmarks run to their end.

use std::process::Command;

use anyhow::{Context as _, bail};

pub(crate) fn run_ok(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
