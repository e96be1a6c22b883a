//! tunnel: dial the checked address, and relay bytes both ways.
//!
//! [`dial`] takes a [`Permit`] and [`CheckedAddr`]s, which only `policy`
//! can make: dialling without a decision does not compile. Must not
//! resolve names or make decisions.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::policy::{CheckedAddr, Permit, Rule};

/// Why a dial failed: `upstream-failed` or `upstream-timeout`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DialError {
    pub rule: Rule,
    pub message: String,
}

/// Connects to the first of `addrs` that answers, within `timeout` overall.
pub async fn dial(
    _permit: &Permit,
    addrs: &[CheckedAddr],
    timeout: Duration,
) -> Result<(TcpStream, CheckedAddr), DialError> {
    let attempt = async {
        let mut last = None;
        for a in addrs {
            match TcpStream::connect(a.addr()).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, *a));
                }
                Err(e) => last = Some((a.addr(), e)),
            }
        }
        Err(match last {
            Some((addr, e)) => DialError {
                rule: Rule::UpstreamFailed,
                message: format!("cannot connect to {addr}: {e}"),
            },
            None => DialError {
                rule: Rule::UpstreamFailed,
                message: "no address to connect to".into(),
            },
        })
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(DialError {
            rule: Rule::UpstreamTimeout,
            message: format!(
                "no connection to {} within {}s",
                addrs
                    .first()
                    .map(|a| a.addr().to_string())
                    .unwrap_or_default(),
                timeout.as_secs()
            ),
        }),
    }
}

/// Wraps a stream and counts the bytes read from it, so a relay knows its
/// volume and when it last moved.
pub struct Counted<S> {
    inner: S,
    read: Arc<AtomicU64>,
}

impl<S> Counted<S> {
    pub fn new(inner: S, read: Arc<AtomicU64>) -> Self {
        Counted { inner, read }
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
        Pin::new(&mut self.inner).poll_write(cx, buf)
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
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Relay buffer per direction: larger than tokio's 8 KiB default, measured
/// to roughly double CONNECT throughput on loopback (BENCHMARKS.md).
const RELAY_BUF: usize = 32 * 1024;

/// Why a relay ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both sides closed (or one side failed).
    Closed,
    /// Nothing moved for the idle timeout.
    Idle,
    /// sluice is shutting down, or policy revoked the tunnel.
    Cancelled,
}

/// Byte counts of a relay, shared so they can be read while it runs.
#[derive(Clone, Default)]
pub struct RelayBytes {
    /// Bytes from the client towards upstream.
    pub up: Arc<AtomicU64>,
    /// Bytes from upstream towards the client.
    pub down: Arc<AtomicU64>,
}

impl RelayBytes {
    fn total(&self) -> u64 {
        self.up.load(Ordering::Relaxed) + self.down.load(Ordering::Relaxed)
    }
}

/// Relays both ways until both sides close, the tunnel idles out or `cancel`
/// fires. Half-closes are passed on.
pub async fn relay<A, B>(
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
    let copy =
        tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, RELAY_BUF, RELAY_BUF);
    tokio::pin!(copy);
    let tick = (idle / 4).max(Duration::from_millis(100));
    let mut seen = bytes.total();
    let mut quiet = Duration::ZERO;
    loop {
        tokio::select! {
            _ = &mut copy => return RelayEnd::Closed,
            _ = cancel.cancelled() => return RelayEnd::Cancelled,
            _ = tokio::time::sleep(tick) => {
                let now = bytes.total();
                if now == seen {
                    quiet += tick;
                    if quiet >= idle {
                        return RelayEnd::Idle;
                    }
                } else {
                    seen = now;
                    quiet = Duration::ZERO;
                }
            }
        }
    }
}
