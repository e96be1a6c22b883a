//! forward: relay an admitted HTTP request upstream and its response
//! back — plain absolute-form requests, and (called by `intercept`) each
//! request inside an intercepted or plain-HTTP tunnel. The response is
//! scanned for host names as it streams, before the client sees it.
//!
//! Strips hop-by-hop and `Proxy-*` headers both ways and adds no `Via` or
//! `X-Forwarded-For`. Must not decide: `exchange::admit` asks `policy`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

use crate::config::TaskConfig;
use crate::exchange::{self, ConnCtx, Exchange, Row};
use crate::log::Kind;
use crate::policy::{
    target::parse_authority, HostHeader, Refusal, Rule, TaintMode, Target, Verdict,
};
use crate::respond::{self, ProxyBody};
use crate::state::Live;
use crate::taint::body::memory::Memory;
use crate::upstream::{PoolKey, Sender, Spare, UpBody, UpstreamError};

mod body;
mod headers;
mod send;
mod upgrade;

use body::{CountingBody, Finish, RelayBody, Scan};
pub(crate) use headers::scan_headers;
pub(crate) use headers::source_url;
use headers::{body_scanner, keep_upgrade, strip_hop_by_hop};
use send::{drain, register_body, send, Upstream};

/// Forwards one absolute-form request.
pub(crate) async fn forward(
    ctx: Arc<ConnCtx>,
    live: &Arc<Live>,
    req: Request<Incoming>,
    started: Instant,
) -> Response<ProxyBody> {
    let snap = &*live.config;
    let uri = req.uri().clone();
    let mut ex = Exchange {
        kind: Kind::Http,
        method: req.method().clone(),
        host: uri.host().unwrap_or_default().to_string(),
        port: uri.port_u16().unwrap_or(80),
        path: Some(uri.path().to_string()),
        url: uri.to_string(),
        body: exchange::carries_body(req.headers()),
        started,
        generation: snap.generation,
        note: None,
        conn: ctx.id,
        addr: None,
    };
    let Some(task) = ctx.task_config(snap) else {
        return ctx.refuse(&ex, exchange::task_gone());
    };
    let target = match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(auth)) => match parse_authority(auth.as_str(), Some(80)) {
            Ok(t) => t,
            Err(e) => return ctx.refuse(&ex, Refusal::new(Rule::BadTarget, e.to_string())),
        },
        (Some(_), Some(_)) => {
            return ctx.refuse(
                &ex,
                Refusal::new(
                    Rule::BadTarget,
                    "only http:// URLs are forwarded; send https through CONNECT (set HTTPS_PROXY)",
                ),
            )
        }
        _ => {
            return ctx.refuse(
                &ex,
                Refusal::new(
                    Rule::BadTarget,
                    "sluice is a forward proxy: send an absolute-form request (GET http://host/path) or CONNECT host:port",
                ),
            )
        }
    };
    ex.host = target.host.to_string();
    ex.port = target.port;
    let out = Outbound {
        task,
        target: &target,
        host_header: exchange::host_header(req.headers(), 80),
        ex,
    };
    let origin = Origin {
        scheme: "http",
        tls: None,
        spare: None,
    };
    relay(ctx, live, out, origin, req).await
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

/// A request on its way upstream, as its caller parsed it.
pub(crate) struct Outbound<'a> {
    pub(crate) task: &'a Arc<TaskConfig>,
    pub(crate) target: &'a Target,
    pub(crate) host_header: HostHeader,
    pub(crate) ex: Exchange,
}

/// The one pipeline of a request, plain or intercepted: decide, send
/// upstream, relay the response while scanning it, log once. It dials,
/// pools and logs under the snapshot the request was admitted under (in
/// ask mode, the one in force when a person answered).
pub(crate) async fn relay(
    ctx: Arc<ConnCtx>,
    live: &Arc<Live>,
    out: Outbound<'_>,
    origin: Origin<'_>,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let Outbound {
        task, target, ex, ..
    } = out;
    // HTTP/2 has no Transfer-Encoding: a body is also one that is not
    // known to be empty.
    let body = ex.body || (req.version() == Version::HTTP_2 && !req.body().is_end_stream());
    let mut ex = Exchange { body, ..ex };
    let (host_header, method) = (&out.host_header, ex.method.as_str());
    let content_type = content_type(req.headers());
    let (path, content_type) = (ex.path.as_deref(), content_type.as_deref());
    let sent = crate::exchange::Sent {
        body,
        method,
        path,
        content_type,
    };
    let mut live = live.clone();
    let verdict = exchange::admit_for(&ctx, &mut live, task, target, host_header, &ex, sent).await;
    let snap = &*live.config;
    ex.generation = snap.generation;
    let (admitted, verdict) = match verdict.split() {
        Ok(x) => x,
        Err(r) => {
            drain(req).await;
            return ctx.refuse(&ex, r);
        }
    };
    let upgrade = keep_upgrade(req.headers_mut());
    let client_version = req.version();
    let (mut parts, incoming) = req.into_parts();
    let client_upgrade = upgrade.then(|| {
        // hyper hands out the client's upgrade through the extensions.
        let mut r = Request::new(());
        *r.extensions_mut() = std::mem::take(&mut parts.extensions);
        hyper::upgrade::on(r)
    });
    let revoked = match register_body(&ctx, &ex, target, &admitted, body && !upgrade, sent) {
        Ok(r) => r,
        Err(r) => {
            drain(Request::from_parts(parts, incoming)).await;
            return ctx.refuse(&ex, r);
        }
    };
    let bytes_up = Arc::new(AtomicU64::new(0));
    let up_body = CountingBody {
        inner: incoming,
        counter: bytes_up.clone(),
        revoked,
    }
    .boxed();
    let path = path_and_query(&parts.uri);
    let authority = authority_for(target, origin.scheme);
    let up_req = upstream_request(parts, up_body, &authority, upgrade);
    let up = Upstream {
        task: &ctx.task,
        pool: &ctx.task.pool,
        tls: &live.tls,
        path: &path,
        authority: &authority,
        timeout: snap.limits.connect_timeout,
        generation: snap.generation,
    };
    let sent_at = Instant::now();
    let on_its_way = Row::on_its_way(ctx.clone(), &ex, &verdict, bytes_up.clone());
    let first_byte = snap.limits.first_byte_timeout;
    let sent = send_timed(
        first_byte,
        target,
        send(&up, admitted, &origin, up_req, upgrade),
    )
    .await;
    on_its_way.disarm();
    let (resp, sender, addr) = match sent {
        Ok(x) => x,
        Err(e) => return ctx.refuse(&ex, e.refusal()),
    };
    ex.addr = Some(addr);
    ctx.task
        .metrics
        .first_byte_seconds
        .observe(sent_at.elapsed().as_secs_f64());
    let back = Back {
        task,
        target,
        origin: &origin,
        path: &path,
        client_version,
        client_upgrade,
        bytes_up,
    };
    respond_with(ctx, &live, back, resp, (sender, addr), (ex, verdict))
}

/// The request's path and query, as sent upstream (`/` when it has none).
fn path_and_query(uri: &http::Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string())
}

/// Sends, waiting at most `first_byte` for the response head.
async fn send_timed<T>(
    first_byte: std::time::Duration,
    target: &Target,
    sending: impl std::future::Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    tokio::time::timeout(first_byte, sending)
        .await
        .unwrap_or_else(|_| {
            Err(UpstreamError::FirstByteTimeout {
                target: target.to_string(),
                secs: first_byte.as_secs(),
            })
        })
}

/// The Host an upstream is sent: the port only when it is not the
/// scheme's default.
fn authority_for(target: &Target, scheme: &str) -> String {
    if target.port == if scheme == "https" { 443 } else { 80 } {
        target.host.to_string()
    } else {
        target.to_string()
    }
}

/// The request sent upstream: the client's, minus what one hop may not
/// pass on; 100-continue is answered by sluice once upstream is connected.
fn upstream_request(
    parts: http::request::Parts,
    body: UpBody,
    authority: &str,
    upgrade: bool,
) -> Request<UpBody> {
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers, upgrade);
    headers.remove(header::EXPECT);
    if !headers.contains_key(header::HOST) {
        if let Ok(v) = HeaderValue::from_str(authority) {
            headers.insert(header::HOST, v);
        }
    }
    let mut up_req = Request::new(body);
    *up_req.method_mut() = parts.method;
    *up_req.headers_mut() = headers;
    up_req
}

/// What the response side of an exchange needs from its request.
struct Back<'a> {
    task: &'a Arc<TaskConfig>,
    target: &'a Target,
    origin: &'a Origin<'a>,
    /// Path and query sent upstream.
    path: &'a str,
    client_version: Version,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    bytes_up: Arc<AtomicU64>,
}

/// Relays the upstream's response: headers scanned now, the body as it
/// streams (or, after a 101, the upgraded connection); the row is written
/// when it ends.
fn respond_with(
    ctx: Arc<ConnCtx>,
    live: &Live,
    back: Back<'_>,
    resp: Response<Incoming>,
    (sender, addr): (Sender, std::net::SocketAddr),
    pending: (Exchange, Verdict),
) -> Response<ProxyBody> {
    let snap = &*live.config;
    let (mut rparts, rbody) = resp.into_parts();
    // Each hop speaks its own protocol: an HTTP/1.0 or HTTP/2 upstream does
    // not change what the client speaks.
    rparts.version = back.client_version;
    let scan = (back.task.taint.mode != TaintMode::Off).then(|| {
        let path = back.path.split('?').next().unwrap_or("/");
        let source: Arc<str> = source_url(back.origin.scheme, back.target, path).into();
        let served_by: Arc<str> = back.target.host.to_string().into();
        let owners = back.task.taint.by_owner.scan_hosts();
        let reason = rparts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .map(hyper::ext::ReasonPhrase::as_bytes);
        let named = scan_headers(&rparts.headers, reason, owners.clone());
        let mut tally = crate::exchange::Tally::default();
        if !named.is_empty() {
            ctx.taint(
                back.task,
                &mut tally,
                named,
                Vec::new(),
                &source,
                &served_by,
            );
        }
        Scan {
            body: body_scanner(&rparts.headers, back.task.taint.max_scan_bytes, owners)
                .with_memory(Memory {
                    task: ctx.task.decoder_memory.clone(),
                    total: ctx.shared.decoder_memory.clone(),
                }),
            task: back.task.clone(),
            source,
            served_by,
            tally,
        }
    });
    let switching = rparts.status == StatusCode::SWITCHING_PROTOCOLS;
    let upgrade = back.client_upgrade.is_some();
    strip_hop_by_hop(&mut rparts.headers, switching && upgrade);
    let row = Row::new(ctx.clone(), pending.0, pending.1, rparts.status.as_u16());
    if let (true, Some(client_upgrade)) = (switching, back.client_upgrade) {
        // hyper hands out the upgraded upstream connection through the
        // response's extensions.
        let mut holder = Response::new(());
        *holder.extensions_mut() = std::mem::take(&mut rparts.extensions);
        // Read as the client will read it: the headers it gets.
        let scan = scan.map(|s| upgrade::DownScan::for_switch(s, &rparts.headers));
        let relay = upgrade::Upgraded {
            ctx,
            target: back.target.clone(),
            addr,
            idle: snap.limits.tunnel_idle_timeout,
            row,
            bytes_up: back.bytes_up,
            scan,
        };
        relay.spawn(client_upgrade, hyper::upgrade::on(holder));
        drop(sender);
        return Response::from_parts(rparts, respond::empty());
    }
    let pool = ctx.task.pool.clone();
    let relay = RelayBody {
        inner: rbody,
        bytes_down: 0,
        since_yield: 0,
        stall: body::Stall::new(snap.limits.first_byte_timeout),
        scan,
        finish: Some(Finish {
            ctx,
            row,
            bytes_up: back.bytes_up,
            reuse: (!upgrade).then(|| {
                let key = PoolKey {
                    addr,
                    tls: back.origin.tls.clone(),
                    generation: snap.generation,
                };
                (pool, key, sender)
            }),
        }),
    };
    Response::from_parts(rparts, relay.boxed())
}
