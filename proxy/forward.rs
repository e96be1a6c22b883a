//! forward: relay an admitted absolute-form HTTP request upstream and its
//! response back, over pooled upstream connections keyed by checked
//! address.
//!
//! Strips hop-by-hop and `Proxy-*` headers both ways and adds no `Via` or
//! `X-Forwarded-For`. Must not decide: it only runs after `conn::admit`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::{Snapshot, TaskConfig};
use crate::conn::{self, ConnCtx, Exchange};
use crate::log::Kind;
use crate::policy::{
    target::parse_authority, CheckedAddr, HostHeader, Permit, Refusal, Rule, TaintMode, Target,
};
use crate::respond::{self, ProxyBody};
use crate::taint::body::BodyScanner;
use crate::tunnel::{self, DialError, RelayBytes};

/// The body type sent upstream.
pub type UpBody = http_body_util::combinators::BoxBody<Bytes, hyper::Error>;

/// How long an idle upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// Idle connections kept per address.
const POOL_PER_ADDR: usize = 32;

/// Where a pooled connection goes: the checked address, and for HTTPS the
/// name its certificate was verified for.
type PoolKey = (SocketAddr, Option<Arc<str>>);

/// Idle upstream connections of one task, keyed by checked address (and
/// TLS name).
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<IdleConn>>>,
}

/// An idle upstream connection and when it became idle.
type IdleConn = (Sender, Instant);

/// An upstream HTTP/1.1 or HTTP/2 connection.
pub enum Sender {
    H1(SendRequest<UpBody>),
    H2(hyper::client::conn::http2::SendRequest<UpBody>),
}

impl Sender {
    fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }
    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }
    async fn ready(&mut self) -> Result<(), hyper::Error> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }
    fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }
    /// Sends; a request that was never started comes back in `Err(Ok(req))`.
    async fn try_send(
        &mut self,
        req: Request<UpBody>,
    ) -> Result<Response<Incoming>, Result<Request<UpBody>, hyper::Error>> {
        let r = match self {
            Sender::H1(s) => s.try_send_request(req).await,
            Sender::H2(s) => s.try_send_request(req).await,
        };
        r.map_err(|mut e| match e.take_message() {
            Some(req) => Ok(req),
            None => Err(e.into_error()),
        })
    }
}

impl Pool {
    /// An idle, ready connection to one of `addrs`, if there is one.
    fn take(&self, addrs: &[CheckedAddr], tls: &Option<Arc<str>>) -> Option<(Sender, CheckedAddr)> {
        // A std Mutex: held only for a map lookup, never across an await.
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        for a in addrs {
            if let Some(list) = idle.get_mut(&(a.addr(), tls.clone())) {
                while let Some((sender, since)) = list.pop() {
                    if since.elapsed() < POOL_IDLE && sender.is_ready() {
                        return Some((sender, *a));
                    }
                }
            }
        }
        None
    }

    /// Drops every idle connection (a reload may no longer allow them).
    pub fn clear(&self) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Returns a connection once it is ready for another request.
    fn put(self: &Arc<Self>, key: PoolKey, mut sender: Sender) {
        let pool = self.clone();
        tokio::spawn(async move {
            let ready = tokio::time::timeout(Duration::from_secs(5), sender.ready()).await;
            if !matches!(ready, Ok(Ok(()))) {
                return;
            }
            let mut idle = pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            let list = idle.entry(key).or_default();
            list.retain(|(s, t)| !s.is_closed() && t.elapsed() < POOL_IDLE);
            if list.len() < POOL_PER_ADDR {
                list.push((sender, Instant::now()));
            }
        });
    }
}

/// A TCP connection dialled for a CONNECT before it was answered, kept for
/// the tunnel's first intercepted request.
pub type Spare = std::sync::Mutex<Option<(TcpStream, CheckedAddr)>>;

/// Dials a fresh upstream connection: TCP, then TLS (verified for `tls`)
/// when the origin is HTTPS, then HTTP/2 or HTTP/1.1 as ALPN says.
async fn connect(
    shared: &crate::server::Shared,
    permit: &Permit,
    addrs: &[CheckedAddr],
    tls: &Option<Arc<str>>,
    timeout: Duration,
    spare: Option<&Spare>,
) -> Result<(Sender, CheckedAddr), DialError> {
    let reused = spare.and_then(|s| {
        let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
        match s.take() {
            Some((stream, addr)) if addrs.contains(&addr) => Some((stream, addr)),
            _ => None,
        }
    });
    let (stream, addr) = match reused {
        Some(x) => x,
        None => tunnel::dial(permit, addrs, timeout).await?,
    };
    let handshake_err = |e: hyper::Error| DialError {
        rule: Rule::UpstreamFailed,
        message: format!("HTTP handshake with {} failed: {e}", addr.addr()),
    };
    let Some(name) = tls else {
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(handshake_err)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        return Ok((Sender::H1(sender), addr));
    };
    let tls_stream = shared
        .tls
        .load_full()
        .connect(name, stream, timeout)
        .await?;
    let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls_stream);
    if h2 {
        let (sender, conn) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .timer(hyper_util::rt::TokioTimer::new())
                .handshake(io)
                .await
                .map_err(handshake_err)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream h2 connection ended with an error");
            }
        });
        Ok((Sender::H2(sender), addr))
    } else {
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(io)
            .await
            .map_err(handshake_err)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok((Sender::H1(sender), addr))
    }
}

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
    let proxy_headers: Vec<HeaderName> = h
        .keys()
        .filter(|k| k.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for n in proxy_headers {
        h.remove(n);
    }
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
    let up_body = CountingBody {
        inner: incoming,
        counter: bytes_up.clone(),
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
        let named = scan_headers(&rparts.headers);
        if !named.is_empty() {
            ctx.taint(task, named, &source);
        }
        let encoding = rparts
            .headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok());
        Scan {
            body: BodyScanner::new(encoding, task.taint.max_scan_bytes),
            task: task.clone(),
            source,
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
            let upstream_upgrade = hyper::upgrade::on(holder);
            let ctx2 = ctx.clone();
            let idle = snap.limits.tunnel_idle_timeout;
            ctx.shared.tracker.spawn(async move {
                let bytes = RelayBytes::default();
                if let (Ok(c), Ok(u)) = (client_upgrade.await, upstream_upgrade.await) {
                    tunnel::relay(
                        TokioIo::new(c),
                        TokioIo::new(u),
                        &bytes,
                        idle,
                        &ctx2.shared.hard_stop,
                    )
                    .await;
                }
                ctx2.record(
                    &ex,
                    verdict,
                    would_deny.as_ref(),
                    status,
                    (
                        bytes_up.load(Ordering::Relaxed) + bytes.up.load(Ordering::Relaxed),
                        bytes.down.load(Ordering::Relaxed),
                    ),
                );
            });
            drop(sender);
            return Response::from_parts(rparts, respond::empty());
        }
    }

    let relay = RelayBody {
        inner: rbody,
        bytes_down: 0,
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

/// Headers that name other URLs.
const URL_HEADERS: [HeaderName; 4] = [
    header::LOCATION,
    header::CONTENT_LOCATION,
    header::LINK,
    HeaderName::from_static("refresh"),
];

/// Host names in a response's URL-bearing headers.
fn scan_headers(h: &HeaderMap) -> Vec<String> {
    let mut out = Vec::new();
    for name in URL_HEADERS.iter() {
        for v in h.get_all(name) {
            out.extend(crate::taint::scan::scan_all(v.as_bytes()));
        }
    }
    out
}

fn upstream_error(addr: CheckedAddr, e: hyper::Error) -> DialError {
    DialError {
        rule: Rule::UpstreamFailed,
        message: format!("the upstream at {} failed: {e}", addr.addr()),
    }
}

/// Counts the bytes of a request body as it is sent upstream.
struct CountingBody {
    inner: Incoming,
    counter: Arc<AtomicU64>,
}

impl Body for CountingBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r {
            if let Some(d) = f.data_ref() {
                self.counter.fetch_add(d.len() as u64, Ordering::Relaxed);
            }
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What to do when a relayed response ends.
struct Finish {
    ctx: Arc<ConnCtx>,
    ex: Exchange,
    verdict: crate::log::Verdict,
    would_deny: Option<Refusal>,
    status: u16,
    bytes_up: Arc<AtomicU64>,
    /// The upstream connection, returned to the pool if the body completes.
    reuse: Option<(Arc<Pool>, PoolKey, Sender)>,
}

/// Taint scanning of one response.
struct Scan {
    body: BodyScanner,
    task: Arc<TaskConfig>,
    /// The response URL without its query: the provenance of what it names.
    source: Arc<str>,
}

/// A response body relayed to the client: scans it for host names before
/// each chunk is passed on, counts bytes, and logs the exchange (and
/// returns the upstream connection) when it ends.
struct RelayBody {
    inner: Incoming,
    bytes_down: u64,
    scan: Option<Scan>,
    finish: Option<Finish>,
}

impl RelayBody {
    fn scan_chunk(&mut self, data: &[u8]) {
        if let (Some(scan), Some(f)) = (self.scan.as_mut(), self.finish.as_ref()) {
            let hosts = scan.body.feed(data);
            if !hosts.is_empty() {
                f.ctx.taint(&scan.task, hosts, &scan.source);
            }
        }
    }

    fn finish(&mut self, complete: bool) {
        if let (Some(mut scan), Some(f)) = (self.scan.take(), self.finish.as_ref()) {
            let (hosts, skipped) = scan.body.finish();
            if !hosts.is_empty() {
                f.ctx.taint(&scan.task, hosts, &scan.source);
            }
            if let Some(why) = skipped {
                tracing::warn!(task = %f.ctx.task.id, source = %scan.source, "taint scan incomplete: {why}");
            }
        }
        if let Some(f) = self.finish.take() {
            f.ctx.record(
                &f.ex,
                f.verdict,
                f.would_deny.as_ref(),
                f.status,
                (f.bytes_up.load(Ordering::Relaxed), self.bytes_down),
            );
            if complete {
                if let Some((pool, key, sender)) = f.reuse {
                    pool.put(key, sender);
                }
            }
        }
    }
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    self.bytes_down += d.len() as u64;
                    // Before the bytes reach the client: a name is tainted
                    // before a request sent after reading it can arrive.
                    self.scan_chunk(d);
                }
                if self.inner.is_end_stream() {
                    self.finish(true);
                }
            }
            Poll::Ready(None) => self.finish(true),
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Pending => {}
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for RelayBody {
    fn drop(&mut self) {
        // The client went away (or the body was empty and never polled).
        let empty = self.inner.is_end_stream();
        self.finish(empty);
    }
}
