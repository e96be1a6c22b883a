//! task: the checks of one `[[task]]` (SPEC §3): its id, listeners, allow
//! list and modes, private ranges, interception and taint settings, into a
//! [`TaskConfig`].
//!
//! Must not: check anything across tasks other than through the `ids` and
//! `listeners` it is handed (the validator owns those), read files, or
//! stop at a task's first problem: each is reported, in the order of the
//! task's keys.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;

use crate::policy::target::{normalize_host, parse_authority};
use crate::policy::{AllowList, AllowMode, Host, TaintMode, TaskRules};

use super::raw::{RawTaint, RawTask, S};
use super::validator::Validator;
use super::{Intercept, ListenAddr, SelfTaint, TaintSettings, TaskConfig};

/// The key of a problem in task `id`: `task[ID].KEY`.
fn key(id: &str, k: &str) -> String {
    format!("task[{id}].{k}")
}

impl Validator<'_> {
    /// One task, or `None` when it has a problem. `ids` and `listeners`
    /// are those of the tasks before it (and the admin API).
    pub(super) fn task(
        &mut self,
        t: &S<RawTask>,
        base: &Path,
        ids: &mut HashSet<String>,
        listeners: &mut HashSet<ListenAddr>,
    ) -> Option<TaskConfig> {
        let start = self.problems.len();
        let raw = t.get_ref();
        let id = raw.id.get_ref().clone();
        self.task_id(&raw.id, ids);
        let listen = self.task_listen(raw, &id, base, listeners);
        let allow = self.task_allow(&raw.allow, &id);
        let allow_mode = self.allow_mode(raw.allow_mode.as_ref(), &id);
        let allow_private = self.allow_private(&raw.allow_private, &id);
        let intercept = self.intercept(raw.intercept.as_ref(), &id);
        let passthrough = self.host_list(&raw.passthrough, &key(&id, "passthrough"));
        let taint = self.taint(raw.taint.as_ref(), &id);
        let ask_secs = self.positive(&raw.ask_timeout_secs, &key(&id, "ask_timeout_secs"), 30);
        let view = super::secret::TaskView {
            id: &id,
            allow: &allow,
            intercept,
            passthrough: &passthrough,
        };
        let secrets = self.secrets(&raw.secret, &view, base);
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
            ask_timeout: std::time::Duration::from_secs(ask_secs),
            secrets,
        })
    }

    /// `id`: a folder name, unique among tasks.
    fn task_id(&mut self, raw_id: &S<String>, ids: &mut HashSet<String>) {
        let id = raw_id.get_ref();
        if id.is_empty()
            || id.len() > 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            || id.starts_with(['.', '-'])
        {
            self.problem(
                raw_id,
                "task.id",
                format!(
                    "{id:?} must be 1–64 letters, digits, '-', '_' or '.', not starting with '.' or '-' (it names a folder and is typed after --task)"
                ),
            );
        } else if !ids.insert(id.clone()) {
            self.problem(
                raw_id,
                "task.id",
                format!("task id {id:?} is defined twice"),
            );
        }
    }

    /// `listen`: at least one address, none shared with another task or
    /// the admin API.
    fn task_listen(
        &mut self,
        raw: &RawTask,
        id: &str,
        base: &Path,
        listeners: &mut HashSet<ListenAddr>,
    ) -> Vec<ListenAddr> {
        let mut listen = Vec::new();
        for l in &raw.listen {
            match ListenAddr::parse(l.get_ref(), base) {
                Ok(a) => {
                    if !listeners.insert(a.clone()) {
                        self.problem(
                            l,
                            key(id, "listen"),
                            format!("{a} is already used by another task or the admin API; a listener belongs to one task"),
                        );
                    } else {
                        listen.push(a);
                    }
                }
                Err(e) => self.problem(l, key(id, "listen"), e),
            }
        }
        if raw.listen.is_empty() {
            self.problem(
                &raw.id,
                key(id, "listen"),
                "a task needs at least one listener",
            );
        }
        listen
    }

    /// `allow`: host or IP with an optional port (80 and 443 without one),
    /// each listed once, IPs in their canonical spelling. URL-shaped
    /// entries and wildcards get a hint; single-label names a warning.
    fn task_allow(&mut self, items: &[S<String>], id: &str) -> AllowList {
        let mut allow = AllowList::default();
        // The spelling that first listed each destination.
        let mut first: HashMap<(Host, u16), &str> = HashMap::new();
        for a in items {
            let written = a.get_ref().as_str();
            let target = match parse_authority(written, Some(0)) {
                Ok(t) => t,
                Err(e) => {
                    let message =
                        allow_hint(written).unwrap_or_else(|| format!("{written:?}: {e}"));
                    self.problem(a, key(id, "allow"), message);
                    continue;
                }
            };
            match &target.host {
                Host::Ip(ip) if !target.canonical_ip => self.problem(
                    a,
                    key(id, "allow"),
                    format!("{written:?}: write the IP address in its canonical spelling: {ip}"),
                ),
                Host::Name(n) if !n.contains('.') => self.warning(
                    a,
                    key(id, "allow"),
                    format!(
                        "{written:?} is a single-label name: public DNS has none, so it \
                         resolves only where [resolver.hosts] or a local resolver knows it \
                         (a compose service, say; then also allow_private); otherwise write \
                         the full name"
                    ),
                ),
                _ => {}
            }
            let ports: &[u16] = if target.port == 0 {
                &[80, 443]
            } else {
                &[target.port]
            };
            let mut twice: Vec<(u16, &str)> = Vec::new();
            for p in ports {
                if allow.insert(target.host.clone(), *p) {
                    first.insert((target.host.clone(), *p), written);
                } else if let Some(earlier) = first.get(&(target.host.clone(), *p)) {
                    twice.push((*p, earlier));
                }
            }
            if let Some((_, earlier)) = twice.first() {
                let ports: Vec<String> = twice.iter().map(|(p, _)| p.to_string()).collect();
                let dest = format!("{}:{}", target.host, ports.join(","));
                let message = if *earlier == written {
                    format!("{written:?} is listed twice ({dest})")
                } else {
                    format!(
                        "{written:?} repeats {dest}, already listed as {earlier:?}; list it once"
                    )
                };
                self.problem(a, key(id, "allow"), message);
            }
        }
        allow
    }

    /// `allow_mode`: `"enforce"` (default), `"shadow"` or `"ask"`.
    fn allow_mode(&mut self, mode: Option<&S<String>>, id: &str) -> AllowMode {
        match mode.map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "enforce")) => AllowMode::Enforce,
            Some((_, "shadow")) => AllowMode::Shadow,
            Some((_, "ask")) => AllowMode::Ask,
            Some((m, other)) => {
                self.problem(
                    m,
                    key(id, "allow_mode"),
                    format!("{other:?} is not \"enforce\", \"shadow\" or \"ask\""),
                );
                AllowMode::Enforce
            }
        }
    }

    /// `allow_private`: CIDRs (or single IPs) without host bits.
    fn allow_private(&mut self, items: &[S<String>], id: &str) -> Vec<IpNet> {
        let mut allow_private = Vec::new();
        for c in items {
            match private_net(c.get_ref()) {
                Ok(net) => allow_private.push(net),
                Err(why) => self.problem(c, key(id, "allow_private"), why),
            }
        }
        allow_private
    }

    /// `intercept`: `"all"` (default) or `"none"`.
    fn intercept(&mut self, mode: Option<&S<String>>, id: &str) -> Intercept {
        match mode.map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "all")) => Intercept::All,
            Some((_, "none")) => Intercept::None,
            Some((m, other)) => {
                self.problem(
                    m,
                    key(id, "intercept"),
                    format!("{other:?} is not \"all\" or \"none\""),
                );
                Intercept::All
            }
        }
    }

    /// `[task.taint]`, each key defaulting on its own.
    fn taint(&mut self, raw: Option<&RawTaint>, id: &str) -> TaintSettings {
        let mut taint = TaintSettings {
            mode: TaintMode::Enforce,
            exempt: HashSet::new(),
            max_hosts: 100_000,
            max_scan_bytes: 64 * 1024 * 1024,
            self_taint: SelfTaint::Exclude,
            by_owner: crate::policy::owners::ByOwner::default_families(),
            related: related_groups(&default_related()),
        };
        let Some(rt) = raw else { return taint };
        taint.mode = self.taint_mode(rt.mode.as_ref(), id);
        taint.exempt = self.exempt_list(&rt.exempt, &key(id, "taint.exempt"));
        taint.max_hosts =
            self.positive(&rt.max_hosts, &key(id, "taint.max_hosts"), 100_000) as usize;
        taint.max_scan_bytes = self.positive(
            &rt.max_scan_bytes,
            &key(id, "taint.max_scan_bytes"),
            taint.max_scan_bytes,
        );
        taint.self_taint = self.self_taint(rt.self_.as_ref(), id);
        if let Some(list) = &rt.by_owner {
            let hosts = self.host_list(list, &key(id, "taint.by_owner"));
            // Config order, for `check` and the docs.
            let mut roots: Vec<String> = Vec::new();
            for item in list {
                if let Ok(Host::Name(n)) = normalize_host(item.get_ref()) {
                    if hosts.contains(&n) && !roots.contains(&n) {
                        roots.push(n);
                    }
                }
            }
            taint.by_owner = crate::policy::owners::ByOwner::from_roots(&roots);
        }
        if let Some(groups) = &rt.related {
            let mut named = Vec::new();
            for (i, g) in groups.iter().enumerate() {
                let k = key(id, &format!("taint.related[{i}]"));
                let hosts = self.host_list(g, &k);
                // Config order: the first host is the one whose responses
                // do not taint the rest.
                let group: Vec<String> = g
                    .iter()
                    .filter_map(|h| match normalize_host(h.get_ref()) {
                        Ok(Host::Name(n)) if hosts.contains(&n) => Some(n),
                        _ => None,
                    })
                    .collect();
                named.push(group);
            }
            taint.related = related_groups(&named);
        }
        taint
    }

    /// `taint.exempt`: hosts, or `host/owner` for an owner on a forge
    /// (`github.com/me`: the task's own account is never tainted).
    fn exempt_list(&mut self, items: &[S<String>], k: &str) -> HashSet<String> {
        let (owners, hosts): (Vec<&S<String>>, Vec<&S<String>>) =
            items.iter().partition(|i| i.get_ref().contains('/'));
        let hosts: Vec<S<String>> = hosts.into_iter().cloned().collect();
        let mut out = self.host_list(&hosts, k);
        for item in owners {
            let (host, owner) = item.get_ref().split_once('/').unwrap_or_default();
            let host = match normalize_host(host) {
                // Owners are kept under the forge's root (`api.github.com/me`
                // is `github.com/me`).
                Ok(Host::Name(n)) => crate::policy::owners::builtin_root(&n)
                    .map(str::to_string)
                    .unwrap_or(n),
                _ => {
                    self.problem(item, k, format!("{host:?} is not a host name"));
                    continue;
                }
            };
            match crate::policy::owners::Owner::from_segment(owner) {
                crate::policy::owners::Owner::Named(o) => {
                    out.insert(format!("{host}/{o}"));
                }
                _ => self.problem(
                    item,
                    k,
                    "an owner is one path segment: letters, digits, -, _ or . (github.com/me)",
                ),
            }
        }
        out
    }

    /// `taint.mode`: `"enforce"` (default), `"shadow"` or `"off"`.
    fn taint_mode(&mut self, mode: Option<&S<String>>, id: &str) -> TaintMode {
        match mode.map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "enforce")) => TaintMode::Enforce,
            Some((_, "shadow")) => TaintMode::Shadow,
            Some((_, "off")) => TaintMode::Off,
            Some((m, other)) => {
                self.problem(
                    m,
                    key(id, "taint.mode"),
                    format!("{other:?} is not \"enforce\", \"shadow\" or \"off\""),
                );
                TaintMode::Enforce
            }
        }
    }

    /// `taint.self`: `"exclude"` (default) or `"taint"`.
    fn self_taint(&mut self, mode: Option<&S<String>>, id: &str) -> SelfTaint {
        match mode.map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "exclude")) => SelfTaint::Exclude,
            Some((_, "taint")) => SelfTaint::Taint,
            Some((m, other)) => {
                self.problem(
                    m,
                    key(id, "taint.self"),
                    format!("{other:?} is not \"exclude\" or \"taint\""),
                );
                SelfTaint::Exclude
            }
        }
    }
}

/// What to write instead of an `allow` entry sluice cannot read, when its
/// shape says what was meant: a URL, or a wildcard.
fn allow_hint(written: &str) -> Option<String> {
    if let Some((_, rest)) = written.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        return Some(format!(
            "{written:?} is a URL; allow takes a host name with an optional port: {authority:?}"
        ));
    }
    if let Some((authority, _)) = written.split_once('/') {
        return Some(format!(
            "{written:?} has a path; allow takes a host name with an optional port: {authority:?}"
        ));
    }
    if written.contains('*') {
        let rest = written.trim_start_matches("*.");
        return Some(format!(
            "{written:?}: wildcards are not supported: sluice admits exact names only, so a \
             task cannot reach a name nobody reviewed (under a wildcard it could pick any \
             bucket, user page or tunnel endpoint); list each host it needs, e.g. \"www.{rest}\""
        ));
    }
    None
}

/// `[task.taint] related`'s default: each package registry's index first,
/// then the hosts its metadata names for its own files and pages, so the
/// index does not taint them. Forges are never here: their owners are
/// tainted by owner.
pub(crate) fn default_related() -> Vec<Vec<String>> {
    const GROUPS: &[&[&str]] = &[
        &[
            "registry.npmjs.org",
            "registry.yarnpkg.com",
            "www.npmjs.com",
            "npmjs.com",
        ],
        &["pypi.org", "files.pythonhosted.org", "pypi.python.org"],
        &["crates.io", "index.crates.io", "static.crates.io"],
        &["proxy.golang.org", "sum.golang.org"],
        &["rubygems.org", "index.rubygems.org"],
        &["repo.maven.apache.org", "repo1.maven.org"],
    ];
    GROUPS
        .iter()
        .map(|g| g.iter().map(std::string::ToString::to_string).collect())
        .collect()
}

/// Host → the first host of its group (a host in two groups joins the
/// first).
fn related_groups(groups: &[Vec<String>]) -> std::collections::HashMap<String, String> {
    let mut map = std::collections::HashMap::new();
    for g in groups {
        let Some(first) = g.first() else { continue };
        for h in g {
            map.entry(h.clone()).or_insert_with(|| first.clone());
        }
    }
    map
}

/// One `allow_private` entry: a CIDR, or a single IP, without host bits.
pub(crate) fn private_net(s: &str) -> Result<IpNet, String> {
    let parsed = s
        .parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from));
    match parsed {
        Ok(net) if net.trunc() == net => Ok(net),
        Ok(net) => Err(format!(
            "{s:?} has host bits set; did you mean {}?",
            net.trunc()
        )),
        Err(_) => Err(format!("{s:?} is not a CIDR")),
    }
}
