//! park: an idle HTTP/1 connection (a client's keep-alive connection, or
//! the plain HTTP or intercepted TLS inside a tunnel) gives back what
//! hyper holds for it — an 8 KiB read buffer, an 8 KiB write buffer, the
//! connection state and its service — and waits on its stream alone, as
//! a fresh connection waits for its first head. When that head is whole,
//! a new hyper connection is built over the same stream, the bytes read
//! while parked replayed first.
//!
//! A connection is parked once it has been quiet for [`PARK_AFTER`] (no
//! byte read or written) with no request in flight: hyper is then
//! between requests, or holds part of a head, which it hands back
//! ([`Ended::Parked`]) with the stream. hyper is shut down gracefully with
//! the stream's shutdown skipped (`HeadGuard`), so the client sees
//! nothing. A response still streaming to a stalled reader when the
//! connection is parked finishes first; hyper then stops at its end and
//! the connection is parked.
//!
//! Owns: when to park and taking hyper's connection apart. Must not
//! decide anything about requests, or read past what hyper had read.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Response;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1::UpgradeableConnection;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{GuardState, HeadGuard};
use crate::respond::ProxyBody;

/// Quiet time after which an idle connection is parked.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

/// A request hyper handed to the service, until its response body has
/// ended (or was dropped): while one is held the connection is not
/// parked.
pub(crate) struct InFlight(Arc<GuardState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // The connection went idle now: a parked wait for the next head
        // counts from here, as hyper's header timer would.
        self.0.idle_since.store(since_start(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Milliseconds since the first call (a clock the guard can keep in an
/// atomic).
fn since_start() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl InFlight {
    /// The response, its body holding the token until it ends. A
    /// response that ends the connection or switches it to another
    /// protocol keeps it from being parked.
    pub(crate) fn hold(self, response: Response<ProxyBody>) -> Response<ProxyBody> {
        if response.status() == http::StatusCode::SWITCHING_PROTOCOLS
            || says_close(response.headers())
        {
            self.0.no_park.store(true, Ordering::Relaxed);
        }
        response.map(|inner| {
            Holding {
                inner,
                _token: self,
            }
            .boxed()
        })
    }
}

/// A response body that keeps its request in flight until hyper drops it
/// (at its end, or when the connection goes).
struct Holding {
    inner: ProxyBody,
    _token: InFlight,
}

impl Body for Holding {
    type Data = bytes::Bytes;
    type Error = crate::respond::BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl GuardState {
    /// A request arrived: the guard steps aside, and the connection is
    /// not parked until the returned token is dropped — nor ever, if the
    /// request ends the connection (`Connection: close`, HTTP/1.0 without
    /// keep-alive) or turns it into a tunnel (CONNECT, an upgrade).
    pub(crate) fn request<B>(self: &Arc<Self>, req: &http::Request<B>) -> InFlight {
        self.served();
        let h = req.headers();
        let keeps = match req.version() {
            http::Version::HTTP_10 => says(h, "keep-alive"),
            _ => !says_close(h),
        };
        if !keeps || req.method() == http::Method::CONNECT || h.contains_key(http::header::UPGRADE)
        {
            self.no_park.store(true, Ordering::Relaxed);
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Resolves once the connection has been quiet for a whole
    /// [`PARK_AFTER`] with no request in flight.
    async fn quiet(&self) {
        let mut last = self.moved.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(PARK_AFTER).await;
            let now = self.moved.load(Ordering::Relaxed);
            if now == last
                && self.in_flight.load(Ordering::Acquire) == 0
                && !self.no_park.load(Ordering::Relaxed)
            {
                return;
            }
            last = now;
        }
    }

    /// How long the connection has been idle (since its last response
    /// ended, or [`PARK_AFTER`] if it served none).
    fn idle_for(&self) -> Duration {
        match self.idle_since.load(Ordering::Relaxed) {
            0 => PARK_AFTER,
            at => Duration::from_millis(since_start().saturating_sub(at)),
        }
    }
}

/// Does a `Connection` header name `close`?
fn says_close(h: &http::HeaderMap) -> bool {
    says(h, "close")
}

/// Does a `Connection` header name `token`?
fn says(h: &http::HeaderMap, token: &str) -> bool {
    h.get_all(http::header::CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// Counts a parked connection in `sluice_parked_connections` while it
/// lives.
pub(crate) struct Parked(());

impl Parked {
    pub(crate) fn new() -> Parked {
        crate::metrics::PARKED.inc();
        Parked(())
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        crate::metrics::PARKED.dec();
    }
}

/// How a served connection ended.
pub(crate) enum Ended<S> {
    /// Closed, upgraded (its stream went to the upgrade), or stopped.
    Done(hyper::Result<()>),
    /// Parked: the stream, the bytes hyper had read but not used, and how
    /// long the connection has been idle (a wait for its next head counts
    /// from then).
    Parked(S, Vec<u8>, Duration),
}

/// Serves `conn` until it ends or parks. `stop` ends it: gracefully
/// (what is in flight finishes) when `graceful`, else at once.
///
/// Only a connection hyper holds idle is parked: hyper closes an idle
/// connection at once when asked to shut down gracefully, so the
/// connection must be done on the very next poll. If it is not (a request
/// body still arriving after its response), it is left to hyper, which
/// now closes it once that exchange is over.
pub(crate) async fn serve<S, Svc, B>(
    mut conn: UpgradeableConnection<TokioIo<HeadGuard<S>>, Svc>,
    guard: &GuardState,
    stop: impl Future<Output = ()>,
    graceful: bool,
) -> Ended<S>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    Svc: HttpService<Incoming, ResBody = B> + Unpin,
    Svc::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(stop);
    let (mut stopping, mut tried) = (false, false);
    let r = loop {
        tokio::select! {
            r = &mut conn => break r,
            () = &mut stop, if !stopping => {
                if !graceful {
                    return Ended::Done(Ok(()));
                }
                stopping = true;
                Pin::new(&mut conn).graceful_shutdown();
            }
            () = guard.quiet(), if !tried && !stopping => {
                tried = true;
                guard.parking.store(true, Ordering::Relaxed);
                Pin::new(&mut conn).graceful_shutdown();
                let now = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut conn).poll(cx))).await;
                match now {
                    Poll::Ready(Ok(())) => {
                        let parts = conn.into_parts().map(|p| (p.io, p.read_buf));
                        return take_apart(parts, guard);
                    }
                    Poll::Ready(Err(e)) => break Err(e),
                    // Not idle after all: hyper finishes and closes it.
                    Poll::Pending => guard.parking.store(false, Ordering::Relaxed),
                }
            }
        }
    };
    guard.parking.store(false, Ordering::Relaxed);
    Ended::Done(r)
}

/// hyper's connection, shut down while idle, taken apart (None: it was
/// upgraded after all).
fn take_apart<S: AsyncRead + AsyncWrite + Unpin>(
    parts: Option<(TokioIo<HeadGuard<S>>, bytes::Bytes)>,
    guard: &GuardState,
) -> Ended<S> {
    guard.parking.store(false, Ordering::Relaxed);
    let Some((io, read_buf)) = parts else {
        return Ended::Done(Ok(()));
    };
    let (stream, unread) = io.into_inner().into_parts();
    // What hyper read but did not use, then what the guard had not
    // handed it yet.
    let mut carried = read_buf.to_vec();
    carried.extend_from_slice(&unread);
    Ended::Parked(stream, carried, guard.idle_for())
}
