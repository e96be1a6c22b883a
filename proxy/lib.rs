//! sluice: an allow-list egress proxy with taint-aware body blocking.
//!
//! The modules, top to bottom (a module names only modules below it;
//! ARCHITECTURE.md has the request's path):
//!
//! - `cli`, `report`, `guest_relay`, `clientenv`, `exec`: the
//!   `sluice` subcommands; `command_error`: their typed error.
//! - `server`: start-up and graceful shutdown; wires the layers.
//! - `admin`: the admin API (health, metrics, tasks, taint, reload).
//! - `reload`: validate a new config whole, swap it in, revoke what it
//!   no longer allows; the file watcher.
//! - `accept`: a task listener's accept loop: identify the task, cap
//!   connections.
//! - `conn`: one client connection: parse each request, plan it
//!   (forward, tunnel, refuse).
//! - `intercept`: inside a CONNECT tunnel: the first bytes, TLS
//!   termination, plain HTTP, or the opaque relay.
//! - `forward`: relay one admitted HTTP request and its scanned response.
//! - `exchange`: the connection context, one request's context
//!   (`ReqCtx`), the decision pipeline (`admit`), the one writer of
//!   access-log rows.
//! - `state`: the live state every connection reads; `ask`: the
//!   questions `allow_mode = "ask"` puts to a person, and the grants.
//! - `upstream`: dial checked addresses, verified TLS, pooled upstream
//!   connections.
//! - `tunnel`: client byte streams and relaying bytes both ways;
//!   `splice`: the kernel relay.
//! - `tls`: the CA and TLS settings.
//! - `secrets`: credentials kept out of the task (placeholders swapped
//!   in only where policy allows, leaks refused, echoes put back).
//! - `taint`: scan responses for host names; the per-task taint set;
//!   recording what a response names (`Recorder`).
//! - `log`, `metrics`, `respond`, `dns`: the access log, the
//!   Prometheus families, refusal responses, resolution.
//! - `policy`: every decision, as pure functions. `config`: TOML →
//!   validated `config::Snapshot`. `shell`: quoting for printed
//!   commands.
//!
//! The public face is small: [`run`] (the `sluice` binary is one call
//! to it), the config loader ([`Config`], [`validate`]), and in
//! [`inspect`] the pure pieces the fuzz targets and benchmarks drive.
//! Everything else is `pub(crate)`.
#![forbid(unsafe_code)]
// Everything but the face above is crate-private; a stray `pub` is a
// warning (and clippy -D warnings fails CI on it).
#![warn(unreachable_pub)]

mod accept;
mod admin;
mod ask;
mod cli;
mod clientenv;
mod command_error;
mod config;
mod conn;
mod console;
mod dns;
mod exchange;
#[cfg(feature = "exec")]
mod exec;
mod forward;
mod guest_relay;
mod intercept;
mod listener;
mod log;
mod metrics;
mod policy;
mod reload;
mod report;
mod respond;
mod secrets;
mod server;
mod shell;
mod splice;
mod state;
mod taint;
mod tls;
mod tunnel;
mod upstream;

pub use config::{validate, ConfigError, Snapshot as Config, Source};

/// The parsers and scanners the fuzz targets and benchmarks drive
/// directly: pure functions and state machines, no I/O.
pub mod inspect {
    pub use crate::intercept::{Peeked, StartReader};
    pub use crate::policy::addr::{classify, classify_v4, classify_v6};
    pub use crate::policy::target::{normalize_host, parse_authority};
    pub use crate::policy::{Host, TunnelStart};
    pub use crate::taint::body::{starts_binary, BodyScanner};
    pub use crate::taint::scan::{scan_all, Charset, Named, Scanner};
}

/// Runs the `sluice` command line: parses the arguments, sets up logging
/// (`SLUICE_LOG`, `SLUICE_LOG_FORMAT=json`) and carries out the command.
/// Its exit code is the command's.
pub fn run() -> std::process::ExitCode {
    use clap::Parser;
    #[cfg(feature = "exec")]
    use cli::Command;
    use cli::{execute, Cli};
    let cli = Cli::parse();
    // `sluice exec` shares the terminal with its command: only refusals
    // and problems, unless SLUICE_LOG says otherwise.
    let default = match cli.command {
        #[cfg(feature = "exec")]
        Command::Exec { .. } => "warn,sluice::accept=info,sluice::exchange=info",
        #[cfg(feature = "exec")]
        Command::ExecGuest { .. } | Command::ExecLaunch { .. } => "warn",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false)
        .with_writer(console::stderr_line);
    // SLUICE_LOG_FORMAT=json: one JSON object a line, for log collectors.
    if std::env::var("SLUICE_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let code = execute(cli);
    console::drain(std::time::Duration::from_secs(2));
    code
}
