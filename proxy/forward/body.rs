//! The bodies forwarding relays: the request body counted on its way up,
//! and the response body scanned for host names, counted and logged on its
//! way down.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::config::TaskConfig;
use crate::exchange::Row;
use crate::taint::body::BodyScanner;
use crate::taint::scan::memo::Memo;
use crate::taint::Recorder;

use crate::upstream::{Pool, PoolKey, Sender};

/// Counts the bytes of a request body as it is sent upstream. A body that
/// carries data is registered like a tunnel while it streams: when its
/// host becomes tainted or leaves the allow-list, no further chunk goes
/// up and the upload fails.
pub(super) struct CountingBody<B = Incoming> {
    pub(super) inner: B,
    pub(super) counter: Arc<AtomicU64>,
    pub(super) revoked: Option<(
        crate::taint::OwnedTunnelGuard,
        tokio_util::sync::CancellationToken,
    )>,
}

/// The error an upload ends with when its destination is revoked.
#[derive(Debug, thiserror::Error)]
#[error("the upload was cut: its host became tainted or left the allow-list")]
pub(super) struct UploadRevoked;

impl<B> Body for CountingBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<crate::respond::BodyError>,
{
    type Data = Bytes;
    type Error = crate::respond::BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.revoked.as_ref().is_some_and(|(_, t)| t.is_cancelled()) {
            return Poll::Ready(Some(Err(Box::new(UploadRevoked))));
        }
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r {
            if let Some(d) = f.data_ref() {
                self.counter.fetch_add(d.len() as u64, Ordering::Relaxed);
            }
        }
        if matches!(r, Poll::Ready(None)) {
            // Sent whole: nothing left to revoke.
            self.revoked = None;
        }
        r.map(|o| o.map(|res| res.map_err(Into::into)))
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What to do when a relayed response ends.
pub(super) struct Finish {
    /// Written when the response ends (or is dropped).
    pub(super) row: Row,
    pub(super) bytes_up: Arc<AtomicU64>,
    /// The upstream connection, returned to the pool if the body completes.
    pub(super) reuse: Option<(Arc<Pool>, PoolKey, Sender)>,
}

/// Taint scanning of one response.
pub(super) struct Scan {
    pub(super) body: BodyScanner,
    pub(super) task: Arc<TaskConfig>,
    /// Where what it names goes: the task's taint set, with the response's
    /// URL (without its query) as the provenance.
    pub(super) record: Recorder,
    /// The connection's memo this response skips by and adds to.
    pub(super) memo: Option<(Arc<crate::exchange::ConnCtx>, Arc<Memo>)>,
    /// The config generation and taint epoch the stream's tokens were
    /// judged under (`ConnCtx::judged_under`).
    pub(super) judged_under: (u64, u64),
}

/// A response body relayed to the client: scans it for host names before
/// each chunk is passed on, counts bytes, and logs the exchange (and
/// returns the upstream connection) when it ends.
pub(super) struct RelayBody<B: Body = Incoming> {
    pub(super) inner: B,
    pub(super) bytes_down: u64,
    /// Bytes scanned since this body last gave its task's turn back.
    pub(super) since_yield: usize,
    pub(super) scan: Option<Scan>,
    pub(super) finish: Option<Finish>,
    pub(super) stall: Stall,
}

/// Bytes a response body scans before it yields its task's turn.
const YIELD_AFTER_SCANNING: usize = 256 * 1024;

/// Cuts a response body that stalls: no frame for `limit` ends it with
/// an error (SPEC §9: a stalled body must not hold a scanner, a decoder
/// and a connection forever). The timer is re-armed lazily, from the time
/// of the last frame, so a streaming body costs no timer work per chunk.
pub(super) struct Stall {
    limit: std::time::Duration,
    /// When the current wait for upstream began (a slow client, which
    /// stops polling, is not a stalled upstream).
    last: tokio::time::Instant,
    waiting: bool,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stall {
    pub(super) fn new(limit: std::time::Duration) -> Stall {
        Stall {
            limit,
            last: tokio::time::Instant::now(),
            waiting: false,
            timer: None,
        }
    }

    fn progressed(&mut self) {
        self.waiting = false;
    }

    /// Ready when upstream has been silent for the whole limit while
    /// sluice waited on it.
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.waiting {
            self.waiting = true;
            self.last = tokio::time::Instant::now();
        }
        let deadline = self.last + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            std::task::ready!(timer.as_mut().poll(cx));
            if tokio::time::Instant::now() >= self.last + self.limit {
                return Poll::Ready(());
            }
        }
    }
}

/// The error a stalled response body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the upstream response body stalled for {0:?}; sluice cut it")]
pub(super) struct Stalled(std::time::Duration);

/// The error a response body ends with when sluice cannot scan it as a
/// client would read it (SPEC §9: fail closed).
#[derive(Debug, thiserror::Error)]
#[error("sluice cut the response: {0}")]
pub(super) struct Unscannable(crate::taint::body::Skipped);

impl<B: Body> RelayBody<B> {
    /// Scans a chunk before it is passed on; `Err` when the body must be
    /// cut instead (the chunk is not passed on).
    fn scan_chunk(&mut self, data: &[u8]) -> Result<(), Unscannable> {
        let Some(scan) = self.scan.as_mut() else {
            return Ok(());
        };
        // A reload or a removed taint while the body streams: what the
        // memo and the stream say was judged, was judged under other
        // settings, so judge afresh (every time it happens).
        if let Some((conn, _)) = &scan.memo {
            let now = conn.judged_under();
            if now != scan.judged_under {
                scan.body.drop_memo();
                scan.judged_under = now;
            }
        }
        let fed = scan.body.feed(data);
        if !fed.names.is_empty() || !fed.pending.is_empty() || scan.record.holds() {
            scan.record.add(fed.names, fed.pending);
        }
        match fed.cut {
            None => Ok(()),
            Some(why) => Err(Unscannable(why)),
        }
    }

    /// Cuts the body: the row says why (a refusal after the status the
    /// client already got), and nothing more is relayed.
    fn cut(
        &mut self,
        why: Unscannable,
    ) -> Poll<Option<Result<Frame<Bytes>, crate::respond::BodyError>>> {
        if let Some(f) = self.finish.as_mut() {
            tracing::warn!(url = %f.row.ex.url, "{why}");
            f.row
                .set_verdict(crate::policy::Verdict::Deny(crate::policy::Refusal::new(
                    crate::policy::Rule::UntrustedTarget,
                    why.to_string(),
                )));
        }
        self.finish(false);
        Poll::Ready(Some(Err(Box::new(why))))
    }

    /// Trailers are headers too: scanned like the response's.
    fn scan_trailers(&mut self, trailers: &http::HeaderMap) {
        if let Some(scan) = self.scan.as_mut() {
            let hosts = super::scan_headers(trailers, None, scan.task.taint.by_owner.scan_hosts());
            if !hosts.is_empty() {
                scan.record.add(hosts, Vec::new());
            }
        }
    }

    fn finish(&mut self, complete: bool) {
        if let Some(mut scan) = self.scan.take() {
            let (hosts, skipped) = scan.body.finish();
            scan.record.add(hosts, Vec::new());
            scan.record.done();
            if let Some(why) = skipped {
                tracing::warn!(source = %scan.record.source(), "taint scan: {why}");
            }
            // Every name it gave is recorded: what it judged may be
            // skipped by the connection's next response.
            let learned = scan.body.learned();
            if let Some((conn, memo)) = scan.memo.take() {
                drop(scan);
                conn.keep_memo(memo, learned);
            }
        }
        if let Some(mut f) = self.finish.take() {
            f.row.bytes = (f.bytes_up.load(Ordering::Relaxed), self.bytes_down);
            drop(f.row);
            if complete {
                if let Some((pool, key, sender)) = f.reuse {
                    pool.put(key, sender);
                }
            }
        }
    }
}

impl<B> Body for RelayBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<crate::respond::BodyError>,
{
    type Data = Bytes;
    type Error = crate::respond::BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // Scanning is CPU work inside a poll: hyper keeps polling a body
        // while the client socket takes bytes, so one download could scan
        // megabytes per turn and starve every other connection on the
        // worker (accepts included). Give the turn back every so often.
        if self.scan.is_some() && self.since_yield >= YIELD_AFTER_SCANNING {
            self.since_yield = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let r = Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map(|o| o.map(|res| res.map_err(Into::into)));
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                self.stall.progressed();
                if let Some(d) = f.data_ref() {
                    self.bytes_down += d.len() as u64;
                    self.since_yield += d.len();
                    // Before the bytes reach the client: a name is tainted
                    // before a request sent after reading it can arrive.
                    if let Err(why) = self.scan_chunk(d) {
                        return self.cut(why);
                    }
                } else if let Some(t) = f.trailers_ref() {
                    self.scan_trailers(t);
                }
                if self.inner.is_end_stream() {
                    self.finish(true);
                }
            }
            Poll::Ready(None) => self.finish(true),
            Poll::Ready(Some(Err(e))) => {
                // The echo check cut it: the row says so, as a cut head's.
                if let Some(cut) = e.downcast_ref::<crate::secrets::EchoCut>() {
                    if let Some(f) = self.finish.as_mut() {
                        tracing::warn!(url = %f.row.ex.url, "{cut}");
                        let refusal = crate::policy::secrets::echo_cut(&cut.to_string());
                        f.row.set_verdict(crate::policy::Verdict::Deny(refusal));
                    }
                }
                self.finish(false);
            }
            Poll::Pending => {
                if self.stall.poll_stalled(cx).is_ready() {
                    let limit = self.stall.limit;
                    if let Some(f) = self.finish.as_ref() {
                        tracing::info!(url = %f.row.ex.url,
                            "response body stalled for {}s; cut", limit.as_secs());
                    }
                    self.finish(false);
                    return Poll::Ready(Some(Err(Box::new(Stalled(limit)))));
                }
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

impl<B: Body> Drop for RelayBody<B> {
    fn drop(&mut self) {
        // The client went away (or the body was empty and never polled).
        let empty = self.inner.is_end_stream();
        self.finish(empty);
    }
}
