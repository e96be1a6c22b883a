//! refused: a refused CONNECT of a task that intercepts, answered the way
//! interception answers. curl and git show only a refused CONNECT's status
//! code; inside TLS they show a response's body and status. So sluice
//! answers the CONNECT with 200, completes the TLS handshake with a leaf
//! from its CA (a small cache of its own, see `tls::ca`), and answers the
//! request inside with the refusal: its status, `Sluice-Rule` and the
//! sentence (a client that speaks plain HTTP through the CONNECT gets it
//! in plain HTTP). Nothing is dialled; the decision and its row were made before
//! (`conn::connect`). Must not decide anything.

use std::convert::Infallible;
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::config::Limits;
use crate::policy::{Refusal, Target};
use crate::tunnel::Rewind;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// One refused tunnel's answer: each request inside (one, as the
/// connection is not kept alive) gets the refusal.
pub(crate) struct Refused {
    pub(crate) server: Arc<rustls::ServerConfig>,
    pub(crate) task: Arc<str>,
    pub(crate) target: Target,
    pub(crate) refusal: Refusal,
}

impl Refused {
    /// Serves the refusal on the client's side of the tunnel, bounded by
    /// the header timeout for the handshake and again for the request.
    /// A client that speaks plain HTTP through the CONNECT (its first
    /// byte is not a TLS record's) gets the refusal in plain HTTP.
    pub(crate) async fn answer<IO>(self, mut io: IO, limits: &Limits)
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let mut first = [0u8; 1];
        let Ok(Ok(1)) = tokio::time::timeout(limits.header_timeout, io.read(&mut first)).await
        else {
            return;
        };
        let mut io = Rewind::new(first.to_vec(), io);
        if first[0] != TLS_HANDSHAKE {
            if !first[0].is_ascii_alphabetic() {
                // Neither TLS nor an HTTP request line: the refusal as a
                // raw response, not hyper's bare 400.
                let raw = crate::respond::raw_refusal(&self.task, &self.refusal);
                let write = tokio::io::AsyncWriteExt::write_all(&mut io, &raw);
                let _ = tokio::time::timeout(limits.header_timeout, write).await;
                return;
            }
            return self.serve(io, "http", 80, limits).await;
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(self.server.clone());
        let tls = match tokio::time::timeout(limits.header_timeout, acceptor.accept(io)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                let host = &self.target.host;
                tracing::info!(
                    "the client refused sluice's certificate for {host}, so it could not be told why the CONNECT was refused ({e}): it does not trust sluice's CA (set its shell up with: eval \"$(sluice env)\")"
                );
                return;
            }
            Err(_) => return,
        };
        self.serve(tls, "https", 443, limits).await;
    }

    async fn serve<IO>(self, io: IO, scheme: &str, default_port: u16, limits: &Limits)
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let origin = match self.target.port {
            p if p == default_port => format!("{scheme}://{}", self.target.host),
            p => format!("{scheme}://{}:{p}", self.target.host),
        };
        let (task, refusal) = (self.task, self.refusal);
        let service = service_fn(move |req: Request<Incoming>| {
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let url = format!("{origin}{path}");
            let response = crate::respond::refusal(&task, req.method().as_str(), &url, &refusal);
            std::future::ready(Ok::<_, Infallible>(response))
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(false)
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(io), service);
        let _ = tokio::time::timeout(limits.header_timeout * 2, conn).await;
    }
}
