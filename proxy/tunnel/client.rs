//! The client stream stack, in one place: any byte stream a listener
//! accepts ([`Io`]); its first request head, read before hyper exists
//! ([`first_head`]); the stack hyper serves ([`ClientStack`]: the stream
//! under a [`HeadGuard`] that replays that head, made only by
//! [`client_stack`]); and what a CONNECT leaves of it after hyper answered
//! ([`ClientIo`]) — the plain TCP socket when the stack can be taken
//! apart, so an opaque relay can splice it. The stack is built and taken
//! apart through the one type alias, so a wrapper added on one side and
//! not the other does not compile; the splice path is also held by a test
//! (`sluice_opaque_relays_total{path="splice"}`).
//!
//! Must not decide anything, or read past the first head.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{HeadGuard, Rewind};

/// Any byte stream a listener accepts.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + std::any::Any {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// What hyper serves: the client's stream under its [`HeadGuard`].
pub(crate) type ClientStack = hyper_util::rt::TokioIo<HeadGuard<Box<dyn Io>>>;

/// Builds the stack hyper serves: `stream` guarded, `first` (the head
/// already read) replayed before it.
pub(crate) fn client_stack(
    stream: Box<dyn Io>,
    first: Vec<u8>,
    guard: std::sync::Arc<super::GuardState>,
    task: std::sync::Arc<str>,
    max_header_bytes: usize,
) -> ClientStack {
    hyper_util::rt::TokioIo::new(
        HeadGuard::new(stream, guard, task, max_header_bytes).replaying(first),
    )
}

/// Reads until the first head is complete, cannot be a head (so hyper
/// refuses it at once, as before), passes `limit` bytes, or the stream
/// ends; returns the bytes read, after `carried` (bytes read before: a
/// parked connection's, `park.rs`).
///
/// The head is parsed again only after the first read and after reads
/// that bring a line end (a head is only ever completed by one): a client
/// trickling one byte at a time cannot make sluice re-parse up to
/// `limit` bytes per byte it sends. Lines are few before hyper's parser
/// gives up (at most 100 headers).
pub(crate) async fn first_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    carried: Vec<u8>,
    limit: usize,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    if !carried.is_empty() && (carried.len() > limit || !partial_head(&carried)) {
        return Ok(carried);
    }
    let mut head = carried;
    head.reserve(256);
    loop {
        if head.len() == head.capacity() {
            head.reserve(head.len());
        }
        let from = head.len();
        if stream.read_buf(&mut head).await? == 0 || head.len() > limit {
            return Ok(head);
        }
        let judge = from == 0 || memchr::memchr(b'\n', &head[from..]).is_some();
        if judge && !partial_head(&head) {
            return Ok(head);
        }
    }
}

/// Is `b` the start of a request head that is not yet whole? (hyper's
/// parser, httparse, judges: a whole head or bytes that cannot start one
/// — TLS sent to a plain port, garbage — go to hyper now.)
fn partial_head(b: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    matches!(
        httparse::Request::new(&mut headers).parse(b),
        Ok(httparse::Status::Partial)
    )
}

/// The client side of a CONNECT tunnel: the plain TCP socket when hyper
/// can hand it back whole (so an opaque relay can splice it), otherwise the
/// upgraded connection.
pub(crate) enum ClientIo {
    Tcp(TcpStream),
    Upgraded(hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>),
    /// Another socket kind, after the bytes hyper had already read.
    Other(Rewind<Box<dyn Io>>),
}

impl ClientIo {
    pub(crate) fn from_upgraded(upgraded: hyper::upgrade::Upgraded) -> ClientIo {
        use hyper_util::rt::TokioIo;
        match upgraded.downcast::<ClientStack>() {
            Ok(parts) => {
                let (io, unread) = parts.io.into_inner().into_parts();
                let any: &dyn std::any::Any = &*io;
                if parts.read_buf.is_empty() && unread.is_empty() && any.is::<TcpStream>() {
                    let any: Box<dyn std::any::Any> = io;
                    if let Ok(tcp) = any.downcast::<TcpStream>() {
                        return ClientIo::Tcp(*tcp);
                    }
                    unreachable!("checked with is::<TcpStream>()");
                }
                // What hyper read but did not use comes first, then what
                // it never read.
                let mut prefix = parts.read_buf.to_vec();
                prefix.extend_from_slice(&unread);
                ClientIo::Other(Rewind::new(prefix, io))
            }
            Err(upgraded) => ClientIo::Upgraded(TokioIo::new(upgraded)),
        }
    }
}

macro_rules! each_client_io {
    ($self:ident, $io:ident => $e:expr) => {
        match $self.get_mut() {
            ClientIo::Tcp($io) => $e,
            ClientIo::Upgraded($io) => $e,
            ClientIo::Other($io) => $e,
        }
    };
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each_client_io!(self, io => Pin::new(io).poll_read(cx, buf))
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each_client_io!(self, io => Pin::new(io).poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_client_io!(self, io => Pin::new(io).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_client_io!(self, io => Pin::new(io).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::partial_head;

    #[test]
    fn only_a_valid_unfinished_head_is_partial() {
        for (bytes, partial) in [
            (&b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..], false),
            (b"GET / HTTP/1.1\nHost: a\n\n", false),
            (b"GET / HTTP/1.1\r\nHost: a\r\n", true),
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r", true),
            (b"GET http://a.example/ HTTP/1.1\r\nHost: a.exa", true),
            (b"CONNECT a.example:443 HTTP/1.1\r\n", true),
            (b"", true),
            (b"\x16\x03\x01\x02\x00\x01", false),
            (b"GET / HTTP/1.1\r\r\r\r", false),
            (b"G\x00T / HTTP/1.1", false),
        ] {
            assert_eq!(
                partial_head(bytes),
                partial,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
