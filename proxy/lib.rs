//! sluice: an allow-list egress proxy with taint-aware body blocking.
//!
//! The modules follow a request's path:
//!
//! - [`cli`]: the `sluice` subcommands (`run`, `check`).
//! - [`config`]: raw TOML → validated, immutable [`config::Snapshot`].
//! - [`listener`]: bind task listeners, accept, identify the task, cap
//!   connections.
//! - [`conn`]: one client connection: parse CONNECT / absolute-form
//!   requests, run the decision pipeline, log each decision once.
//! - [`policy`]: normalise targets, decide, classify addresses (pure).
//! - [`dns`]: resolve a name once, for policy to classify.
//! - [`tunnel`]: dial the checked address; relay bytes both ways.
//! - [`intercept`]: the CA, TLS termination of CONNECT tunnels and
//!   verified re-origination upstream; the SNI check of opaque tunnels.
//! - [`forward`]: relay HTTP requests over pooled upstream connections.
//! - [`taint`]: scan relayed responses for host names; the per-task taint
//!   set with provenance, persisted and reloaded.
//! - [`respond`]: the one place refusals become HTTP responses.
//! - [`log`]: the per-task JSON-lines access log writer.
//! - [`metrics`]: the Prometheus families.
//! - [`admin`]: the admin API (health, metrics, tasks, taint, reload).
//! - [`reload`]: validate a new config whole, swap it in, revoke what it
//!   no longer allows; the file watcher and SIGHUP.
//! - [`report`]: `sluice report`, destinations each task reached.
//! - [`guest_relay`]: `sluice forward`, the guest-side TCP → vsock/unix relay.
//! - [`server`]: live state, start-up and graceful shutdown.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod config;
pub mod conn;
pub mod dns;
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
pub mod splice;
pub mod taint;
pub mod tunnel;
