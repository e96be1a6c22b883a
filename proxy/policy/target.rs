//! Parsing and normalising request targets: `host`, `host:port`, `[v6]:port`.
//!
//! Pure: no I/O. Every later step uses the [`Target`] this produces, so a
//! host is normalised exactly once.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A destination host after normalisation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// Lower-case ASCII (IDNA applied), no trailing dot.
    Name(String),
    /// An IP literal, in whatever spelling it arrived.
    Ip(IpAddr),
}

impl Host {
    pub(crate) fn as_name(&self) -> Option<&str> {
        match self {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        }
    }

    /// What the taint set knows this host by: the name, or an IP literal
    /// in its plain text form (no brackets). Borrowed for a name.
    pub(crate) fn taint_name(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Host::Name(n) => std::borrow::Cow::Borrowed(n),
            Host::Ip(ip) => std::borrow::Cow::Owned(ip.to_string()),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// A normalised `host:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: Host,
    pub port: u16,
    /// True when an IP literal was written in its canonical spelling
    /// (`10.0.0.7`, `[2001:db8::1]`). Only canonical spellings can match an
    /// IP named in `allow`; `0x0a000007` never does.
    pub(crate) canonical_ip: bool,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a target is malformed (rule `bad-target`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("the target is empty")]
    Empty,
    #[error("the target carries user information ('@')")]
    Userinfo,
    #[error("brackets may only enclose an IPv6 address")]
    Brackets,
    #[error("the port {0:?} is not a decimal number from 1 to 65535")]
    BadPort(String),
    #[error("the target has no port")]
    MissingPort,
    #[error("the host name {0:?} is not a valid DNS name")]
    BadName(String),
    #[error("{0:?} looks like an IPv4 address but is not a valid one")]
    BadIpv4(String),
}

/// Parses a port: plain decimal 1–65535, no sign, no leading zero.
pub(crate) fn parse_port(s: &str) -> Result<u16, TargetError> {
    let bad = || TargetError::BadPort(s.to_string());
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('0') {
        return Err(bad());
    }
    match s.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        _ => Err(bad()),
    }
}

/// Parses an authority (`host`, `host:port`, `[v6]`, `[v6]:port`).
/// `default_port` applies when no port is written; `None` makes the port
/// mandatory (CONNECT).
pub fn parse_authority(raw: &str, default_port: Option<u16>) -> Result<Target, TargetError> {
    if raw.is_empty() {
        return Err(TargetError::Empty);
    }
    if raw.contains('@') {
        return Err(TargetError::Userinfo);
    }
    let (host_part, port_part) = split_host_port(raw)?;
    let port = match port_part {
        Some(p) => parse_port(p)?,
        None => default_port.ok_or(TargetError::MissingPort)?,
    };
    let (host, canonical_ip) = if let Some(inner) = host_part
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
    {
        let v6: Ipv6Addr = inner.parse().map_err(|_| TargetError::Brackets)?;
        let canonical = inner == v6.to_string();
        (Host::Ip(IpAddr::V6(v6)), canonical)
    } else {
        let host = normalize_host(host_part)?;
        let canonical = match &host {
            Host::Ip(ip) => host_part == ip.to_string(),
            Host::Name(_) => false,
        };
        (host, canonical)
    };
    Ok(Target {
        host,
        port,
        canonical_ip,
    })
}

/// Splits `host[:port]`, honouring brackets. Returns the host with its
/// brackets still on.
fn split_host_port(raw: &str) -> Result<(&str, Option<&str>), TargetError> {
    if raw.starts_with('[') {
        let close = raw.find(']').ok_or(TargetError::Brackets)?;
        let (host, rest) = raw.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(p) => Ok((host, Some(p))),
                None => Err(TargetError::Brackets),
            },
        };
    }
    if raw.contains('[') || raw.contains(']') {
        return Err(TargetError::Brackets);
    }
    match raw.rfind(':') {
        // Two colons without brackets: a bare IPv6 address or junk.
        Some(i) if raw[..i].contains(':') => Err(TargetError::BadName(raw.to_string())),
        Some(i) => Ok((&raw[..i], Some(&raw[i + 1..]))),
        None => Ok((raw, None)),
    }
}

/// Normalises a host name (no port, no brackets): IDNA to ASCII, lower
/// case, one trailing dot removed. A name whose last label is numeric is an
/// IPv4 address in some `inet_aton` spelling (`2130706433`, `0177.0.0.1`,
/// `0x7f000001`, `127.1`), or else invalid.
pub fn normalize_host(raw: &str) -> Result<Host, TargetError> {
    if raw.is_empty() {
        return Err(TargetError::Empty);
    }
    let bad = || TargetError::BadName(raw.to_string());
    // Reject anything URL-special before IDNA can map it away.
    if raw
        .bytes()
        .any(|b| b <= b' ' || b == 0x7f || b"%/\\?#@:<>\"'`^{|}[]".contains(&b))
    {
        return Err(bad());
    }
    // Plain ASCII names (the common case) need only lower-casing; IDNA
    // runs for anything else, and to check existing punycode labels.
    let lower = raw.to_ascii_lowercase();
    let ascii = if raw.is_ascii() && !lower.contains("xn--") {
        lower
    } else {
        idna::domain_to_ascii_cow(raw.as_bytes(), idna::AsciiDenyList::URL)
            .map_err(|_| bad())?
            .to_ascii_lowercase()
    };
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() {
        return Err(bad());
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    if looks_numeric(last) {
        return parse_ipv4_any(name)
            .map(|v4| Host::Ip(IpAddr::V4(v4)))
            .ok_or_else(|| TargetError::BadIpv4(raw.to_string()));
    }
    if name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(bad());
    }
    Ok(Host::Name(name.to_string()))
}

fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// True for a label an IPv4 parser would claim: decimal digits, or `0x` hex.
fn looks_numeric(label: &str) -> bool {
    if let Some(hex) = label.strip_prefix("0x") {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
}

/// IPv4 in every spelling `inet_aton(3)` accepts: one to four parts, each
/// decimal, octal (leading 0) or hex (0x); the last part fills the
/// remaining bytes.
pub(crate) fn parse_ipv4_any(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        nums.push(parse_ipv4_part(p)?);
    }
    let (last, init) = nums.split_last()?;
    let mut value: u64 = 0;
    for (i, n) in init.iter().enumerate() {
        if *n > 255 {
            return None;
        }
        value |= n << (8 * (3 - i));
    }
    let last_bits = 8 * (4 - init.len() as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn parse_ipv4_part(p: &str) -> Option<u64> {
    if p.is_empty() || p.len() > 12 {
        return None;
    }
    if let Some(hex) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        if hex.is_empty() {
            return Some(0);
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if p.len() > 1 && p.starts_with('0') {
        return u64::from_str_radix(&p[1..], 8).ok();
    }
    p.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::Name(s.to_string())
    }
    fn v4(s: &str) -> Host {
        Host::Ip(s.parse().unwrap())
    }

    #[test]
    fn normalize_table() {
        let cases: &[(&str, &str, Result<Host, ()>)] = &[
            (
                "lower case",
                "pkgs.example.com",
                Ok(name("pkgs.example.com")),
            ),
            (
                "upper case",
                "PKGS.Example.COM",
                Ok(name("pkgs.example.com")),
            ),
            (
                "one trailing dot",
                "pkgs.example.com.",
                Ok(name("pkgs.example.com")),
            ),
            ("two trailing dots", "pkgs.example.com..", Err(())),
            ("empty label", "pkgs..example.com", Err(())),
            ("idna", "bücher.example", Ok(name("xn--bcher-kva.example"))),
            (
                "idna upper",
                "BÜCHER.example",
                Ok(name("xn--bcher-kva.example")),
            ),
            (
                "fullwidth dot",
                "example\u{3002}com",
                Ok(name("example.com")),
            ),
            (
                "underscore",
                "my_bucket.example.com",
                Ok(name("my_bucket.example.com")),
            ),
            ("percent", "%65xample.com", Err(())),
            ("space", "exa mple.com", Err(())),
            ("nul", "example.com\0.evil", Err(())),
            ("slash", "example.com/x", Err(())),
            ("backslash", "example.com\\x", Err(())),
            ("leading hyphen", "-x.example.com", Err(())),
            ("dotted quad", "127.0.0.1", Ok(v4("127.0.0.1"))),
            ("decimal", "2130706433", Ok(v4("127.0.0.1"))),
            ("octal", "0177.0.0.1", Ok(v4("127.0.0.1"))),
            ("hex", "0x7f000001", Ok(v4("127.0.0.1"))),
            ("hex parts", "0x7f.0x0.0x0.0x1", Ok(v4("127.0.0.1"))),
            ("short two", "127.1", Ok(v4("127.0.0.1"))),
            ("short three", "127.0.1", Ok(v4("127.0.0.1"))),
            ("metadata decimal", "2852039166", Ok(v4("169.254.169.254"))),
            ("ip trailing dot", "127.0.0.1.", Ok(v4("127.0.0.1"))),
            ("ipv4 overflow", "256.0.0.1", Err(())),
            ("ipv4 five parts", "1.2.3.4.5", Err(())),
            ("bad octal", "09.0.0.1", Err(())),
            ("numeric last label", "example.123", Err(())),
            (
                "too long label",
                &format!("{}.com", "a".repeat(64)),
                Err(()),
            ),
        ];
        for (what, input, want) in cases {
            let got = normalize_host(input).map_err(|_| ());
            assert_eq!(&got, want, "case {what:?}: {input:?}");
        }
    }

    #[test]
    fn authority_table() {
        type Case<'a> = (&'a str, &'a str, Option<u16>, Result<(Host, u16), ()>);
        let cases: &[Case] = &[
            (
                "host port",
                "a.example.com:8080",
                None,
                Ok((name("a.example.com"), 8080)),
            ),
            (
                "default port",
                "a.example.com",
                Some(80),
                Ok((name("a.example.com"), 80)),
            ),
            ("connect needs port", "a.example.com", None, Err(())),
            ("port zero", "a.example.com:0", None, Err(())),
            ("leading zero port", "a.example.com:080", None, Err(())),
            ("sign", "a.example.com:+80", None, Err(())),
            ("big port", "a.example.com:65536", None, Err(())),
            ("named port", "a.example.com:http", None, Err(())),
            ("empty port", "a.example.com:", None, Err(())),
            ("userinfo", "user@a.example.com:443", None, Err(())),
            (
                "brackets around a name",
                "[a.example.com]:443",
                None,
                Err(()),
            ),
            ("ipv6", "[::1]:443", None, Ok((v4_6("::1"), 443))),
            (
                "ipv6 mapped",
                "[::ffff:127.0.0.1]:80",
                None,
                Ok((v4_6("::ffff:127.0.0.1"), 80)),
            ),
            ("bare ipv6", "::1:443", None, Err(())),
            ("ipv6 zone", "[fe80::1%25eth0]:443", None, Err(())),
            ("junk after bracket", "[::1]x:443", None, Err(())),
            (
                "ipv6, default port",
                "[::1]",
                Some(443),
                Ok((v4_6("::1"), 443)),
            ),
            ("empty", "", None, Err(())),
        ];
        for (what, input, default, want) in cases {
            let got = parse_authority(input, *default)
                .map(|t| (t.host, t.port))
                .map_err(|_| ());
            assert_eq!(&got, want, "case {what:?}: {input:?}");
        }
    }

    fn v4_6(s: &str) -> Host {
        Host::Ip(IpAddr::V6(s.parse().unwrap()))
    }

    #[test]
    fn malformed_authorities_say_what_is_wrong() {
        assert_eq!(
            parse_authority("::1:443", None),
            Err(TargetError::BadName("::1:443".into())),
            "a bare IPv6 address is named whole"
        );
        for stray in [
            "a]b.example.com:443",
            "a[b.example.com:443",
            "a.example.com]",
        ] {
            assert_eq!(
                parse_authority(stray, Some(80)),
                Err(TargetError::Brackets),
                "{stray}"
            );
        }
        assert_eq!(parse_authority("[::1", None), Err(TargetError::Brackets));
    }

    #[test]
    fn names_at_the_edges() {
        // 253 characters is the longest name; 254 is too long.
        let label = "a".repeat(61);
        let name = format!("{label}.{label}.{label}.{label}.b"); // 4 * 62 + 1
        let longest = format!("{name}.com");
        assert_eq!(longest.len(), 253);
        assert!(normalize_host(&longest).is_ok());
        assert!(normalize_host(&format!("{name}x.com")).is_err());
        // Five parts are not an IPv4 address in any spelling.
        assert_eq!(parse_ipv4_any("1.2.3.4.0"), None);
        assert_eq!(parse_ipv4_any("1.2.3.4"), Some(Ipv4Addr::new(1, 2, 3, 4)));
        // The last part fills exactly the bytes left.
        assert_eq!(parse_ipv4_any("1.2.3.300"), None);
        assert_eq!(
            parse_ipv4_any("1.2.65535"),
            Some(Ipv4Addr::new(1, 2, 255, 255))
        );
        assert_eq!(parse_ipv4_any("1.2.65536"), None);
        // A part of more than 12 characters is no number, whatever its
        // value (sluice and inet_aton agree on what is an address).
        assert_eq!(parse_ipv4_any("0000000000001.0.0.1"), None);
        assert_eq!(
            parse_ipv4_any("000000000001.0.0.1"),
            Some(Ipv4Addr::new(1, 0, 0, 1))
        );
    }

    #[test]
    fn punycode_labels_are_checked() {
        // Invalid punycode is refused, not taken as written.
        assert!(normalize_host("xn--a.example").is_err());
        assert!(normalize_host("XN--BCHER-KVA.example").is_ok());
    }

    #[test]
    fn ports_at_the_edges() {
        for (p, ok) in [
            ("1", true),
            ("65535", true),
            ("65536", false),
            ("99999", false),
            ("100000", false),
            ("0", false),
            ("", false),
            ("+80", false),
            ("080", false),
        ] {
            assert_eq!(parse_port(p).is_ok(), ok, "{p:?}");
        }
        let t = parse_authority("Pkgs.Example.com.:65535", None).unwrap();
        assert_eq!(t.to_string(), "pkgs.example.com:65535");
        let t = parse_authority("[2001:db8::1]:443", None).unwrap();
        assert_eq!(t.to_string(), "[2001:db8::1]:443");
    }

    #[test]
    fn canonical_spelling_is_recorded() {
        assert!(parse_authority("10.0.0.7:8080", None).unwrap().canonical_ip);
        assert!(
            !parse_authority("0x0a000007:8080", None)
                .unwrap()
                .canonical_ip
        );
        assert!(
            !parse_authority("010.0.0.7:8080", None)
                .unwrap()
                .canonical_ip
        );
        assert!(
            parse_authority("[2001:db8::1]:443", None)
                .unwrap()
                .canonical_ip
        );
        assert!(
            !parse_authority("[2001:DB8::1]:443", None)
                .unwrap()
                .canonical_ip
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn host_like() -> impl Strategy<Value = String> {
        // Labels from a small alphabet (with case, digits, hyphens), one to
        // four of them, maybe a trailing dot, maybe numeric.
        (
            prop::collection::vec("[a-zA-Z0-9][a-zA-Z0-9-]{0,6}[a-zA-Z0-9]?", 1..5),
            any::<bool>(),
        )
            .prop_map(|(labels, dot)| {
                let mut s = labels.join(".");
                if dot {
                    s.push('.');
                }
                s
            })
    }

    proptest! {
        #[test]
        fn normalisation_is_idempotent(raw in host_like()) {
            if let Ok(Host::Name(n)) = normalize_host(&raw) {
                prop_assert_eq!(normalize_host(&n), Ok(Host::Name(n.clone())));
            }
        }

        #[test]
        fn equal_normal_forms_iff_equal_hosts(a in host_like(), b in host_like()) {
            // Two spellings name the same host exactly when their normal
            // forms are equal: no suffix or case games.
            if let (Ok(x), Ok(y)) = (normalize_host(&a), normalize_host(&b)) {
                // host_like adds at most one trailing dot.
                let same = a.trim_end_matches('.').eq_ignore_ascii_case(b.trim_end_matches('.'));
                if same {
                    prop_assert_eq!(x, y);
                } else if let (Host::Name(x), Host::Name(y)) = (&x, &y) {
                    prop_assert_ne!(x, y);
                }
            }
        }

        #[test]
        fn any_ipv4_spelling_round_trips(n in any::<u32>()) {
            let ip = std::net::Ipv4Addr::from(n);
            for s in [ip.to_string(), n.to_string(), format!("0x{n:x}"), format!("0{n:o}")] {
                prop_assert_eq!(normalize_host(&s), Ok(Host::Ip(IpAddr::V4(ip))), "{}", s);
            }
        }

        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,40}") {
            let _ = normalize_host(&s);
            let _ = parse_authority(&s, None);
            let _ = parse_authority(&s, Some(443));
        }
    }
}
