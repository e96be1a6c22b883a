//! The headers of a forwarded exchange: what one hop may not pass on,
//! the request shape each upstream protocol wants, and reading host names
//! out of response headers for the taint set. Pure functions.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Uri, Version};

use crate::exchange::remove_prefixed;
use crate::policy::Target;
use crate::taint::body::{BodyScanner, OwnerHosts};
use crate::taint::scan::Named;
use crate::upstream::{Sender, UpBody};

/// Headers that describe one hop, never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, and those the Connection header names.
/// Keeps `Connection: upgrade` + `Upgrade` when `upgrade` is set.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for n in named {
        if !(upgrade && n == header::UPGRADE) {
            h.remove(n);
        }
    }
    for n in HOP_BY_HOP.iter() {
        h.remove(n);
    }
    remove_prefixed(h, "proxy-");
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        h.remove(header::UPGRADE);
    }
}

/// Is the request an upgrade sluice passes on? Every `Upgrade` token but
/// `h2c`: an h2c upgrade is dropped (the header removed, or the token
/// left out of it), so the exchange stays HTTP/1.1 and its response is
/// scanned as a body — raw scanning could not follow HTTP/2's frames and
/// HPACK. RFC 9113 §3.1 lets a server ignore it, and clients fall back.
pub(super) fn keep_upgrade(h: &mut HeaderMap) -> bool {
    let tokens: Vec<Vec<u8>> = h
        .get_all(header::UPGRADE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if tokens.is_empty() {
        return false;
    }
    if !tokens.iter().any(|t| t.eq_ignore_ascii_case(b"h2c")) {
        return true;
    }
    h.remove(header::UPGRADE);
    let kept: Vec<Vec<u8>> = tokens
        .into_iter()
        .filter(|t| !t.eq_ignore_ascii_case(b"h2c"))
        .collect();
    match HeaderValue::from_bytes(&kept.join(&b", "[..])) {
        Ok(v) if !kept.is_empty() => {
            h.insert(header::UPGRADE, v);
            true
        }
        _ => false,
    }
}

/// HTTP/1.1 upstreams get origin-form and a Host header; HTTP/2 upstreams
/// an absolute URI (its :authority) and no Host.
pub(super) fn shape_for(
    req: &mut Request<UpBody>,
    sender: &Sender,
    scheme: &str,
    path: &str,
    authority: &str,
) {
    if sender.is_h2() {
        *req.version_mut() = Version::HTTP_2;
        req.headers_mut().remove(header::HOST);
        *req.uri_mut() = format!("{scheme}://{authority}{path}")
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"));
    } else {
        *req.version_mut() = Version::HTTP_11;
        *req.uri_mut() = path.parse().unwrap_or_else(|_| Uri::from_static("/"));
    }
}

/// The URL of a response, without its query, for provenance.
pub(crate) fn source_url(scheme: &str, target: &Target, path: &str) -> String {
    let default = if scheme == "https" { 443 } else { 80 };
    if target.port == default {
        format!("{scheme}://{}{path}", target.host)
    } else {
        format!("{scheme}://{}:{}{path}", target.host, target.port)
    }
}

/// The scanner for a response body: its Content-Encoding lines (undone in
/// reverse order) and charset decide how the bytes are decoded for it.
pub(super) fn body_scanner(h: &HeaderMap, limit: u64, owners: OwnerHosts) -> BodyScanner {
    let encodings: Vec<&[u8]> = h
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .map(http::HeaderValue::as_bytes)
        .collect();
    // Every Content-Type line: clients differ on which one they follow.
    let types: Vec<&[u8]> = h
        .get_all(header::CONTENT_TYPE)
        .iter()
        .map(http::HeaderValue::as_bytes)
        .collect();
    let content_type = (!types.is_empty()).then(|| types.join(&b","[..]));
    let mut scanner =
        BodyScanner::reading_owners(&encodings, content_type.as_deref(), limit, owners);
    if types.is_empty() {
        // A browser sniffs it, and may render it as HTML.
        scanner = scanner.also_html();
    }
    // Not an HTTP coding, but a reader (a mail library) undoes it.
    let quoted = h.get_all("content-transfer-encoding").iter().any(|v| {
        v.as_bytes()
            .windows(16)
            .any(|w| w.eq_ignore_ascii_case(b"quoted-printable"))
    });
    if quoted {
        scanner.also_quoted_printable()
    } else {
        scanner
    }
}

/// Host names in a response's headers: every header's name and value, not
/// only the URL-bearing ones (a name in `X-Next: paste.example.com` is read
/// by whoever reads the headers, and so is a header *named*
/// `paste.example.com`), and the status line's reason phrase (Python shows
/// it in `HTTPError`). Trailers are scanned by the body relay.
pub(crate) fn scan_headers(h: &HeaderMap, reason: Option<&[u8]>, owners: OwnerHosts) -> Vec<Named> {
    // One scanner for every name and value (a newline between two ends any
    // name), not one per header: this runs on every response.
    let mut scanner = crate::taint::scan::Scanner::new().with_owner_hosts(owners);
    let mut out = Vec::new();
    let mut last_name = None;
    for (name, v) in h.iter() {
        // Lines of one header share its name: scan it once.
        if last_name != Some(name) {
            scanner.feed(name.as_str().as_bytes(), &mut |n| out.push(n));
            scanner.feed(b"\n", &mut |n| out.push(n));
            last_name = Some(name);
        }
        scanner.feed(v.as_bytes(), &mut |n| out.push(n));
        scanner.feed(b"\n", &mut |n| out.push(n));
    }
    if let Some(r) = reason {
        scanner.feed(r, &mut |n| out.push(n));
        scanner.feed(b"\n", &mut |n| out.push(n));
    }
    scanner.finish(&mut |n| out.push(n));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgrade_of(values: &[&str]) -> (bool, Vec<String>) {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::UPGRADE, HeaderValue::from_str(v).unwrap());
        }
        let kept = keep_upgrade(&mut h);
        let left = h
            .get_all(header::UPGRADE)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        (kept, left)
    }

    #[test]
    fn an_h2c_upgrade_is_not_passed_on() {
        let none: Vec<String> = Vec::new();
        assert_eq!(upgrade_of(&[]), (false, none.clone()));
        assert_eq!(upgrade_of(&["websocket"]), (true, vec!["websocket".into()]));
        assert_eq!(upgrade_of(&["h2c"]), (false, none.clone()));
        assert_eq!(upgrade_of(&["H2C"]), (false, none));
        assert_eq!(upgrade_of(&["h2c, foo/1"]), (true, vec!["foo/1".into()]));
        assert_eq!(
            upgrade_of(&["h2c", "websocket"]),
            (true, vec!["websocket".into()])
        );
    }
}
