//! End-to-end tests: the real `sluice` binary, driven by curl and raw
//! sockets, against upstreams on 127.0.0.1. Each denial checks that
//! nothing reached the upstream; each allow that the bytes arrived intact;
//! each test checks the access-log line.

mod adversary;
mod audit;
mod check;
mod clients;
mod connect;
mod console;
mod denials;
mod evasion;
mod exec;
mod faults;
mod forward;
mod installs;
mod lifetimes;
mod limits;
mod netns;
mod ops;
mod owners;
mod snapshots;
mod taint;
mod tls;
mod trail;
mod util;
mod websocket;
