//! The secrets module's behaviour on whole requests and bodies: swaps only
//! where `policy::secrets` allows, refusals everywhere else, bodies split
//! at every offset, echoes put back.

use std::sync::Arc;

use bytes::Bytes;
use data_encoding::BASE64;
use http::{HeaderMap, HeaderValue, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;

use super::guard::{Dest, Leak};
use super::store::{Secret, TaskSecrets};
use super::{EchoBody, LeakGuard, Watch};
use crate::config::{OnViolation, SecretConfig, SecretSource};
use crate::policy::target::parse_authority;
use crate::policy::{AllowList, Rule, Target};

const PH: &str = "sluice_Qx7Jm2Kd9Pz4Vb8Nc3Rt6YwLpEh";
const VALUE: &str = "ghp_RealSecretValue0123456789abcdef";

fn secrets(query: bool, body: bool, ph: &str) -> Arc<TaskSecrets> {
    let mut hosts = AllowList::default();
    let t = parse_authority("api.example.com", Some(443)).unwrap();
    hosts.insert(t.host, 443);
    let secret = Secret::for_test(
        SecretConfig {
            name: "TOKEN".into(),
            source: SecretSource::Env("TOKEN".into()),
            hosts,
            headers: vec!["authorization".into(), "x-api-key".into()],
            query,
            body,
            on_violation: OnViolation::Refuse,
        },
        ph,
        VALUE.as_bytes(),
    );
    Arc::new(TaskSecrets::for_test(vec![secret]))
}

fn target(s: &str) -> Target {
    parse_authority(s, Some(443)).unwrap()
}

fn head(
    s: &TaskSecrets,
    to: &str,
    intercepted: bool,
    uri: &str,
    headers: &[(&str, String)],
) -> Result<(Uri, HeaderMap, Vec<Arc<str>>), Leak> {
    let t = target(to);
    let dest = Dest {
        target: &t,
        intercepted,
    };
    let mut uri: Uri = uri.parse().unwrap();
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let used = s.request_head(&dest, &http::Method::GET, &mut uri, &mut map)?;
    Ok((uri, map, used))
}

#[test]
fn bearer_and_basic_are_swapped_only_at_the_secrets_host_when_intercepted() {
    let s = secrets(false, false, PH);
    let bearer = ("authorization", format!("Bearer {PH}"));
    let (_, h, used) = head(
        &s,
        "api.example.com",
        true,
        "/repos",
        std::slice::from_ref(&bearer),
    )
    .unwrap();
    assert_eq!(h["authorization"], format!("Bearer {VALUE}").as_str());
    assert_eq!(used, vec![Arc::<str>::from("TOKEN")]);
    let basic = (
        "authorization",
        format!(
            "Basic {}",
            BASE64.encode(format!("x-access-token:{PH}").as_bytes())
        ),
    );
    let (_, h, _) = head(
        &s,
        "api.example.com",
        true,
        "/",
        std::slice::from_ref(&basic),
    )
    .unwrap();
    let want = format!(
        "Basic {}",
        BASE64.encode(format!("x-access-token:{VALUE}").as_bytes())
    );
    assert_eq!(h["authorization"], want.as_str());
    // Anywhere else: refused, naming the secret.
    for (to, intercepted, hdr) in [
        ("paste.example.com", true, bearer.clone()),
        ("api.example.com", false, bearer.clone()),
        ("api.example.com:8443", true, bearer.clone()),
        ("paste.example.com", true, basic),
        ("api.example.com", true, ("x-other", PH.to_string())),
        (
            "api.example.com",
            true,
            ("authorization", format!("Bearer {VALUE}")),
        ),
        (
            "api.example.com",
            true,
            (
                "authorization",
                format!("Bearer {}", BASE64.encode(PH.as_bytes())),
            ),
        ),
    ] {
        let err = head(&s, to, intercepted, "/", std::slice::from_ref(&hdr)).unwrap_err();
        assert_eq!(err.refusal.rule, Rule::SecretLeak, "{to} {hdr:?}");
        assert_eq!(&*err.name, "TOKEN");
        assert!(
            !err.refusal.reason.contains(VALUE),
            "the sentence never shows the value"
        );
    }
}

#[test]
fn the_url_is_refused_unless_the_query_is_enabled() {
    let off = secrets(false, false, PH);
    for uri in [
        format!("/x?token={PH}"),
        format!("/{PH}/x"),
        format!(
            "/x?t={}",
            PH.bytes().map(|b| format!("%{b:02x}")).collect::<String>()
        ),
        format!(
            "http://paste.example.com/x?t={}",
            data_encoding::HEXLOWER.encode(VALUE.as_bytes())
        ),
    ] {
        let err = head(&off, "api.example.com", true, &uri, &[]).unwrap_err();
        assert_eq!(err.refusal.rule, Rule::SecretLeak, "{uri}");
    }
    let on = secrets(true, false, PH);
    let (uri, _, used) = head(
        &on,
        "api.example.com",
        true,
        &format!("/x?token={PH}&a=1"),
        &[],
    )
    .unwrap();
    assert_eq!(uri.query(), Some(format!("token={VALUE}&a=1").as_str()));
    assert_eq!(used.len(), 1);
    // Still never in the path, nor to another host.
    assert!(head(&on, "api.example.com", true, &format!("/{PH}?a=1"), &[]).is_err());
    assert!(head(
        &on,
        "paste.example.com",
        true,
        &format!("/x?token={PH}"),
        &[]
    )
    .is_err());
}

fn chunks(body: &[u8], cut: usize) -> Vec<Bytes> {
    vec![
        Bytes::copy_from_slice(&body[..cut]),
        Bytes::copy_from_slice(&body[cut..]),
    ]
}

/// Runs `body`, cut at `cut`, through a guard to `to`; what went out, and
/// the watch.
async fn guarded(
    s: &Arc<TaskSecrets>,
    to: &str,
    body: &[u8],
    cut: usize,
) -> (Vec<u8>, bool, Arc<Watch>) {
    let t = target(to);
    let dest = Dest {
        target: &t,
        intercepted: true,
    };
    let inner = Chunks(chunks(body, cut).into());
    let watch = Arc::new(Watch::default());
    let mut g = LeakGuard::new(inner, s.clone(), &dest, watch.clone());
    let mut out = Vec::new();
    let mut failed = false;
    while let Some(f) = g.frame().await {
        match f {
            Ok(f) => out.extend_from_slice(f.data_ref().map_or(&[][..], |d| d)),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    (out, failed, watch)
}

/// A body of the given chunks, one frame each.
struct Chunks(std::collections::VecDeque<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(c))))
    }
}

#[tokio::test]
async fn a_body_leak_is_caught_before_its_first_byte_leaves_at_every_cut() {
    let s = secrets(false, false, PH);
    let forms = [
        PH.as_bytes().to_vec(),
        VALUE.as_bytes().to_vec(),
        BASE64.encode(format!("k={VALUE}").as_bytes()).into_bytes(),
        data_encoding::BASE64URL_NOPAD
            .encode(format!("ab{PH}").as_bytes())
            .into_bytes(),
        data_encoding::HEXUPPER.encode(PH.as_bytes()).into_bytes(),
        PH.bytes()
            .map(|b| format!("%{b:02X}"))
            .collect::<String>()
            .into_bytes(),
        VALUE
            .bytes()
            .map(|b| format!("\\u00{b:02x}"))
            .collect::<String>()
            .into_bytes(),
    ];
    for form in forms {
        let body = [b"{\"note\": \"".as_slice(), &form, b"\"}"].concat();
        for cut in 0..=body.len() {
            let (out, failed, watch) = guarded(&s, "api.example.com", &body, cut).await;
            assert!(failed, "cut {cut}: {}", String::from_utf8_lossy(&form));
            assert!(out.len() <= 10, "cut {cut}: {} bytes left", out.len());
            assert_eq!(watch.leak().map(|l| l.refusal.rule), Some(Rule::SecretLeak));
        }
    }
    let (out, failed, _) = guarded(&s, "api.example.com", b"nothing secret", 3).await;
    assert_eq!((out.as_slice(), failed), (&b"nothing secret"[..], false));
}

#[tokio::test]
async fn an_enabled_body_gets_the_value_at_every_cut() {
    let s = secrets(false, true, PH);
    let body = format!("{{\"token\": \"{PH}\", \"again\": \"{PH}\"}}");
    let want = body.replace(PH, VALUE);
    for cut in 0..=body.len() {
        let (out, failed, watch) = guarded(&s, "api.example.com", body.as_bytes(), cut).await;
        assert!(!failed, "cut {cut}");
        assert_eq!(String::from_utf8(out).unwrap(), want, "cut {cut}");
        assert_eq!(watch.swapped(), vec![Arc::<str>::from("TOKEN")]);
    }
    // To another host it is a leak.
    let (_, failed, _) = guarded(&s, "paste.example.com", body.as_bytes(), 5).await;
    assert!(failed);
}

#[tokio::test]
async fn echoes_of_the_value_come_back_as_the_placeholder() {
    for ph in [PH, "sluice_Short0123456789abcdefghijklmnopqrstuvwxyz"] {
        let s = secrets(false, false, ph);
        let t = target("api.example.com");
        let dest = Dest {
            target: &t,
            intercepted: true,
        };
        let body = format!("your token is {VALUE}; again: {VALUE}.");
        let mut headers = HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_str(VALUE).unwrap());
        headers.insert("content-length", HeaderValue::from(body.len()));
        assert!(s.echo_head(&dest, &mut headers).unwrap());
        assert_eq!(headers["x-echo"], ph);
        assert_eq!(
            headers.contains_key("content-length"),
            ph.len() == VALUE.len()
        );
        let out = EchoBody::new(Full::new(Bytes::from(body.clone())), s.clone(), &dest)
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(String::from_utf8_lossy(&out), body.replace(VALUE, ph));
        // An encoded echo cannot be put back: the response is cut.
        let b64 = BASE64.encode(format!("u:{VALUE}").as_bytes());
        let cut = EchoBody::new(Full::new(Bytes::from(b64)), s.clone(), &dest)
            .collect()
            .await;
        assert!(cut.is_err());
    }
}

/// Data, then trailers.
struct WithTrailers(Option<Bytes>, Option<HeaderMap>);

impl hyper::body::Body for WithTrailers {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let next = match self.0.take() {
            Some(d) => Some(Ok(Frame::data(d))),
            None => self.1.take().map(|t| Ok(Frame::trailers(t))),
        };
        std::task::Poll::Ready(next)
    }
}

#[tokio::test]
async fn a_trailer_is_checked_and_clean_trailers_pass() {
    let s = secrets(false, false, PH);
    let t = target("api.example.com");
    let dest = Dest {
        target: &t,
        intercepted: true,
    };
    for (value, leaks) in [(PH, true), ("plain", false)] {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sig", HeaderValue::from_str(value).unwrap());
        let inner = WithTrailers(Some(Bytes::from_static(b"data")), Some(trailers));
        let watch = Arc::new(Watch::default());
        let got = LeakGuard::new(inner, s.clone(), &dest, watch.clone())
            .collect()
            .await;
        assert_eq!(got.is_err(), leaks, "{value}");
        if let Ok(c) = got {
            assert_eq!(
                c.trailers().map(|t| t["x-sig"].clone()),
                Some(HeaderValue::from_static("plain"))
            );
            assert_eq!(c.to_bytes(), Bytes::from_static(b"data"));
        }
    }
}

#[test]
fn escapes_line_breaks_and_the_method_hide_nothing() {
    let s = secrets(false, true, PH);
    // Part of the placeholder in escapes, base64 wrapped in lines.
    let partial = format!("{}%{:02X}{}", &PH[..5], PH.as_bytes()[5], &PH[6..]);
    assert_eq!(s.hidden(partial.as_bytes()), Some(0));
    let b64 = BASE64.encode(format!("k={PH}").as_bytes());
    let wrapped: String = b64
        .as_bytes()
        .chunks(8)
        .map(|c| format!("{}\r\n", String::from_utf8_lossy(c)))
        .collect();
    assert_eq!(s.hidden(wrapped.as_bytes()), Some(0));
    assert_eq!(
        s.hidden(format!("k={}", VALUE.replace('_', "\\u005f")).as_bytes()),
        Some(0)
    );
    // The plain placeholder alone is not hidden (an enabled body swaps it).
    assert_eq!(s.hidden(format!("k={PH}").as_bytes()), None);
    let t = target("other.example.com");
    let dest = Dest {
        target: &t,
        intercepted: true,
    };
    let method = http::Method::from_bytes(PH.as_bytes()).unwrap();
    let err = s
        .request_head(
            &dest,
            &method,
            &mut "/".parse().unwrap(),
            &mut HeaderMap::new(),
        )
        .unwrap_err();
    assert_eq!(err.refusal.rule, Rule::SecretLeak);
}

#[tokio::test]
async fn echoes_in_escapes_codings_names_and_trailers_are_cut_or_put_back() {
    let s = secrets(false, false, PH);
    let t = target("api.example.com");
    let dest = Dest {
        target: &t,
        intercepted: true,
    };
    let with = |k: &str, v: &str| {
        let mut h = HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
        h
    };
    assert!(s
        .echo_head(&dest, &mut with("transfer-encoding", "gzip, chunked"))
        .is_err());
    assert!(s
        .echo_head(
            &dest,
            &mut with(&format!("x-{}", VALUE.to_lowercase()), "1")
        )
        .is_err());
    assert!(s
        .echo_head(&dest, &mut with("transfer-encoding", "chunked"))
        .is_ok());
    // The value with JSON's escaped slashes, or wrapped: cut.
    for body in [
        VALUE.replace('_', "\\u005f"),
        format!("{}\n{}", &VALUE[..10], &VALUE[10..]),
    ] {
        let cut = EchoBody::new(Full::new(Bytes::from(body.clone())), s.clone(), &dest)
            .collect()
            .await;
        assert!(cut.is_err(), "{body}");
    }
    // A trailer holding the value comes back with the placeholder.
    let mut trailers = HeaderMap::new();
    trailers.insert("x-t", HeaderValue::from_str(VALUE).unwrap());
    let got = EchoBody::new(
        WithTrailers(Some(Bytes::from_static(b"ok")), Some(trailers)),
        s.clone(),
        &dest,
    )
    .collect()
    .await
    .unwrap();
    assert_eq!(got.trailers().unwrap()["x-t"], PH);
}

#[test]
fn a_swapped_query_echoed_back_gets_the_placeholder_and_plain_http_echoes_too() {
    let slashy = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    let mut hosts = AllowList::default();
    hosts.insert(
        parse_authority("api.example.com", Some(443)).unwrap().host,
        443,
    );
    hosts.insert(
        parse_authority("api.example.com", Some(80)).unwrap().host,
        80,
    );
    let secret = Secret::for_test(
        SecretConfig {
            name: "KEY".into(),
            source: SecretSource::Env("KEY".into()),
            hosts,
            headers: vec!["authorization".into()],
            query: true,
            body: false,
            on_violation: OnViolation::Refuse,
        },
        "sluice_Qx7Jm2Kd9Pz4Vb8Nc3Rt6YwLpEh12345",
        slashy.as_bytes(),
    );
    let s = Arc::new(TaskSecrets::for_test(vec![secret]));
    let ph = s.list[0].placeholder.clone();
    let (uri, _, _) = head(&s, "api.example.com", true, &format!("/r?key={ph}"), &[]).unwrap();
    let sent = uri.query().unwrap().to_string();
    assert!(sent.contains("%2F"), "{sent}");
    let t = target("api.example.com");
    for intercepted in [true, false] {
        let dest = Dest {
            target: &t,
            intercepted,
        };
        let mut h = HeaderMap::new();
        h.insert(
            "location",
            HeaderValue::from_str(&format!("/r/?{sent}")).unwrap(),
        );
        assert!(s.echo_head(&dest, &mut h).unwrap(), "{intercepted}");
        assert_eq!(h["location"], format!("/r/?key={ph}").as_str());
    }
}
