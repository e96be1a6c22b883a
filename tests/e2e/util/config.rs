//! Test configs, and [`SluiceBuilder`], which writes one and starts sluice
//! on it. The standard config has one task `t` on a port-0 TCP listener,
//! the test names pinned in `[resolver.hosts]` (everything else goes to the
//! fake DNS server, which answers NXDOMAIN) and loopback allowed as a
//! private range, since every upstream is on 127.0.0.1.

use super::dns::FakeDns;
use super::harness::Sluice;
use super::upstream::Upstream;

/// The task's default listener: a port sluice picks and logs.
const LISTEN: &str = "tcp:127.0.0.1:0";

/// Names every config pins, and their addresses.
const HOSTS: &[(&str, &[&str])] = &[
    ("pkgs.example.com", &["127.0.0.1"]),
    ("other.example.com", &["127.0.0.1"]),
    ("paste.example.com", &["127.0.0.1"]),
    ("docs.example.com", &["127.0.0.1"]),
    ("private.example.com", &["127.0.0.1"]),
    ("metadata.example.com", &["169.254.169.254"]),
    ("mixed.example.com", &["10.1.2.3", "127.0.0.1"]),
];

/// Builds a test config and starts sluice on it:
///
/// ```ignore
/// let s = SluiceBuilder::new(&dns)
///     .allow(&[format!("pkgs.example.com:{p}")])
///     .task_extra("intercept = \"none\"")
///     .top("[limits]\nheader_timeout_secs = 2\n")
///     .admin()
///     .start();
/// ```
#[derive(Clone)]
pub struct SluiceBuilder {
    dns: std::net::SocketAddr,
    allow: Vec<String>,
    allow_private: Vec<String>,
    listen: Vec<String>,
    hosts: Vec<(String, Vec<String>)>,
    task_extra: String,
    top: String,
    admin: bool,
    files: Vec<(String, Vec<u8>)>,
}

impl SluiceBuilder {
    /// The standard config, resolving through `dns`, allowing nothing yet.
    pub fn new(dns: &FakeDns) -> Self {
        Self::resolving_with(dns.addr)
    }

    /// The standard config with `nameserver` as its resolver (a broken
    /// one, for DNS fault tests).
    pub fn resolving_with(nameserver: std::net::SocketAddr) -> Self {
        SluiceBuilder {
            dns: nameserver,
            allow: Vec::new(),
            allow_private: vec!["127.0.0.0/8".into()],
            listen: vec![LISTEN.into()],
            hosts: Vec::new(),
            task_extra: String::new(),
            top: String::new(),
            admin: false,
            files: Vec::new(),
        }
    }

    /// Adds `host:port` entries to task `t`'s allow-list.
    pub fn allow(mut self, entries: &[impl AsRef<str>]) -> Self {
        self.allow
            .extend(entries.iter().map(|e| e.as_ref().to_string()));
        self
    }

    /// Replaces task `t`'s `allow_private` (default `127.0.0.0/8`; empty
    /// leaves the key out, so loopback answers are refused).
    pub fn allow_private(mut self, cidrs: &[&str]) -> Self {
        self.allow_private = cidrs.iter().map(std::string::ToString::to_string).collect();
        self
    }

    /// Replaces task `t`'s listeners (default one TCP port 0 on loopback).
    pub fn listen(mut self, addrs: &[impl AsRef<str>]) -> Self {
        self.listen = addrs.iter().map(|a| a.as_ref().to_string()).collect();
        self
    }

    /// Pins `name` to `addrs` in `[resolver.hosts]` (beside the standard
    /// test names).
    pub fn host(mut self, name: &str, addrs: &[&str]) -> Self {
        self.hosts.push((
            name.to_string(),
            addrs.iter().map(std::string::ToString::to_string).collect(),
        ));
        self
    }

    /// TOML added at the end of task `t` (`intercept = ...`, `[task.taint]`).
    pub fn task_extra(mut self, toml: &str) -> Self {
        self.task_extra.push_str(toml);
        self.task_extra.push('\n');
        self
    }

    /// TOML added at the top level, before any table of the standard config
    /// (`[limits]`, `[upstream]`, a top-level key).
    pub fn top(mut self, toml: &str) -> Self {
        self.top.push_str(toml);
        self.top.push('\n');
        self
    }

    /// An admin API on a port-0 loopback listener ([`Sluice::admin`]).
    pub fn admin(mut self) -> Self {
        self.admin = true;
        self
    }

    /// A file written into sluice's folder (beside its config) before it
    /// starts; relative paths in the config find it there.
    pub fn file(mut self, name: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.files.push((name.to_string(), contents.into()));
        self
    }

    /// The config text.
    pub fn config(&self) -> String {
        let quoted = |v: &[String]| {
            v.iter()
                .map(|a| format!("{a:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut hosts = String::new();
        let pinned = HOSTS
            .iter()
            .map(|(n, a)| {
                (
                    n.to_string(),
                    a.iter().map(std::string::ToString::to_string).collect(),
                )
            })
            .chain(self.hosts.iter().cloned());
        for (name, addrs) in pinned {
            let addrs: Vec<String> = addrs;
            hosts.push_str(&format!("{name:?} = [{}]\n", quoted(&addrs)));
        }
        let admin = if self.admin {
            "[admin]\nlisten = \"tcp:127.0.0.1:0\"\n"
        } else {
            ""
        };
        let allow_private = if self.allow_private.is_empty() {
            String::new()
        } else {
            format!("allow_private = [{}]\n", quoted(&self.allow_private))
        };
        format!(
            r#"state_dir = "state"
{top}{admin}
[resolver]
nameservers = ["{dns}"]
[resolver.hosts]
{hosts}
[[task]]
id = "t"
listen = [{listen}]
allow = [{allow}]
{allow_private}{task_extra}"#,
            top = self.top,
            dns = self.dns,
            listen = quoted(&self.listen),
            allow = quoted(&self.allow),
            task_extra = self.task_extra,
        )
    }

    /// Writes the config (and any files) into a temp folder and starts
    /// sluice on it; returns once every listener is bound.
    pub fn start(&self) -> Sluice {
        self.start_in(tempfile::tempdir().unwrap())
    }

    /// [`Self::start`] in a folder the test prepared (its `state` folder
    /// on a small tmpfs, say).
    pub fn start_in(&self, dir: tempfile::TempDir) -> Sluice {
        for (name, contents) in &self.files {
            std::fs::write(dir.path().join(name), contents).unwrap();
        }
        let path = dir.path().join("sluice.toml");
        std::fs::write(&path, self.config()).unwrap();
        Sluice::start_in(dir, path)
    }
}

/// A fake DNS server and sluice with one task `t` allowing
/// pkgs.example.com on `up`'s port (the most common test setup).
pub fn pkgs_sluice(up: &Upstream, extra_task: &str, extra_top: &str) -> (FakeDns, Sluice) {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{}", up.port())])
        .task_extra(extra_task)
        .top(extra_top)
        .start();
    (dns, s)
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for configs that
/// must name their port: a fixed admin address, a task `sluice env` reads).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
