//! Decisions on a tunnel after its CONNECT was admitted: what its first
//! bytes may be (SPEC §9 "ClientHello"), and whether an opaque relay may
//! carry it given the host's taint. Pure, like the rest of `policy`.

use super::{Host, Refusal, Rule, TaintMode, TaintState, Target};

/// What a tunnel's client sent first, as `intercept::hello` read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TunnelStart {
    /// A complete ClientHello; its SNI, lower-cased.
    Tls { sni: Option<String> },
    /// First byte 0x16, but no complete ClientHello sluice can read: it
    /// did not parse, stalled, ended or grew past 64 KiB. The sentence
    /// says which.
    BadHello(String),
    /// An HTTP/1 request line: served as HTTP, each request decided.
    Http,
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
pub fn decide_tunnel_start(target: &Target, start: &TunnelStart) -> Result<(), Refusal> {
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
        TunnelStart::Http | TunnelStart::Other | TunnelStart::Nothing => Ok(()),
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

/// The verdict on relaying a tunnel opaquely, which cannot be shown to
/// carry no body (SPEC §4), given the host's taint.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum OpaqueVerdict {
    Relay,
    /// Shadow mode: relayed, logged as `would_deny` with this refusal.
    RelayWouldDeny(Refusal),
    Refuse(Refusal),
}

/// Taint rules for an opaque relay to `host` (a CONNECT tunnel that is
/// not intercepted, or an upgraded WebSocket / h2c connection).
pub fn decide_opaque(mode: TaintMode, host: &str, taint: &TaintState) -> OpaqueVerdict {
    let refusal = match taint {
        _ if mode == TaintMode::Off => return OpaqueVerdict::Relay,
        TaintState::Clean => return OpaqueVerdict::Relay,
        TaintState::Tainted(p) => Refusal {
            rule: Rule::UntrustedTarget,
            reason: format!(
                "{host} is tainted ({p}) and an opaque connection cannot be shown to carry no body"
            ),
            tainted_by: Some(p.clone()),
        },
        TaintState::Overflow => Refusal::new(
            Rule::UntrustedTarget,
            "the task's taint set is full, so every host counts as tainted, and an opaque connection cannot be shown to carry no body",
        ),
    };
    match mode {
        TaintMode::Enforce => OpaqueVerdict::Refuse(refusal),
        TaintMode::Shadow | TaintMode::Off => OpaqueVerdict::RelayWouldDeny(refusal),
    }
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
            ("other bytes", &name, TunnelStart::Other, None),
            ("nothing", &name, TunnelStart::Nothing, None),
        ];
        for (what, target, start, want) in cases {
            let got = decide_tunnel_start(target, &start).err().map(|r| r.rule);
            assert_eq!(got, want, "case {what}");
        }
    }

    #[test]
    fn opaque_table() {
        let p = Provenance {
            source: "http://docs.example.com/".into(),
            at: "now".into(),
        };
        let tainted = TaintState::Tainted(p);
        use OpaqueVerdict as V;
        let is = |v: V| match v {
            V::Relay => "relay",
            V::RelayWouldDeny(_) => "would",
            V::Refuse(_) => "refuse",
        };
        let cases = [
            (
                "clean enforce",
                TaintMode::Enforce,
                TaintState::Clean,
                "relay",
            ),
            (
                "tainted enforce",
                TaintMode::Enforce,
                tainted.clone(),
                "refuse",
            ),
            (
                "tainted shadow",
                TaintMode::Shadow,
                tainted.clone(),
                "would",
            ),
            ("tainted off", TaintMode::Off, tainted, "relay"),
            (
                "overflow enforce",
                TaintMode::Enforce,
                TaintState::Overflow,
                "refuse",
            ),
            (
                "overflow shadow",
                TaintMode::Shadow,
                TaintState::Overflow,
                "would",
            ),
        ];
        for (what, mode, state, want) in cases {
            assert_eq!(
                is(decide_opaque(mode, "h.example.com", &state)),
                want,
                "case {what}"
            );
        }
    }
}
