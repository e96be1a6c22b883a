//! forward: relay an admitted HTTP request upstream and its response
//! back — plain absolute-form requests, and (called by `intercept`) each
//! request inside an intercepted or plain-HTTP tunnel. The response is
//! scanned for host names as it streams, before the client sees it.
//!
//! [`relay`] is the whole pipeline of a request, read top to bottom: the
//! request's context ([`ReqCtx`]) goes through admit (`exchange`), dial
//! and send ([`send`]) and respond ([`response`], which hands the row to
//! the body or upgrade relay that writes it when the exchange ends). Each
//! phase is entered once and returns; none calls back up.
//!
//! Strips hop-by-hop and `Proxy-*` headers both ways and adds no `Via` or
//! `X-Forwarded-For`. Must not decide: `ReqCtx::admit` asks `policy`.

use std::sync::Arc;
use std::time::Instant;

use http::header;
use http::{Request, Response, Version};
use hyper::body::{Body, Incoming};

use crate::exchange::{self, ConnCtx, Exchange, ReqCtx};
use crate::log::Kind;
use crate::policy::{target::parse_authority, HostHeader, Refusal, Rule, Target};
use crate::respond::ProxyBody;
use crate::state::Live;
use crate::upstream::Spare;

mod body;
mod headers;
mod response;
mod secret;
mod send;
mod upgrade;

pub(crate) use headers::scan_headers;
pub(crate) use headers::source_url;

/// Forwards one absolute-form request, under `live` (the snapshot loaded
/// once for it).
pub(crate) async fn forward(
    ctx: Arc<ConnCtx>,
    live: Arc<Live>,
    req: Request<Incoming>,
    started: Instant,
) -> Response<ProxyBody> {
    let uri = req.uri();
    let ex = Exchange {
        kind: Kind::Http,
        method: req.method().clone(),
        host: uri.host().unwrap_or_default().to_string(),
        port: uri.port_u16().unwrap_or(80),
        path: Some(uri.path().to_string()),
        url: uri.to_string(),
        body: exchange::carries_body(req.headers()),
        started,
        generation: 0,
        note: None,
        conn: ctx.id,
        addr: None,
        secrets: Vec::new(),
    };
    let mut cx = match ReqCtx::start(&ctx, live, ex) {
        Ok(cx) => cx,
        Err(refused) => return *refused,
    };
    let target = match absolute_target(req.uri()) {
        Ok(t) => t,
        Err(r) => return cx.refuse(r),
    };
    cx.ex_mut().host = target.host.to_string();
    cx.ex_mut().port = target.port;
    let host_header = exchange::host_header(req.headers(), 80);
    let origin = Origin {
        scheme: "http",
        tls: None,
        spare: None,
    };
    relay(cx, &target, host_header, origin, req).await
}

/// The target of an absolute-form `http://` request.
fn absolute_target(uri: &http::Uri) -> Result<Target, Refusal> {
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(auth)) => parse_authority(auth.as_str(), Some(80))
            .map_err(|e| Refusal::new(Rule::BadTarget, e.to_string())),
        (Some(_), Some(_)) => Err(Refusal::new(
            Rule::BadTarget,
            "only http:// URLs are forwarded; send https through CONNECT (set HTTPS_PROXY)",
        )),
        _ => Err(Refusal::new(
            Rule::BadTarget,
            "sluice is a forward proxy: send an absolute-form request (GET http://host/path) or CONNECT host:port",
        )),
    }
}

/// The request's Content-Type, if it is text.
fn content_type(h: &http::HeaderMap) -> Option<String> {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Where an admitted request goes: plain HTTP, or HTTPS re-originated by
/// sluice for an intercepted tunnel.
pub(crate) struct Origin<'a> {
    pub(crate) scheme: &'static str,
    /// The name to verify the upstream certificate for (HTTPS only).
    pub(crate) tls: Option<Arc<str>>,
    /// The connection dialled when the tunnel was opened.
    pub(crate) spare: Option<&'a Spare>,
}

/// The one pipeline of a request, plain or intercepted, top to bottom:
/// admit, dial and send, respond. The context carries the snapshot the
/// request was admitted under (in ask mode, the one in force when a
/// person answered); it dials, pools and logs under it.
pub(crate) async fn relay(
    mut cx: ReqCtx,
    target: &Target,
    host_header: HostHeader,
    origin: Origin<'_>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    // HTTP/2 has no Transfer-Encoding: a body is also one that is not
    // known to be empty.
    let body = cx.ex().body || (req.version() == Version::HTTP_2 && !req.body().is_end_stream());
    cx.ex_mut().body = body;
    let content_type = content_type(req.headers());
    let method = cx.ex().method.clone();
    let path = cx.ex().path.clone();
    let sent = exchange::Sent {
        body,
        method: method.as_str(),
        path: path.as_deref(),
        content_type: content_type.as_deref(),
    };
    // admit
    let verdict = cx.admit(target, &host_header, sent).await;
    let (admitted, verdict) = match verdict.split() {
        Ok(x) => x,
        Err(r) => {
            // The row is written as the context becomes the refusal, so a
            // client that leaves while its body drains still has one.
            let refused = cx.refuse(r);
            send::drain(req).await;
            return refused;
        }
    };
    // dial and send
    let sending = send::Sending {
        target,
        origin: &origin,
        admitted,
        verdict,
        sent,
    };
    let exchanged = match send::send(&mut cx, sending, req).await {
        Ok(x) => x,
        Err(send::NotSent { refusal, unread }) => {
            let refused = cx.refuse(refusal);
            if let Some(req) = unread {
                send::drain(req).await;
            }
            return refused;
        }
    };
    // respond (the row is written when the relay it hands on ends)
    response::respond(cx, target, &origin, exchanged)
}
