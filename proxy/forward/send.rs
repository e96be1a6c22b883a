//! Sending an admitted request upstream: registering a request body like
//! a tunnel (so a taint or reload cuts it), the pooled or fresh upstream
//! connection, and draining a refused body. Must not decide: the recheck
//! is `policy`'s, through `exchange`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;

use super::headers::shape_for;
use super::Origin;
use crate::exchange::{ConnCtx, Exchange};
use crate::policy::{Admission, Refusal, Target, Verdict};
use crate::state::TaskRuntime;
use crate::tls::Tls;
use crate::upstream::{connect, Pool, Sender, UpBody, UpstreamError};

/// A body registers like a tunnel, then policy is asked again: a taint or
/// reload that landed since `admit` is not missed, and one that lands
/// while it streams cuts it (see `CountingBody`).
pub(super) fn register_body(
    ctx: &Arc<ConnCtx>,
    ex: &Exchange,
    target: &Target,
    admitted: &Admission,
    carries_body: bool,
    sent: crate::exchange::Sent<'_>,
) -> Result<Option<(crate::taint::OwnedTunnelGuard, CancellationToken)>, Refusal> {
    let Some(addr) = admitted.addrs().first().filter(|_| carries_body) else {
        return Ok(None);
    };
    let stop = ctx.shared.hard_stop.child_token();
    let path = ex.path.as_deref().unwrap_or("/");
    let taint = ctx.taint_applies(&ex.host, sent);
    let guard = ctx
        .task
        .tunnels
        .register_owned(target, addr.addr(), (taint, path), stop.clone());
    if let Verdict::Deny(r) = ctx.recheck_body(target, addr.addr(), taint.then_some(path)) {
        return Err(r);
    }
    Ok(Some((guard, stop)))
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
pub(super) struct Upstream<'a> {
    pub(super) task: &'a TaskRuntime,
    pub(super) pool: &'a Arc<Pool>,
    /// Loaded only when a fresh connection is dialled.
    pub(super) tls: &'a Arc<Tls>,
    pub(super) path: &'a str,
    pub(super) authority: &'a str,
    pub(super) timeout: Duration,
    /// The config generation the request was admitted under (pool key).
    pub(super) generation: u64,
}

/// Sends on a pooled connection, or a fresh one. A request that a pooled
/// connection could not even start sending (it closed meanwhile) is
/// retried once on a fresh connection.
pub(super) async fn send(
    up: &Upstream<'_>,
    admitted: Admission,
    origin: &Origin<'_>,
    req: Request<UpBody>,
    fresh_only: bool,
) -> Result<(Response<Incoming>, Sender, SocketAddr), UpstreamError> {
    let (path, authority, pool, task) = (up.path, up.authority, up.pool, up.task);
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
