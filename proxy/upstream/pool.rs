//! The upstream side of forwarding: idle connections per task keyed by
//! checked address (and TLS name), and dialling fresh ones (TCP, TLS, then
//! HTTP/2 or HTTP/1.1 by ALPN). Must not decide anything.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Bytes read from an upstream HTTP/1 connection at a time. hyper's
/// default grows the read buffer up to 400 KiB, and each body chunk
/// handed on keeps its whole buffer alive while a slow client has not
/// taken it: a stalled download held about 1 MiB. Fixed 32 KiB reads
/// bound that (BENCHMARKS.md, stalled downloads) at no measurable cost.
const UPSTREAM_READ: usize = 32 * 1024;

use super::{dial, tls_connect, UpstreamError};
use crate::policy::{Admission, CheckedAddr};
use crate::tls::Tls;

/// The body type sent upstream.
pub(crate) type UpBody = http_body_util::combinators::BoxBody<Bytes, crate::respond::BodyError>;

/// How long an idle upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// Idle connections kept per address.
const POOL_PER_ADDR: usize = 32;

/// Where a pooled connection goes: the checked address, for HTTPS the name
/// its certificate was verified for, and the config generation it was
/// admitted under (a connection is never reused under another config).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub(crate) addr: SocketAddr,
    pub(crate) tls: Option<Arc<str>>,
    pub(crate) generation: u64,
}

/// Idle upstream connections of one task, keyed by checked address, TLS
/// name and config generation. Only the generation in force is kept: a
/// connection handed back after a reload is dropped.
pub(crate) struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<IdleConn>>>,
    /// The config generation in force.
    generation: std::sync::atomic::AtomicU64,
}

/// An idle upstream connection and when it became idle.
type IdleConn = (Sender, Instant);

/// An upstream HTTP/1.1 or HTTP/2 connection.
pub(crate) enum Sender {
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
    pub(crate) fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }
    /// Sends; a request that was never started comes back in `Err(Ok(req))`.
    pub(crate) async fn try_send(
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
    /// An idle, ready connection to one of `addrs` made under config
    /// `generation`, if there is one.
    pub(crate) fn take(
        &self,
        addrs: &[CheckedAddr],
        tls: &Option<Arc<str>>,
        generation: u64,
    ) -> Option<(Sender, CheckedAddr)> {
        // A std Mutex: held only for a map lookup, never across an await.
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for a in addrs {
            let key = PoolKey {
                addr: a.addr(),
                tls: tls.clone(),
                generation,
            };
            if let Some(list) = idle.get_mut(&key) {
                while let Some((sender, since)) = list.pop() {
                    if since.elapsed() < POOL_IDLE && sender.is_ready() {
                        return Some((sender, a.clone()));
                    }
                }
            }
        }
        None
    }

    /// An empty pool for config `generation`.
    pub(crate) fn new(generation: u64) -> Pool {
        Pool {
            idle: Mutex::default(),
            generation: generation.into(),
        }
    }

    /// A reload put `generation` in force: every idle connection is
    /// dropped (the new config may no longer allow it), and from now on
    /// only connections admitted under it are kept.
    pub(crate) fn renew(&self, generation: u64) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation
            .store(generation, std::sync::atomic::Ordering::Release);
        idle.clear();
    }

    /// Returns a connection once it is ready for another request.
    pub(crate) fn put(self: &Arc<Self>, key: PoolKey, mut sender: Sender) {
        let pool = self.clone();
        tokio::spawn(async move {
            let ready = tokio::time::timeout(Duration::from_secs(5), sender.ready()).await;
            if !matches!(ready, Ok(Ok(()))) {
                return;
            }
            let mut idle = pool
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Read under the lock `renew` takes: a connection of an older
            // generation is dropped, never kept past its reload.
            if key.generation != pool.generation.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
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
pub(crate) type Spare = std::sync::Mutex<Option<(TcpStream, CheckedAddr)>>;

/// Dials a fresh upstream connection: TCP, then TLS (verified for `tls`)
/// when the origin is HTTPS, then HTTP/2 or HTTP/1.1 as ALPN says.
pub(crate) async fn connect(
    tls_settings: &Tls,
    admission: Admission,
    tls: &Option<Arc<str>>,
    timeout: Duration,
    spare: Option<&Spare>,
) -> Result<(Sender, CheckedAddr), UpstreamError> {
    let reused = spare.and_then(|s| {
        let mut s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.take() {
            Some((stream, addr)) if admission.addrs().contains(&addr) => Some((stream, addr)),
            _ => None,
        }
    });
    let (stream, addr) = match reused {
        Some(x) => x,
        None => dial(admission, timeout).await?,
    };
    let handshake_err = |source: hyper::Error| UpstreamError::HttpHandshake {
        addr: addr.addr(),
        source,
    };
    let Some(name) = tls else {
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .read_buf_exact_size(Some(UPSTREAM_READ))
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
    let tls_stream = tls_connect(tls_settings, name, stream, timeout).await?;
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
            .read_buf_exact_size(Some(UPSTREAM_READ))
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
