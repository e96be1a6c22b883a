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
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false)
        .with_writer(sluice::console::stderr_line);
    // SLUICE_LOG_FORMAT=json: one JSON object a line, for log collectors.
    if std::env::var("SLUICE_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let code = execute(cli);
    sluice::console::drain(std::time::Duration::from_secs(2));
    code
}
