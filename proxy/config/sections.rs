//! sections: the top-level sections of a config (state_dir, unix_mode,
//! admin, resolver, upstream, limits, logs) and its `[[task]]` list, into
//! a [`Snapshot`], with the checks across tasks (unique ids and
//! listeners, at least one task).
//!
//! Must not: check a task's own keys (`task` does), read files, touch the
//! network, or stop early: every problem is reported, in the order of the
//! sections.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::policy::target::normalize_host;
use crate::policy::Host;

use super::raw::{
    RawAdmin, RawConfig, RawLimits, RawLogs, RawNameservers, RawResolver, RawTask, RawUpstream, S,
};
use super::validator::Validator;
use super::{
    Limits, ListenAddr, LogSettings, Nameservers, Problem, ResolverSettings, Snapshot, Source,
    TaskConfig,
};

impl Validator<'_> {
    /// The whole config; its problems are left in the validator.
    pub(super) fn build(
        &mut self,
        raw: RawConfig,
        source: Source,
        base: &Path,
        generation: u64,
    ) -> Snapshot {
        let state_dir = raw
            .state_dir
            .as_ref()
            .map(|s| base.join(s.get_ref()))
            .unwrap_or_else(|| base.join("sluice-state"));
        let unix_mode = self.unix_mode(raw.unix_mode.as_ref());
        let admin = self.admin(raw.admin.as_ref(), base);
        let metrics_listen = self.metrics_listen(raw.admin.as_ref(), base);
        let resolver = self.resolver(raw.resolver.as_ref());
        let extra_roots = self.extra_roots(raw.upstream.as_ref(), base);
        let publish_ca = raw.publish_ca.as_ref().map(|p| base.join(p.get_ref()));
        let limits = self.limits(raw.limits.as_ref());
        let logs = self.logs(raw.logs.as_ref());
        let own: Vec<&ListenAddr> = admin.iter().chain(metrics_listen.iter()).collect();
        let tasks = self.tasks(&raw.task, base, &own);
        Snapshot {
            generation,
            fingerprint: 0,
            source,
            state_dir,
            unix_mode,
            admin,
            metrics_listen,
            resolver,
            extra_roots,
            publish_ca,
            limits,
            logs,
            tasks,
            warnings: Vec::new(),
        }
    }

    /// `unix_mode`: an octal file mode, 0660 when absent or wrong.
    fn unix_mode(&mut self, mode: Option<&S<String>>) -> u32 {
        match mode {
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
        }
    }

    /// `[upstream] extra_roots`, relative to `base`: each a readable PEM
    /// file with at least one certificate (what `run` loads; `check`
    /// finds the same problems, with their line).
    fn extra_roots(&mut self, upstream: Option<&RawUpstream>, base: &Path) -> Vec<PathBuf> {
        let Some(u) = upstream else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for r in &u.extra_roots {
            let path = base.join(r.get_ref());
            let found = std::fs::read(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
                .and_then(|pem| {
                    use rustls::pki_types::{pem::PemObject, CertificateDer};
                    let certs = CertificateDer::pem_slice_iter(&pem)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| format!("{} is not PEM: {e}", path.display()))?;
                    if certs.is_empty() {
                        return Err(format!("{} holds no certificate", path.display()));
                    }
                    Ok(())
                });
            if let Err(why) = found {
                self.problem(r, "upstream.extra_roots", why);
            }
            out.push(path);
        }
        out
    }

    /// `[admin] metrics_listen`: tcp: only (a scraper reaches it over the
    /// network; the admin API itself stays on its own listener).
    fn metrics_listen(&mut self, admin: Option<&RawAdmin>, base: &Path) -> Option<ListenAddr> {
        let s = admin.and_then(|a| a.metrics_listen.as_ref())?;
        match ListenAddr::parse(s.get_ref(), base) {
            Ok(a @ ListenAddr::Tcp(_)) => Some(a),
            Ok(_) => {
                self.problem(
                    s,
                    "admin.metrics_listen",
                    "the metrics listener is tcp: only (it serves /metrics and /healthz to a scraper)",
                );
                None
            }
            Err(e) => {
                self.problem(s, "admin.metrics_listen", e);
                None
            }
        }
    }

    /// `[admin] listen`: tcp: or unix: only.
    fn admin(&mut self, admin: Option<&RawAdmin>, base: &Path) -> Option<ListenAddr> {
        let s = admin.and_then(|a| a.listen.as_ref())?;
        match ListenAddr::parse(s.get_ref(), base) {
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
        }
    }

    /// `[limits]`: every field positive, each defaulting on its own.
    fn limits(&mut self, raw: Option<&RawLimits>) -> Limits {
        let defaults = Limits::default();
        let Some(l) = raw else { return defaults };
        Limits {
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
        }
    }

    /// `[logs]`: rotation size and how many rotated files are kept.
    fn logs(&mut self, raw: Option<&RawLogs>) -> LogSettings {
        let log_defaults = LogSettings::default();
        let Some(l) = raw else { return log_defaults };
        LogSettings {
            rotate_bytes: self.positive(
                &l.rotate_bytes,
                "logs.rotate_bytes",
                log_defaults.rotate_bytes,
            ),
            keep: self.positive(&l.keep, "logs.keep", log_defaults.keep as u64) as usize,
            stdout: l.stdout.as_ref().is_some_and(|s| *s.get_ref()),
        }
    }

    /// Every `[[task]]`, with the checks across them: ids and listeners
    /// are unique, and at least one task is defined.
    fn tasks(
        &mut self,
        raw: &[S<RawTask>],
        base: &Path,
        own: &[&ListenAddr],
    ) -> Vec<Arc<TaskConfig>> {
        let mut ids = HashSet::new();
        // Port 0 asks the OS for a fresh port, so the admin API and one task
        // may both say "tcp:127.0.0.1:0"; two tasks may not.
        let mut listeners: HashSet<ListenAddr> = own
            .iter()
            .filter(|a| !matches!(a, ListenAddr::Tcp(t) if t.port() == 0))
            .map(|a| (*a).clone())
            .collect();
        let mut tasks = Vec::new();
        for t in raw {
            if let Some(task) = self.task(t, base, &mut ids, &mut listeners) {
                tasks.push(Arc::new(task));
            }
        }
        if raw.is_empty() {
            self.problems.push(Problem {
                line: None,
                key: "task".into(),
                message: "no [[task]] is defined; nothing would be served".into(),
            });
        }
        tasks
    }

    fn resolver(&mut self, raw: Option<&RawResolver>) -> ResolverSettings {
        let mut settings = ResolverSettings {
            nameservers: Nameservers::System,
            hosts: HashMap::new(),
        };
        let Some(raw) = raw else { return settings };
        if let Some(ns) = &raw.nameservers {
            if let Some(list) = self.nameservers(ns) {
                settings.nameservers = Nameservers::List(list);
            }
        }
        for (name, answers) in &raw.hosts {
            self.pinned_host(&mut settings.hosts, name, answers);
        }
        settings
    }

    /// `resolver.nameservers`: `"system"` (`None`) or a list of IP or
    /// IP:PORT (port 53 by default).
    fn nameservers(&mut self, ns: &S<RawNameservers>) -> Option<Vec<SocketAddr>> {
        match ns.get_ref() {
            RawNameservers::Named(n) if n == "system" => None,
            RawNameservers::Named(n) => {
                self.problem(
                    ns,
                    "resolver.nameservers",
                    format!("{n:?} is neither \"system\" nor a list of IP:PORT"),
                );
                None
            }
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
                Some(addrs)
            }
        }
    }

    /// One `[resolver.hosts]` entry: a host name pinned to IP addresses.
    fn pinned_host(
        &mut self,
        hosts: &mut HashMap<String, Vec<IpAddr>>,
        name: &str,
        answers: &S<Vec<S<String>>>,
    ) {
        let key = format!("resolver.hosts.{name:?}");
        let host = match normalize_host(name) {
            Ok(Host::Name(n)) => n,
            Ok(Host::Ip(_)) => {
                self.problem(answers, &key, "an IP address needs no pinning");
                return;
            }
            Err(e) => {
                self.problem(answers, &key, e.to_string());
                return;
            }
        };
        let mut ips = Vec::new();
        for a in answers.get_ref() {
            match a.get_ref().parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => self.problem(a, &key, format!("{:?} is not an IP address", a.get_ref())),
            }
        }
        if answers.get_ref().is_empty() {
            self.problem(answers, &key, "needs at least one address");
        }
        if hosts.insert(host.clone(), ips).is_some() {
            self.problem(answers, &key, format!("{host} is pinned twice"));
        }
    }
}
