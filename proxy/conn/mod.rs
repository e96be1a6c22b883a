//! conn: one client connection — parse each request (CONNECT or
//! absolute-form), run it through the one decision pipeline, and hand the
//! admitted plan to `forward` or `tunnel`.
//!
//! Every request gets exactly one decision and one access-log line, logged
//! here (or, for relayed exchanges, when the exchange ends). Must not
//! classify addresses or match allow-lists itself: that is `policy`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use http::{header, Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use crate::config::{Snapshot, TaskConfig};
use crate::log::{AccessRecord, Kind, TaintedBy, Verdict};
use crate::policy::{
    self, target::parse_authority, CheckedAddr, Decision, Host, HostHeader, NameVerdict, Permit,
    Refusal, Resolution, Rule, TaintMode, Target,
};
use crate::respond::{self, ProxyBody};
use crate::server::{Shared, TaskRuntime};
use crate::tunnel;

pub mod malformed;

pub use malformed::{GuardState, HeadGuard};

/// Any byte stream a listener accepts.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + std::any::Any {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Who is on the other end of a connection.
pub struct ConnCtx {
    pub shared: Arc<Shared>,
    pub task: Arc<TaskRuntime>,
    /// `ip:port`, `unix` or `vsock:CID`.
    pub client: Arc<str>,
    /// The connection's place under `max_connections_per_task`. Every
    /// tunnel, intercepted session and upgraded relay born of the
    /// connection holds this context, so the slot is freed only when the
    /// last of them ends (SPEC §9: caps hold for a connection's whole life).
    pub slot: ConnSlot,
}

/// A held connection slot: the cap's permit and the active-connections
/// gauge, both released when dropped.
pub struct ConnSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl ConnSlot {
    pub fn new(
        permit: tokio::sync::OwnedSemaphorePermit,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> ConnSlot {
        gauge.inc();
        ConnSlot {
            _permit: permit,
            gauge,
        }
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

static CONN_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Serves HTTP/1.1 on one client connection until it closes.
pub async fn serve(stream: Box<dyn Io>, ctx: Arc<ConnCtx>) {
    let span = tracing::debug_span!(
        "conn",
        conn.id = CONN_IDS.fetch_add(1, Ordering::Relaxed),
        client = %ctx.client,
        task = %ctx.task.id
    );
    let limits = ctx.shared.snapshot.load().limits.clone();
    let shutdown = ctx.shared.shutdown.clone();
    let guard = Arc::new(GuardState::default());
    let stream = HeadGuard::new(
        stream,
        guard.clone(),
        ctx.task.id.clone(),
        limits.max_header_bytes,
    );
    let svc_ctx = ctx.clone();
    let svc_guard = guard.clone();
    let service = service_fn(move |req| {
        svc_guard.served();
        let ctx = svc_ctx.clone();
        async move { Ok::<_, Infallible>(handle(ctx, req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    let result = async {
        tokio::select! {
            r = conn.as_mut() => r,
            _ = shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        }
    }
    .instrument(span)
    .await;
    if let Err(e) = result {
        if e.is_parse() || e.is_parse_too_large() {
            record_unparsable(&ctx, guard.refused(), &e);
        } else {
            tracing::debug!(client = %ctx.client, error = %e, "client connection ended with an error");
        }
    }
}

/// Logs a request the HTTP parser rejected: the raw request line sluice
/// answered, or (on a kept-alive connection, where hyper answered with a
/// bare 400) what hyper said was wrong.
pub(crate) fn record_unparsable(ctx: &ConnCtx, raw: Option<malformed::RawLine>, e: &hyper::Error) {
    let raw = raw.unwrap_or_else(|| malformed::RawLine {
        method: "-".into(),
        target: "-".into(),
        refusal: Refusal::new(
            Rule::BadTarget,
            format!("a later request on a kept-alive connection could not be parsed: {e}"),
        ),
    });
    let ex = Exchange {
        kind: Kind::Http,
        method: Method::from_bytes(raw.method.as_bytes())
            .or_else(|_| Method::from_bytes(b"-"))
            .unwrap_or(Method::GET),
        host: raw.target.clone(),
        port: 0,
        path: None,
        url: raw.target.clone(),
        body: false,
        started: Instant::now(),
        generation: ctx.shared.snapshot.load().generation,
    };
    tracing::info!(task = %ctx.task.id, client = %ctx.client, target = %raw.target,
        rule = "bad-target", "refused: {}", raw.refusal.reason);
    ctx.record(&ex, Verdict::Deny, Some(&raw.refusal), 400, (0, 0));
}

/// What is known of an exchange for its log line and refusal message.
pub struct Exchange {
    pub kind: Kind,
    pub method: Method,
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
    /// For messages: `http://host:port/path` or `host:port`.
    pub url: String,
    pub body: bool,
    pub started: Instant,
    pub generation: u64,
}

impl ConnCtx {
    /// Writes the one access-log line of an exchange.
    pub fn record(
        &self,
        ex: &Exchange,
        decision: Verdict,
        refusal: Option<&Refusal>,
        status: u16,
        bytes: (u64, u64),
    ) {
        let rec = AccessRecord {
            ts: crate::log::now_rfc3339(),
            task: self.task.id.clone(),
            client: self.client.clone(),
            kind: ex.kind,
            method: ex.method.as_str().to_string(),
            host: ex.host.clone(),
            port: ex.port,
            path: ex.path.clone(),
            decision,
            rule: refusal.map(|r| r.rule.as_str()),
            status,
            body: ex.body,
            bytes_up: bytes.0,
            bytes_down: bytes.1,
            duration_ms: ex.started.elapsed().as_millis() as u64,
            tainted_by: refusal
                .and_then(|r| r.tainted_by.as_ref())
                .map(TaintedBy::from),
            generation: ex.generation,
        };
        self.shared.log.access(&rec);
        let m = &self.task.metrics;
        m.decision(decision, refusal.map(|r| r.rule));
        m.bytes(bytes.0, bytes.1);
    }

    /// Logs a refusal and builds its response.
    pub fn refuse(&self, ex: &Exchange, refusal: Refusal) -> Response<ProxyBody> {
        let status = refusal.rule.status();
        tracing::info!(
            task = %self.task.id, client = %self.client, method = %ex.method, url = %ex.url,
            rule = refusal.rule.as_str(), "refused: {}", refusal.reason
        );
        self.record(ex, Verdict::Deny, Some(&refusal), status, (0, 0));
        respond::refusal(&self.task.id, ex.method.as_str(), &ex.url, &refusal)
    }
}

/// An admitted request: where it may go, and any shadow-mode refusal to log.
pub struct Admitted {
    pub permit: Permit,
    pub addrs: Vec<CheckedAddr>,
    pub would_deny: Option<Refusal>,
}

impl Admitted {
    /// The verdict and rule for the access log.
    pub fn verdict(&self) -> (Verdict, Option<&Refusal>) {
        match &self.would_deny {
            Some(r) => (Verdict::WouldDeny, Some(r)),
            None => (Verdict::Allow, None),
        }
    }
}

/// The decision pipeline shared by plain HTTP, CONNECT and (later)
/// intercepted requests: name rules → resolve → classify → taint.
pub async fn admit(
    shared: &Shared,
    runtime: &TaskRuntime,
    task: &TaskConfig,
    target: &Target,
    host_header: &HostHeader,
    carries_body: bool,
) -> Result<Admitted, Refusal> {
    let would_deny = match policy::decide_name(&task.rules, target, host_header) {
        NameVerdict::Deny(r) => return Err(r),
        NameVerdict::Proceed { would_deny } => would_deny,
    };
    let resolution = match &target.host {
        Host::Ip(ip) => Resolution::Literal(*ip),
        Host::Name(name) => shared.resolver.load_full().resolve(name).await,
    };
    let taint = match &target.host {
        Host::Name(n) => runtime.taint.state(n, &task.taint),
        Host::Ip(ip) => runtime.taint.state(&ip.to_string(), &task.taint),
    };
    match policy::decide_addresses(
        &task.rules,
        target,
        &resolution,
        &shared.own.load(),
        &taint,
        carries_body,
        would_deny,
    ) {
        Decision::Allow {
            permit,
            addrs,
            would_deny,
        } => Ok(Admitted {
            permit,
            addrs,
            would_deny,
        }),
        Decision::Deny(r) => Err(r),
    }
}

/// Parses the Host header(s) against a default port.
pub fn host_header(headers: &http::HeaderMap, default_port: u16) -> HostHeader {
    let mut values = headers.get_all(header::HOST).iter();
    match (values.next(), values.next()) {
        (None, _) => HostHeader::Absent,
        (Some(_), Some(_)) => HostHeader::Many,
        (Some(v), None) => HostHeader::One(match v.to_str() {
            Ok(s) => parse_authority(s, Some(default_port)),
            Err(_) => Err(policy::TargetError::BadName(
                "<non-ASCII Host header>".into(),
            )),
        }),
    }
}

/// Does the request carry a body (SPEC §4)?
pub fn carries_body(headers: &http::HeaderMap) -> bool {
    let content_length = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .any(|v| v.to_str().map(|s| s.trim() != "0").unwrap_or(true));
    content_length
        || headers.contains_key(header::TRANSFER_ENCODING)
        || headers.contains_key(header::UPGRADE)
}

async fn handle(ctx: Arc<ConnCtx>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let started = Instant::now();
    let snap = ctx.shared.snapshot.load_full();
    strip_sluice_headers(req.headers_mut());
    if req.method() == Method::CONNECT {
        connect(ctx, &snap, req, started).await
    } else {
        crate::forward::forward(ctx, &snap, req, started).await
    }
}

pub fn strip_sluice_headers(h: &mut http::HeaderMap) {
    remove_prefixed(h, "sluice-");
}

/// Removes every header whose (lower-case) name starts with `prefix`.
pub fn remove_prefixed(h: &mut http::HeaderMap, prefix: &str) {
    let names: Vec<_> = h
        .keys()
        .filter(|k| k.as_str().starts_with(prefix))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
}

/// The task config this connection belongs to, in this snapshot.
pub fn task_config<'a>(ctx: &ConnCtx, snap: &'a Snapshot) -> Option<&'a Arc<TaskConfig>> {
    snap.task(&ctx.task.id)
}

/// CONNECT: decide, dial before answering, then relay opaquely.
async fn connect(
    ctx: Arc<ConnCtx>,
    snap: &Snapshot,
    req: Request<Incoming>,
    started: Instant,
) -> Response<ProxyBody> {
    let raw = req.uri().authority().map(|a| a.as_str().to_string());
    let mut ex = Exchange {
        kind: Kind::Connect,
        method: Method::CONNECT,
        host: raw.clone().unwrap_or_default(),
        port: 0,
        path: None,
        url: raw.clone().unwrap_or_else(|| req.uri().to_string()),
        body: true,
        started,
        generation: snap.generation,
    };
    let Some(task) = task_config(&ctx, snap) else {
        return ctx.refuse(&ex, task_gone());
    };
    let target = match raw.as_deref().map(|a| parse_authority(a, None)) {
        Some(Ok(t)) if req.uri().scheme().is_none() && req.uri().path_and_query().is_none() => t,
        Some(Err(e)) => return ctx.refuse(&ex, Refusal::new(Rule::BadTarget, e.to_string())),
        _ => {
            return ctx.refuse(
                &ex,
                Refusal::new(Rule::BadTarget, "CONNECT needs an authority, host:port"),
            )
        }
    };
    ex.host = target.host.to_string();
    ex.port = target.port;
    ex.url = target.to_string();
    let hh = host_header(req.headers(), target.port);
    // An intercepted tunnel carries nothing itself: each request inside it
    // is decided on its own. Any other tunnel is opaque.
    let intercepted = crate::intercept::intercepts(&ctx.shared, task, &target);
    let admitted = match admit(&ctx.shared, &ctx.task, task, &target, &hh, !intercepted).await {
        Ok(a) => a,
        Err(r) => return ctx.refuse(&ex, r),
    };
    ex.body = !intercepted;
    let limits = &snap.limits;
    let dial_started = Instant::now();
    let (upstream, addr) =
        match tunnel::dial(&admitted.permit, &admitted.addrs, limits.connect_timeout).await {
            Ok(x) => x,
            Err(e) => return ctx.refuse(&ex, Refusal::new(e.rule, e.message)),
        };
    ctx.task
        .metrics
        .upstream_connect_seconds
        .observe(dial_started.elapsed().as_secs_f64());
    let upgrade = hyper::upgrade::on(req);
    // The tunnel task holds the connection's context, and with it its slot
    // under the task's connection cap, until the tunnel closes.
    let ctx2 = ctx.clone();
    ctx.shared.tracker.spawn(async move {
        let verdict = {
            let (v, r) = admitted.verdict();
            (v, r.cloned())
        };
        match upgrade.await {
            Ok(upgraded) => {
                let client = crate::tunnel::ClientIo::from_upgraded(upgraded);
                crate::intercept::tunnel_session(
                    ctx2,
                    intercepted,
                    target,
                    client,
                    upstream,
                    addr,
                    ex,
                    verdict,
                )
                .await;
            }
            Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
        }
    });
    Response::new(respond::empty())
}

impl ConnCtx {
    /// Adds hosts named by the response at `source` (served by
    /// `served_by`) to the task's taint set, as far as policy says they
    /// count. In enforce mode, opaque tunnels to a newly tainted host close.
    pub fn taint(&self, task: &TaskConfig, hosts: Vec<String>, source: &Arc<str>, served_by: &str) {
        use crate::taint::Inserted;
        let snap = self.shared.snapshot.load();
        // The taint settings in force now: a long response may outlive a
        // reload (shadow to enforce, new exemptions or max_hosts).
        let task = snap.task(&self.task.id).map(|t| &**t).unwrap_or(task);
        let allowed_somewhere = |n: &str| snap.tasks.iter().any(|t| t.rules.allow.names(n));
        for h in hosts {
            if !policy::worth_tainting(&h, served_by, task.taint.self_taint, allowed_somewhere) {
                continue;
            }
            match self
                .task
                .taint
                .insert(&h, source, &task.taint, &self.shared.log)
            {
                Inserted::New => {
                    tracing::info!(task = %self.task.id, host = %h, source = %source, "tainted");
                    self.task
                        .metrics
                        .taint_hosts
                        .set(self.task.taint.len() as i64);
                    if task.taint.mode == TaintMode::Enforce {
                        self.task.tunnels.revoke(&h);
                    }
                }
                Inserted::Overflow { first: true } => {
                    self.task.metrics.taint_overflow.set(1);
                    tracing::error!(
                        task = %self.task.id, max_hosts = task.taint.max_hosts,
                        "taint-overflow: the taint set is full; from now on every body-carrying request to a non-exempt host is refused"
                    );
                    if task.taint.mode == TaintMode::Enforce {
                        self.task.tunnels.revoke_all();
                    }
                }
                Inserted::Overflow { first: false } | Inserted::Known | Inserted::Exempt => {}
            }
        }
    }
}

impl ConnCtx {
    /// Is a connection that is already open to `target` (connected to
    /// `addr`) still within policy under the config in force now? Called
    /// by opaque tunnels and upgraded relays right after they register, so
    /// a reload or taint that landed before registration is not missed.
    pub fn recheck_open(
        &self,
        target: &Target,
        addr: std::net::SocketAddr,
        opaque: bool,
    ) -> Result<Option<Refusal>, Refusal> {
        let snap = self.shared.snapshot.load();
        let task = task_config(self, &snap).ok_or_else(task_gone)?;
        let taint = if opaque {
            self.task.taint.state(&target.host.to_string(), &task.taint)
        } else {
            policy::TaintState::Clean
        };
        policy::decide_open(
            &task.rules,
            target,
            addr,
            &self.shared.own.load(),
            &taint,
            opaque,
        )
    }
}

/// The task was removed from the config while its connection was open.
pub fn task_gone() -> Refusal {
    Refusal::new(
        Rule::NotAllowed,
        "the task this listener belonged to is no longer in the config",
    )
}
