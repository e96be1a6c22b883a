//! config: raw serde types → [`validate`] → an immutable [`Snapshot`].
//!
//! Owns parsing and every validity rule of SPEC §3 and §8. Reports every
//! problem at once, each with file, line and key. Does no network I/O and
//! touches the file system only to read the config file.
//!
//! This file holds the validated types, [`load`] and [`validate`]; the
//! file as written is in `raw`, listen addresses in `listen`, and the
//! checks in `sections` (the top-level sections and the task list), which
//! uses `task` (one `[[task]]`), which uses `validator` (problem
//! collection and the checks both share).

pub(crate) mod diff;
mod listen;
mod raw;
mod secret;
mod sections;
mod task;
mod validator;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::policy::{TaintMode, TaskRules};
pub(crate) use listen::ListenAddr;
use raw::RawConfig;
pub(crate) use secret::{OnViolation, SecretConfig, SecretSource};
#[cfg(feature = "exec")]
pub(crate) use task::private_net;
use validator::Validator;

/// The embedded default config (`config/default.toml`).
pub(crate) const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// TLS interception setting of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intercept {
    All,
    None,
}

#[derive(Clone, Debug)]
pub(crate) struct TaintSettings {
    pub(crate) mode: TaintMode,
    /// Hosts never tainted (normalised).
    pub(crate) exempt: HashSet<String>,
    /// Bound on the taint set; an insert past it fails the task closed.
    pub(crate) max_hosts: usize,
    /// Decoded bytes scanned per response at most (decompression bombs).
    pub(crate) max_scan_bytes: u64,
    /// Whether a response may taint the host that served it. Excluded by
    /// default: an API whose JSON links to itself would otherwise refuse
    /// every later upload to that API, and a host naming itself gives the
    /// agent nothing it did not already choose.
    pub(crate) self_taint: SelfTaint,
    /// Multi-tenant hosts, tainted per owner (SPEC §4).
    pub(crate) by_owner: crate::policy::owners::ByOwner,
    /// `[task.taint] related`: a response from a group's first host (a
    /// registry's index) does not taint the other hosts of its group (its
    /// file and web hosts): host → the first host of its group. One way
    /// only: what the file hosts serve (package contents, anyone's) still
    /// taints the index.
    pub(crate) related: std::collections::HashMap<String, String>,
}

impl TaintSettings {
    /// Is `name` the host that served a response, or one its `related`
    /// group lets that host name without tainting?
    pub(crate) fn same_site(&self, name: &str, served_by: &str) -> bool {
        name == served_by
            || self
                .related
                .get(name)
                .is_some_and(|first| first == served_by)
    }
}

pub(crate) use crate::policy::SelfTaint;

/// One task: who arrives on its listeners and what they may reach.
#[derive(Clone, Debug)]
pub(crate) struct TaskConfig {
    pub(crate) id: String,
    pub(crate) listen: Vec<ListenAddr>,
    pub(crate) rules: TaskRules,
    pub(crate) intercept: Intercept,
    pub(crate) passthrough: HashSet<String>,
    pub(crate) taint: TaintSettings,
    /// `allow_mode = "ask"`: how long a request waits for a person.
    pub(crate) ask_timeout: Duration,
    /// `[[task.secret]]`: credentials kept out of the task (SPEC §10).
    pub(crate) secrets: Vec<SecretConfig>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Nameservers {
    System,
    List(Vec<SocketAddr>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolverSettings {
    pub(crate) nameservers: Nameservers,
    /// Pinned answers, like curl --resolve. Still classified.
    pub(crate) hosts: HashMap<String, Vec<IpAddr>>,
}

/// Resource limits. Defaults suit a sidecar serving one agent or build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Concurrent client connections per task; past it a 503.
    pub(crate) max_connections_per_task: usize,
    /// Time a client has to send a request head (also the keep-alive idle time).
    pub(crate) header_timeout: Duration,
    /// Largest request head accepted.
    pub(crate) max_header_bytes: usize,
    /// Upstream connect timeout (`upstream-timeout`, 504).
    pub(crate) connect_timeout: Duration,
    /// Time an upstream has to answer a forwarded request with a response
    /// head (`upstream-timeout`, 504).
    pub(crate) first_byte_timeout: Duration,
    /// A tunnel with no bytes either way for this long is closed.
    pub(crate) tunnel_idle_timeout: Duration,
    /// Grace period for open connections on shutdown.
    pub(crate) drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections_per_task: 4096,
            header_timeout: Duration::from_secs(30),
            max_header_bytes: 64 * 1024,
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(60),
            tunnel_idle_timeout: Duration::from_secs(600),
            drain: Duration::from_secs(10),
        }
    }
}

/// Access-log rotation: `access.jsonl` is renamed to `access.jsonl.1`
/// (older ones shift up) when it passes `rotate_bytes`; `keep` rotated
/// files are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogSettings {
    pub(crate) rotate_bytes: u64,
    pub(crate) keep: usize,
    /// Each access row also goes to stdout, one JSON line.
    pub(crate) stdout: bool,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            rotate_bytes: 64 * 1024 * 1024,
            keep: 5,
            stdout: false,
        }
    }
}

/// Where a config came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file (its path as given).
    File(PathBuf),
    /// The default config built into the binary.
    Embedded,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Embedded => f.write_str("<embedded default.toml>"),
        }
    }
}

/// A validated config. Immutable; a reload builds a new one.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub(crate) generation: u64,
    /// A hash of the config text this was built from (the file watcher
    /// compares it with the file).
    pub(crate) fingerprint: u64,
    pub(crate) source: Source,
    pub(crate) state_dir: PathBuf,
    /// Mode task unix sockets are created with (the admin socket is 0600).
    pub(crate) unix_mode: u32,
    pub(crate) admin: Option<ListenAddr>,
    /// `[admin] metrics_listen`: a read-only TCP listener serving only
    /// `/metrics` and `/healthz` (for Prometheus and probes).
    pub(crate) metrics_listen: Option<ListenAddr>,
    pub(crate) resolver: ResolverSettings,
    pub(crate) extra_roots: Vec<PathBuf>,
    /// `publish_ca`: a folder sluice copies `ca.pem` and `ca-bundle.pem`
    /// to (and nothing else), to share with tasks instead of the state
    /// folder.
    pub(crate) publish_ca: Option<PathBuf>,
    pub(crate) limits: Limits,
    pub(crate) logs: LogSettings,
    pub(crate) tasks: Vec<Arc<TaskConfig>>,
    /// Valid but probably not meant (`file:line: key: message`), in line
    /// order: `check` prints them, `run` logs them.
    pub(crate) warnings: Vec<String>,
}

impl Snapshot {
    pub(crate) fn task(&self, id: &str) -> Option<&Arc<TaskConfig>> {
        self.tasks.iter().find(|t| t.id == id)
    }
}

/// One problem in a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The line of the config the problem is on, where it has one.
    pub line: Option<usize>,
    /// The key (`task.agent.allow`) or section it is about.
    pub key: String,
    /// What is wrong, as a sentence.
    pub message: String,
}

/// Why a config was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The text was read but is not a valid config: every problem found,
    /// each with its line.
    #[error("{}", render_problems(.origin, .problems))]
    Invalid {
        /// Where the text came from.
        origin: Source,
        /// Every problem, in the order of the text.
        problems: Vec<Problem>,
    },
}

fn render_problems(source: &Source, problems: &[Problem]) -> String {
    let mut out = format!("invalid config {source}: {} problem(s)", problems.len());
    for p in problems {
        out.push_str("\n  ");
        out.push_str(&render_problem(source, p));
    }
    out
}

/// `task[1].alow` → `task[build].alow`, as the other task problems say.
fn task_key(raw: &RawConfig, key: String) -> String {
    let Some(rest) = key.strip_prefix("task[") else {
        return key;
    };
    let Some((n, tail)) = rest.split_once(']') else {
        return key;
    };
    match n.parse::<usize>().ok().and_then(|n| raw.task.get(n)) {
        Some(t) => format!("task[{}]{tail}", t.get_ref().id.get_ref()),
        None => key,
    }
}

/// `file:line: key: message`.
fn render_problem(source: &Source, p: &Problem) -> String {
    let line = p.line.map(|l| format!(":{l}")).unwrap_or_default();
    format!("{source}{line}: {}: {}", p.key, p.message)
}

/// A hash of a config text.
pub(crate) fn fingerprint(text: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Loads and validates a config file (or the embedded default).
pub(crate) fn load(path: Option<&Path>, generation: u64) -> Result<Snapshot, ConfigError> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?;
            let base = p
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            let base = if base.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                base
            };
            validate(&text, Source::File(p.to_path_buf()), &base, generation)
        }
        None => validate(DEFAULT_TOML, Source::Embedded, Path::new("."), generation),
    }
}

/// Checks a config text whole and builds its snapshot. `base` is the folder
/// relative paths are resolved against.
pub fn validate(
    text: &str,
    source: Source,
    base: &Path,
    generation: u64,
) -> Result<Snapshot, ConfigError> {
    let mut v = Validator {
        text,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let raw: RawConfig = match raw::parse(text) {
        Ok((r, unknown)) => {
            for u in unknown {
                v.problems.push(Problem {
                    line: u.span.map(|s| v.line_of(s.start)),
                    key: task_key(&r, u.key),
                    message: match (u.nearest, u.belongs_in) {
                        (Some(k), _) => format!(
                            "unknown key; did you mean `{k}`? (the config reference, \
                             docs/src/config.md, lists every key)"
                        ),
                        (None, Some(table)) => format!(
                            "unknown key here; it belongs in {table} (keys after a \
                             [section] header belong to that section)"
                        ),
                        (None, None) => "unknown key (the config reference, docs/src/config.md, \
                                 lists every key)"
                            .into(),
                    },
                });
            }
            r
        }
        Err(e) => {
            let line = e.span().map(|s| v.line_of(s.start));
            let key = e
                .span()
                .and_then(|s| raw::key_at(text, s.start))
                .unwrap_or_else(|| "toml".into());
            v.problems.push(Problem {
                line,
                key,
                message: e.message().trim().to_string(),
            });
            return Err(ConfigError::Invalid {
                origin: source,
                problems: v.problems,
            });
        }
    };
    let mut snapshot = v.build(raw, source.clone(), base, generation);
    snapshot.fingerprint = fingerprint(text.as_bytes());
    // In line order, whichever check found them; the sort is stable.
    v.problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    v.warnings.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    snapshot.warnings = v
        .warnings
        .iter()
        .map(|w| render_problem(&source, w))
        .collect();
    if v.problems.is_empty() {
        Ok(snapshot)
    } else {
        Err(ConfigError::Invalid {
            origin: source,
            problems: v.problems,
        })
    }
}

#[cfg(test)]
mod tests;
