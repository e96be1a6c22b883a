//! forward: relay an admitted absolute-form HTTP request upstream and its
//! response back, over pooled upstream connections keyed by checked
//! address.
//!
//! Strips hop-by-hop and `Proxy-*` headers both ways and adds no `Via` or
//! `X-Forwarded-For`. Must not decide: it only runs after `conn::admit`.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

use crate::config::{Snapshot, TaskConfig};
use crate::conn::{self, ConnCtx, Exchange};
use crate::log::Kind;
use crate::policy::{
    target::parse_authority, CheckedAddr, HostHeader, Refusal, Rule, TaintMode, Target,
};
use crate::respond::{self, ProxyBody};
use crate::taint::body::BodyScanner;
use crate::tunnel::DialError;
use tokio_util::sync::CancellationToken;

mod body;
mod pool;
mod upgrade;

use body::{CountingBody, Finish, RelayBody, Scan};
use pool::connect;
pub use pool::{Pool, Sender, Spare, UpBody};

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
fn strip_hop_by_hop(h: &mut HeaderMap, upgrade: bool) {
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
    conn::remove_prefixed(h, "proxy-");
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        h.remove(header::UPGRADE);
    }
}

/// Forwards one absolute-form request.
pub async fn forward(
    ctx: Arc<ConnCtx>,
    snap: &Snapshot,
    req: Request<Incoming>,
    started: Instant,
) -> Response<ProxyBody> {
    let uri = req.uri().clone();
    let mut ex = Exchange {
        kind: Kind::Http,
        method: req.method().clone(),
        host: uri.host().unwrap_or_default().to_string(),
        port: uri.port_u16().unwrap_or(80),
        path: Some(uri.path().to_string()),
        url: uri.to_string(),
        body: conn::carries_body(req.headers()),
        started,
        generation: snap.generation,
    };
    let Some(task) = conn::task_config(&ctx, snap) else {
        return ctx.refuse(&ex, conn::task_gone());
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
    let hh = conn::host_header(req.headers(), 80);
    let origin = Origin {
        scheme: "http",
        tls: None,
        spare: None,
    };
    exchange(ctx, snap, task, &target, &hh, origin, req, ex).await
}

/// Where an admitted request goes: plain HTTP, or HTTPS re-originated by
/// sluice for an intercepted tunnel.
pub struct Origin<'a> {
    pub scheme: &'static str,
    /// The name to verify the upstream certificate for (HTTPS only).
    pub tls: Option<Arc<str>>,
    /// The connection dialled when the tunnel was opened.
    pub spare: Option<&'a Spare>,
}

/// The one pipeline of a request, plain or intercepted: decide, send
/// upstream, relay the response while scanning it, log once.
#[allow(clippy::too_many_arguments)]
pub async fn exchange(
    ctx: Arc<ConnCtx>,
    snap: &Snapshot,
    task: &Arc<TaskConfig>,
    target: &Target,
    hh: &HostHeader,
    origin: Origin<'_>,
    req: Request<Incoming>,
    ex: Exchange,
) -> Response<ProxyBody> {
    // HTTP/2 has no Transfer-Encoding: a body is also one that is not
    // known to be empty.
    let body = ex.body || (req.version() == Version::HTTP_2 && !req.body().is_end_stream());
    let ex = Exchange { body, ..ex };
    let admitted = match conn::admit(&ctx.shared, &ctx.task, task, target, hh, body).await {
        Ok(a) => a,
        Err(r) => {
            drain(req).await;
            return ctx.refuse(&ex, r);
        }
    };

    let client_version = req.version();
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let (mut parts, incoming) = req.into_parts();
    let client_upgrade = upgrade.then(|| {
        // hyper hands out the client's upgrade through the extensions.
        let mut r = Request::new(());
        *r.extensions_mut() = std::mem::take(&mut parts.extensions);
        hyper::upgrade::on(r)
    });
    let bytes_up = Arc::new(AtomicU64::new(0));
    let revoked = match register_body(&ctx, &ex, target, &admitted, body && !upgrade) {
        Ok(r) => r,
        Err(r) => {
            drain(Request::from_parts(parts, incoming)).await;
            return ctx.refuse(&ex, r);
        }
    };
    let up_body = CountingBody {
        inner: incoming,
        counter: bytes_up.clone(),
        revoked,
    }
    .boxed();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let authority = if target.port == if origin.scheme == "https" { 443 } else { 80 } {
        target.host.to_string()
    } else {
        target.to_string()
    };
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers, upgrade);
    // 100-continue is answered by sluice once upstream is connected.
    headers.remove(header::EXPECT);
    if !headers.contains_key(header::HOST) {
        if let Ok(v) = HeaderValue::from_str(&authority) {
            headers.insert(header::HOST, v);
        }
    }
    let mut up_req = Request::new(up_body);
    *up_req.method_mut() = parts.method.clone();
    *up_req.headers_mut() = headers;

    let timeout = snap.limits.connect_timeout;
    let pool = ctx.task.pool.clone();
    let sent_at = Instant::now();
    let first_byte = snap.limits.first_byte_timeout;
    let sent = send(
        &ctx.shared,
        &ctx.task,
        &pool,
        &admitted,
        &origin,
        up_req,
        (&path_and_query, &authority),
        timeout,
        upgrade,
    );
    let sent = match tokio::time::timeout(first_byte, sent).await {
        Ok(r) => r,
        Err(_) => Err(DialError {
            rule: Rule::UpstreamTimeout,
            message: format!(
                "the upstream for {target} sent no response within {}s",
                first_byte.as_secs()
            ),
        }),
    };
    let (resp, sender, addr) = match sent {
        Ok(x) => x,
        Err(e) => return ctx.refuse(&ex, Refusal::new(e.rule, e.message)),
    };
    ctx.task
        .metrics
        .first_byte_seconds
        .observe(sent_at.elapsed().as_secs_f64());

    let (mut rparts, rbody) = resp.into_parts();
    // Each hop speaks its own protocol: an HTTP/1.0 or HTTP/2 upstream does
    // not change what the client speaks.
    rparts.version = client_version;
    // Read what comes back: headers now, the body as it is relayed.
    let scan = (task.taint.mode != TaintMode::Off).then(|| {
        let path = path_and_query.split('?').next().unwrap_or("/");
        let source: Arc<str> = source_url(origin.scheme, target, path).into();
        let served_by: Arc<str> = target.host.to_string().into();
        let named = scan_headers(&rparts.headers);
        if !named.is_empty() {
            ctx.taint(task, named, &source, &served_by);
        }
        Scan {
            body: body_scanner(&rparts.headers, task.taint.max_scan_bytes),
            task: task.clone(),
            source,
            served_by,
        }
    });
    let switching = rparts.status == StatusCode::SWITCHING_PROTOCOLS;
    strip_hop_by_hop(&mut rparts.headers, switching && upgrade);
    let status = rparts.status.as_u16();
    let (verdict, would_deny) = admitted.verdict();
    let would_deny = would_deny.cloned();

    if switching {
        if let Some(client_upgrade) = client_upgrade {
            // hyper hands out the upgraded upstream connection through the
            // response's extensions.
            let mut holder = Response::new(());
            *holder.extensions_mut() = std::mem::take(&mut rparts.extensions);
            let relay = upgrade::Upgraded {
                ctx: ctx.clone(),
                target: target.clone(),
                addr,
                idle: snap.limits.tunnel_idle_timeout,
                ex,
                verdict: (verdict, would_deny),
                status,
                bytes_up,
            };
            relay.spawn(client_upgrade, hyper::upgrade::on(holder));
            drop(sender);
            return Response::from_parts(rparts, respond::empty());
        }
    }

    let relay = RelayBody {
        inner: rbody,
        bytes_down: 0,
        stall: body::Stall::new(first_byte),
        scan,
        finish: Some(Finish {
            ctx,
            ex,
            verdict,
            would_deny,
            status,
            bytes_up,
            reuse: (!upgrade).then_some((pool, (addr, origin.tls.clone()), sender)),
        }),
    };
    Response::from_parts(rparts, relay.boxed())
}

/// A body registers like a tunnel, then policy is asked again: a taint or
/// reload that landed since `admit` is not missed, and one that lands
/// while it streams cuts it (see `CountingBody`).
fn register_body(
    ctx: &Arc<ConnCtx>,
    ex: &Exchange,
    target: &Target,
    admitted: &conn::Admitted,
    carries_body: bool,
) -> Result<Option<(crate::taint::OwnedTunnelGuard, CancellationToken)>, Refusal> {
    let Some(addr) = admitted.addrs.first().filter(|_| carries_body) else {
        return Ok(None);
    };
    let stop = ctx.shared.hard_stop.child_token();
    let guard = ctx
        .task
        .tunnels
        .register_owned(&ex.host, addr.addr(), stop.clone());
    ctx.recheck_open(target, addr.addr(), true)?;
    Ok(Some((guard, stop)))
}

/// Reads and discards a small refused request body, so that the client
/// sees the refusal instead of a reset (HTTP/2) and the connection stays
/// usable (HTTP/1.1). Nothing read here goes anywhere. A client waiting for
/// 100-continue is not asked for its body.
async fn drain(req: Request<Incoming>) {
    const LIMIT: u64 = 1024 * 1024;
    if req.headers().contains_key(header::EXPECT) {
        return;
    }
    let mut body = req.into_body();
    let mut read = 0u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while read <= LIMIT {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => read += f.data_ref().map(|d| d.len() as u64).unwrap_or(0),
            _ => return,
        }
    }
}

/// Sends on a pooled connection, or a fresh one. A request that a pooled
/// connection could not even start sending (it closed meanwhile) is
/// retried once on a fresh connection.
#[allow(clippy::too_many_arguments)]
async fn send(
    shared: &crate::server::Shared,
    task: &crate::server::TaskRuntime,
    pool: &Arc<Pool>,
    admitted: &conn::Admitted,
    origin: &Origin<'_>,
    req: Request<UpBody>,
    (path, authority): (&str, &str),
    timeout: Duration,
    fresh_only: bool,
) -> Result<(Response<Incoming>, Sender, SocketAddr), DialError> {
    let mut req = req;
    if !fresh_only {
        if let Some((mut sender, addr)) = pool.take(&admitted.addrs, &origin.tls) {
            shape_for(&mut req, &sender, origin.scheme, path, authority);
            match sender.try_send(req).await {
                Ok(resp) => return Ok((resp, sender, addr.addr())),
                Err(Ok(r)) => req = r,
                Err(Err(e)) => return Err(upstream_error(addr, e)),
            }
        }
    }
    let started = Instant::now();
    let (mut sender, addr) = connect(
        shared,
        &admitted.permit,
        &admitted.addrs,
        &origin.tls,
        timeout,
        origin.spare,
    )
    .await?;
    task.metrics
        .upstream_connect_seconds
        .observe(started.elapsed().as_secs_f64());
    shape_for(&mut req, &sender, origin.scheme, path, authority);
    match sender.try_send(req).await {
        Ok(resp) => Ok((resp, sender, addr.addr())),
        Err(Ok(_)) => Err(DialError {
            rule: Rule::UpstreamFailed,
            message: format!("the upstream at {} closed the connection", addr.addr()),
        }),
        Err(Err(e)) => Err(upstream_error(addr, e)),
    }
}

/// HTTP/1.1 upstreams get origin-form and a Host header; HTTP/2 upstreams
/// an absolute URI (its :authority) and no Host.
fn shape_for(
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
pub fn source_url(scheme: &str, target: &Target, path: &str) -> String {
    let default = if scheme == "https" { 443 } else { 80 };
    if target.port == default {
        format!("{scheme}://{}{path}", target.host)
    } else {
        format!("{scheme}://{}:{}{path}", target.host, target.port)
    }
}

/// The scanner for a response body: its Content-Encoding lines (undone in
/// reverse order) and charset decide how the bytes are decoded for it.
fn body_scanner(h: &HeaderMap, limit: u64) -> BodyScanner {
    let encodings: Vec<&[u8]> = h
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    let content_type = h.get(header::CONTENT_TYPE).map(|v| v.as_bytes());
    BodyScanner::for_response(&encodings, content_type, limit)
}

/// Host names in a response's headers: every header, not only the
/// URL-bearing ones (a name in `X-Next: paste.example.com` is read by
/// whoever reads the headers). Trailers are scanned by the body relay.
pub(crate) fn scan_headers(h: &HeaderMap) -> Vec<String> {
    // One scanner for every value (a newline between two ends any name),
    // not one per header: this runs on every response.
    let mut scanner = crate::taint::scan::Scanner::new();
    let mut out = Vec::new();
    for v in h.values() {
        scanner.feed(v.as_bytes(), &mut |n| out.push(n));
        scanner.feed(b"\n", &mut |n| out.push(n));
    }
    scanner.finish(&mut |n| out.push(n));
    out
}

fn upstream_error(addr: CheckedAddr, e: hyper::Error) -> DialError {
    DialError {
        rule: Rule::UpstreamFailed,
        message: format!("the upstream at {} failed: {e}", addr.addr()),
    }
}
