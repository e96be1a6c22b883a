//! The `sluice` binary: parse the command line, set up tracing, run.

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::{execute, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `sluice exec` shares the terminal with its command: only refusals
    // and problems, unless SLUICE_LOG says otherwise.
    let default = match cli.command {
        Command::Exec { .. } => "warn,sluice::exchange=info",
        Command::ExecGuest { .. } | Command::ExecLaunch { .. } => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    execute(cli)
}
