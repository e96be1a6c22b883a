//! The e2e harness, one file per concern; everything is re-exported here so
//! a test file needs only `use crate::util::*;`.
//!
//! - `upstream`: fake upstream servers that record what reaches them.
//! - `dns`: the fake DNS server (NXDOMAIN to everything).
//! - `harness`: the sluice process, its stderr lines, logs and reports.
//! - `config`: test configs and `SluiceBuilder`, which starts sluice on one.
//! - `client`: curl, raw sockets, CONNECT tunnels and npm as clients.
//! - `http`: parsing answers and asserting refusals.
//! - `tlsca`: a test CA and the TLS server configs it signs.
//! - `wait`: bounded polling (`eventually`, `wait_for`), the only way a
//!   test waits.
//!
//! The real `sluice` binary runs on port 0 against all of it on 127.0.0.1;
//! nothing leaves loopback.

mod client;
mod config;
mod dns;
mod harness;
mod http;
mod tlsca;
mod upstream;
mod wait;

pub use client::*;
pub use config::*;
pub use dns::*;
pub use harness::*;
pub use http::*;
pub use tlsca::*;
pub use upstream::*;
pub use wait::*;
