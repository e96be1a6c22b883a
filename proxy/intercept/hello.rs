//! The start of a CONNECT tunnel: read the client's first bytes without
//! losing them, and say what they are — a complete TLS ClientHello (and
//! its SNI), a ClientHello that cannot be read, an HTTP/1 request line, or
//! anything else. Pure but for the reads in `peek`; decides nothing (the
//! verdict on what was read is `policy::decide_tunnel_start`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

pub use crate::policy::TunnelStart;

/// A ClientHello may span several records and segments, up to this size.
pub const MAX_HELLO: usize = 64 * 1024;

/// Reads the start of a tunnel without losing it: a whole TLS ClientHello
/// once the first byte is 0x16, the request line of plain HTTP, or the
/// first bytes of anything else. `Nothing` when the client closed or stayed
/// silent past the timeout before sending a byte.
pub(super) async fn peek<S: AsyncRead + Unpin>(
    io: &mut S,
    timeout: Duration,
) -> (Vec<u8>, TunnelStart) {
    let deadline = tokio::time::Instant::now() + timeout;
    // A tunnel whose client has not spoken yet waits here holding five
    // bytes (a TLS record header), not a buffer: idle tunnels stay small.
    let mut head = [0u8; 5];
    let n = match tokio::time::timeout_at(deadline, io.read(&mut head)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return (Vec::new(), TunnelStart::Nothing),
    };
    let mut seen = Vec::with_capacity(4096);
    seen.extend_from_slice(&head[..n]);
    // Take what arrived with those bytes without waiting, so the start of
    // a non-TLS stream is passed on in one piece.
    {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let read = std::pin::pin!(io.read_buf(&mut seen));
        let _ = std::future::Future::poll(read, &mut cx);
    }
    Box::pin(read_start(io, seen, deadline)).await
}

/// Reads on until the bytes seen so far say what the tunnel carries.
async fn read_start<S: AsyncRead + Unpin>(
    io: &mut S,
    mut seen: Vec<u8>,
    deadline: tokio::time::Instant,
) -> (Vec<u8>, TunnelStart) {
    let mut reader = StartReader::default();
    let mut fed = 0;
    loop {
        match reader.push(&seen[fed..]) {
            Peeked::NeedMore => fed = seen.len(),
            Peeked::Done(start) => return (seen, start),
        }
        seen.reserve(4096);
        let read = tokio::time::timeout_at(deadline, io.read_buf(&mut seen)).await;
        if !matches!(read, Ok(Ok(n)) if n > 0) {
            let why = match read {
                Err(_) => "stalled before its end",
                _ => "was cut off by the client",
            };
            return (seen, reader.incomplete(why));
        }
    }
}

/// What the start of a tunnel is, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Peeked {
    NeedMore,
    Done(TunnelStart),
}

/// Classifies the first bytes of a tunnel as they arrive: a TLS
/// ClientHello (rustls parses it, so sluice reads exactly what it would
/// terminate; bounded to [`MAX_HELLO`]), an HTTP/1 request line, or other
/// bytes. Pure: no I/O.
#[derive(Default)]
pub struct StartReader {
    acceptor: rustls::server::Acceptor,
    /// The first bytes, until they tell TLS from HTTP from other.
    prefix: Vec<u8>,
    kind: Option<StartKind>,
    len: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StartKind {
    Tls,
}

/// Longest HTTP method sluice recognises in a tunnel's first line.
const MAX_METHOD: usize = 16;

impl StartReader {
    pub fn push(&mut self, bytes: &[u8]) -> Peeked {
        if bytes.is_empty() {
            return Peeked::NeedMore;
        }
        if self.kind.is_none() {
            if bytes[0] == 0x16 && self.prefix.is_empty() {
                self.kind = Some(StartKind::Tls);
            } else {
                self.prefix
                    .extend_from_slice(&bytes[..bytes.len().min(MAX_METHOD + 1)]);
                return match http_start(&self.prefix) {
                    Some(true) => Peeked::Done(TunnelStart::Http),
                    Some(false) => Peeked::Done(TunnelStart::Other),
                    None => Peeked::NeedMore,
                };
            }
        }
        self.push_tls(bytes)
    }

    fn push_tls(&mut self, mut bytes: &[u8]) -> Peeked {
        self.len += bytes.len();
        while !bytes.is_empty() {
            match self.acceptor.read_tls(&mut bytes) {
                // rustls buffers no more until it has processed what it has.
                Ok(0) => return bad_hello("could not be buffered".into()),
                Ok(_) => {}
                Err(e) => return bad_hello(format!("cannot be read ({e})")),
            }
            match self.acceptor.accept() {
                Ok(Some(accepted)) => {
                    let sni = accepted
                        .client_hello()
                        .server_name()
                        .map(|s| s.to_ascii_lowercase());
                    return Peeked::Done(TunnelStart::Tls { sni });
                }
                Ok(None) => {}
                Err((e, _)) => return bad_hello(format!("is not one sluice can read ({e})")),
            }
        }
        if self.len < MAX_HELLO {
            Peeked::NeedMore
        } else {
            bad_hello(format!("is larger than {} KiB", MAX_HELLO / 1024))
        }
    }

    /// The stream ended (or stalled, `why`) before the start was known.
    pub fn incomplete(&self, why: &str) -> TunnelStart {
        match self.kind {
            Some(StartKind::Tls) => TunnelStart::BadHello(format!("the TLS ClientHello {why}")),
            // A short stream that never finished a method: opaque bytes.
            None => TunnelStart::Other,
        }
    }
}

fn bad_hello(why: String) -> Peeked {
    Peeked::Done(TunnelStart::BadHello(format!("the TLS ClientHello {why}")))
}

/// Do these first bytes start an HTTP/1 request (`METHOD SP`)? `None`
/// while they could still become one.
fn http_start(b: &[u8]) -> Option<bool> {
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'A'..=b'Z' if i < MAX_METHOD => {}
            b' ' if i > 0 => return Some(true),
            _ => return Some(false),
        }
    }
    if b.len() > MAX_METHOD {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello (Python's ssl, SNI pkgs.example.com).
    const HELLO: &[u8] = include_bytes!("testdata_client_hello.bin");

    fn tls(sni: &str) -> Peeked {
        Peeked::Done(TunnelStart::Tls {
            sni: Some(sni.into()),
        })
    }

    fn is_bad(p: &Peeked) -> bool {
        matches!(p, Peeked::Done(TunnelStart::BadHello(_)))
    }

    #[test]
    fn client_hello_sni_in_any_pieces() {
        for cut in [1, 5, 100, HELLO.len() - 1] {
            let mut r = StartReader::default();
            assert_eq!(r.push(&HELLO[..cut]), Peeked::NeedMore, "cut {cut}");
            assert_eq!(r.push(&HELLO[cut..]), tls("pkgs.example.com"), "cut {cut}");
        }
    }

    /// The hello split into one record per few bytes of handshake message:
    /// rustls reassembles it, so sluice reads the SNI a server would.
    #[test]
    fn client_hello_spread_over_many_records() {
        let body = &HELLO[5..];
        let mut records = Vec::new();
        for piece in body.chunks(37) {
            records.extend_from_slice(&[0x16, 0x03, 0x01]);
            records.extend_from_slice(&(piece.len() as u16).to_be_bytes());
            records.extend_from_slice(piece);
        }
        let mut r = StartReader::default();
        assert_eq!(r.push(&records), tls("pkgs.example.com"));
    }

    /// Issue 11 finding 1: an empty handshake record before a real hello
    /// (OpenSSL skips it) must not make the tunnel opaque.
    #[test]
    fn empty_record_before_the_hello_is_refused_not_relayed() {
        let mut bytes = vec![0x16, 0x03, 0x01, 0x00, 0x00];
        bytes.extend_from_slice(HELLO);
        let mut r = StartReader::default();
        assert!(is_bad(&r.push(&bytes)));
    }

    #[test]
    fn unreadable_hellos_are_bad_not_other() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "garbage record",
                vec![0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5],
            ),
            (
                "alert content inside",
                vec![0x16, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28],
            ),
            (
                "huge version",
                vec![0x16, 0xff, 0xff, 0x00, 0x05, 1, 0, 0, 1, 0],
            ),
            (
                "record longer than TLS allows",
                vec![0x16, 0x03, 0x01, 0xff, 0xff, 1],
            ),
        ];
        for (what, bytes) in cases {
            let mut r = StartReader::default();
            let p = r.push(&bytes);
            // Either refused now, or waiting for more; never Other.
            assert!(is_bad(&p) || p == Peeked::NeedMore, "case {what}: {p:?}");
            if p == Peeked::NeedMore {
                assert!(matches!(r.incomplete("stalled"), TunnelStart::BadHello(_)));
            }
        }
    }

    #[test]
    fn a_stalled_or_cut_hello_is_bad() {
        let mut r = StartReader::default();
        assert_eq!(r.push(&HELLO[..40]), Peeked::NeedMore);
        assert!(matches!(
            r.incomplete("stalled before its end"),
            TunnelStart::BadHello(s) if s.contains("stalled")
        ));
    }

    #[test]
    fn an_endless_hello_is_bad_at_64_kib() {
        // Handshake header announcing a 16 MiB ClientHello, then filler
        // records: never complete, refused at the cap.
        let mut r = StartReader::default();
        let mut first = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff];
        first.resize(5 + 0x4000, 0);
        let mut last = r.push(&first);
        let mut sent = first.len();
        while last == Peeked::NeedMore && sent < 2 * MAX_HELLO {
            let mut rec = vec![0x16, 0x03, 0x01, 0x40, 0x00];
            rec.resize(5 + 0x4000, 0);
            last = r.push(&rec);
            sent += rec.len();
        }
        assert!(is_bad(&last), "{last:?} after {sent} bytes");
        assert!(sent <= MAX_HELLO + 0x4005);
    }

    #[test]
    fn plain_http_and_other_bytes() {
        let cases: &[(&str, &[u8], Option<TunnelStart>)] = &[
            ("GET", b"GET / HTTP/1.1\r\n", Some(TunnelStart::Http)),
            ("POST", b"POST /x HTTP/1.1\r\n", Some(TunnelStart::Http)),
            (
                "OPTIONS",
                b"OPTIONS * HTTP/1.1\r\n",
                Some(TunnelStart::Http),
            ),
            (
                "SSH banner",
                b"SSH-2.0-OpenSSH_9.6\r\n",
                Some(TunnelStart::Other),
            ),
            (
                "lower case",
                b"get / HTTP/1.1\r\n",
                Some(TunnelStart::Other),
            ),
            ("binary", b"\x00\x01\x02", Some(TunnelStart::Other)),
            ("unfinished method", b"GE", None),
        ];
        for (what, bytes, want) in cases {
            let mut r = StartReader::default();
            let got = match r.push(bytes) {
                Peeked::Done(s) => Some(s),
                Peeked::NeedMore => None,
            };
            assert_eq!(got.as_ref(), want.as_ref(), "case {what}");
        }
        // A method split across reads.
        let mut r = StartReader::default();
        assert_eq!(r.push(b"PO"), Peeked::NeedMore);
        assert_eq!(r.push(b"ST / HTTP/1.1"), Peeked::Done(TunnelStart::Http));
        let r = StartReader::default();
        assert_eq!(r.incomplete("ended"), TunnelStart::Other);
    }
}
