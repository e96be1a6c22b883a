//! End-to-end tests: the real `sluice` binary, driven by curl and raw
//! sockets, against upstreams on 127.0.0.1. Each denial checks that
//! nothing reached the upstream; each allow that the bytes arrived intact;
//! each test checks the access-log line.
//!
//! Plain `cargo test` needs only the Rust toolchain and curl, and runs as
//! any user. A test that needs more (root, network namespaces, nftables,
//! chromium, npm, pip, git, python3) is marked
//! `#[cfg(feature = "system-tests")]` with the tool named beside it, so it
//! is not compiled into the plain run rather than skipped at run time:
//! `cargo test --features system-tests` runs every test, on a machine set
//! up by `.ci/run`.

mod adversary;
mod audit;
mod check;
mod clients;
mod connect;
mod console;
mod denials;
mod evasion;
#[cfg(feature = "system-tests")] // root, user and network namespaces, nft, python3, npm
mod exec;
mod faults;
mod forward;
#[cfg(feature = "system-tests")] // npm, python3 with pip
mod installs;
mod lifetimes;
mod limits;
#[cfg(feature = "system-tests")] // root, iproute2, network namespaces
mod netns;
mod ops;
#[cfg(feature = "system-tests")] // git
mod owners;
mod park;
mod scale;
#[cfg(feature = "system-tests")] // git, npm
mod secret_clients;
mod secrets;
mod snapshots;
mod taint;
mod tls;
mod trail;
mod util;
mod websocket;
