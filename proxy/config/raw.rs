//! The config file as written: serde types that mirror SPEC §3 exactly and
//! reject unknown keys. Values carry their spans so that validation can
//! name the line of every problem.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

pub type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub state_dir: Option<S<String>>,
    /// A folder to copy the CA certificate and bundle to, for tasks.
    pub publish_ca: Option<S<String>>,
    /// Mode of task unix sockets, octal ("0660").
    pub unix_mode: Option<S<String>>,
    pub admin: Option<RawAdmin>,
    pub resolver: Option<RawResolver>,
    pub upstream: Option<RawUpstream>,
    pub limits: Option<RawLimits>,
    pub logs: Option<RawLogs>,
    #[serde(default)]
    pub task: Vec<S<RawTask>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<S<String>>,
    pub metrics_listen: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawNameservers {
    Named(String),
    List(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResolver {
    pub nameservers: Option<S<RawNameservers>>,
    #[serde(default)]
    pub hosts: BTreeMap<String, S<Vec<S<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    #[serde(default)]
    pub extra_roots: Vec<S<String>>,
}

/// Resource limits; every field has a default (see `Limits`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_connections_per_task: Option<S<i64>>,
    pub header_timeout_secs: Option<S<i64>>,
    pub max_header_bytes: Option<S<i64>>,
    pub connect_timeout_secs: Option<S<i64>>,
    pub first_byte_timeout_secs: Option<S<i64>>,
    pub tunnel_idle_timeout_secs: Option<S<i64>>,
    pub drain_secs: Option<S<i64>>,
}

/// Access-log rotation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLogs {
    pub rotate_bytes: Option<S<i64>>,
    pub keep: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTask {
    pub id: S<String>,
    #[serde(default)]
    pub listen: Vec<S<String>>,
    #[serde(default)]
    pub allow: Vec<S<String>>,
    pub allow_mode: Option<S<String>>,
    #[serde(default)]
    pub allow_private: Vec<S<String>>,
    pub intercept: Option<S<String>>,
    #[serde(default)]
    pub passthrough: Vec<S<String>>,
    pub taint: Option<RawTaint>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTaint {
    pub mode: Option<S<String>>,
    #[serde(default)]
    pub exempt: Vec<S<String>>,
    pub max_hosts: Option<S<i64>>,
    /// Decoded bytes scanned per response at most.
    pub max_scan_bytes: Option<S<i64>>,
    /// `"exclude"` (default): a response does not taint the host that
    /// served it; `"taint"`: it does.
    #[serde(rename = "self")]
    pub self_: Option<S<String>>,
}
