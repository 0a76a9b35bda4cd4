//! `enforcer`: reamer's node daemon and its command-line tools (`enforcer --help`).

use std::process::ExitCode;

use clap::Parser as _;
use enforcer::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

fn init_logging(level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Colours only on a terminal: journald and log files would keep the escape codes.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log_level);
    match cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("enforcer: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
