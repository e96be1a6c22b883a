//! Fake upstream servers on 127.0.0.1 that record what reaches them, so a
//! test can prove a refusal sent nothing upstream and an allow delivered
//! the bytes intact: [`Upstream`] speaks HTTP/1.1 (or TLS with HTTP/2 by
//! ALPN) through hyper; [`RawUpstream`] hands each TCP connection to a
//! test-written function (silence, resets, echo, WebSocket).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// A request as the upstream received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub version: hyper::Version,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// A custom upstream route: `Some(response)` answers the request.
pub type Handler = Arc<dyn Fn(&Seen) -> Option<Response<Full<Bytes>>> + Send + Sync>;

/// An HTTP/1.1 upstream on 127.0.0.1:0 that records what reaches it.
pub struct Upstream {
    pub addr: SocketAddr,
    /// TCP connections accepted: zero proves nothing reached it.
    pub connections: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _rt: tokio::runtime::Runtime,
}

/// Deterministic bytes for large bodies.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + i / 4096) % 251) as u8)
        .collect()
}

impl Upstream {
    /// Routes: `/big?n=BYTES` answers `pattern(n)`; `/slow...` answers
    /// after 500 ms; anything else answers "hello from upstream" or, for
    /// requests with a body, its length. `start_with`'s handler is asked
    /// first.
    pub fn start() -> Upstream {
        Self::start_with(Arc::new(|_req: &Seen| None))
    }

    pub fn start_with(custom: Handler) -> Upstream {
        Self::start_inner(custom, None)
    }

    /// The same routes over TLS (HTTP/2 or HTTP/1.1 by ALPN).
    pub fn start_tls(custom: Handler, tls: Arc<rustls::ServerConfig>) -> Upstream {
        Self::start_inner(custom, Some(tls))
    }

    fn start_inner(custom: Handler, tls: Option<Arc<rustls::ServerConfig>>) -> Upstream {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (c, s) = (connections.clone(), seen.clone());
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let seen = s.clone();
                let custom = custom.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let seen = seen.clone();
                        let custom = custom.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(http_body_util::Collected::to_bytes)
                                .unwrap_or_default();
                            let mut headers: HashMap<String, String> = parts
                                .headers
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                                .collect();
                            if let Some(a) = parts.uri.authority() {
                                headers.entry("host".into()).or_insert(a.to_string());
                            }
                            let rec = Seen {
                                method: parts.method.to_string(),
                                uri: parts
                                    .uri
                                    .path_and_query()
                                    .map(std::string::ToString::to_string)
                                    .unwrap_or_default(),
                                version: parts.version,
                                headers,
                                body: body.to_vec(),
                            };
                            seen.lock().unwrap().push(rec.clone());
                            // The slow route: an upstream that takes its
                            // time is what tests of requests in flight need.
                            if rec.uri.starts_with("/slow") {
                                tokio::time::sleep(Duration::from_millis(500)).await;
                            }
                            if let Some(resp) = custom(&rec) {
                                return Ok::<_, hyper::Error>(resp);
                            }
                            let out = if let Some(n) = rec.uri.strip_prefix("/big?n=") {
                                pattern(n.parse().unwrap_or(0))
                            } else if !rec.body.is_empty() {
                                format!("received {} bytes\n", rec.body.len()).into_bytes()
                            } else {
                                b"hello from upstream\n".to_vec()
                            };
                            Ok(Response::new(Full::new(Bytes::from(out))))
                        }
                    });
                    let Some(tls) = tls else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .with_upgrades()
                            .await;
                        return;
                    };
                    let Ok(stream) = tokio_rustls::TlsAcceptor::from(tls).accept(stream).await
                    else {
                        return;
                    };
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    }
                });
            }
        });
        Upstream {
            addr,
            connections,
            seen,
            _rt: rt,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn conns(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// How many requests reached this upstream (without copying them).
    pub fn request_count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Requests that reached this upstream with a Host starting `host`.
    pub fn requests_to(&self, host: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.headers.get("host").is_some_and(|h| h.starts_with(host)))
            .count()
    }
}

/// `b` gzip-encoded.
pub fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// What a [`RawUpstream`] does with each connection: the stream, and the
/// upstream's record of received bytes to add to (or ignore).
pub type Serve = Arc<dyn Fn(TcpStream, Arc<Mutex<Vec<u8>>>) + Send + Sync>;

/// A raw TCP upstream on 127.0.0.1 that runs `serve` on each of its first
/// 64 connections, in a thread of its own, and counts them.
pub struct RawUpstream {
    pub port: u16,
    /// The bytes `serve` recorded (all connections together).
    pub received: Arc<Mutex<Vec<u8>>>,
    pub conns: Arc<AtomicUsize>,
}

impl RawUpstream {
    pub fn start(serve: impl Fn(TcpStream, Arc<Mutex<Vec<u8>>>) + Send + Sync + 'static) -> Self {
        let serve: Serve = Arc::new(serve);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(AtomicUsize::new(0));
        let (r, n) = (received.clone(), conns.clone());
        thread::spawn(move || {
            for c in l.incoming().take(64).flatten() {
                n.fetch_add(1, Ordering::SeqCst);
                let (r, serve) = (r.clone(), serve.clone());
                thread::spawn(move || serve(c, r));
            }
        });
        RawUpstream {
            port,
            received,
            conns,
        }
    }

    /// Records bytes until the peer closes; answers nothing.
    pub fn record(mut c: TcpStream, r: Arc<Mutex<Vec<u8>>>) {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 4096];
        while let Ok(n) = c.read(&mut buf) {
            if n == 0 {
                break;
            }
            r.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    }

    /// Echoes every byte back (and records it) until the peer closes.
    pub fn echo(mut c: TcpStream, r: Arc<Mutex<Vec<u8>>>) {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 4096];
        while let Ok(n) = c.read(&mut buf) {
            if n == 0 || c.write_all(&buf[..n]).is_err() {
                break;
            }
            r.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    }

    /// Bytes recorded so far.
    pub fn bytes(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// The recorded bytes, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }

    pub fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }
}

/// Reads a request head (to the blank line, byte by byte so nothing after
/// it is consumed), waiting at most 10 s; what arrived.
pub fn read_head(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    head
}

/// A file of `tests/fixtures/corpus`.
#[cfg(feature = "system-tests")]
pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/corpus")
            .join(name),
    )
    .unwrap()
}
