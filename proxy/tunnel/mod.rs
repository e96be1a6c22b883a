//! tunnel: the client's byte stream and the relay of bytes both ways —
//! counting, idle detection, the copy loop — for opaque tunnels,
//! upgraded connections and the sessions inside intercepted tunnels. An
//! inspected relay (`relay_inspected`, for upgraded connections) shows
//! each chunk from upstream to its caller before writing any of it.
//!
//! Must not dial (that is `upstream`), resolve names or make decisions:
//! it moves bytes between two streams someone else admitted.

mod client;
pub(crate) mod guard;
pub(crate) mod opaque;
pub(crate) mod park;
pub(crate) mod rewind;

pub(crate) use client::{client_stack, first_head, ClientIo, Io};
pub(crate) use guard::{GuardState, HeadGuard, RawLine};
pub(crate) use rewind::Rewind;

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// Wraps a stream and counts the bytes read from it, so a relay knows its
/// volume and when it last moved.
pub(crate) struct Counted<S> {
    inner: S,
    read: Arc<AtomicU64>,
    /// Bytes written to it, where the caller wants them counted too.
    written: Option<Arc<AtomicU64>>,
}

impl<S> Counted<S> {
    pub(crate) fn new(inner: S, read: Arc<AtomicU64>) -> Self {
        Counted {
            inner,
            read,
            written: None,
        }
    }

    /// Counts both directions: reads into `read`, writes into `written`.
    pub(crate) fn both(inner: S, read: Arc<AtomicU64>, written: Arc<AtomicU64>) -> Self {
        Counted {
            inner,
            read,
            written: Some(written),
        }
    }

    /// The stream and its counter.
    /// The stream inside.
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    pub(crate) fn into_parts(self) -> (S, Arc<AtomicU64>) {
        (self.inner, self.read)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let (Poll::Ready(Ok(n)), Some(w)) = (&r, &self.written) {
            w.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let (Poll::Ready(Ok(n)), Some(w)) = (&r, &self.written) {
            w.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Relay buffer: larger than tokio's 8 KiB default, measured to roughly
/// double CONNECT throughput on loopback (BENCHMARKS.md).
const RELAY_BUF: usize = 32 * 1024;

/// Buffers kept for reuse per worker thread (the rest are freed).
const POOL_MAX: usize = 32;

thread_local! {
    static POOL: std::cell::RefCell<Vec<Box<[u8]>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn buffer() -> Box<[u8]> {
    POOL.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0u8; RELAY_BUF].into_boxed_slice())
}

fn give_back(buf: Box<[u8]>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(buf);
        }
    });
}

/// Looks at each chunk one direction of a relay read, before any of it
/// is written on; `false` refuses the chunk: none of it is written and
/// the relay ends ([`RelayEnd::Refused`]).
pub(crate) type Inspect<'a> = &'a mut (dyn FnMut(&[u8]) -> bool + Send);

/// Bytes an inspected direction looks at before it yields its task's
/// turn (inspection is CPU work inside a poll, as a scanned body's is).
const YIELD_AFTER_INSPECTING: usize = 256 * 1024;

/// The error a relay ends with when its inspector refuses a chunk.
#[derive(Debug, thiserror::Error)]
#[error("the relay's inspector refused a chunk")]
struct Refused;

/// One direction of a relay. It holds a buffer only while bytes are in
/// flight (read, not yet written): a tunnel waiting for its peer to speak
/// holds none, so idle tunnels cost no buffer memory at all. Buffers come
/// from a small per-thread pool.
#[derive(Default)]
struct Half<'a> {
    buf: Option<Box<[u8]>>,
    pos: usize,
    end: usize,
    eof: bool,
    need_flush: bool,
    /// Shown each chunk before it is written, if set.
    inspect: Option<Inspect<'a>>,
    /// Bytes inspected since this direction last yielded.
    since_yield: usize,
}

impl Half<'_> {
    /// Moves bytes from `r` to `w` until `r` ends (then shuts `w` down) or
    /// either side would block.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut r: Pin<&mut R>,
        mut w: Pin<&mut W>,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.since_yield >= YIELD_AFTER_INSPECTING {
                self.since_yield = 0;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if self.buf.is_none() && !self.eof {
                let mut buf = buffer();
                let mut rb = ReadBuf::new(&mut buf);
                match r.as_mut().poll_read(cx, &mut rb) {
                    Poll::Pending => {
                        give_back(buf);
                        if self.need_flush {
                            std::task::ready!(w.as_mut().poll_flush(cx))?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => {
                        give_back(buf);
                        return Poll::Ready(Err(e));
                    }
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            self.eof = true;
                            give_back(buf);
                        } else if !self.inspected(&buf[..n]) {
                            give_back(buf);
                            return Poll::Ready(Err(io::Error::other(Refused)));
                        } else {
                            self.buf = Some(buf);
                            self.pos = 0;
                            self.end = n;
                        }
                    }
                }
            }
            if let Some(buf) = &self.buf {
                while self.pos < self.end {
                    let n = std::task::ready!(w.as_mut().poll_write(cx, &buf[self.pos..self.end]))?;
                    if n == 0 {
                        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                    }
                    self.pos += n;
                    self.need_flush = true;
                }
                if let Some(buf) = self.buf.take() {
                    give_back(buf);
                }
            }
            if self.eof {
                if self.need_flush {
                    std::task::ready!(w.as_mut().poll_flush(cx))?;
                    self.need_flush = false;
                }
                return w.as_mut().poll_shutdown(cx);
            }
        }
    }
}

impl Half<'_> {
    /// Shows a chunk to the inspector, if there is one: may it be written?
    fn inspected(&mut self, chunk: &[u8]) -> bool {
        let Some(inspect) = self.inspect.as_mut() else {
            return true;
        };
        self.since_yield += chunk.len();
        inspect(chunk)
    }
}

/// Copies both ways until both directions have ended (each end passed on
/// as a half-close) or one fails. `down` (from `b` to `a`), if set, sees
/// each chunk before it is written.
async fn copy_both<A, B>(a: &mut A, b: &mut B, down: Option<Inspect<'_>>) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut up = Half::default();
    let mut down = Half {
        inspect: down,
        ..Half::default()
    };
    let (mut up_done, mut down_done) = (false, false);
    std::future::poll_fn(|cx| {
        if !up_done {
            match up.poll_copy(cx, Pin::new(&mut *a), Pin::new(&mut *b)) {
                Poll::Ready(Ok(())) => up_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if !down_done {
            match down.poll_copy(cx, Pin::new(&mut *b), Pin::new(&mut *a)) {
                Poll::Ready(Ok(())) => down_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if up_done && down_done {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Why a relay ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RelayEnd {
    /// Both sides closed (or one side failed).
    Closed,
    /// Nothing moved for the idle timeout.
    Idle,
    /// sluice is shutting down, or policy revoked the tunnel.
    Cancelled,
    /// The inspector refused a chunk from upstream (none of it was
    /// written).
    Refused,
}

/// Byte counts of a relay, shared so they can be read while it runs.
#[derive(Clone, Default)]
pub(crate) struct RelayBytes {
    /// Bytes from the client towards upstream.
    pub(crate) up: Arc<AtomicU64>,
    /// Bytes from upstream towards the client.
    pub(crate) down: Arc<AtomicU64>,
}

impl RelayBytes {
    pub(crate) fn total(&self) -> u64 {
        self.up.load(Ordering::Relaxed) + self.down.load(Ordering::Relaxed)
    }
}

/// Relays both ways until both sides close, the tunnel idles out or `cancel`
/// fires. Half-closes are passed on.
pub(crate) async fn relay<A, B>(
    client: A,
    upstream: B,
    bytes: &RelayBytes,
    idle: Duration,
    cancel: &CancellationToken,
) -> RelayEnd
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = Counted::new(client, bytes.up.clone());
    let mut upstream = Counted::new(upstream, bytes.down.clone());
    watch(
        copy_both(&mut client, &mut upstream, None),
        bytes,
        idle,
        cancel,
    )
    .await
}

/// [`relay`], showing each chunk read from upstream to `inspect` before
/// any of it is written to the client. A chunk it refuses is not written,
/// and the relay ends at once ([`RelayEnd::Refused`]); both streams are
/// dropped (closed) by the caller.
pub(crate) async fn relay_inspected<A, B>(
    client: A,
    upstream: B,
    bytes: &RelayBytes,
    idle: Duration,
    cancel: &CancellationToken,
    inspect: Inspect<'_>,
) -> RelayEnd
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    #[allow(clippy::redundant_closure_for_method_calls)] // the method path is unreadable
    let is_refused = |e: &std::io::Error| e.get_ref().is_some_and(|e| e.is::<Refused>());
    let mut client = Counted::new(client, bytes.up.clone());
    let mut upstream = Counted::new(upstream, bytes.down.clone());
    let copy = copy_both(&mut client, &mut upstream, Some(inspect));
    tokio::select! {
        r = copy => match r {
            Err(e) if is_refused(&e) => RelayEnd::Refused,
            _ => RelayEnd::Closed,
        },
        _ = cancel.cancelled() => RelayEnd::Cancelled,
        _ = quiet_for(bytes, idle) => RelayEnd::Idle,
    }
}

/// Runs a relay's copying until it ends, nothing moves for `idle` (seen in
/// `bytes`), or `cancel` fires.
pub(crate) async fn watch<F: std::future::Future>(
    copy: F,
    bytes: &RelayBytes,
    idle: Duration,
    cancel: &CancellationToken,
) -> RelayEnd {
    tokio::select! {
        _ = copy => RelayEnd::Closed,
        _ = cancel.cancelled() => RelayEnd::Cancelled,
        _ = quiet_for(bytes, idle) => RelayEnd::Idle,
    }
}

/// Completes once no byte has moved (as counted in `bytes`) for `idle`.
/// Wakes a few times per `idle`, not per byte.
pub(crate) async fn quiet_for(bytes: &RelayBytes, idle: Duration) {
    let tick = (idle / 4).max(Duration::from_millis(100));
    let mut seen = bytes.total();
    let mut quiet = Duration::ZERO;
    loop {
        tokio::time::sleep(tick).await;
        let now = bytes.total();
        if now == seen {
            quiet += tick;
            if quiet >= idle {
                return;
            }
        } else {
            seen = now;
            quiet = Duration::ZERO;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Drives a relay from both ends: the client's bytes reach upstream
    /// and then its half-close; upstream's bytes still reach the client
    /// after that; both ends see the other's EOF. Shared by the relays'
    /// tests (buffered here, spliced in `splice`).
    pub(crate) async fn half_close_both_ways<C, U>(
        mut client: C,
        mut upstream: U,
        up: usize,
        down: usize,
    ) where
        C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        U: AsyncRead + AsyncWrite + Unpin,
    {
        let up_bytes: Vec<u8> = (0..up).map(|i| (i % 251) as u8).collect();
        let down_bytes: Vec<u8> = (0..down).map(|i| (i % 241) as u8).collect();
        let u = up_bytes.clone();
        let client_side = tokio::spawn(async move {
            client.write_all(&u).await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, up_bytes, "upstream saw the client's bytes, then EOF");
        upstream.write_all(&down_bytes).await.unwrap();
        upstream.shutdown().await.unwrap();
        assert_eq!(client_side.await.unwrap(), down_bytes);
    }

    /// Bytes both ways, larger than a buffer, arrive intact; each side's
    /// end is passed on as a half-close; the relay ends when both have.
    #[tokio::test]
    async fn relays_both_ways_with_half_close() {
        let (client, proxy_client) = tokio::io::duplex(4096);
        let (proxy_up, upstream) = tokio::io::duplex(4096);
        let relay = tokio::spawn(async move {
            let (mut a, mut b) = (proxy_client, proxy_up);
            copy_both(&mut a, &mut b, None).await
        });
        half_close_both_ways(client, upstream, 200_000, 150_000).await;
        relay.await.unwrap().unwrap();
    }

    /// An inspected relay shows each upstream chunk before writing it: what
    /// it passes arrives intact, a chunk it refuses never reaches the
    /// client, and the relay ends there.
    #[tokio::test]
    async fn an_inspected_relay_writes_nothing_of_a_refused_chunk() {
        let (mut client, proxy_client) = tokio::io::duplex(4096);
        let (proxy_up, mut upstream) = tokio::io::duplex(4096);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let relay = tokio::spawn(async move {
            let mut inspect = move |chunk: &[u8]| {
                s.lock().unwrap().extend_from_slice(chunk);
                !chunk.windows(3).any(|w| w == b"BAD")
            };
            let bytes = RelayBytes::default();
            let stop = CancellationToken::new();
            let idle = Duration::from_secs(30);
            relay_inspected(proxy_client, proxy_up, &bytes, idle, &stop, &mut inspect).await
        });
        upstream.write_all(b"good bytes").await.unwrap();
        let mut got = [0u8; 10];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"good bytes");
        client.write_all(b"up").await.unwrap();
        let mut up = [0u8; 2];
        upstream.read_exact(&mut up).await.unwrap();
        assert_eq!(&up, b"up", "the client's direction is a plain relay");
        upstream.write_all(b"then BAD ones").await.unwrap();
        assert_eq!(relay.await.unwrap(), RelayEnd::Refused);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "nothing of the refused chunk: {rest:?}");
        assert!(seen.lock().unwrap().ends_with(b"then BAD ones"));
    }

    /// A relay waiting for bytes holds no buffer: it is back in the pool.
    #[tokio::test(flavor = "current_thread")]
    async fn an_idle_relay_holds_no_buffer() {
        let (_client, mut proxy_client) = tokio::io::duplex(64);
        let (mut proxy_up, _upstream) = tokio::io::duplex(64);
        POOL.with(|p| p.borrow_mut().clear());
        let copy = copy_both(&mut proxy_client, &mut proxy_up, None);
        let r = tokio::time::timeout(Duration::from_millis(50), copy).await;
        assert!(r.is_err(), "still waiting");
        assert_eq!(
            POOL.with(|p| p.borrow().len()),
            1,
            "the one buffer used to poll is back in the pool"
        );
    }
}
