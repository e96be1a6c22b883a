//! The client side of a connection: any byte stream a listener accepts
//! ([`Io`]), and what a CONNECT leaves of it after hyper answered
//! ([`ClientIo`]) — the plain TCP socket when possible, so an opaque relay
//! can splice it. Must not read or write the stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{HeadGuard, Rewind};

/// Any byte stream a listener accepts.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + std::any::Any {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

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
        type Guarded = HeadGuard<Box<dyn Io>>;
        match upgraded.downcast::<TokioIo<Guarded>>() {
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
