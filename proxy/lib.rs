//! sluice: an allow-list egress proxy with taint-aware body blocking.
//!
//! The modules, top to bottom (a module names only modules below it;
//! ARCHITECTURE.md has the request's path):
//!
//! - [`cli`], [`report`], [`guest_relay`], [`clientenv`], [`exec`]: the
//!   `sluice` subcommands.
//! - [`server`]: start-up and graceful shutdown; wires the layers.
//! - [`admin`]: the admin API (health, metrics, tasks, taint, reload).
//! - [`reload`]: validate a new config whole, swap it in, revoke what it
//!   no longer allows; the file watcher.
//! - [`accept`]: a task listener's accept loop: identify the task, cap
//!   connections.
//! - [`conn`]: one client connection: parse each request, plan it
//!   (forward, tunnel, refuse).
//! - [`intercept`]: inside a CONNECT tunnel: the first bytes, TLS
//!   termination, plain HTTP, or the opaque relay.
//! - [`forward`]: relay one admitted HTTP request and its scanned response.
//! - [`exchange`]: the connection context, the decision pipeline
//!   (`admit`), the one writer of access-log rows, taint insertion.
//! - [`state`]: the live state every connection reads; [`ask`]: the
//!   questions `allow_mode = "ask"` puts to a person, and the grants.
//! - [`upstream`]: dial checked addresses, verified TLS, pooled upstream
//!   connections.
//! - [`tunnel`]: client byte streams and relaying bytes both ways;
//!   [`splice`]: the kernel relay.
//! - [`tls`]: the CA and TLS settings.
//! - [`taint`]: scan responses for host names; the per-task taint set.
//! - [`log`], [`metrics`], [`respond`], [`dns`]: the access log, the
//!   Prometheus families, refusal responses, resolution.
//! - [`policy`]: every decision, as pure functions. [`config`]: TOML →
//!   validated [`config::Snapshot`]. [`shell`]: quoting for printed
//!   commands.
#![forbid(unsafe_code)]

pub mod accept;
pub mod admin;
pub mod ask;
pub mod cli;
pub mod clientenv;
pub mod config;
pub mod conn;
pub mod console;
pub mod dns;
pub mod exchange;
pub mod exec;
pub mod forward;
pub mod guest_relay;
pub mod intercept;
pub mod listener;
pub mod log;
pub mod metrics;
pub mod policy;
pub mod reload;
pub mod report;
pub mod respond;
pub mod server;
pub mod shell;
pub mod splice;
pub mod state;
pub mod taint;
pub mod tls;
pub mod tunnel;
pub mod upstream;
