//! intercept: TLS both ways — terminate a CONNECT tunnel with a leaf from
//! sluice's own CA, and re-originate each request upstream over verified
//! TLS — plus the SNI check of tunnels that are relayed opaquely.
//!
//! After a CONNECT is answered, [`tunnel_session`] reads the client's first
//! bytes: a TLS ClientHello must name the CONNECT host (`sni-mismatch`
//! otherwise); an intercepted tunnel is then served as HTTP/1.1 or HTTP/2
//! (by ALPN), every request going through `forward::exchange`, the same
//! pipeline as plain HTTP. Anything not intercepted is relayed opaquely and
//! counts as carrying a body. Must not decide on targets itself.

pub mod ca;
mod hello;
pub mod rewind;

use hello::{peek, sni_matches, FirstBytes};
pub use hello::{ClientHelloReader, Peeked};

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

use crate::config::{Intercept, Snapshot, TaskConfig};
use crate::conn::{self, ConnCtx, Exchange};
use crate::forward::{self, Origin, Spare};
use crate::log::{Kind, Verdict};
use crate::policy::target::parse_authority;
use crate::policy::{Refusal, Rule, TaintMode, TaintState, Target};
use crate::respond::ProxyBody;
use crate::tunnel::{self, ClientIo, Counted, DialError, RelayBytes, RelayEnd};
pub use ca::Ca;
use rewind::Rewind;

/// TLS settings shared by every connection.
#[derive(Clone)]
pub struct Tls {
    /// The `extra_roots` the client config was built with (reload compares).
    pub extra_roots: Vec<std::path::PathBuf>,
    pub provider: Arc<rustls::crypto::CryptoProvider>,
    /// Upstream side: Mozilla roots, the system store and `extra_roots`.
    pub client: Arc<ClientConfig>,
    /// Client side, when some task intercepts: leaves minted by the CA.
    pub server: Option<Arc<ServerConfig>>,
    pub ca: Option<Arc<Ca>>,
}

/// Mints (or reuses) the leaf for the SNI the client asked for; the SNI
/// was checked against the CONNECT host before the handshake.
#[derive(Debug)]
struct LeafResolver(Arc<Ca>);

impl rustls::server::ResolvesServerCert for LeafResolver {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let name = hello.server_name()?;
        match self.0.leaf(&name.to_ascii_lowercase()) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot mint a leaf certificate");
                None
            }
        }
    }
}

impl Tls {
    /// Builds the TLS settings; `ca` is the loaded CA when a task
    /// intercepts.
    pub fn new(snapshot: &Snapshot, ca: Option<Ca>) -> anyhow::Result<Tls> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        for path in &snapshot.extra_roots {
            use rustls::pki_types::pem::PemObject;
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow::anyhow!("upstream.extra_roots {}: {e}", path.display()))?;
            if certs.is_empty() {
                anyhow::bail!(
                    "upstream.extra_roots {}: no certificate in it",
                    path.display()
                );
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| anyhow::anyhow!("upstream.extra_roots {}: {e}", path.display()))?;
            }
        }
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

        let ca = ca.map(Arc::new);
        let server = match &ca {
            Some(ca) => {
                let mut server = ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()?
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(LeafResolver(ca.clone())));
                server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                Some(Arc::new(server))
            }
            None => None,
        };
        Ok(Tls {
            extra_roots: snapshot.extra_roots.clone(),
            provider,
            client: Arc::new(client),
            server,
            ca,
        })
    }

    /// Opens verified TLS to an upstream for `name`.
    pub async fn connect(
        &self,
        name: &str,
        stream: TcpStream,
        timeout: Duration,
    ) -> Result<TlsStream<TcpStream>, DialError> {
        let server_name = ServerName::try_from(name.to_string()).map_err(|e| DialError {
            rule: Rule::UpstreamFailed,
            message: format!("{name} is not a valid TLS server name: {e}"),
        })?;
        let connector = TlsConnector::from(self.client.clone());
        match tokio::time::timeout(timeout, connector.connect(server_name, stream)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(DialError {
                rule: Rule::UpstreamFailed,
                message: match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    Some(rustls::Error::InvalidCertificate(why)) => format!(
                        "the upstream's TLS certificate for {name} was rejected ({why:?}); sluice never falls back to an unverified connection"
                    ),
                    _ => format!("TLS handshake with the upstream for {name} failed: {e}"),
                },
            }),
            Err(_) => Err(DialError {
                rule: Rule::UpstreamTimeout,
                message: format!("no TLS handshake with the upstream for {name} within {}s", timeout.as_secs()),
            }),
        }
    }
}

/// Will a CONNECT to `target` be intercepted (if the client speaks TLS)?
pub fn intercepts(shared: &crate::server::Shared, task: &TaskConfig, target: &Target) -> bool {
    task.intercept == Intercept::All
        && shared.tls.load().server.is_some()
        && target
            .host
            .as_name()
            .is_some_and(|h| !task.passthrough.contains(h))
}

/// Serves an answered CONNECT: check the SNI, then intercept or relay.
/// `ex` is the CONNECT's exchange; its one access-log row is written here.
#[allow(clippy::too_many_arguments)]
pub async fn tunnel_session(
    ctx: Arc<ConnCtx>,
    task: Arc<TaskConfig>,
    target: Target,
    client: ClientIo,
    upstream: TcpStream,
    upstream_addr: crate::policy::CheckedAddr,
    mut ex: Exchange,
    verdict: (Verdict, Option<Refusal>),
) {
    let snap = ctx.shared.snapshot.load_full();
    let limits = snap.limits.clone();
    let bytes = RelayBytes::default();
    let mut client = Counted::new(client, bytes.up.clone());
    let (first, kind) = peek(&mut client, limits.header_timeout).await;
    let host = target.host.to_string();
    let intercept = intercepts(&ctx.shared, &task, &target);

    let sni_refusal = |sni: &Option<String>| {
        Refusal::new(
            Rule::SniMismatch,
            match sni {
                Some(s) => format!("the TLS ClientHello names {s}, not the CONNECT host {host}"),
                None => {
                    format!("the TLS ClientHello names no server (SNI); the CONNECT host is {host}")
                }
            },
        )
    };
    match kind {
        FirstBytes::Nothing => {
            ctx.record(&ex, verdict.0, verdict.1.as_ref(), 200, (0, 0));
        }
        FirstBytes::Tls { sni } if !sni_matches(&sni, &target) => {
            let r = sni_refusal(&sni);
            tracing::info!(task = %ctx.task.id, url = %ex.url, "tunnel closed: {}", r.reason);
            ctx.record(&ex, Verdict::Deny, Some(&r), 403, (first.len() as u64, 0));
        }
        FirstBytes::Tls { .. } if intercept => {
            ex.body = false;
            let stop = ctx.shared.hard_stop.child_token();
            let _registered =
                ctx.task
                    .tunnels
                    .register(&host, upstream_addr.addr(), false, stop.clone());
            let spare: Spare = std::sync::Mutex::new(Some((upstream, upstream_addr)));
            let io = Rewind::new(first, client);
            Box::pin(serve_intercepted(
                ctx.clone(),
                task,
                target,
                io,
                spare,
                &limits,
                stop,
            ))
            .await;
            ctx.record(
                &ex,
                verdict.0,
                verdict.1.as_ref(),
                200,
                (
                    bytes.up.load(Ordering::Relaxed),
                    bytes.down.load(Ordering::Relaxed),
                ),
            );
        }
        FirstBytes::Tls { .. } | FirstBytes::Other => {
            // Opaque: it cannot be shown to carry no body.
            ex.body = true;
            let tainted = taint_refusal(&ctx, &task, &target);
            let (verdict, refusal) = match (tainted, task.taint.mode) {
                (Some(r), TaintMode::Enforce) => {
                    tracing::info!(task = %ctx.task.id, url = %ex.url, "tunnel closed: {}", r.reason);
                    ctx.record(&ex, Verdict::Deny, Some(&r), 403, (first.len() as u64, 0));
                    return;
                }
                // Shadow mode lets it through, logged as would_deny.
                (Some(w), TaintMode::Shadow) if verdict == (Verdict::Allow, None) => {
                    (Verdict::WouldDeny, Some(w))
                }
                _ => verdict,
            };
            Box::pin(relay_opaque(
                &ctx,
                &host,
                client,
                upstream,
                upstream_addr.addr(),
                first,
                &bytes,
                &limits,
            ))
            .await;
            ctx.record(
                &ex,
                verdict,
                refusal.as_ref(),
                200,
                (
                    bytes.up.load(Ordering::Relaxed),
                    bytes.down.load(Ordering::Relaxed),
                ),
            );
        }
    }
}

/// Why a tunnel to `target` may not be opaque, if its host is tainted.
fn taint_refusal(ctx: &ConnCtx, task: &TaskConfig, target: &Target) -> Option<Refusal> {
    let host = target.host.to_string();
    match ctx.task.taint.state(&host, &task.taint) {
        TaintState::Clean => None,
        TaintState::Tainted(p) => Some(Refusal {
            rule: Rule::UntrustedTarget,
            reason: format!("{host} is tainted ({p}) and an opaque tunnel cannot be shown to carry no body"),
            tainted_by: Some(p),
        }),
        TaintState::Overflow => Some(Refusal::new(
            Rule::UntrustedTarget,
            "the task's taint set is full, so every host counts as tainted, and an opaque tunnel cannot be shown to carry no body",
        )),
    }
}

/// Relays an opaque tunnel: the peeked bytes first, then both ways, until
/// close, idle, shutdown or the host becoming tainted.
#[allow(clippy::too_many_arguments)]
async fn relay_opaque(
    ctx: &ConnCtx,
    host: &str,
    client: Counted<ClientIo>,
    upstream: TcpStream,
    addr: std::net::SocketAddr,
    first: Vec<u8>,
    bytes: &RelayBytes,
    limits: &crate::config::Limits,
) {
    let stop = ctx.shared.hard_stop.child_token();
    let _registered = ctx.task.tunnels.register(host, addr, true, stop.clone());
    let mut upstream = upstream;
    if upstream.write_all(&first).await.is_err() {
        return;
    }
    // Not held for the tunnel's life: a relaying tunnel keeps no buffers.
    drop(first);
    let idle = limits.tunnel_idle_timeout;
    // The client side is already counted (peeked bytes included).
    let (client, up) = client.into_parts();
    let end = match client {
        // Both ends plain TCP: splice, the bytes never enter sluice.
        ClientIo::Tcp(client) => match crate::splice::Pipes::new() {
            Ok(pipes) => {
                let copy = crate::splice::relay(&client, &upstream, pipes, &up, &bytes.down);
                tunnel::watch(copy, bytes, idle, &stop).await
            }
            Err(e) => {
                tracing::debug!(error = %e, "no pipes for splice; relaying through buffers");
                buffered(ClientIo::Tcp(client), upstream, up, bytes, idle, &stop).await
            }
        },
        other => buffered(other, upstream, up, bytes, idle, &stop).await,
    };
    match end {
        RelayEnd::Cancelled if !ctx.shared.hard_stop.is_cancelled() => {
            tracing::info!(task = %ctx.task.id, host, "opaque tunnel closed: its host became tainted")
        }
        RelayEnd::Idle => tracing::debug!(host, "tunnel closed after idling"),
        _ => {}
    }
}

/// The buffered relay, for clients that are not a plain TCP socket.
async fn buffered(
    client: ClientIo,
    upstream: TcpStream,
    up: Arc<std::sync::atomic::AtomicU64>,
    bytes: &RelayBytes,
    idle: Duration,
    stop: &tokio_util::sync::CancellationToken,
) -> RelayEnd {
    // Counted again from here on, into the same counter.
    let inner = RelayBytes {
        up,
        down: bytes.down.clone(),
    };
    tunnel::relay(client, upstream, &inner, idle, stop).await
}

/// Serves the inside of an intercepted tunnel: TLS with a minted leaf, then
/// HTTP/1.1 or HTTP/2 by ALPN, every request through the shared pipeline.
#[allow(clippy::too_many_arguments)]
async fn serve_intercepted<IO>(
    ctx: Arc<ConnCtx>,
    task: Arc<TaskConfig>,
    target: Target,
    io: IO,
    spare: Spare,
    limits: &crate::config::Limits,
    stop: tokio_util::sync::CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Some(server) = ctx.shared.tls.load().server.clone() else {
        return;
    };
    let start = match tokio::time::timeout(
        limits.header_timeout,
        LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io),
    )
    .await
    {
        Ok(Ok(s)) => s,
        _ => return,
    };
    let tls = match tokio::time::timeout(limits.header_timeout, start.into_stream(server)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::info!(task = %ctx.task.id, host = %target.host, error = %e,
                "client TLS handshake failed: does the client trust sluice's CA? (sluice ca show)");
            return;
        }
        Err(_) => return,
    };
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let spare = Arc::new(spare);
    let target = Arc::new(target);
    let svc_ctx = ctx.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let (ctx, task, target, spare) =
            (svc_ctx.clone(), task.clone(), target.clone(), spare.clone());
        async move { Ok::<_, Infallible>(inner_request(ctx, task, &target, &spare, req).await) }
    });
    let io = TokioIo::new(tls);
    let shutdown = ctx.shared.shutdown.clone();
    // Revoked by a reload that no longer allows the destination: close at
    // once rather than drain.
    let revoked = stop;
    if h2 {
        let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .serve_connection(io, service);
        tokio::pin!(conn);
        let r = tokio::select! {
            r = conn.as_mut() => r,
            _ = revoked.cancelled() => Ok(()),
            _ = shutdown.cancelled() => { conn.as_mut().graceful_shutdown(); conn.await }
        };
        if let Err(e) = r {
            tracing::debug!(error = %e, "intercepted h2 connection ended with an error");
        }
    } else {
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_header_bytes.max(8192))
            .serve_connection(io, service)
            .with_upgrades();
        tokio::pin!(conn);
        let r = tokio::select! {
            r = conn.as_mut() => r,
            _ = revoked.cancelled() => Ok(()),
            _ = shutdown.cancelled() => { conn.as_mut().graceful_shutdown(); conn.await }
        };
        if let Err(e) = r {
            tracing::debug!(error = %e, "intercepted connection ended with an error");
        }
    }
}

/// One request inside an intercepted tunnel: its authority must be the
/// tunnel's, then it goes through the same pipeline as plain HTTP.
async fn inner_request(
    ctx: Arc<ConnCtx>,
    task: Arc<TaskConfig>,
    target: &Target,
    spare: &Spare,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let snap = ctx.shared.snapshot.load_full();
    conn::strip_sluice_headers(req.headers_mut());
    let uri = req.uri().clone();
    let path = uri.path().to_string();
    let ex = Exchange {
        kind: Kind::Intercepted,
        method: req.method().clone(),
        host: target.host.to_string(),
        port: target.port,
        path: Some(path.clone()),
        url: forward::source_url("https", target, &path),
        body: conn::carries_body(req.headers()),
        started: Instant::now(),
        generation: snap.generation,
    };
    if req.method() == Method::CONNECT {
        return ctx.refuse(
            &ex,
            Refusal::new(
                Rule::BadTarget,
                "CONNECT inside an intercepted tunnel is not allowed",
            ),
        );
    }
    // An absolute-form request (or HTTP/2 :authority) naming another
    // authority is a mismatch, as is a Host header that differs.
    if let Some(auth) = uri.authority() {
        let same = matches!(parse_authority(auth.as_str(), Some(443)), Ok(t) if t.host == target.host && t.port == target.port);
        if !same {
            return ctx.refuse(
                &ex,
                Refusal::new(
                    Rule::HostMismatch,
                    format!("the request names {auth}, but the tunnel was opened to {target}"),
                ),
            );
        }
    }
    // HTTP/2 clients usually send no Host: the authority was checked above.
    let hh = conn::host_header(req.headers(), 443);
    let origin = Origin {
        scheme: "https",
        tls: target.host.as_name().map(Arc::from),
        spare: Some(spare),
    };
    forward::exchange(ctx, &snap, &task, target, &hh, origin, req, ex).await
}
