//! respond: the one place where refusals become HTTP responses.
//!
//! Every refusal is a response from sluice itself, with `Sluice-Rule`,
//! `Sluice-Task` and a one-line sentence a person can act on (SPEC §5).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};

use crate::policy::Refusal;

/// Why a response body sluice relays ended early.
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every response sluice sends to a client.
pub(crate) type ProxyBody = http_body_util::combinators::BoxBody<Bytes, BodyError>;

pub(crate) fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

pub(crate) fn full(b: impl Into<Bytes>) -> ProxyBody {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// The refusal sentence: `sluice: refused METHOD URL for task "ID": REASON [RULE]`.
pub(crate) fn sentence(task: &str, method: &str, url: &str, refusal: &Refusal) -> String {
    // A failure (DNS, upstream) refused nothing: it could not be done.
    let what = if refusal.rule.is_failure() {
        "could not reach"
    } else {
        "refused"
    };
    format!(
        "sluice: {what} {method} {url} for task \"{task}\": {} [{}]",
        refusal.reason,
        refusal.rule.as_str()
    )
}

/// Builds the response for a refusal.
pub(crate) fn refusal(
    task: &str,
    method: &str,
    url: &str,
    refusal: &Refusal,
) -> Response<ProxyBody> {
    let mut text = sentence(task, method, url, refusal);
    text.push('\n');
    let status = StatusCode::from_u16(refusal.rule.status()).unwrap_or(StatusCode::FORBIDDEN);
    let mut resp = Response::new(full(text));
    *resp.status_mut() = status;
    // Clients discard a refused CONNECT's body; many show only the status
    // line (curl: "CONNECT tunnel failed, response 403"; Python and pip:
    // "Tunnel connection failed: 403 ..."), so it carries the rule and
    // the reason too (HTTP/1 only; HTTP/2 has no reason phrase).
    if let Ok(p) = hyper::ext::ReasonPhrase::try_from(reason_phrase(refusal)) {
        resp.extensions_mut().insert(p);
    }
    let h = resp.headers_mut();
    h.insert(
        "sluice-rule",
        HeaderValue::from_static(refusal.rule.as_str()),
    );
    if let Ok(v) = HeaderValue::from_str(task) {
        h.insert("sluice-task", v);
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if refusal.rule == crate::policy::Rule::BadTarget {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// `rule: reason`, as a status line's reason phrase: visible ASCII only
/// (anything else becomes `?`), at most 200 bytes.
pub(crate) fn reason_phrase(refusal: &Refusal) -> String {
    let mut p: String = format!("{}: {}", refusal.rule.as_str(), refusal.reason)
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
    if p.len() > 200 {
        p.truncate(197);
        p.push_str("...");
    }
    p
}

/// A raw HTTP/1.1 refusal for places with no HTTP library in reach (the
/// connection limit, before a request is read).
pub(crate) fn raw_refusal(task: &str, refusal: &Refusal) -> Vec<u8> {
    let body = format!(
        "sluice: refused a connection for task \"{task}\": {} [{}]\n",
        refusal.reason,
        refusal.rule.as_str()
    );
    raw_response(task, refusal, body)
}

/// The refusal of a request the HTTP parser could not read, written as raw
/// bytes (hyper never saw a request to answer); `method` and `target` are
/// the escaped pieces of its request line.
pub(crate) fn raw_request_refusal(
    task: &str,
    method: &str,
    target: &str,
    refusal: &Refusal,
) -> Vec<u8> {
    let mut body = sentence(task, method, target, refusal);
    body.push('\n');
    raw_response(task, refusal, body)
}

fn raw_response(task: &str, refusal: &Refusal, body: String) -> Vec<u8> {
    let status = refusal.rule.status();
    let reason = reason_phrase(refusal);
    format!(
        "HTTP/1.1 {status} {reason}\r\nsluice-rule: {}\r\nsluice-task: {task}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        refusal.rule.as_str(),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Rule;

    #[test]
    fn reason_phrase_is_one_safe_line() {
        let r = Refusal::new(
            Rule::NotAllowed,
            "example.com:443 is not on the task's allow-list",
        );
        assert_eq!(
            reason_phrase(&r),
            "not-allowed: example.com:443 is not on the task's allow-list"
        );
        let hostile = Refusal::new(
            Rule::BadTarget,
            format!("a\r\nSet-Cookie: x\u{e9}{}", "y".repeat(300)),
        );
        let p = reason_phrase(&hostile);
        assert!(
            p.len() <= 200 && p.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "{p}"
        );
        assert!(hyper::ext::ReasonPhrase::try_from(p).is_ok());
    }
}
