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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1::UpgradeableConnection;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{GuardState, HeadGuard};

/// Quiet time after which an idle connection is parked.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

/// A request hyper handed to the service, until its response is made.
pub(crate) struct InFlight(Arc<GuardState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl GuardState {
    /// A request arrived: the guard steps aside, and the connection is
    /// not parked until the returned token is dropped.
    pub(crate) fn request(self: &Arc<Self>) -> InFlight {
        self.served();
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
            if now == last && self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            last = now;
        }
    }
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
    /// Parked: the stream, and the bytes hyper had read but not used.
    Parked(S, Vec<u8>),
}

/// Serves `conn` until it ends or parks. `stop` ends it: gracefully
/// (what is in flight finishes) when `graceful`, else at once.
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
    let (mut stopping, mut parking) = (false, false);
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
            () = guard.quiet(), if !parking && !stopping => {
                parking = true;
                guard.parking.store(true, Ordering::Relaxed);
                Pin::new(&mut conn).graceful_shutdown();
            }
        }
    };
    if r.is_err() || !parking || stopping {
        return Ended::Done(r);
    }
    // None: the connection was upgraded after all.
    match conn.into_parts() {
        Some(parts) => {
            let (stream, unread) = parts.io.into_inner().into_parts();
            // What hyper read but did not use, then what the guard had
            // not handed it yet.
            let mut carried = parts.read_buf.to_vec();
            carried.extend_from_slice(&unread);
            Ended::Parked(stream, carried)
        }
        None => Ended::Done(Ok(())),
    }
}
