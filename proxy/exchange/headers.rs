//! Request headers the pipeline reads: the Host header(s), whether a
//! request carries a body, and the `Sluice-*` headers only sluice says.
//!
//! Pure functions over `http::HeaderMap`; must not decide.

use http::header;

use crate::policy::{self, target::parse_authority, HostHeader};

/// Parses the Host header(s) against a default port.
pub(crate) fn host_header(headers: &http::HeaderMap, default_port: u16) -> HostHeader {
    let mut values = headers.get_all(header::HOST).iter();
    match (values.next(), values.next()) {
        (None, _) => HostHeader::Absent,
        (Some(_), Some(_)) => HostHeader::Many,
        (Some(v), None) => HostHeader::One(match v.to_str() {
            Ok(s) => parse_authority(s, Some(default_port)),
            Err(_) => Err(policy::TargetError::BadName(
                "<non-ASCII Host header>".into(),
            )),
        }),
    }
}

/// Does the request carry a body (SPEC §4)?
pub(crate) fn carries_body(headers: &http::HeaderMap) -> bool {
    let content_length = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .any(|v| v.to_str().map(|s| s.trim() != "0").unwrap_or(true));
    content_length
        || headers.contains_key(header::TRANSFER_ENCODING)
        || headers.contains_key(header::UPGRADE)
}

/// Removes the `Sluice-*` headers a client sent: only sluice says those.
pub(crate) fn strip_sluice_headers(h: &mut http::HeaderMap) {
    remove_prefixed(h, "sluice-");
}

/// Removes every header whose (lower-case) name starts with `prefix`.
pub(crate) fn remove_prefixed(h: &mut http::HeaderMap, prefix: &str) {
    let names: Vec<_> = h
        .keys()
        .filter(|k| k.as_str().starts_with(prefix))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
}
