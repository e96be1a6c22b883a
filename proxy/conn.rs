//! conn: one client connection — parse each request (CONNECT or
//! absolute-form) and turn it into a plan: forward it (`forward`), open a
//! tunnel and serve it (`intercept`), or refuse it.
//!
//! Every decision is `policy`'s, reached through `ReqCtx::admit`; every
//! row is written by `exchange`. Must not classify addresses, match
//! allow-lists, or relay bytes itself.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioTimer;
use tracing::Instrument;

use crate::exchange::{self, ConnCtx, Exchange, ReqCtx};
use crate::intercept::Tunnel;
use crate::log::Kind;
use crate::policy::{self, target::parse_authority, Refusal, Rule, Target};
use crate::respond::{self, ProxyBody};
use crate::state::Live;
use crate::tunnel::park::{self, Ended};
use crate::tunnel::{ClientIo, GuardState, Io};

/// Serves HTTP/1.1 on one client connection until it closes.
///
/// The first request head is read here, into a buffer sized to it, before
/// hyper's connection exists: hyper makes an 8 KiB read buffer and room
/// for a request's future as soon as it starts, so a connection that has
/// sent nothing or half a head (a slowloris client, a pool's spare
/// connection) holds only a few hundred bytes until its head is whole.
/// The header timeout and shutdown apply to this wait as to hyper's. A
/// keep-alive connection that goes quiet between requests is parked
/// (`tunnel::park`) and waits here again, hyper's memory given back.
pub(crate) async fn serve(mut stream: Box<dyn Io>, ctx: Arc<ConnCtx>) {
    let shutdown = ctx.shared.shutdown.clone();
    let mut carried = Vec::new();
    let mut waited = std::time::Duration::ZERO;
    loop {
        let limits = ctx.shared.snapshot().limits.clone();
        // A parked connection has been waiting for its next head since it
        // went quiet, as hyper's timeout would have counted.
        let parked = (!waited.is_zero()).then(park::Parked::new);
        let wait = tokio::time::timeout(
            limits.header_timeout.saturating_sub(waited),
            crate::tunnel::first_head(&mut stream, carried, limits.max_header_bytes),
        );
        let first = tokio::select! {
            r = wait => match r {
                Ok(Ok(first)) if !first.is_empty() => first,
                // Closed before a byte, a read error, or no whole head in
                // time: closed without a word, as hyper closes them.
                _ => return,
            },
            _ = shutdown.cancelled() => return,
        };
        drop(parked);
        match Box::pin(serve_http(
            stream,
            first,
            ctx.clone(),
            limits,
            shutdown.clone(),
        ))
        .await
        {
            Some((parked, read, idle)) => (stream, carried, waited) = (parked, read, idle),
            None => return,
        }
    }
}

/// hyper's side of a connection, from a head on; the stream and the bytes
/// hyper had read when it is parked.
async fn serve_http(
    stream: Box<dyn Io>,
    first: Vec<u8>,
    ctx: Arc<ConnCtx>,
    limits: crate::config::Limits,
    shutdown: tokio_util::sync::CancellationToken,
) -> Option<(Box<dyn Io>, Vec<u8>, std::time::Duration)> {
    let guard = Arc::new(GuardState::default());
    let stream = crate::tunnel::client_stack(
        stream,
        first,
        guard.clone(),
        ctx.task.id.clone(),
        limits.max_header_bytes,
    );
    let svc_ctx = ctx.clone();
    let svc_guard = guard.clone();
    let service = service_fn(move |req| {
        let in_flight = svc_guard.request(&req);
        let ctx = svc_ctx.clone();
        // Boxed: hyper sets aside room for one in-flight request future
        // per connection from its first byte on, and a request's future
        // (forwarding, tunnels, interception) is large. A connection that
        // has sent nothing or half a head holds only this pointer
        // (BENCHMARKS.md, partial request heads).
        Box::pin(async move { Ok::<_, Infallible>(in_flight.hold(handle(ctx, req).await)) })
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    let conn = builder.serve_connection(stream, service).with_upgrades();
    let result = match park::serve(conn, &guard, shutdown.cancelled(), true).await {
        Ended::Parked(stream, read, idle) => {
            // A parked connection holds nothing but its socket: what its
            // responses taught the scanner goes too.
            ctx.forget_memo();
            return Some((stream, read, idle));
        }
        Ended::Done(r) => r,
    };
    if let Err(e) = result {
        if e.is_parse() || e.is_parse_too_large() {
            ctx.record_unparsable(guard.refused(), &e);
        } else {
            tracing::debug!(error = %e, "client connection ended with an error");
        }
    }
    None
}

async fn handle(ctx: Arc<ConnCtx>, req: Request<Incoming>) -> Response<ProxyBody> {
    // Inside the connection's span (conn, task, client): each request's.
    // The path only: the access log keeps no query string, nor does this.
    let uri = req.uri();
    let host = uri.authority().map_or("", |a| a.as_str());
    let span = tracing::debug_span!("request", method = %req.method(), host, path = uri.path());
    handle_in_span(ctx, req).instrument(span).await
}

async fn handle_in_span(ctx: Arc<ConnCtx>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let started = Instant::now();
    // One live snapshot per request: config, TLS settings and own
    // addresses of one generation.
    let live = ctx.shared.live();
    exchange::strip_sluice_headers(req.headers_mut());
    if req.method() == Method::CONNECT {
        connect(ctx, live, req, started).await
    } else {
        crate::forward::forward(ctx, live, req, started).await
    }
}

/// CONNECT: plan the tunnel (decide, dial before answering), answer 200,
/// then hand the client's stream to the tunnel's session.
async fn connect(
    ctx: Arc<ConnCtx>,
    live: Arc<Live>,
    req: Request<Incoming>,
    started: Instant,
) -> Response<ProxyBody> {
    let raw = req.uri().authority().map(|a| a.as_str().to_string());
    let ex = Exchange {
        kind: Kind::Connect,
        method: Method::CONNECT,
        host: raw.clone().unwrap_or_default(),
        port: 0,
        path: None,
        url: raw.clone().unwrap_or_else(|| req.uri().to_string()),
        body: true,
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
    let target = match connect_target(&req, raw.as_deref()) {
        Ok(t) => t,
        Err(r) => return cx.refuse(r),
    };
    let ex = cx.ex_mut();
    ex.host = target.host.to_string();
    ex.port = target.port;
    ex.url = target.to_string();
    let inside_tls = refusal_tls(&cx, &target);
    let tunnel = match plan_tunnel(cx, &req, target.clone()).await {
        Ok(t) => t,
        // A refusal is said inside TLS; a failure (no answer from DNS or
        // the upstream) keeps the status line a client retries on.
        Err((cx, r)) => match inside_tls {
            Some(server) if !r.rule.is_failure() => {
                return refuse_inside_tls(cx, req, (server, target, r))
            }
            _ => return cx.refuse(r),
        },
    };
    let upgrade = hyper::upgrade::on(req);
    // The tunnel task holds the connection's context, and with it its slot
    // under the task's connection cap, until the tunnel closes.
    let ctx2 = ctx.clone();
    ctx.shared.tracker.spawn(
        async move {
            match upgrade.await {
                Ok(upgraded) => {
                    let client = ClientIo::from_upgraded(upgraded);
                    crate::intercept::tunnel_session(ctx2, client, tunnel).await;
                }
                // The tunnel's row is written when `tunnel` drops.
                Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
            }
        }
        .in_current_span(),
    );
    Response::new(respond::empty())
}

/// Where a refused CONNECT is answered inside TLS: the task would
/// intercept this target (a name, not passed through), so its client
/// trusts sluice's CA for it.
fn refusal_tls(cx: &ReqCtx, target: &Target) -> Option<Arc<rustls::ServerConfig>> {
    let task = &cx.task;
    let tls = cx.live.tls.clone();
    let intercepts = policy::intercepts(
        task.intercept == crate::config::Intercept::All,
        tls.server.is_some(),
        |h| task.passthrough.contains(h),
        target,
    );
    let name = target.host.as_name()?;
    (intercepts && !policy::server_speaks_first(target.port))
        .then(|| tls.refusal_for(name))
        .flatten()
}

/// Logs the refusal as usual, answers the CONNECT with 200 and the
/// request inside with the refusal (`intercept::Refused`).
fn refuse_inside_tls(
    mut cx: ReqCtx,
    req: Request<Incoming>,
    (server, target, refusal): (Arc<rustls::ServerConfig>, Target, Refusal),
) -> Response<ProxyBody> {
    let limits = cx.snap().limits.clone();
    let ctx = cx.conn.clone();
    cx.ex_mut().note = Some(crate::log::REFUSED_INSIDE_TLS);
    // The row and the log line; the status-line answer is not sent.
    drop(cx.refuse(refusal.clone()));
    let answer = crate::intercept::Refused {
        server,
        task: Arc::from(&*ctx.task.id),
        target,
        refusal,
    };
    let upgrade = hyper::upgrade::on(req);
    // The answer holds the connection's context, and with it its slot
    // under the task's cap, until it is sent: a refused tunnel counts like
    // any other.
    let held = ctx.clone();
    ctx.shared.tracker.spawn(
        async move {
            let _held = held;
            if let Ok(upgraded) = upgrade.await {
                answer
                    .answer(ClientIo::from_upgraded(upgraded), &limits)
                    .await;
            }
        }
        .in_current_span(),
    );
    Response::new(respond::empty())
}

/// The CONNECT target: an authority, `host:port`, and nothing else.
fn connect_target(req: &Request<Incoming>, raw: Option<&str>) -> Result<Target, Refusal> {
    match raw.map(|a| parse_authority(a, None)) {
        Some(Ok(t)) if req.uri().scheme().is_none() && req.uri().path_and_query().is_none() => {
            Ok(t)
        }
        Some(Err(e)) => Err(Refusal::new(Rule::BadTarget, e.to_string())),
        _ => Err(Refusal::new(
            Rule::BadTarget,
            "CONNECT needs an authority, host:port",
        )),
    }
}

/// Decides on a CONNECT and dials its upstream before it is answered.
/// Whether the tunnel will be intercepted is decided here, once: an
/// intercepted tunnel carries nothing itself (each request inside is
/// decided on its own); any other tunnel is opaque and carries a body.
async fn plan_tunnel(
    mut cx: ReqCtx,
    req: &Request<Incoming>,
    target: Target,
) -> Result<Tunnel, (ReqCtx, Refusal)> {
    let hh = exchange::host_header(req.headers(), target.port);
    let (task, tls) = (&cx.task, &cx.live.tls);
    let intercept = policy::intercepts(
        task.intercept == crate::config::Intercept::All,
        tls.server.is_some(),
        |h| task.passthrough.contains(h),
        &target,
    )
    .then(|| tls.server.clone())
    .flatten();
    let sent = exchange::Sent {
        body: intercept.is_none(),
        method: "CONNECT",
        path: None,
        content_type: None,
    };
    let verdict = cx.admit(&target, &hh, sent).await;
    let (admission, verdict) = match verdict.split() {
        Ok(x) => x,
        Err(r) => return Err((cx, r)),
    };
    cx.ex_mut().body = intercept.is_none();
    cx.admitted(verdict);
    let dial_started = Instant::now();
    let dialled = crate::upstream::dial(admission, cx.snap().limits.connect_timeout).await;
    let (upstream, addr) = match dialled {
        Ok(x) => x,
        Err(e) => return Err((cx, e.refusal())),
    };
    cx.ex_mut().addr = Some(addr.addr());
    cx.conn
        .task
        .metrics
        .upstream_connect_seconds
        .observe(dial_started.elapsed().as_secs_f64());
    Ok(Tunnel {
        target,
        upstream,
        addr,
        // From here on, however the tunnel ends, its row is written.
        row: cx.answered(200),
        intercept,
    })
}
