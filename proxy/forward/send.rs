//! The dial and send phase: an admitted request goes upstream — its body
//! registered like a tunnel (so a taint or reload cuts it), on a pooled or
//! fresh connection to exactly the checked addresses — and its response
//! head comes back; and a refused body is drained. Must not decide: the
//! recheck is `policy`'s, through `exchange`.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use tokio_util::sync::CancellationToken;

use super::body::CountingBody;
use super::headers::{keep_upgrade, shape_for, strip_hop_by_hop};
use super::secret::{
    guard_head, leaked, read_whole, small, up_req_headers_lose_length, Holding, Upload,
};
use super::Origin;
use crate::exchange::{ReqCtx, Sent};
use crate::policy::{Admission, Refusal, Target, Verdict};
use crate::secrets::{Dest, LeakGuard, TaskSecrets, Watch};
use crate::state::TaskRuntime;
use crate::tls::Tls;
use crate::upstream::{connect, Sender, UpBody, UpstreamError};

/// What the send phase is given: where to, the admission it dials under,
/// the verdict the row will say, and what the request is.
pub(super) struct Sending<'a> {
    pub(super) target: &'a Target,
    pub(super) origin: &'a Origin<'a>,
    pub(super) admitted: Admission,
    pub(super) verdict: Verdict,
    pub(super) sent: Sent<'a>,
}

/// What came back: the response head, the connection it came on, and
/// what the respond phase needs of the request.
pub(super) struct Exchanged {
    pub(super) resp: Response<Incoming>,
    pub(super) sender: Sender,
    pub(super) addr: SocketAddr,
    /// Path and query sent upstream.
    pub(super) path: String,
    pub(super) client_version: Version,
    /// The client's side of an upgrade, when one was asked for.
    pub(super) client_upgrade: Option<OnUpgrade>,
    /// Request-body bytes sent.
    pub(super) bytes_up: Arc<AtomicU64>,
}

/// Why a request was not sent (or not answered): the refusal, and the
/// request itself when its body was never read (the caller refuses first,
/// so the row is written, then drains it).
pub(super) struct NotSent {
    pub(super) refusal: Refusal,
    pub(super) unread: Option<Request<Incoming>>,
}

impl From<Refusal> for NotSent {
    fn from(refusal: Refusal) -> NotSent {
        NotSent {
            refusal,
            unread: None,
        }
    }
}

/// The dial and send phase: the request (minus what one hop may not pass
/// on) goes upstream on a pooled or fresh connection to exactly the
/// admitted addresses, its body registered like a tunnel so a later taint
/// or reload cuts it. From the first byte sent, the request has a row
/// ([`ReqCtx::on_its_way`]). Waits at most `first_byte_timeout` for the
/// response head.
pub(super) async fn send(
    cx: &mut ReqCtx,
    s: Sending<'_>,
    mut req: Request<Incoming>,
) -> Result<Exchanged, NotSent> {
    let secrets = cx.secrets();
    if secrets.is_some() {
        // Client frames of an upgraded connection are not watched for
        // secrets: the upgrade is not passed on (fail closed).
        req.headers_mut().remove(http::header::UPGRADE);
    }
    let upgrade = keep_upgrade(req.headers_mut());
    let client_version = req.version();
    let (mut parts, incoming) = req.into_parts();
    let guard = match secrets
        .map(|t| guard_head(cx, &dest_of(&s), t, &mut parts))
        .transpose()
    {
        Ok(g) => g,
        Err(refusal) => {
            return Err(NotSent {
                refusal,
                unread: Some(Request::from_parts(parts, incoming)),
            })
        }
    };
    let client_upgrade = upgrade.then(|| {
        // hyper hands out the client's upgrade through the extensions.
        let mut r = Request::new(());
        *r.extensions_mut() = std::mem::take(&mut parts.extensions);
        hyper::upgrade::on(r)
    });
    let carries = s.sent.body && !upgrade;
    let (up_body, bytes_up) =
        match upload(cx, &s, guard.as_ref(), &mut parts, incoming, carries).await {
            Ok(x) => x,
            Err((refusal, unread)) => {
                let unread = unread.map(|b| Request::from_parts(parts, b));
                return Err(NotSent { refusal, unread });
            }
        };
    let path = path_and_query(&parts.uri);
    let authority = authority_for(s.target, s.origin.scheme);
    let up_req = upstream_request(parts, up_body, &authority, upgrade);
    cx.on_its_way(s.verdict, bytes_up.clone());
    let snap = cx.snap();
    let up = Upstream {
        task: &cx.conn.task,
        tls: &cx.live.tls,
        path: &path,
        authority: &authority,
        timeout: snap.limits.connect_timeout,
        generation: snap.generation,
    };
    let first_byte = snap.limits.first_byte_timeout;
    let sent_at = Instant::now();
    let sending = send_on(&up, s.admitted, s.origin, up_req, upgrade);
    let sent = tokio::time::timeout(first_byte, sending).await;
    // A secret found in the body refuses the request, however the upstream
    // took the cut.
    if let Some((_, watch)) = &guard {
        if let Some(leak) = watch.leak() {
            return Err(leaked(cx, leak).into());
        }
        watch.answered();
        for name in watch.swapped() {
            if !cx.ex().secrets.contains(&name) {
                cx.ex_mut().secrets.push(name);
            }
        }
    }
    let (resp, sender, addr) = match sent {
        Ok(r) => r.map_err(|e| e.refusal())?,
        Err(_) => {
            let late = UpstreamError::FirstByteTimeout {
                target: s.target.to_string(),
                secs: first_byte.as_secs(),
            };
            return Err(late.refusal().into());
        }
    };
    cx.ex_mut().addr = Some(addr);
    cx.conn
        .task
        .metrics
        .first_byte_seconds
        .observe(sent_at.elapsed().as_secs_f64());
    Ok(Exchanged {
        resp,
        sender,
        addr,
        path,
        client_version,
        client_upgrade,
        bytes_up,
    })
}

/// What the secrets check needs of where a request goes.
fn dest_of<'a>(s: &Sending<'a>) -> Dest<'a> {
    Dest {
        target: s.target,
        intercepted: s.origin.tls.is_some(),
    }
}

/// The request body as it goes upstream: registered like a tunnel (so a
/// later taint or reload cuts it) and counted; for a task with secrets,
/// read whole and checked before a byte is sent when it is small, else
/// watched as it streams. `Err`: the refusal, and the body if unread.
async fn upload(
    cx: &mut ReqCtx,
    s: &Sending<'_>,
    guard: Option<&(Arc<TaskSecrets>, Arc<Watch>)>,
    parts: &mut http::request::Parts,
    incoming: Incoming,
    carries: bool,
) -> Result<(UpBody, Arc<AtomicU64>), (Refusal, Option<Incoming>)> {
    let held = guard
        .filter(|_| carries)
        .and_then(|_| small(&parts.headers));
    let upload = match (guard, held) {
        (Some((secrets, watch)), Some(held)) => {
            // A client may pause this long between frames of its body.
            let idle = cx.snap().limits.header_timeout;
            match read_whole(secrets, &dest_of(s), watch, incoming, idle).await {
                Ok(b) => Upload::Read(Holding {
                    inner: Full::new(b),
                    _held: held,
                }),
                Err(r) => return Err((watch.leak().map_or(r, |l| leaked(cx, l)), None)),
            }
        }
        _ => Upload::Streamed(incoming),
    };
    let revoked = match register_body(cx, s.target, &s.admitted, carries, s.sent) {
        Ok(r) => r,
        Err(refusal) => {
            return Err(match upload {
                Upload::Streamed(b) => (refusal, Some(b)),
                Upload::Read(_) => (refusal, None),
            })
        }
    };
    let bytes_up = Arc::new(AtomicU64::new(0));
    let counter = bytes_up.clone();
    let streamed = matches!(upload, Upload::Streamed(_));
    let mut up_body = match upload {
        Upload::Read(inner) => CountingBody {
            inner,
            counter,
            revoked,
        }
        .boxed(),
        Upload::Streamed(inner) => CountingBody {
            inner,
            counter,
            revoked,
        }
        .boxed(),
    };
    if let Some((secrets, watch)) = guard {
        let dest = dest_of(s);
        if secrets.body_changes_length(&dest) {
            up_req_headers_lose_length(parts);
        }
        if streamed {
            up_body = LeakGuard::new(up_body, secrets.clone(), &dest, watch.clone()).boxed();
        }
    }
    Ok((up_body, bytes_up))
}

/// A body registers like a tunnel, then policy is asked again: a taint or
/// reload that landed since `admit` is not missed, and one that lands
/// while it streams cuts it (see `CountingBody`).
fn register_body(
    cx: &ReqCtx,
    target: &Target,
    admitted: &Admission,
    carries_body: bool,
    sent: Sent<'_>,
) -> Result<Option<(crate::taint::OwnedTunnelGuard, CancellationToken)>, Refusal> {
    let Some(addr) = admitted.addrs().first().filter(|_| carries_body) else {
        return Ok(None);
    };
    let ctx = &cx.conn;
    let stop = ctx.shared.hard_stop.child_token();
    let path = sent.path.unwrap_or("/");
    let taint = ctx.taint_applies(&cx.ex().host, sent);
    let guard = ctx
        .task
        .tunnels
        .register_owned(target, addr.addr(), (taint, path), stop.clone());
    if let Verdict::Deny(r) = ctx.recheck_body(target, addr.addr(), taint.then_some(path)) {
        return Err(r);
    }
    Ok(Some((guard, stop)))
}

/// The request's path and query, as sent upstream (`/` when it has none).
fn path_and_query(uri: &http::Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string())
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

/// Reads and discards a small refused request body, so that the client
/// sees the refusal instead of a reset (HTTP/2) and the connection stays
/// usable (HTTP/1.1). Nothing read here goes anywhere. A client waiting for
/// 100-continue is not asked for its body.
pub(super) async fn drain(req: Request<Incoming>) {
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

/// Where and how a request is sent: the task's pool and metrics, the
/// TLS settings, the request's path and authority, the connect timeout.
struct Upstream<'a> {
    task: &'a TaskRuntime,
    /// Used only when a fresh connection is dialled.
    tls: &'a Arc<Tls>,
    path: &'a str,
    authority: &'a str,
    timeout: Duration,
    /// The config generation the request was admitted under (pool key).
    generation: u64,
}

/// Sends on a pooled connection, or a fresh one. A request that a pooled
/// connection could not even start sending (it closed meanwhile) is
/// retried once on a fresh connection.
async fn send_on(
    up: &Upstream<'_>,
    admitted: Admission,
    origin: &Origin<'_>,
    req: Request<UpBody>,
    fresh_only: bool,
) -> Result<(Response<Incoming>, Sender, SocketAddr), UpstreamError> {
    let (path, authority, task) = (up.path, up.authority, up.task);
    let pool = &task.pool;
    let mut req = req;
    if !fresh_only {
        if let Some((mut sender, addr)) = pool.take(admitted.addrs(), &origin.tls, up.generation) {
            shape_for(&mut req, &sender, origin.scheme, path, authority);
            match sender.try_send(req).await {
                Ok(resp) => return Ok((resp, sender, addr.addr())),
                Err(Ok(r)) => req = r,
                Err(Err(source)) => {
                    return Err(UpstreamError::Exchange {
                        addr: addr.addr(),
                        source,
                    })
                }
            }
        }
    }
    let started = Instant::now();
    let (mut sender, addr) =
        connect(up.tls, admitted, &origin.tls, up.timeout, origin.spare).await?;
    task.metrics
        .upstream_connect_seconds
        .observe(started.elapsed().as_secs_f64());
    shape_for(&mut req, &sender, origin.scheme, path, authority);
    match sender.try_send(req).await {
        Ok(resp) => Ok((resp, sender, addr.addr())),
        Err(Ok(_)) => Err(UpstreamError::Closed { addr: addr.addr() }),
        Err(Err(source)) => Err(UpstreamError::Exchange {
            addr: addr.addr(),
            source,
        }),
    }
}
