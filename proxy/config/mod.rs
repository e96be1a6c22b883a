//! config: raw serde types → [`validate`] → an immutable [`Snapshot`].
//!
//! Owns parsing and every validity rule of SPEC §3 and §8. Reports every
//! problem at once, each with file, line and key. Does no network I/O and
//! touches the file system only to read the config file.

mod raw;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use crate::policy::target::{normalize_host, parse_authority};
use crate::policy::{AllowList, AllowMode, Host, TaintMode, TaskRules};
use raw::{RawConfig, RawNameservers, S};

/// The embedded default config (`config/default.toml`).
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// Where a listener listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    Vsock { cid: u32, port: u32 },
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "tcp:{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Vsock { cid, port } if *cid == u32::MAX => write!(f, "vsock:{port}"),
            ListenAddr::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
        }
    }
}

impl ListenAddr {
    /// Parses `tcp:IP:PORT`, `unix:PATH` (relative to `base`), `vsock:PORT`
    /// or `vsock:CID:PORT`.
    pub fn parse(s: &str, base: &Path) -> Result<ListenAddr, String> {
        if let Some(rest) = s.strip_prefix("tcp:") {
            return rest
                .parse::<SocketAddr>()
                .map(ListenAddr::Tcp)
                .map_err(|_| format!("{rest:?} is not IP:PORT (a name is not accepted)"));
        }
        if let Some(rest) = s.strip_prefix("unix:") {
            if rest.is_empty() {
                return Err("a unix listener needs a path".into());
            }
            return Ok(ListenAddr::Unix(base.join(rest)));
        }
        if let Some(rest) = s.strip_prefix("vsock:") {
            let parts: Vec<&str> = rest.split(':').collect();
            let num = |p: &str| {
                p.parse::<u32>()
                    .map_err(|_| format!("{p:?} is not a number"))
            };
            return match parts.as_slice() {
                [port] => Ok(ListenAddr::Vsock {
                    cid: u32::MAX,
                    port: num(port)?,
                }),
                [cid, port] => Ok(ListenAddr::Vsock {
                    cid: num(cid)?,
                    port: num(port)?,
                }),
                _ => Err("expected vsock:PORT or vsock:CID:PORT".into()),
            };
        }
        Err(format!(
            "{s:?} must start with tcp:, unix: or vsock: (e.g. \"tcp:127.0.0.1:3128\")"
        ))
    }
}

/// TLS interception setting of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intercept {
    All,
    None,
}

#[derive(Clone, Debug)]
pub struct TaintSettings {
    pub mode: TaintMode,
    /// Hosts never tainted (normalised).
    pub exempt: HashSet<String>,
    /// Bound on the taint set; an insert past it fails the task closed.
    pub max_hosts: usize,
    /// Decoded bytes scanned per response at most (decompression bombs).
    pub max_scan_bytes: u64,
    /// Whether a response may taint the host that served it. Excluded by
    /// default: an API whose JSON links to itself would otherwise refuse
    /// every later upload to that API, and a host naming itself gives the
    /// agent nothing it did not already choose.
    pub self_taint: SelfTaint,
}

pub use crate::policy::SelfTaint;

/// One task: who arrives on its listeners and what they may reach.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub id: String,
    pub listen: Vec<ListenAddr>,
    pub rules: TaskRules,
    pub intercept: Intercept,
    pub passthrough: HashSet<String>,
    pub taint: TaintSettings,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nameservers {
    System,
    List(Vec<SocketAddr>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolverSettings {
    pub nameservers: Nameservers,
    /// Pinned answers, like curl --resolve. Still classified.
    pub hosts: HashMap<String, Vec<IpAddr>>,
}

/// Resource limits. Defaults suit a sidecar serving one agent or build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent client connections per task; past it a 503.
    pub max_connections_per_task: usize,
    /// Time a client has to send a request head (also the keep-alive idle time).
    pub header_timeout: Duration,
    /// Largest request head accepted.
    pub max_header_bytes: usize,
    /// Upstream connect timeout (`upstream-timeout`, 504).
    pub connect_timeout: Duration,
    /// Time an upstream has to answer a forwarded request with a response
    /// head (`upstream-timeout`, 504).
    pub first_byte_timeout: Duration,
    /// A tunnel with no bytes either way for this long is closed.
    pub tunnel_idle_timeout: Duration,
    /// Grace period for open connections on shutdown.
    pub drain: Duration,
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
pub struct LogSettings {
    pub rotate_bytes: u64,
    pub keep: usize,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            rotate_bytes: 64 * 1024 * 1024,
            keep: 5,
        }
    }
}

/// Where a config came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
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
    pub generation: u64,
    /// A hash of the config text this was built from (the file watcher
    /// compares it with the file).
    pub fingerprint: u64,
    pub source: Source,
    pub state_dir: PathBuf,
    /// Mode task unix sockets are created with (the admin socket is 0600).
    pub unix_mode: u32,
    pub admin: Option<ListenAddr>,
    pub resolver: ResolverSettings,
    pub extra_roots: Vec<PathBuf>,
    pub limits: Limits,
    pub logs: LogSettings,
    pub tasks: Vec<Arc<TaskConfig>>,
}

impl Snapshot {
    pub fn task(&self, id: &str) -> Option<&Arc<TaskConfig>> {
        self.tasks.iter().find(|t| t.id == id)
    }
}

/// One problem in a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub key: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", render_problems(.origin, .problems))]
    Invalid {
        origin: Source,
        problems: Vec<Problem>,
    },
}

fn render_problems(source: &Source, problems: &[Problem]) -> String {
    let mut out = format!("invalid config {source}: {} problem(s)", problems.len());
    for p in problems {
        let line = p.line.map(|l| format!(":{l}")).unwrap_or_default();
        out.push_str(&format!("\n  {source}{line}: {}: {}", p.key, p.message));
    }
    out
}

/// A hash of a config text.
pub fn fingerprint(text: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Loads and validates a config file (or the embedded default).
pub fn load(path: Option<&Path>, generation: u64) -> Result<Snapshot, ConfigError> {
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
    };
    let raw: RawConfig = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let line = e.span().map(|s| v.line_of(s.start));
            v.problems.push(Problem {
                line,
                key: "toml".into(),
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
    if v.problems.is_empty() {
        Ok(snapshot)
    } else {
        Err(ConfigError::Invalid {
            origin: source,
            problems: v.problems,
        })
    }
}

struct Validator<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Validator<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    fn problem<T>(&mut self, at: &S<T>, key: impl Into<String>, message: impl Into<String>) {
        let line = Some(self.line_of(at.span().start));
        self.problems.push(Problem {
            line,
            key: key.into(),
            message: message.into(),
        });
    }

    fn positive(&mut self, v: &Option<S<i64>>, key: &str, default: u64) -> u64 {
        match v {
            None => default,
            Some(s) if *s.get_ref() > 0 => *s.get_ref() as u64,
            Some(s) => {
                self.problem(
                    s,
                    key,
                    format!("must be a positive number, not {}", s.get_ref()),
                );
                default
            }
        }
    }

    fn build(&mut self, raw: RawConfig, source: Source, base: &Path, generation: u64) -> Snapshot {
        let state_dir = raw
            .state_dir
            .as_ref()
            .map(|s| base.join(s.get_ref()))
            .unwrap_or_else(|| base.join("sluice-state"));

        let unix_mode = match &raw.unix_mode {
            None => 0o660,
            Some(m) => match u32::from_str_radix(m.get_ref().trim_start_matches("0o"), 8) {
                Ok(v) if v <= 0o777 => v,
                _ => {
                    self.problem(
                        m,
                        "unix_mode",
                        format!("{:?} is not an octal file mode like \"0660\"", m.get_ref()),
                    );
                    0o660
                }
            },
        };

        let admin = match raw.admin.as_ref().and_then(|a| a.listen.as_ref()) {
            None => None,
            Some(s) => match ListenAddr::parse(s.get_ref(), base) {
                Ok(ListenAddr::Vsock { .. }) => {
                    self.problem(
                        s,
                        "admin.listen",
                        "the admin API listens on tcp: or unix: only",
                    );
                    None
                }
                Ok(a) => Some(a),
                Err(e) => {
                    self.problem(s, "admin.listen", e);
                    None
                }
            },
        };

        let resolver = self.resolver(raw.resolver.as_ref());
        let extra_roots = raw
            .upstream
            .as_ref()
            .map(|u| {
                u.extra_roots
                    .iter()
                    .map(|r| base.join(r.get_ref()))
                    .collect()
            })
            .unwrap_or_default();

        let defaults = Limits::default();
        let limits = match &raw.limits {
            None => defaults,
            Some(l) => Limits {
                max_connections_per_task: self.positive(
                    &l.max_connections_per_task,
                    "limits.max_connections_per_task",
                    defaults.max_connections_per_task as u64,
                ) as usize,
                header_timeout: Duration::from_secs(self.positive(
                    &l.header_timeout_secs,
                    "limits.header_timeout_secs",
                    defaults.header_timeout.as_secs(),
                )),
                max_header_bytes: self.positive(
                    &l.max_header_bytes,
                    "limits.max_header_bytes",
                    defaults.max_header_bytes as u64,
                ) as usize,
                connect_timeout: Duration::from_secs(self.positive(
                    &l.connect_timeout_secs,
                    "limits.connect_timeout_secs",
                    defaults.connect_timeout.as_secs(),
                )),
                first_byte_timeout: Duration::from_secs(self.positive(
                    &l.first_byte_timeout_secs,
                    "limits.first_byte_timeout_secs",
                    defaults.first_byte_timeout.as_secs(),
                )),
                tunnel_idle_timeout: Duration::from_secs(self.positive(
                    &l.tunnel_idle_timeout_secs,
                    "limits.tunnel_idle_timeout_secs",
                    defaults.tunnel_idle_timeout.as_secs(),
                )),
                drain: Duration::from_secs(self.positive(
                    &l.drain_secs,
                    "limits.drain_secs",
                    defaults.drain.as_secs(),
                )),
            },
        };

        let log_defaults = LogSettings::default();
        let logs = match &raw.logs {
            None => log_defaults,
            Some(l) => LogSettings {
                rotate_bytes: self.positive(
                    &l.rotate_bytes,
                    "logs.rotate_bytes",
                    log_defaults.rotate_bytes,
                ),
                keep: self.positive(&l.keep, "logs.keep", log_defaults.keep as u64) as usize,
            },
        };

        let mut ids = HashSet::new();
        // Port 0 asks the OS for a fresh port, so the admin API and one task
        // may both say "tcp:127.0.0.1:0"; two tasks may not.
        let mut listeners: HashSet<ListenAddr> = admin
            .iter()
            .filter(|a| !matches!(a, ListenAddr::Tcp(t) if t.port() == 0))
            .cloned()
            .collect();
        let mut tasks = Vec::new();
        for t in &raw.task {
            if let Some(task) = self.task(t, base, &mut ids, &mut listeners) {
                tasks.push(Arc::new(task));
            }
        }
        if raw.task.is_empty() {
            self.problems.push(Problem {
                line: None,
                key: "task".into(),
                message: "no [[task]] is defined; nothing would be served".into(),
            });
        }
        Snapshot {
            generation,
            fingerprint: 0,
            source,
            state_dir,
            unix_mode,
            admin,
            resolver,
            extra_roots,
            limits,
            logs,
            tasks,
        }
    }

    fn resolver(&mut self, raw: Option<&raw::RawResolver>) -> ResolverSettings {
        let mut settings = ResolverSettings {
            nameservers: Nameservers::System,
            hosts: HashMap::new(),
        };
        let Some(raw) = raw else { return settings };
        if let Some(ns) = &raw.nameservers {
            match ns.get_ref() {
                RawNameservers::Named(n) if n == "system" => {}
                RawNameservers::Named(n) => self.problem(
                    ns,
                    "resolver.nameservers",
                    format!("{n:?} is neither \"system\" nor a list of IP:PORT"),
                ),
                RawNameservers::List(list) => {
                    let mut addrs = Vec::new();
                    for item in list {
                        match item.parse::<SocketAddr>() {
                            Ok(a) => addrs.push(a),
                            Err(_) => match item.parse::<IpAddr>() {
                                Ok(ip) => addrs.push(SocketAddr::new(ip, 53)),
                                Err(_) => self.problem(
                                    ns,
                                    "resolver.nameservers",
                                    format!("{item:?} is not IP or IP:PORT"),
                                ),
                            },
                        }
                    }
                    if list.is_empty() {
                        self.problem(ns, "resolver.nameservers", "the list is empty");
                    }
                    settings.nameservers = Nameservers::List(addrs);
                }
            }
        }
        for (name, answers) in &raw.hosts {
            let key = format!("resolver.hosts.{name:?}");
            let host = match normalize_host(name) {
                Ok(Host::Name(n)) => n,
                Ok(Host::Ip(_)) => {
                    self.problem(answers, &key, "an IP address needs no pinning");
                    continue;
                }
                Err(e) => {
                    self.problem(answers, &key, e.to_string());
                    continue;
                }
            };
            let mut ips = Vec::new();
            for a in answers.get_ref() {
                match a.get_ref().parse::<IpAddr>() {
                    Ok(ip) => ips.push(ip),
                    Err(_) => {
                        self.problem(a, &key, format!("{:?} is not an IP address", a.get_ref()))
                    }
                }
            }
            if answers.get_ref().is_empty() {
                self.problem(answers, &key, "needs at least one address");
            }
            if settings.hosts.insert(host.clone(), ips).is_some() {
                self.problem(answers, &key, format!("{host} is pinned twice"));
            }
        }
        settings
    }

    fn host_list(&mut self, items: &[S<String>], key: &str) -> HashSet<String> {
        let mut out = HashSet::new();
        for item in items {
            match normalize_host(item.get_ref()) {
                Ok(Host::Name(n)) => {
                    if !out.insert(n.clone()) {
                        self.problem(item, key, format!("{n} is listed twice"));
                    }
                }
                Ok(Host::Ip(_)) => self.problem(item, key, "expects a host name, not an IP"),
                Err(e) => self.problem(item, key, e.to_string()),
            }
        }
        out
    }

    fn task(
        &mut self,
        t: &S<raw::RawTask>,
        base: &Path,
        ids: &mut HashSet<String>,
        listeners: &mut HashSet<ListenAddr>,
    ) -> Option<TaskConfig> {
        let start = self.problems.len();
        let raw = t.get_ref();
        let id = raw.id.get_ref().clone();
        let key = |k: &str| format!("task[{id}].{k}");
        if id.is_empty()
            || id.len() > 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            || id.starts_with('.')
        {
            self.problem(
                &raw.id,
                "task.id",
                format!("{id:?} must be 1–64 letters, digits, '-', '_' or '.' (it names a folder)"),
            );
        } else if !ids.insert(id.clone()) {
            self.problem(
                &raw.id,
                "task.id",
                format!("task id {id:?} is defined twice"),
            );
        }

        let mut listen = Vec::new();
        for l in &raw.listen {
            match ListenAddr::parse(l.get_ref(), base) {
                Ok(a) => {
                    if !listeners.insert(a.clone()) {
                        self.problem(
                            l,
                            key("listen"),
                            format!("{a} is already used by another task or the admin API; a listener belongs to one task"),
                        );
                    } else {
                        listen.push(a);
                    }
                }
                Err(e) => self.problem(l, key("listen"), e),
            }
        }
        if raw.listen.is_empty() {
            self.problem(&raw.id, key("listen"), "a task needs at least one listener");
        }

        let mut allow = AllowList::default();
        for a in &raw.allow {
            match parse_authority(a.get_ref(), Some(0)) {
                Ok(target) => {
                    if let Host::Ip(ip) = target.host {
                        if !target.canonical_ip {
                            self.problem(
                                a,
                                key("allow"),
                                format!("write the IP address in its canonical spelling: {ip}"),
                            );
                        }
                    }
                    let ports: &[u16] = if target.port == 0 {
                        &[80, 443]
                    } else {
                        &[target.port]
                    };
                    for p in ports {
                        if !allow.insert(target.host.clone(), *p) {
                            self.problem(
                                a,
                                key("allow"),
                                format!("{}:{p} is listed twice", target.host),
                            );
                        }
                    }
                }
                Err(e) => self.problem(a, key("allow"), format!("{:?}: {e}", a.get_ref())),
            }
        }

        let allow_mode = match raw.allow_mode.as_ref().map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "enforce")) => AllowMode::Enforce,
            Some((_, "shadow")) => AllowMode::Shadow,
            Some((m, other)) => {
                self.problem(
                    m,
                    key("allow_mode"),
                    format!("{other:?} is not \"enforce\" or \"shadow\""),
                );
                AllowMode::Enforce
            }
        };

        let mut allow_private = Vec::new();
        for c in &raw.allow_private {
            let s = c.get_ref();
            let parsed = s
                .parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from));
            match parsed {
                Ok(net) if net.trunc() == net => allow_private.push(net),
                Ok(net) => self.problem(
                    c,
                    key("allow_private"),
                    format!("{s:?} has host bits set; did you mean {}?", net.trunc()),
                ),
                Err(_) => self.problem(c, key("allow_private"), format!("{s:?} is not a CIDR")),
            }
        }

        let intercept = match raw.intercept.as_ref().map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "all")) => Intercept::All,
            Some((_, "none")) => Intercept::None,
            Some((m, other)) => {
                self.problem(
                    m,
                    key("intercept"),
                    format!("{other:?} is not \"all\" or \"none\""),
                );
                Intercept::All
            }
        };
        let passthrough = self.host_list(&raw.passthrough, &key("passthrough"));

        let mut taint = TaintSettings {
            mode: TaintMode::Enforce,
            exempt: HashSet::new(),
            max_hosts: 100_000,
            max_scan_bytes: 64 * 1024 * 1024,
            self_taint: SelfTaint::Exclude,
        };
        if let Some(rt) = &raw.taint {
            taint.mode = match rt.mode.as_ref().map(|m| (m, m.get_ref().as_str())) {
                None | Some((_, "enforce")) => TaintMode::Enforce,
                Some((_, "shadow")) => TaintMode::Shadow,
                Some((_, "off")) => TaintMode::Off,
                Some((m, other)) => {
                    self.problem(
                        m,
                        key("taint.mode"),
                        format!("{other:?} is not \"enforce\", \"shadow\" or \"off\""),
                    );
                    TaintMode::Enforce
                }
            };
            taint.exempt = self.host_list(&rt.exempt, &key("taint.exempt"));
            taint.max_hosts =
                self.positive(&rt.max_hosts, &key("taint.max_hosts"), 100_000) as usize;
            taint.max_scan_bytes = self.positive(
                &rt.max_scan_bytes,
                &key("taint.max_scan_bytes"),
                taint.max_scan_bytes,
            );
            taint.self_taint = match rt.self_.as_ref().map(|m| (m, m.get_ref().as_str())) {
                None | Some((_, "exclude")) => SelfTaint::Exclude,
                Some((_, "taint")) => SelfTaint::Taint,
                Some((m, other)) => {
                    self.problem(
                        m,
                        key("taint.self"),
                        format!("{other:?} is not \"exclude\" or \"taint\""),
                    );
                    SelfTaint::Exclude
                }
            };
        }

        if self.problems.len() > start {
            return None;
        }
        Some(TaskConfig {
            id,
            listen,
            rules: TaskRules {
                allow,
                allow_mode,
                allow_private,
                taint_mode: taint.mode,
            },
            intercept,
            passthrough,
            taint,
        })
    }
}

#[cfg(test)]
mod tests;
