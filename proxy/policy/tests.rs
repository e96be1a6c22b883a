use super::target::parse_authority;
use super::*;

fn rules(allow: &[&str]) -> TaskRules {
    let mut list = AllowList::default();
    for a in allow {
        let t = parse_authority(a, Some(0)).unwrap();
        if t.port == 0 {
            list.insert(t.host.clone(), 80);
            list.insert(t.host, 443);
        } else {
            list.insert(t.host, t.port);
        }
    }
    TaskRules {
        allow: list,
        allow_mode: AllowMode::Enforce,
        allow_private: vec![],
        taint_mode: TaintMode::Enforce,
    }
}

fn name_rule(r: &TaskRules, target: &str, host: &HostHeader) -> Option<Rule> {
    let Ok(t) = parse_authority(target, None) else {
        return Some(Rule::BadTarget);
    };
    match decide_name(r, &t, host) {
        Verdict::Allow(()) => None,
        Verdict::WouldDeny((), w) => panic!("unexpected would_deny {w:?}"),
        Verdict::Deny(refusal) => Some(refusal.rule),
    }
}

fn header(s: &str, default_port: u16) -> HostHeader {
    HostHeader::One(parse_authority(s, Some(default_port)))
}

#[test]
fn name_table() {
    let r = rules(&[
        "pkgs.example.com",
        "api.example.com:8443",
        "10.0.0.7:8080",
        "[2001:db8::7]:443",
    ]);
    let none = HostHeader::Absent;
    let cases: &[(&str, &str, &HostHeader, Option<Rule>)] = &[
        ("exact allowed", "pkgs.example.com:443", &none, None),
        ("port 80 implied", "pkgs.example.com:80", &none, None),
        (
            "other port",
            "pkgs.example.com:8080",
            &none,
            Some(Rule::NotAllowed),
        ),
        (
            "uppercase trailing dot allowed",
            "PKGS.EXAMPLE.COM.:443",
            &none,
            None,
        ),
        (
            "suffix attack",
            "pkgs.example.com.evil.example.com:443",
            &none,
            Some(Rule::NotAllowed),
        ),
        (
            "prefix attack",
            "xpkgs.example.com:443",
            &none,
            Some(Rule::NotAllowed),
        ),
        (
            "parent domain",
            "example.com:443",
            &none,
            Some(Rule::NotAllowed),
        ),
        (
            "subdomain",
            "a.pkgs.example.com:443",
            &none,
            Some(Rule::NotAllowed),
        ),
        ("explicit port entry", "api.example.com:8443", &none, None),
        (
            "explicit port entry not 443",
            "api.example.com:443",
            &none,
            Some(Rule::NotAllowed),
        ),
        (
            "ip literal loopback",
            "127.0.0.1:80",
            &none,
            Some(Rule::IpLiteral),
        ),
        (
            "ip literal decimal",
            "2130706433:80",
            &none,
            Some(Rule::IpLiteral),
        ),
        (
            "ip literal octal",
            "0177.0.0.1:80",
            &none,
            Some(Rule::IpLiteral),
        ),
        (
            "ip literal hex",
            "0x7f000001:80",
            &none,
            Some(Rule::IpLiteral),
        ),
        ("ip literal short", "127.1:80", &none, Some(Rule::IpLiteral)),
        ("ip literal v6", "[::1]:443", &none, Some(Rule::IpLiteral)),
        (
            "ip literal mapped",
            "[::ffff:127.0.0.1]:443",
            &none,
            Some(Rule::IpLiteral),
        ),
        (
            "ip literal metadata",
            "169.254.169.254:80",
            &none,
            Some(Rule::IpLiteral),
        ),
        ("allowed ip canonical", "10.0.0.7:8080", &none, None),
        (
            "allowed ip hex spelling",
            "0x0a000007:8080",
            &none,
            Some(Rule::IpLiteral),
        ),
        (
            "allowed ip other port",
            "10.0.0.7:80",
            &none,
            Some(Rule::IpLiteral),
        ),
        ("allowed v6", "[2001:db8::7]:443", &none, None),
        (
            "bad port",
            "pkgs.example.com:0",
            &none,
            Some(Rule::BadTarget),
        ),
        (
            "brackets around name",
            "[pkgs.example.com]:443",
            &none,
            Some(Rule::BadTarget),
        ),
    ];
    for (what, target, host, want) in cases {
        assert_eq!(&name_rule(&r, target, host), want, "case {what:?}");
    }
}

#[test]
fn host_header_table() {
    let r = rules(&["pkgs.example.com", "other.example.com"]);
    let cases: &[(&str, HostHeader, Option<Rule>)] = &[
        ("same", header("pkgs.example.com", 80), None),
        ("same with port", header("pkgs.example.com:80", 80), None),
        ("case and dot", header("PKGS.example.com.", 80), None),
        (
            "other allowed host",
            header("other.example.com", 80),
            Some(Rule::HostMismatch),
        ),
        (
            "other port",
            header("pkgs.example.com:8080", 80),
            Some(Rule::HostMismatch),
        ),
        ("two headers", HostHeader::Many, Some(Rule::BadTarget)),
        (
            "malformed",
            header("pkgs.example.com:x", 80),
            Some(Rule::BadTarget),
        ),
    ];
    for (what, host, want) in cases {
        assert_eq!(
            name_rule(&r, "pkgs.example.com:80", host),
            *want,
            "case {what:?}"
        );
    }
}

#[test]
fn shadow_allow_mode_records_would_deny() {
    let mut r = rules(&["pkgs.example.com"]);
    r.allow_mode = AllowMode::Shadow;
    let t = parse_authority("other.example.com:443", None).unwrap();
    match decide_name(&r, &t, &HostHeader::Absent) {
        Verdict::WouldDeny((), w) => assert_eq!(w.rule, Rule::NotAllowed),
        v => panic!("got {v:?}"),
    }
    // IP literals are enforced even in shadow mode.
    let t = parse_authority("127.0.0.1:443", None).unwrap();
    assert!(matches!(
        decide_name(&r, &t, &HostHeader::Absent),
        Verdict::Deny(_)
    ));
}

fn addr_rule(
    r: &TaskRules,
    res: Resolution,
    taint: TaintState,
    body: bool,
) -> Result<Vec<SocketAddr>, Rule> {
    let t = parse_authority("pkgs.example.com:443", None).unwrap();
    let own = OwnAddrs {
        exact: ["127.0.0.1:3128".parse().unwrap()].into_iter().collect(),
        any_ip_ports: HashSet::new(),
        machine: HashSet::new(),
    };
    match decide_addresses(r, &t, &res, facts(&own, &taint, body), Verdict::Allow(())) {
        Verdict::Allow(a) => Ok(a.addrs.iter().map(super::CheckedAddr::addr).collect()),
        Verdict::WouldDeny(..) => panic!("unexpected would_deny"),
        Verdict::Deny(refusal) => Err(refusal.rule),
    }
}

fn ips(list: &[&str]) -> Resolution {
    Resolution::Resolved(list.iter().map(|s| s.parse().unwrap()).collect())
}

fn prov() -> Provenance {
    Provenance {
        source: "http://docs.example.com/readme".into(),
        at: "2026-12-02T10:00:00Z".into(),
    }
}

#[test]
fn address_table() {
    let r = rules(&["pkgs.example.com"]);
    let mut private_ok = rules(&["pkgs.example.com"]);
    private_ok.allow_private = vec!["127.0.0.0/8".parse().unwrap()];
    let clean = TaintState::Clean;
    let tainted = TaintState::Tainted {
        key: "pkgs.example.com".into(),
        by: prov(),
        exact: true,
    };
    let sa = |s: &str| -> SocketAddr { s.parse().unwrap() };
    type Case<'a> = (
        &'a str,
        &'a TaskRules,
        Resolution,
        TaintState,
        bool,
        Result<Vec<SocketAddr>, Rule>,
    );
    let cases: Vec<Case> = vec![
        (
            "public",
            &r,
            ips(&["93.184.216.34"]),
            clean.clone(),
            false,
            Ok(vec![sa("93.184.216.34:443")]),
        ),
        (
            "loopback",
            &r,
            ips(&["127.0.0.1"]),
            clean.clone(),
            false,
            Err(Rule::PrivateAddress),
        ),
        (
            "metadata",
            &r,
            ips(&["169.254.169.254"]),
            clean.clone(),
            false,
            Err(Rule::PrivateAddress),
        ),
        (
            "cgnat",
            &r,
            ips(&["100.64.1.1"]),
            clean.clone(),
            false,
            Err(Rule::PrivateAddress),
        ),
        (
            "nat64 private",
            &r,
            ips(&["64:ff9b::a00:1"]),
            clean.clone(),
            false,
            Err(Rule::PrivateAddress),
        ),
        (
            "mixed keeps only public",
            &r,
            ips(&["10.0.0.1", "93.184.216.34"]),
            clean.clone(),
            false,
            Ok(vec![sa("93.184.216.34:443")]),
        ),
        (
            "allow_private admits",
            &private_ok,
            ips(&["127.0.0.1"]),
            clean.clone(),
            false,
            Ok(vec![sa("127.0.0.1:443")]),
        ),
        (
            "allow_private is exact cidr",
            &private_ok,
            ips(&["10.0.0.1"]),
            clean.clone(),
            false,
            Err(Rule::PrivateAddress),
        ),
        (
            "no answers",
            &r,
            ips(&[]),
            clean.clone(),
            false,
            Err(Rule::DnsFailed),
        ),
        (
            "dns failed",
            &r,
            Resolution::Failed("nxdomain".into()),
            clean.clone(),
            false,
            Err(Rule::DnsFailed),
        ),
        (
            "tainted no body",
            &r,
            ips(&["93.184.216.34"]),
            tainted.clone(),
            false,
            Ok(vec![sa("93.184.216.34:443")]),
        ),
        (
            "tainted with body",
            &r,
            ips(&["93.184.216.34"]),
            tainted.clone(),
            true,
            Err(Rule::UntrustedTarget),
        ),
        (
            "private before taint",
            &r,
            ips(&["10.0.0.1"]),
            tainted.clone(),
            true,
            Err(Rule::PrivateAddress),
        ),
        (
            "taint before dns",
            &r,
            Resolution::Failed("nxdomain".into()),
            tainted.clone(),
            true,
            Err(Rule::UntrustedTarget),
        ),
        (
            "overflow fails closed",
            &r,
            ips(&["93.184.216.34"]),
            TaintState::Overflow,
            true,
            Err(Rule::UntrustedTarget),
        ),
        (
            "overflow without body",
            &r,
            ips(&["93.184.216.34"]),
            TaintState::Overflow,
            false,
            Ok(vec![sa("93.184.216.34:443")]),
        ),
    ];
    for (what, rules, res, taint, body, want) in cases {
        assert_eq!(addr_rule(rules, res, taint, body), want, "case {what:?}");
    }
}

#[test]
fn own_listener_refused_even_when_private_allowed() {
    let mut r = rules(&["pkgs.example.com"]);
    r.allow_private = vec!["127.0.0.0/8".parse().unwrap()];
    let res = Resolution::Resolved(vec!["127.0.0.1".parse().unwrap()]);
    let t = parse_authority("pkgs.example.com:3128", None).unwrap();
    let own = OwnAddrs {
        exact: ["127.0.0.1:3128".parse().unwrap()].into_iter().collect(),
        any_ip_ports: HashSet::new(),
        machine: HashSet::new(),
    };
    let d = decide_addresses(
        &r,
        &t,
        &res,
        facts(&own, &TaintState::Clean, false),
        Verdict::Allow(()),
    );
    assert!(matches!(
        d,
        Verdict::Deny(Refusal {
            rule: Rule::PrivateAddress,
            ..
        })
    ));
}

#[test]
fn taint_shadow_allows_with_would_deny() {
    let mut r = rules(&["pkgs.example.com"]);
    r.taint_mode = TaintMode::Shadow;
    let t = parse_authority("pkgs.example.com:443", None).unwrap();
    let d = decide_addresses(
        &r,
        &t,
        &ips(&["93.184.216.34"]),
        facts(
            &OwnAddrs::default(),
            &TaintState::Tainted {
                key: "pkgs.example.com".into(),
                by: prov(),
                exact: true,
            },
            true,
        ),
        Verdict::Allow(()),
    );
    match d {
        Verdict::WouldDeny(_, w) => {
            assert_eq!(w.rule, Rule::UntrustedTarget);
            assert_eq!(w.tainted_by, Some(prov()));
        }
        d => panic!("got {d:?}"),
    }
    r.taint_mode = TaintMode::Off;
    let d = decide_addresses(
        &r,
        &t,
        &ips(&["93.184.216.34"]),
        facts(
            &OwnAddrs::default(),
            &TaintState::Tainted {
                key: "pkgs.example.com".into(),
                by: prov(),
                exact: true,
            },
            true,
        ),
        Verdict::Allow(()),
    );
    assert!(matches!(d, Verdict::Allow(_)));
}

#[test]
fn rule_all_is_derived_and_in_declaration_order() {
    assert_eq!(Rule::ALL.len(), Rule::COUNT);
    for (i, r) in Rule::ALL.iter().enumerate() {
        assert_eq!(r.index(), i, "{}", r.as_str());
    }
    // Every variant is in ALL: a new rule breaks this match first.
    let listed = |r: Rule| match r {
        Rule::BadTarget
        | Rule::IpLiteral
        | Rule::NotAllowed
        | Rule::HostMismatch
        | Rule::SniMismatch
        | Rule::PrivateAddress
        | Rule::UntrustedTarget
        | Rule::DnsFailed
        | Rule::UpstreamFailed
        | Rule::UpstreamTimeout
        | Rule::OverCapacity
        | Rule::SecretLeak
        | Rule::Quarantined => Rule::ALL.contains(&r),
    };
    assert!(Rule::ALL.iter().all(|r| listed(*r)));
    let ids: std::collections::HashSet<_> = Rule::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(ids.len(), Rule::COUNT, "rule ids are distinct");
}

#[test]
fn only_enforce_mode_revokes_on_a_new_taint() {
    assert!(TaintMode::Enforce.revokes());
    assert!(!TaintMode::Shadow.revokes());
    assert!(!TaintMode::Off.revokes());
}

/// The old question, through [`names::taint_key`]: a URL-context name,
/// no multi-tenant hosts.
fn worth_tainting(
    name: &str,
    served_by: &str,
    mode: SelfTaint,
    allowed: impl Fn(&str) -> bool,
) -> bool {
    let n = names::Named::new(name, names::Seen::Url);
    let own = |h: &str| mode == SelfTaint::Exclude && h == served_by;
    let judge = names::Judge {
        own_site: &own,
        by_owner: &owners::ByOwner::none(),
        allowed_somewhere: &allowed,
        weak_counts: false,
    };
    !names::taint_keys(&n, &judge).is_empty()
}

#[test]
fn worth_tainting_table() {
    let allowed = |n: &str| n == "intranet";
    let cases = [
        (
            "named elsewhere",
            "paste.example.com",
            "docs.example.com",
            SelfTaint::Exclude,
            true,
        ),
        (
            "self excluded by default",
            "api.example.com",
            "api.example.com",
            SelfTaint::Exclude,
            false,
        ),
        (
            "self kept when asked",
            "api.example.com",
            "api.example.com",
            SelfTaint::Taint,
            true,
        ),
        (
            "base64 fragment single label",
            "b",
            "registry.example.com",
            SelfTaint::Exclude,
            false,
        ),
        (
            "single label on an allow-list",
            "intranet",
            "docs.example.com",
            SelfTaint::Exclude,
            true,
        ),
        (
            "subdomain of the server is not self",
            "evil.api.example.com",
            "api.example.com",
            SelfTaint::Exclude,
            true,
        ),
    ];
    for (what, name, served_by, mode, want) in cases {
        assert_eq!(
            worth_tainting(name, served_by, mode, allowed),
            want,
            "case {what}"
        );
    }
}

/// Issue 11 finding 8: the admin API on 127.0.0.1 reached as
/// [::ffff:127.0.0.1] (or ::127.0.0.1, or NAT64) with a wide allow_private.
#[test]
fn own_address_in_ipv6_forms_is_refused() {
    let mut r = rules(&["pkgs.example.com:9901"]);
    r.allow_private = vec!["::/0".parse().unwrap(), "0.0.0.0/0".parse().unwrap()];
    let mut own = OwnAddrs::default();
    own.add_listener("127.0.0.1:9901".parse().unwrap());
    own.add_listener("[::]:3128".parse().unwrap());
    own.machine.insert("93.184.215.14".parse().unwrap());
    let cases = [
        ("mapped", "::ffff:127.0.0.1", 9901, true),
        ("compatible", "::127.0.0.1", 9901, true),
        ("nat64", "64:ff9b::7f00:1", 9901, true),
        ("plain", "127.0.0.1", 9901, true),
        ("other port", "127.0.0.1", 9902, false),
        (
            "wildcard listener via a public interface address",
            "93.184.215.14",
            3128,
            true,
        ),
        (
            "wildcard listener via its mapped form",
            "::ffff:93.184.215.14",
            3128,
            true,
        ),
        ("another public host on that port", "8.8.8.8", 3128, false),
        // Round 3, finding 6: the unspecified address is the local machine.
        ("0.0.0.0 to a loopback listener", "0.0.0.0", 9901, true),
        ("mapped 0.0.0.0", "::ffff:0.0.0.0", 9901, true),
        (":: to a loopback listener", "::", 9901, true),
        ("nat64 0.0.0.0", "64:ff9b::", 9901, true),
        ("0.0.0.0 to a wildcard listener", "0.0.0.0", 3128, true),
        (
            "0.0.0.0 on a port sluice does not use",
            "0.0.0.0",
            9902,
            false,
        ),
    ];
    for (what, ip, port, refused) in cases {
        let t = parse_authority(&format!("pkgs.example.com:{port}"), None).unwrap();
        let res = Resolution::Resolved(vec![ip.parse().unwrap()]);
        let d = decide_addresses(
            &r,
            &t,
            &res,
            facts(&own, &TaintState::Clean, false),
            Verdict::Allow(()),
        );
        let got = matches!(
            d,
            Verdict::Deny(Refusal {
                rule: Rule::PrivateAddress,
                ..
            })
        );
        assert_eq!(got, refused, "case {what}");
    }
}

fn facts<'a>(own: &'a OwnAddrs, taint: &'a TaintState, carries_body: bool) -> Facts<'a> {
    Facts {
        own,
        taint,
        carries_body,
        task: "build",
    }
}

#[test]
fn rule_ids_and_statuses_are_the_contract() {
    // SPEC §4: each rule's id and HTTP status.
    let table = [
        (Rule::BadTarget, "bad-target", 400),
        (Rule::IpLiteral, "ip-literal", 403),
        (Rule::NotAllowed, "not-allowed", 403),
        (Rule::HostMismatch, "host-mismatch", 403),
        (Rule::SniMismatch, "sni-mismatch", 403),
        (Rule::PrivateAddress, "private-address", 403),
        (Rule::UntrustedTarget, "untrusted-target", 403),
        (Rule::DnsFailed, "dns-failed", 502),
        (Rule::UpstreamFailed, "upstream-failed", 502),
        (Rule::UpstreamTimeout, "upstream-timeout", 504),
        (Rule::OverCapacity, "over-capacity", 503),
        (Rule::SecretLeak, "secret-leak", 403),
        (Rule::Quarantined, "quarantined", 403),
    ];
    assert_eq!(table.len(), Rule::ALL.len());
    for (rule, id, status) in table {
        assert_eq!(rule.as_str(), id);
        assert_eq!(rule.to_string(), id, "Display is the id");
        assert_eq!(rule.status(), status, "{id}");
    }
}

#[test]
fn a_bare_public_suffix_is_not_a_host() {
    for s in ["com", "co.uk", "org"] {
        assert!(
            !worth_tainting(s, "x.example.com", SelfTaint::Exclude, |_| false),
            "{s}"
        );
    }
    assert!(worth_tainting(
        "example.co.uk",
        "x.example.com",
        SelfTaint::Exclude,
        |_| false
    ));
}

#[test]
fn allow_list_lookups() {
    let r = rules(&["pkgs.example.com:443", "10.0.0.7:8080"]);
    let list = &r.allow;
    assert_eq!(list.len(), 2);
    assert_eq!(AllowList::default().len(), 0);
    assert!(list.names("pkgs.example.com"), "any port");
    assert!(!list.names("example.com"), "exact names only");
    assert!(!list.names("10.0.0.7"), "IP entries are not names");
    assert_eq!(list.sorted(), vec!["pkgs.example.com:443", "10.0.0.7:8080"]);
}

#[test]
fn provenance_reads_as_a_sentence() {
    let p = Provenance {
        source: "https://docs.example.com/readme".into(),
        at: "2026-12-02T10:00:00Z".into(),
    };
    assert_eq!(
        p.to_string(),
        "named by https://docs.example.com/readme at 2026-12-02T10:00:00Z"
    );
}

#[test]
fn the_private_address_sentence_says_what_to_add_but_never_for_metadata() {
    let t = parse_authority("mirror.example.com:443", None).unwrap();
    let r = private_refusal(&t, "10.0.0.7".parse().unwrap(), addr::NonPublic::Private);
    assert_eq!(r.rule, Rule::PrivateAddress);
    assert!(
        r.reason
            .contains("add \"10.0.0.7\" to allow_private in the task's [[task]] section")
            && r.reason.contains("--allow-private 10.0.0.7"),
        "{}",
        r.reason
    );
    let r = private_refusal(
        &t,
        "169.254.169.254".parse().unwrap(),
        addr::NonPublic::Metadata,
    );
    assert!(r.reason.contains("cloud metadata"), "{}", r.reason);
    assert!(
        !r.reason.contains("allow_private") && !r.reason.contains("--allow-private"),
        "{}",
        r.reason
    );
}

#[test]
fn refusals_are_not_answered_inside_the_tunnel_where_the_server_speaks_first() {
    for port in [80, 443, 8080, 8443, 465, 993, 5432, 40123] {
        assert!(!server_speaks_first(port), "{port}");
    }
    for port in [21, 22, 25, 110, 143, 587, 3306] {
        assert!(server_speaks_first(port), "{port}");
    }
}
