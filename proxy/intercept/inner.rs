//! The inside of a tunnel sluice serves as HTTP: TLS terminated with a
//! leaf from sluice's CA (HTTP/1.1 or HTTP/2 by ALPN), or plain HTTP/1
//! that a client sent through CONNECT. Every request goes through
//! `forward::relay`, the same pipeline as plain HTTP, under the config
//! in force when it arrives. Must not decide on targets itself.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::exchange::{self, ConnCtx, Exchange, ReqCtx};
use crate::forward::{self, Origin};
use crate::log::Kind;
use crate::policy::target::parse_authority;
use crate::policy::{self, Target};
use crate::respond::ProxyBody;
use crate::tunnel::park::{self, Ended};
use crate::tunnel::{self, RelayBytes};
use crate::tunnel::{GuardState, HeadGuard};
use crate::upstream::Spare;
use hyper::server::conn::http1::UpgradeableConnection;
use hyper::service::Service;

/// How the client speaks inside the tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// TLS, terminated by sluice (intercepted).
    Https,
    /// Plain HTTP/1 sent through CONNECT (e.g. undici for `http://` URLs).
    Http,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }
    fn default_port(self) -> u16 {
        match self {
            Scheme::Https => 443,
            Scheme::Http => 80,
        }
    }
}

/// How a served tunnel ended, as far as its row is concerned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    Done,
    /// The client's TLS handshake with sluice failed (an untrusted CA or a
    /// pinned certificate).
    ClientTlsFailed,
}

/// One served tunnel.
pub(crate) struct Session {
    pub(crate) ctx: Arc<ConnCtx>,
    pub(crate) target: Arc<Target>,
    /// The upstream connection dialled for the CONNECT, used first.
    pub(crate) spare: Arc<Spare>,
    pub(crate) scheme: Scheme,
    /// Plain HTTP/2 with prior knowledge (the client sent the preface).
    pub(crate) h2c: bool,
    /// For HTTPS: the TLS settings the CONNECT was admitted to intercept
    /// with.
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
}

impl Session {
    /// Serves until the client closes, the session idles past the tunnel
    /// idle timeout (both directions quiet), or a reload or the end of the
    /// drain period stops it (`stop`).
    pub(crate) async fn serve<IO>(
        self,
        io: IO,
        limits: &Limits,
        bytes: &RelayBytes,
        stop: CancellationToken,
    ) -> Served
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        match self.scheme {
            Scheme::Http => {
                let h2 = self.h2c;
                Box::pin(self.serve_http(io, h2, limits, bytes, stop)).await;
                Served::Done
            }
            Scheme::Https => {
                // Boxed: the handshake's state is large, and the session
                // outlives it by hours.
                let tls = match Box::pin(self.handshake(io, limits)).await {
                    Ok(tls) => tls,
                    Err(served) => return served,
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                Box::pin(self.serve_http(tls, h2, limits, bytes, stop)).await;
                Served::Done
            }
        }
    }

    async fn handshake<IO>(
        &self,
        io: IO,
        limits: &Limits,
    ) -> Result<tokio_rustls::server::TlsStream<IO>, Served>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let server = self.tls.clone().ok_or(Served::Done)?;
        let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
        let Ok(Ok(start)) = tokio::time::timeout(limits.header_timeout, acceptor).await else {
            return Err(Served::Done);
        };
        match tokio::time::timeout(limits.header_timeout, start.into_stream(server)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => {
                let host = &self.target.host;
                tracing::warn!(host = %host, error = %e,
                    "the client refused sluice's certificate for {host}: it does not trust sluice's CA (set its shell up with: eval \"$(sluice env)\") or it pins the certificate (list {host} in the task's passthrough)");
                Err(Served::ClientTlsFailed)
            }
            Err(_) => Err(Served::Done),
        }
    }

    async fn serve_http<IO>(
        self,
        io: IO,
        h2: bool,
        limits: &Limits,
        bytes: &RelayBytes,
        revoked: CancellationToken,
    ) where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let idle = tunnel::quiet_for(bytes, limits.tunnel_idle_timeout);
        tokio::pin!(idle);
        let ctx = self.ctx.clone();
        let session = Arc::new(self);
        // Revoked by a reload that no longer allows the destination, or
        // idle: close at once. On SIGTERM a tunnel, like an opaque one,
        // keeps serving until its client closes it or the drain period
        // ends (`revoked` is a child of the hard stop).
        if h2 {
            let service = service_fn(move |req: Request<Incoming>| {
                let session = session.clone();
                // Boxed for the reason `conn::serve` gives.
                Box::pin(async move { Ok::<_, Infallible>(session.request(req).await) })
            });
            // Boxed: an HTTP/2 connection's state is large, and inline it
            // would size every session's future, HTTP/1 ones too.
            let mut conn = Box::pin(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .serve_connection(TokioIo::new(io), service),
            );
            let r = tokio::select! {
                r = conn.as_mut() => r,
                _ = revoked.cancelled() => Ok(()),
                _ = &mut idle => Ok(()),
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection inside a tunnel ended with an error");
            }
            return;
        }
        // HTTP/1: each head read whole before hyper's connection exists
        // (as `conn::serve` reads a client's), served until the
        // connection ends, parked whenever it goes quiet
        // (`tunnel::park`), and served again from its next head.
        let (mut io, mut read, mut idle_for) = (io, Vec::new(), std::time::Duration::ZERO);
        loop {
            let parked = (!idle_for.is_zero()).then(park::Parked::new);
            let wait = tokio::time::timeout(
                limits.header_timeout.saturating_sub(idle_for),
                tunnel::first_head(&mut io, read, limits.max_header_bytes),
            );
            let first = tokio::select! {
                r = wait => match r {
                    Ok(Ok(head)) if !head.is_empty() => head,
                    _ => return,
                },
                _ = revoked.cancelled() => return,
                _ = &mut idle => return,
            };
            drop(parked);
            let guard = Arc::new(GuardState::default());
            let r = {
                let stop = async {
                    tokio::select! {
                        _ = revoked.cancelled() => {}
                        _ = &mut idle => {}
                    }
                };
                let conn = http1(&session, &guard, io, first, limits);
                Box::pin(park::serve(conn, &guard, stop, false)).await
            };
            match r {
                Ended::Parked(parked, carried, idle) => {
                    ctx.forget_memo();
                    (io, read, idle_for) = (parked, carried, idle);
                }
                // A request line hyper rejects gets sluice's answer and a
                // log row, as on a client connection.
                Ended::Done(Err(e)) if e.is_parse() || e.is_parse_too_large() => {
                    return ctx.record_unparsable(guard.refused(), &e);
                }
                Ended::Done(Err(e)) => {
                    return tracing::debug!(error = %e, "connection inside a tunnel ended with an error");
                }
                Ended::Done(Ok(())) => return,
            }
        }
    }

    /// One request inside the tunnel: its authority must be the tunnel's,
    /// then it goes through the same pipeline as plain HTTP, under the
    /// config in force now (not the one the tunnel was opened under).
    async fn request(&self, mut req: Request<Incoming>) -> Response<ProxyBody> {
        let ctx = &self.ctx;
        let target = &*self.target;
        exchange::strip_sluice_headers(req.headers_mut());
        let path = req.uri().path().to_string();
        let ex = Exchange {
            kind: Kind::Intercepted,
            method: req.method().clone(),
            host: target.host.to_string(),
            port: target.port,
            path: Some(path.clone()),
            url: forward::source_url(self.scheme.as_str(), target, &path),
            body: exchange::carries_body(req.headers()),
            started: Instant::now(),
            generation: 0,
            note: None,
            conn: ctx.id,
            addr: None,
            secrets: Vec::new(),
        };
        let cx = match ReqCtx::start(ctx, ctx.shared.live(), ex) {
            Ok(cx) => cx,
            Err(refused) => return *refused,
        };
        // An absolute-form request (or HTTP/2 :authority) naming another
        // authority is a mismatch, as is a Host header that differs.
        let default_port = self.scheme.default_port();
        let authority = req
            .uri()
            .authority()
            .map(|a| (a.as_str(), parse_authority(a.as_str(), Some(default_port))));
        let is_connect = req.method() == Method::CONNECT;
        if let Err(r) = policy::decide_inner(target, is_connect, authority) {
            return cx.refuse(r);
        }
        // HTTP/2 clients usually send no Host: the authority was checked above.
        let host_header = exchange::host_header(req.headers(), default_port);
        let origin = Origin {
            scheme: self.scheme.as_str(),
            tls: match self.scheme {
                Scheme::Https => target.host.as_name().map(Arc::from),
                Scheme::Http => None,
            },
            spare: Some(&self.spare),
        };
        forward::relay(cx, target, host_header, origin, req).await
    }
}

/// A request's future inside a tunnel, boxed for the reason
/// `conn::serve` gives.
type RequestFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>,
>;

/// hyper's HTTP/1 connection for a tunnel's inside, `first` (bytes read
/// while it was parked) replayed before the stream.
fn http1<IO>(
    session: &Arc<Session>,
    guard: &Arc<GuardState>,
    io: IO,
    first: Vec<u8>,
    limits: &Limits,
) -> UpgradeableConnection<
    TokioIo<HeadGuard<IO>>,
    impl Service<
            Request<Incoming>,
            Response = Response<ProxyBody>,
            Error = Infallible,
            Future = RequestFuture,
        > + Send
        + Unpin,
>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let task = session.ctx.task.id.clone();
    let (session, served) = (session.clone(), guard.clone());
    let service = service_fn(move |req: Request<Incoming>| -> RequestFuture {
        let in_flight = served.request(&req);
        let session = session.clone();
        Box::pin(async move { Ok::<_, Infallible>(in_flight.hold(session.request(req).await)) })
    });
    let io = HeadGuard::new(io, guard.clone(), task, limits.max_header_bytes).replaying(first);
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
}
