//! Decisions on a tunnel after its CONNECT was admitted: what its first
//! bytes may be (SPEC §9 "ClientHello"), and whether an opaque relay may
//! carry it given the host's taint. Pure, like the rest of `policy`.

use std::net::SocketAddr;

use super::{
    decide_addresses, decide_name, Facts, Host, HostHeader, OwnAddrs, Refusal, Resolution, Rule,
    TaintState, Target, TaskRules, Verdict,
};

/// Is `port` the well-known port of a protocol whose server speaks first
/// (FTP, SSH, telnet, SMTP and submission, POP3, NNTP, IMAP, MySQL)? A
/// refused CONNECT there is not answered inside the tunnel: the client
/// would wait for a banner that never comes, so it gets the status line
/// at once. (Implicit-TLS ports, 465, 993, 995, start with the client's
/// hello and are answered inside TLS like HTTPS.)
pub(crate) fn server_speaks_first(port: u16) -> bool {
    matches!(
        port,
        21 | 22 | 23 | 25 | 110 | 119 | 143 | 587 | 2525 | 3306
    )
}

/// What a tunnel's client sent first, as `intercept::hello` read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TunnelStart {
    /// A complete ClientHello; its SNI, lower-cased.
    Tls {
        /// The server name the hello asked for, if any.
        sni: Option<String>,
    },
    /// First byte 0x16, but no complete ClientHello sluice can read: it
    /// did not parse, stalled, ended or grew past 64 KiB. The sentence
    /// says which.
    BadHello(String),
    /// An HTTP/1 request line: served as HTTP, each request decided.
    Http,
    /// The HTTP/2 preface (`PRI * HTTP/2.0`, h2c with prior knowledge):
    /// served as HTTP/2, each request decided.
    Http2,
    /// Bytes that could still have become a request line when the client
    /// stalled or closed: what they name cannot be shown.
    Unfinished(String),
    /// Anything else: relayed opaquely (it carries a body).
    Other,
    /// The client closed, or sent nothing before the head timeout.
    Nothing,
}

/// May a tunnel that started with `start` go on? A ClientHello must name
/// the CONNECT host (a tunnel to an IP literal, which TLS cannot name,
/// must carry no SNI); one sluice cannot read is refused, whatever another
/// TLS stack might make of it. The same for intercepted and passthrough
/// tunnels: nothing of a refused tunnel reaches upstream.
pub(crate) fn decide_tunnel_start(target: &Target, start: &TunnelStart) -> Result<(), Refusal> {
    match start {
        TunnelStart::Tls { sni } if sni_names(sni.as_deref(), target) => Ok(()),
        TunnelStart::Tls { sni: Some(s) } => Err(Refusal::new(
            Rule::SniMismatch,
            format!(
                "the TLS ClientHello names {s}, not the CONNECT host {}",
                target.host
            ),
        )),
        TunnelStart::Tls { sni: None } => Err(Refusal::new(
            Rule::SniMismatch,
            format!(
                "the TLS ClientHello names no server (SNI); the CONNECT host is {}",
                target.host
            ),
        )),
        TunnelStart::BadHello(why) => Err(Refusal::new(
            Rule::SniMismatch,
            format!(
                "{why}, so its server name cannot be checked against the CONNECT host {}",
                target.host
            ),
        )),
        TunnelStart::Unfinished(why) => Err(Refusal::new(
            Rule::BadTarget,
            format!("{why}, so the host it names cannot be checked"),
        )),
        TunnelStart::Http | TunnelStart::Http2 | TunnelStart::Other | TunnelStart::Nothing => {
            Ok(())
        }
    }
}

/// Does the SNI name the CONNECT host, after the same normalisation?
fn sni_names(sni: Option<&str>, target: &Target) -> bool {
    match (sni, &target.host) {
        (Some(s), Host::Name(host)) => matches!(
            super::target::normalize_host(s),
            Ok(Host::Name(n)) if &n == host
        ),
        (None, Host::Ip(_)) => true,
        _ => false,
    }
}

/// Is a connection that is already open — an opaque tunnel, an upgraded
/// relay, or (for a reload) any registered tunnel — still within policy
/// under the config in force now? The same rules a new request meets, on
/// the address it is connected to (never resolved again): `Ok` with any
/// shadow-mode refusal to log, or the refusal that closes it. `opaque`
/// connections carry a body, so taint applies to them.
pub(crate) fn decide_open(
    rules: &TaskRules,
    target: &Target,
    connected: SocketAddr,
    own: &OwnAddrs,
    taint: &TaintState,
    opaque: bool,
    task: &str,
) -> Verdict {
    let name = decide_name(rules, target, &HostHeader::Absent);
    let resolution = match target.host {
        Host::Ip(ip) => Resolution::Literal(ip),
        Host::Name(_) => Resolution::Resolved(vec![connected.ip()]),
    };
    let facts = Facts {
        own,
        taint,
        carries_body: opaque,
        task,
    };
    decide_addresses(rules, target, &resolution, facts, name).map(|_| ())
}

/// May a request inside a tunnel to `tunnel` go on? Not a CONNECT (no
/// tunnel in a tunnel), and an authority it names (absolute form, HTTP/2
/// `:authority`) must be the tunnel's own (`host-mismatch` otherwise; the
/// Host header is checked by [`decide_name`] as for any request).
pub(crate) fn decide_inner(
    tunnel: &Target,
    is_connect: bool,
    authority: Option<(&str, Result<Target, super::TargetError>)>,
) -> Result<(), Refusal> {
    if is_connect {
        return Err(Refusal::new(
            Rule::BadTarget,
            "CONNECT inside a CONNECT tunnel is not allowed",
        ));
    }
    match authority {
        Some((_, Ok(t))) if t.host == tunnel.host && t.port == tunnel.port => Ok(()),
        Some((raw, _)) => Err(Refusal::new(
            Rule::HostMismatch,
            format!("the request names {raw}, but the tunnel was opened to {tunnel}"),
        )),
        None => Ok(()),
    }
}

/// May a connection from this vsock peer use a listener that names
/// `expected` (`vsock:PORT@CID`)? On vsock, task identity is the listener
/// and the guest's CID: another VM on the same host must not use this
/// task's listener (`not-allowed`). A listener without a peer rule takes
/// any peer; one with a rule refuses a connection whose CID is unknown.
pub(crate) fn decide_peer(expected: Option<u32>, actual: Option<u32>) -> Result<(), Refusal> {
    match (expected, actual) {
        (None, _) => Ok(()),
        (Some(e), Some(a)) if e == a => Ok(()),
        (Some(e), Some(a)) => Err(Refusal::new(
            Rule::NotAllowed,
            format!(
                "this listener serves only the VM with CID {e}; the connection came from CID {a}"
            ),
        )),
        (Some(e), None) => Err(Refusal::new(
            Rule::NotAllowed,
            format!(
                "this listener serves only the VM with CID {e}; the connection's CID is unknown"
            ),
        )),
    }
}

/// Will a CONNECT to `target` be intercepted (if its client speaks TLS)?
/// When the task intercepts, sluice has a CA to mint leaves with, and the
/// host is not on the task's `passthrough` list. IP literals are never
/// intercepted (a certificate cannot name them for the client). Decided
/// once, when the CONNECT is admitted; the tunnel keeps the answer.
pub(crate) fn intercepts(
    task_intercepts: bool,
    have_ca: bool,
    passthrough: impl Fn(&str) -> bool,
    target: &Target,
) -> bool {
    task_intercepts && have_ca && target.host.as_name().is_some_and(|h| !passthrough(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::target::parse_authority;
    use crate::policy::Provenance;

    fn t(a: &str) -> Target {
        parse_authority(a, None).unwrap()
    }

    #[test]
    fn inner_request_table() {
        let tunnel = t("pkgs.example.com:443");
        let auth = |s: &'static str| Some((s, parse_authority(s, Some(443))));
        type Authority = Option<(&'static str, Result<Target, crate::policy::TargetError>)>;
        let cases: Vec<(&str, bool, Authority, Option<Rule>)> = vec![
            ("origin form", false, None, None),
            ("same authority", false, auth("pkgs.example.com"), None),
            (
                "same, explicit port",
                false,
                auth("pkgs.example.com:443"),
                None,
            ),
            ("same, other case", false, auth("PKGS.example.com"), None),
            (
                "other host",
                false,
                auth("paste.example.com"),
                Some(Rule::HostMismatch),
            ),
            (
                "other port",
                false,
                auth("pkgs.example.com:8443"),
                Some(Rule::HostMismatch),
            ),
            (
                "unparsable",
                false,
                auth("pkgs example"),
                Some(Rule::HostMismatch),
            ),
            (
                "CONNECT",
                true,
                auth("pkgs.example.com:443"),
                Some(Rule::BadTarget),
            ),
        ];
        for (what, connect, a, want) in cases {
            let got = decide_inner(&tunnel, connect, a).err().map(|r| r.rule);
            assert_eq!(got, want, "case {what}");
        }
    }

    #[test]
    fn peer_cid_table() {
        assert!(decide_peer(None, Some(5)).is_ok(), "no rule: any peer");
        assert!(decide_peer(None, None).is_ok());
        assert!(decide_peer(Some(5), Some(5)).is_ok());
        let r = decide_peer(Some(5), Some(6)).unwrap_err();
        assert_eq!(r.rule, Rule::NotAllowed);
        assert!(
            r.reason.contains("CID 5") && r.reason.contains("CID 6"),
            "{}",
            r.reason
        );
        assert_eq!(
            decide_peer(Some(5), None).unwrap_err().rule,
            Rule::NotAllowed
        );
    }

    #[test]
    fn intercepts_table() {
        let name = t("pkgs.example.com:443");
        let ip = t("10.0.0.7:443");
        let pass = |h: &str| h == "pinned.example.com";
        assert!(intercepts(true, true, pass, &name));
        assert!(
            !intercepts(false, true, pass, &name),
            "task does not intercept"
        );
        assert!(!intercepts(true, false, pass, &name), "no CA");
        assert!(!intercepts(true, true, pass, &ip), "IP literal");
        assert!(
            !intercepts(true, true, pass, &t("pinned.example.com:443")),
            "passthrough"
        );
    }

    #[test]
    fn tunnel_start_table() {
        let name = t("pkgs.example.com:443");
        let ip = t("10.0.0.7:443");
        let tls = |s: Option<&str>| TunnelStart::Tls {
            sni: s.map(String::from),
        };
        let cases: Vec<(&str, &Target, TunnelStart, Option<Rule>)> = vec![
            ("same SNI", &name, tls(Some("pkgs.example.com")), None),
            (
                "SNI in upper case with a dot",
                &name,
                tls(Some("PKGS.example.com.")),
                None,
            ),
            (
                "other SNI (domain fronting)",
                &name,
                tls(Some("other.example.com")),
                Some(Rule::SniMismatch),
            ),
            (
                "no SNI to a name",
                &name,
                tls(None),
                Some(Rule::SniMismatch),
            ),
            ("no SNI to an IP", &ip, tls(None), None),
            (
                "SNI to an IP",
                &ip,
                tls(Some("pkgs.example.com")),
                Some(Rule::SniMismatch),
            ),
            (
                "unreadable hello (empty record first)",
                &name,
                TunnelStart::BadHello("x".into()),
                Some(Rule::SniMismatch),
            ),
            (
                "stalled hello",
                &name,
                TunnelStart::BadHello("stalled".into()),
                Some(Rule::SniMismatch),
            ),
            ("plain HTTP", &name, TunnelStart::Http, None),
            ("h2c preface", &name, TunnelStart::Http2, None),
            (
                "unfinished request line",
                &name,
                TunnelStart::Unfinished("x".into()),
                Some(Rule::BadTarget),
            ),
            ("other bytes", &name, TunnelStart::Other, None),
            ("nothing", &name, TunnelStart::Nothing, None),
        ];
        for (what, target, start, want) in cases {
            let got = decide_tunnel_start(target, &start).err().map(|r| r.rule);
            assert_eq!(got, want, "case {what}");
        }
    }

    #[test]
    fn open_connection_table() {
        use crate::policy::{AllowList, AllowMode, TaintMode};
        let mut allow = AllowList::default();
        allow.insert(Host::Name("pkgs.example.com".into()), 443);
        let rules = |taint_mode, allow_mode| TaskRules {
            allow: allow.clone(),
            allow_mode,
            allow_private: vec!["127.0.0.0/8".parse().unwrap()],
            taint_mode,
        };
        let p = Provenance {
            source: "http://docs.example.com/".into(),
            at: "now".into(),
        };
        let tainted = TaintState::Tainted {
            key: "pkgs.example.com".into(),
            by: p,
            exact: true,
        };
        let addr: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let mut own = OwnAddrs::default();
        own.add_listener("127.0.0.1:3128".parse().unwrap());
        let cases: Vec<(&str, TaskRules, Target, TaintState, bool, &str)> = vec![
            (
                "clean, allowed",
                rules(TaintMode::Enforce, AllowMode::Enforce),
                t("pkgs.example.com:443"),
                TaintState::Clean,
                true,
                "ok",
            ),
            (
                "tainted opaque, enforce",
                rules(TaintMode::Enforce, AllowMode::Enforce),
                t("pkgs.example.com:443"),
                tainted.clone(),
                true,
                "untrusted-target",
            ),
            (
                "tainted opaque, shadow",
                rules(TaintMode::Shadow, AllowMode::Enforce),
                t("pkgs.example.com:443"),
                tainted.clone(),
                true,
                "would",
            ),
            (
                "tainted but served (not opaque)",
                rules(TaintMode::Enforce, AllowMode::Enforce),
                t("pkgs.example.com:443"),
                tainted,
                false,
                "ok",
            ),
            (
                "overflow opaque",
                rules(TaintMode::Enforce, AllowMode::Enforce),
                t("pkgs.example.com:443"),
                TaintState::Overflow,
                true,
                "untrusted-target",
            ),
            (
                "host left the allow-list",
                rules(TaintMode::Enforce, AllowMode::Enforce),
                t("gone.example.com:443"),
                TaintState::Clean,
                true,
                "not-allowed",
            ),
            (
                "left the allow-list, shadow",
                rules(TaintMode::Enforce, AllowMode::Shadow),
                t("gone.example.com:443"),
                TaintState::Clean,
                true,
                "would",
            ),
        ];
        for (what, r, target, taint, opaque, want) in cases {
            let got = match decide_open(&r, &target, addr, &own, &taint, opaque, "build") {
                Verdict::Allow(()) => "ok",
                Verdict::WouldDeny(..) => "would",
                Verdict::Deny(refusal) => refusal.rule.as_str(),
            };
            assert_eq!(got, want, "case {what}");
        }
    }
}
