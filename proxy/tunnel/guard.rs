//! Requests the HTTP parser rejects still get sluice's answer (SPEC §9
//! "Malformed requests"): 400 with `Sluice-Rule: bad-target`,
//! `Sluice-Task`, a sentence, and an access-log row naming the raw target.
//!
//! hyper answers a head it cannot parse with a bare 400 of its own before
//! any service runs. [`HeadGuard`] wraps the client stream: until hyper
//! hands it a first request, it keeps a copy of the bytes read (bounded),
//! and anything hyper writes can only be that automatic answer — it is
//! replaced by sluice's refusal. After the first request the guard is
//! transparent. Owns no decision: the refusal is always `bad-target`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::policy::{Refusal, Rule};

/// What the guard and the connection share.
#[derive(Default)]
pub(crate) struct GuardState {
    /// Set when hyper parsed a first request: the guard steps aside.
    served: AtomicBool,
    /// The raw request line of an unparsable first request, once answered.
    answered: Mutex<Option<RawLine>>,
    /// Requests hyper handed to the service whose response is not made
    /// yet (`park.rs`).
    pub(super) in_flight: AtomicUsize,
    /// Bumped by every read or write that moved bytes: it stays put while
    /// the connection is quiet (`park.rs`).
    pub(super) moved: AtomicU64,
    /// The connection is being parked: hyper's shutdown of the stream is
    /// skipped, as the stream lives on without it.
    pub(super) parking: AtomicBool,
    /// When the last response ended (`park.rs`'s clock), 0 before any.
    pub(super) idle_since: AtomicU64,
    /// The connection ends or turns into something else after its
    /// exchange (`Connection: close`, HTTP/1.0, CONNECT, an upgrade): it
    /// is never parked.
    pub(super) no_park: AtomicBool,
}

impl GuardState {
    pub(crate) fn served(&self) {
        self.served.store(true, Ordering::Relaxed);
    }

    /// The request line sluice refused, if it answered one.
    pub(crate) fn refused(&self) -> Option<RawLine> {
        self.answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// Bytes of an unparsed first request kept for its refusal and log row.
const HEAD_KEPT: usize = 1024;

/// A request line as received: escaped, each part cut to 256 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawLine {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) refusal: Refusal,
}

/// A client stream that answers an unparsable first request itself.
pub(crate) struct HeadGuard<S> {
    inner: S,
    state: Arc<GuardState>,
    task: Arc<str>,
    /// Bytes read before the first request was parsed (bounded).
    head: Vec<u8>,
    /// Bytes read before the first request, kept or not.
    seen: usize,
    limit: usize,
    /// sluice's refusal, and how much of it is written.
    reply: Option<(Vec<u8>, usize)>,
    /// Bytes read from `inner` before hyper took over (the first head,
    /// read by `conn`), handed out before `inner` is read again.
    replay: Vec<u8>,
    replayed: usize,
}

impl<S> HeadGuard<S> {
    pub(crate) fn new(inner: S, state: Arc<GuardState>, task: Arc<str>, limit: usize) -> Self {
        HeadGuard {
            inner,
            state,
            task,
            head: Vec::new(),
            seen: 0,
            limit,
            reply: None,
            replay: Vec::new(),
            replayed: 0,
        }
    }

    /// The guard hands out `first` (already read from the stream) before
    /// reading the stream itself.
    pub(crate) fn replaying(mut self, first: Vec<u8>) -> Self {
        self.replay = first;
        self
    }

    /// The stream, and the bytes of `replaying` not handed out yet.
    pub(crate) fn into_parts(mut self) -> (S, Vec<u8>) {
        let left = self.replay.split_off(self.replayed);
        (self.inner, left)
    }

    fn guarding(&self) -> bool {
        !self.state.served.load(Ordering::Relaxed)
    }
}

/// Splits the first line of `head` into an escaped method and target.
pub(crate) fn request_line(head: &[u8], too_large: bool) -> RawLine {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = head[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[..line_end]);
    let mut parts = line.splitn(3, |&b| b == b' ');
    let method = escape(parts.next().unwrap_or_default());
    let target = escape(parts.next().unwrap_or_default());
    let reason = if too_large {
        "the request head is larger than limits.max_header_bytes".to_string()
    } else {
        format!(
            "the request could not be parsed as HTTP/1.1 (request line {:?})",
            escape(line)
        )
    };
    RawLine {
        method: if method.is_empty() {
            "-".into()
        } else {
            method
        },
        target: if target.is_empty() {
            "-".into()
        } else {
            target
        },
        refusal: Refusal::new(Rule::BadTarget, reason),
    }
}

/// Printable ASCII kept, everything else as `\xNN`; cut to 256 bytes.
fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        if s.len() >= 256 {
            s.push('…');
            break;
        }
        s.extend(std::ascii::escape_default(c).map(char::from));
    }
    s
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = if self.replayed < self.replay.len() {
            let this = &mut *self;
            let rest = &this.replay[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            if this.replayed == this.replay.len() {
                this.replay = Vec::new();
                this.replayed = 0;
            }
            Poll::Ready(Ok(()))
        } else {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        };
        if buf.filled().len() > before {
            self.state.moved.fetch_add(1, Ordering::Relaxed);
        }
        if self.guarding() {
            // Only the start of the request line is kept (enough for its
            // method and 256 bytes of target); the rest is only counted.
            let new = &buf.filled()[before..];
            let room = HEAD_KEPT.saturating_sub(self.head.len());
            let take = new.len().min(room);
            self.head.extend_from_slice(&new[..take]);
            self.seen += new.len();
        } else if !self.head.is_empty() {
            self.head = Vec::new();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> HeadGuard<S> {
    /// Writes sluice's refusal in place of hyper's answer.
    fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.reply.is_none() {
            let raw = request_line(&self.head, self.seen > self.limit);
            let bytes = crate::respond::raw_request_refusal(
                &self.task,
                &raw.method,
                &raw.target,
                &raw.refusal,
            );
            *self
                .state
                .answered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(raw);
            self.reply = Some((bytes, 0));
        }
        if let Some((bytes, pos)) = &mut self.reply {
            while *pos < bytes.len() {
                let n =
                    std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*pos..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                *pos += n;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.guarding() {
            // Before any request was parsed, hyper writes only its own
            // answer to a head it rejected: swallow it, send ours.
            std::task::ready!(self.poll_reply(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.moved.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.reply.is_some() {
            std::task::ready!(self.poll_reply(cx))?;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.reply.is_some() {
            std::task::ready!(self.poll_reply(cx))?;
        }
        if self.state.parking.load(Ordering::Relaxed) {
            // Parked, not closed: the stream is taken back and waited on.
            return Pin::new(&mut self.inner).poll_flush(cx);
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_is_escaped_and_cut() {
        let cases: &[(&str, &[u8], &str, &str)] = &[
            (
                "brackets",
                b"GET http://[[host]]/ HTTP/1.1\r\nHost: x\r\n",
                "GET",
                "http://[[host]]/",
            ),
            (
                "non-ASCII host",
                b"GET http://h\xc3\xa9.com/ HTTP/1.1\r\n",
                "GET",
                "http://h\\xc3\\xa9.com/",
            ),
            (
                "CONNECT with a path",
                b"CONNECT host:443/x HTTP/1.1\r\n",
                "CONNECT",
                "host:443/x",
            ),
            (
                "double port",
                b"CONNECT host:443:443 HTTP/1.1\r\n",
                "CONNECT",
                "host:443:443",
            ),
            ("empty", b"", "-", "-"),
        ];
        for (what, head, method, target) in cases {
            let r = request_line(head, false);
            assert_eq!(
                (r.method.as_str(), r.target.as_str()),
                (*method, *target),
                "case {what}"
            );
            assert_eq!(r.refusal.rule, Rule::BadTarget);
        }
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(5000));
        let r = request_line(long.as_bytes(), true);
        assert!(r.target.len() <= 260, "{}", r.target.len());
        assert!(r.refusal.reason.contains("max_header_bytes"));
    }
}
