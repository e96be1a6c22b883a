//! policy: normalise targets, decide on them, classify addresses.
//!
//! Owns the rules of SPEC §4 and the proof tokens ([`Admission`], bound to
//! its [`CheckedAddr`]s) that `upstream::dial` consumes. Must not do I/O, logging,
//! metrics, `async` or read a clock: everything a decision needs is passed
//! in, so every case is a table test.
//!
//! The pipeline, one function each: [`target::parse_authority`] (normalise)
//! → [`decide_name`] → resolve (caller) → [`decide_addresses`] (classify
//! every address, taint) → dial exactly the [`CheckedAddr`]s returned.

pub(crate) mod addr;
pub(crate) mod names;
pub(crate) mod owners;
pub(crate) mod secrets;
pub(crate) mod target;
mod tunnel;
pub(crate) mod verdict;

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

pub use target::Host;
pub(crate) use target::{Target, TargetError};
pub use tunnel::TunnelStart;
pub(crate) use tunnel::{
    decide_inner, decide_open, decide_peer, decide_tunnel_start, intercepts, server_speaks_first,
};
pub(crate) use verdict::Verdict;

/// The stable rule ids of SPEC §4 (plus sluice's own capacity rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::VariantArray, strum::EnumCount)]
pub(crate) enum Rule {
    BadTarget,
    IpLiteral,
    NotAllowed,
    HostMismatch,
    SniMismatch,
    PrivateAddress,
    UntrustedTarget,
    DnsFailed,
    UpstreamFailed,
    UpstreamTimeout,
    /// The task's connection limit is reached (503).
    OverCapacity,
    /// A secret's placeholder or value would leave for a place it does not
    /// belong (SPEC §10).
    SecretLeak,
    /// The task is quarantined after a secret leak, until released.
    Quarantined,
}

impl Rule {
    /// Every rule, in declaration order: derived, so a new rule is in it
    /// without anyone listing it.
    pub(crate) const ALL: &'static [Rule] = <Rule as strum::VariantArray>::VARIANTS;

    /// How many rules there are.
    pub(crate) const COUNT: usize = <Rule as strum::EnumCount>::COUNT;

    /// The rule's place in [`Rule::ALL`] (always below [`Rule::COUNT`]).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rule::BadTarget => "bad-target",
            Rule::IpLiteral => "ip-literal",
            Rule::NotAllowed => "not-allowed",
            Rule::HostMismatch => "host-mismatch",
            Rule::SniMismatch => "sni-mismatch",
            Rule::PrivateAddress => "private-address",
            Rule::UntrustedTarget => "untrusted-target",
            Rule::DnsFailed => "dns-failed",
            Rule::UpstreamFailed => "upstream-failed",
            Rule::UpstreamTimeout => "upstream-timeout",
            Rule::OverCapacity => "over-capacity",
            Rule::SecretLeak => "secret-leak",
            Rule::Quarantined => "quarantined",
        }
    }

    /// Does this rule say the request could not be carried out (rather
    /// than that policy refused it)? Logged as decision `error`.
    pub(crate) fn is_failure(self) -> bool {
        matches!(
            self,
            Rule::DnsFailed | Rule::UpstreamFailed | Rule::UpstreamTimeout
        )
    }

    /// The HTTP status of a refusal under this rule.
    pub(crate) fn status(self) -> u16 {
        match self {
            Rule::BadTarget => 400,
            Rule::IpLiteral
            | Rule::NotAllowed
            | Rule::HostMismatch
            | Rule::SniMismatch
            | Rule::PrivateAddress
            | Rule::UntrustedTarget
            | Rule::SecretLeak
            | Rule::Quarantined => 403,
            Rule::DnsFailed | Rule::UpstreamFailed => 502,
            Rule::UpstreamTimeout => 504,
            Rule::OverCapacity => 503,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `enforce` refuses; `shadow` allows and records `would_deny`; `ask`
/// refuses unless a person admits the host while the request waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AllowMode {
    Enforce,
    Shadow,
    Ask,
}

/// May a person be asked about this refusal (`allow_mode = "ask"`)? Only a
/// host name missing from the allow-list, once its Host header passed
/// ([`decide_name`] checks that first in ask mode): IP literals and
/// mismatches are refused as in enforce mode, never asked about; the
/// caller refuses addresses outside `allow_private` and taint before it
/// asks, and decides again after the answer.
pub(crate) fn askable(rules: &TaskRules, refusal: &Refusal) -> bool {
    rules.allow_mode == AllowMode::Ask && refusal.rule == Rule::NotAllowed
}

/// Taint mode: `off` neither scans nor checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TaintMode {
    Enforce,
    Shadow,
    Off,
}

impl TaintMode {
    /// Does a new taint close the task's open streams it now refuses
    /// (opaque tunnels, request bodies on their way)? Only in enforce
    /// mode: shadow mode logs what it would refuse and cuts nothing.
    pub(crate) fn revokes(self) -> bool {
        self == TaintMode::Enforce
    }
}

/// `[task.taint] self`: does a response taint the host that served it?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SelfTaint {
    Exclude,
    Taint,
}

/// The set of exact `host:port` pairs a task may reach.
#[derive(Clone, Debug, Default)]
pub(crate) struct AllowList {
    entries: HashSet<(Host, u16)>,
}

impl AllowList {
    pub(crate) fn insert(&mut self, host: Host, port: u16) -> bool {
        self.entries.insert((host, port))
    }

    pub(crate) fn contains(&self, host: &Host, port: u16) -> bool {
        self.entries.contains(&(host.clone(), port))
    }

    /// Does any entry name this host, on any port?
    pub(crate) fn names(&self, name: &str) -> bool {
        self.entries
            .iter()
            .any(|(h, _)| matches!(h, Host::Name(n) if n == name))
    }

    pub(crate) fn contains_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.entries.contains(&(Host::Ip(ip), port))
    }

    /// Entries sorted for display, `host:port`.
    /// Every (host, port) entry, in no set order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&Host, u16)> {
        self.entries.iter().map(|(h, p)| (h, *p))
    }

    pub(crate) fn sorted(&self) -> Vec<String> {
        let mut v: Vec<_> = self.entries.iter().collect();
        v.sort();
        v.into_iter().map(|(h, p)| format!("{h}:{p}")).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What a task's policy says, as far as decisions are concerned.
#[derive(Clone, Debug)]
pub(crate) struct TaskRules {
    pub(crate) allow: AllowList,
    pub(crate) allow_mode: AllowMode,
    pub(crate) allow_private: Vec<IpNet>,
    pub(crate) taint_mode: TaintMode,
}

/// Where a tainted host was named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Provenance {
    /// URL of the response that first named the host, without its query.
    pub(crate) source: Arc<str>,
    /// RFC 3339 time it was first seen.
    pub(crate) at: Arc<str>,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "named by {} at {}", self.source, self.at)
    }
}

/// What the taint store knows of a target host, looked up by the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaintState {
    Clean,
    /// `key` is tainted: the target host, or an owner on its multi-tenant
    /// family (`github.com/acme`). `exact`: the key is the request's own
    /// (its host, or the owner its path names); else the path names no
    /// owner sluice can read and `key` is one of the family's owners.
    Tainted {
        key: String,
        by: Provenance,
        exact: bool,
    },
    /// The taint set is full: every non-exempt host counts as tainted.
    Overflow,
}

/// The Host header (or inner authority) as the client sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostHeader {
    Absent,
    One(Result<Target, TargetError>),
    Many,
}

/// A refusal: the rule that fired and a sentence for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) rule: Rule,
    pub(crate) reason: String,
    pub(crate) tainted_by: Option<Provenance>,
}

impl Refusal {
    pub(crate) fn new(rule: Rule, reason: impl Into<String>) -> Self {
        Refusal {
            rule,
            reason: reason.into(),
            tainted_by: None,
        }
    }
}

/// The `private-address` refusal: what the address is and, unless it is
/// one nobody should open to a task (a cloud metadata endpoint hands out
/// the machine's credentials), exactly what to add and where.
fn private_refusal(target: &Target, ip: std::net::IpAddr, why: addr::NonPublic) -> Refusal {
    let what = format!("{} resolves to {ip}, {}", target.host, why.describe());
    let reason = if why == addr::NonPublic::Metadata {
        format!("{what}; sluice does not suggest allowing it: it serves the machine's credentials")
    } else {
        format!(
            "{what}; to permit it, add \"{ip}\" to allow_private in the task's [[task]] \
             section of the config (sluice exec: --allow-private {ip})"
        )
    };
    Refusal::new(Rule::PrivateAddress, reason)
}

/// An address that [`decide_addresses`] classified as admissible. Only this
/// module can make one, so nothing dials an unchecked address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CheckedAddr(SocketAddr);

impl CheckedAddr {
    pub(crate) fn addr(&self) -> SocketAddr {
        self.0
    }
}

/// Decides on the normalised target before any resolution: `ip-literal`,
/// `not-allowed`, `host-mismatch`, in that order. The caller parses the
/// Host header with the scheme's default port (for CONNECT, the target's).
pub(crate) fn decide_name(rules: &TaskRules, target: &Target, host_header: &HostHeader) -> Verdict {
    let mut would_deny = None;
    match &target.host {
        Host::Ip(ip) => {
            if !(target.canonical_ip && rules.allow.contains_ip(*ip, target.port)) {
                return Verdict::Deny(Refusal::new(
                    Rule::IpLiteral,
                    format!(
                        "{target} is an IP address; name the host, or add \"{}\" to allow in its canonical spelling",
                        Target { canonical_ip: true, ..target.clone() }
                    ),
                ));
            }
        }
        Host::Name(_) => {
            if !rules.allow.contains(&target.host, target.port) {
                let refusal = Refusal::new(
                    Rule::NotAllowed,
                    format!("{target} is not on the task's allow-list"),
                );
                match rules.allow_mode {
                    AllowMode::Enforce => return Verdict::Deny(refusal),
                    // Ask: refused below, once the Host header has been
                    // checked (a mismatch is never asked about).
                    AllowMode::Shadow | AllowMode::Ask => would_deny = Some(refusal),
                }
            }
        }
    }
    match host_header {
        HostHeader::Absent => {}
        HostHeader::Many => {
            return Verdict::Deny(Refusal::new(
                Rule::BadTarget,
                "the request has more than one Host header",
            ))
        }
        HostHeader::One(Err(e)) => {
            return Verdict::Deny(Refusal::new(
                Rule::BadTarget,
                format!("the Host header is malformed: {e}"),
            ))
        }
        HostHeader::One(Ok(h)) => {
            if h.host != target.host || h.port != target.port {
                return Verdict::Deny(Refusal::new(
                    Rule::HostMismatch,
                    format!("the Host header names {h}, not {target}"),
                ));
            }
        }
    }
    match (rules.allow_mode, would_deny) {
        (AllowMode::Ask, Some(r)) => Verdict::Deny(r),
        (_, w) => Verdict::admit((), w),
    }
}

/// What resolution produced for the target.
#[derive(Clone, Debug)]
pub(crate) enum Resolution {
    /// The target is an IP literal that `allow` names.
    Literal(IpAddr),
    /// Resolved (or pinned) answers.
    Resolved(Vec<IpAddr>),
    /// The name did not resolve; the sentence says why.
    Failed(String),
}

/// Facts about sluice itself that classification needs. Addresses are
/// kept and compared canonically (SPEC §9 "Own addresses"): an
/// IPv4-mapped, IPv4-compatible or NAT64 form of a listener's address is
/// that address.
#[derive(Clone, Debug, Default)]
pub(crate) struct OwnAddrs {
    /// Addresses sluice listens on; refused to every task.
    pub(crate) exact: HashSet<SocketAddr>,
    /// Ports sluice listens on with an unspecified address (0.0.0.0, ::).
    pub(crate) any_ip_ports: HashSet<u16>,
    /// The addresses of the machine's interfaces (gathered by the caller):
    /// a listener on 0.0.0.0 / [::] is reachable on every one of them.
    pub(crate) machine: HashSet<IpAddr>,
}

impl OwnAddrs {
    /// Records a bound listener's address.
    pub(crate) fn add_listener(&mut self, a: SocketAddr) {
        let ip = addr::canonical(a.ip());
        if ip.is_unspecified() {
            self.any_ip_ports.insert(a.port());
        } else {
            self.exact.insert(SocketAddr::new(ip, a.port()));
        }
    }

    fn contains(&self, a: SocketAddr) -> bool {
        let ip = addr::canonical(a.ip());
        // 0.0.0.0 and :: connect to the local machine: in any spelling they
        // reach every listener on that port, a loopback-only one too.
        let any_listener_port = || self.exact.iter().any(|e| e.port() == a.port());
        if ip.is_unspecified() && (any_listener_port() || self.any_ip_ports.contains(&a.port())) {
            return true;
        }
        self.exact.contains(&SocketAddr::new(ip, a.port()))
            || (self.any_ip_ports.contains(&a.port())
                && (ip.is_loopback()
                    || ip.is_unspecified()
                    || self.machine.contains(&ip)
                    || addr::classify(ip).is_err()))
    }
}

/// What an admitted request may do: the proof policy admitted it, bound to
/// the addresses it may be dialled at (only those). Only this module makes
/// one; `upstream::dial` consumes it, so it is used once and cannot be
/// paired with other addresses.
#[derive(Debug)]
pub(crate) struct Admission {
    addrs: Vec<CheckedAddr>,
}

impl Admission {
    /// The addresses it admits, in the order to try them.
    pub(crate) fn addrs(&self) -> &[CheckedAddr] {
        &self.addrs
    }
}

/// What a request's address and taint checks need besides its target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts<'a> {
    /// sluice's own listening addresses.
    pub(crate) own: &'a OwnAddrs,
    /// What the taint store knows of the target host.
    pub(crate) taint: &'a TaintState,
    /// Does the request (or opaque tunnel) carry a body?
    pub(crate) carries_body: bool,
    /// The task's id, for the sentence's hint.
    pub(crate) task: &'a str,
}

/// Classifies every resolved address, then applies taint:
/// `private-address`, `untrusted-target`, `dns-failed`, in SPEC order.
/// `name` is [`decide_name`]'s verdict (a refusal there stands).
pub(crate) fn decide_addresses(
    rules: &TaskRules,
    target: &Target,
    resolution: &Resolution,
    facts: Facts<'_>,
    name: Verdict,
) -> Verdict<Admission> {
    let mut would_deny = match name {
        Verdict::Deny(r) => return Verdict::Deny(r),
        Verdict::Allow(()) => None,
        Verdict::WouldDeny((), r) => Some(r),
    };
    let own = facts.own;
    let checked = match resolution {
        Resolution::Literal(ip) => {
            let sa = SocketAddr::new(*ip, target.port);
            if own.contains(sa) {
                return Verdict::Deny(own_refusal(target, sa));
            }
            Ok(vec![CheckedAddr(sa)])
        }
        Resolution::Resolved(ips) => {
            let mut ok = Vec::with_capacity(ips.len());
            let mut first_bad = None;
            for ip in ips {
                let sa = SocketAddr::new(*ip, target.port);
                if own.contains(sa) {
                    first_bad.get_or_insert_with(|| own_refusal(target, sa));
                    continue;
                }
                match addr::classify(*ip) {
                    Ok(()) => ok.push(CheckedAddr(sa)),
                    Err(_) if rules.allow_private.iter().any(|n| n.contains(ip)) => {
                        ok.push(CheckedAddr(sa))
                    }
                    Err(why) => {
                        first_bad.get_or_insert_with(|| private_refusal(target, *ip, why));
                    }
                }
            }
            match (ok.is_empty(), first_bad) {
                (true, Some(refusal)) => return Verdict::Deny(refusal),
                (true, None) => Err(format!("{} resolved to no address", target.host)),
                (false, _) => Ok(ok),
            }
        }
        Resolution::Failed(why) => Err(why.clone()),
    };
    if facts.carries_body && rules.taint_mode != TaintMode::Off {
        let tainted = match facts.taint {
            TaintState::Clean => None,
            TaintState::Tainted { key, by, exact } => Some(Refusal {
                rule: Rule::UntrustedTarget,
                reason: taint_sentence(&target.host, key, by, *exact, facts.task),
                tainted_by: Some(by.clone()),
            }),
            TaintState::Overflow => Some(Refusal::new(
                Rule::UntrustedTarget,
                format!(
                    "the task's taint set is full (or was not saved whole: see sluice's log), so every host counts as tainted, and the request to {} carries a body",
                    target.host
                ),
            )),
        };
        if let Some(refusal) = tainted {
            match rules.taint_mode {
                TaintMode::Enforce => return Verdict::Deny(refusal),
                TaintMode::Shadow | TaintMode::Off => {
                    would_deny.get_or_insert(refusal);
                }
            }
        }
    }
    match checked {
        Ok(addrs) => Verdict::admit(Admission { addrs }, would_deny),
        Err(why) => Verdict::Deny(Refusal::new(Rule::DnsFailed, why)),
    }
}

/// The sentence of an `untrusted-target` refusal, with how to clear the
/// taint once a person has looked.
fn taint_sentence(host: &Host, key: &str, by: &Provenance, exact: bool, task: &str) -> String {
    let what = if exact {
        format!("{key} is tainted ({by}) and the request carries a body")
    } else {
        format!(
            "the path names no owner of {host} that sluice can read, and {key} is tainted ({by}): \
             a body to such a path could reach any owner"
        )
    };
    format!(
        "{what}; if a person has checked {key}, clear it with: sluice untaint --task {task} {key}"
    )
}

fn own_refusal(target: &Target, sa: SocketAddr) -> Refusal {
    Refusal::new(
        Rule::PrivateAddress,
        format!("{} resolves to {sa}, which is sluice itself", target.host),
    )
}

#[cfg(test)]
mod tests;
