//! The start of a CONNECT tunnel: read the client's first bytes without
//! losing them, and say what they are — a complete TLS ClientHello (and
//! its SNI), a ClientHello that cannot be read, an HTTP/1 request line, or
//! anything else. Pure but for the reads in `peek`; decides nothing (the
//! verdict on what was read is `policy::decide_tunnel_start`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

pub(crate) use crate::policy::TunnelStart;

/// A ClientHello may span several records and segments, up to this size.
pub(crate) const MAX_HELLO: usize = 64 * 1024;

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
            let (why, stalled) = match read {
                Err(_) => ("stalled before its end", true),
                _ => ("was cut off by the client", false),
            };
            return (seen, reader.incomplete(why, stalled));
        }
    }
}

/// What the start of a tunnel is, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Peeked {
    /// Not yet decidable: push more bytes.
    NeedMore,
    /// Decided: what the tunnel's first bytes are.
    Done(TunnelStart),
}

/// Classifies the first bytes of a tunnel as they arrive: a TLS
/// ClientHello (rustls parses it, so sluice reads exactly what it would
/// terminate; bounded to `MAX_HELLO` (64 KiB)), an HTTP/1 request line or the
/// HTTP/2 preface, or other bytes. Pure: no I/O.
///
/// Fail closed both ways: a first byte that is any TLS record type, or an
/// SSLv2-style hello, must become a readable ClientHello; bytes that could
/// still become a request line (any method token, any case, after blank
/// lines, as HTTP servers accept) must become one — a start that stalls or
/// ends while still ambiguous is refused, never relayed unread.
#[derive(Default)]
pub struct StartReader {
    acceptor: rustls::server::Acceptor,
    /// The first bytes, until they tell TLS from HTTP from other.
    prefix: Vec<u8>,
    /// Set once the first byte says TLS.
    tls: bool,
    len: usize,
}

/// Longest HTTP method sluice recognises in a tunnel's first line.
const MAX_METHOD: usize = 16;
/// Blank lines a server skips before a request line (RFC 9112 §2.2).
const MAX_LEADING_CRLF: usize = 8;

/// TLS record types (change_cipher_spec, alert, handshake, application
/// data, heartbeat): a tunnel starting with one is TLS, readable or not.
fn is_tls_start(first: &[u8]) -> bool {
    match first {
        [0x14..=0x18, ..] => true,
        // SSLv2-style ClientHello: 2-byte length with the high bit set,
        // then message type 1.
        [b0, _, 0x01, ..] if b0 & 0x80 != 0 => true,
        _ => false,
    }
}

impl StartReader {
    /// Adds the next bytes the client sent; says whether the start is
    /// decided (it never answers `Unfinished`: only a stall or the end of
    /// the stream makes a start unfinished).
    pub fn push(&mut self, bytes: &[u8]) -> Peeked {
        if bytes.is_empty() {
            return Peeked::NeedMore;
        }
        if !self.tls {
            let held = self.prefix.len();
            let keep = bytes.len().min(MAX_LEADING_CRLF * 2 + MAX_METHOD + 16);
            self.prefix.extend_from_slice(&bytes[..keep]);
            if self.prefix.len() < 3 && self.prefix[0] & 0x80 != 0 {
                // Could be an SSLv2 hello: its third byte decides.
                return Peeked::NeedMore;
            }
            if !is_tls_start(&self.prefix) {
                return match http_start(&self.prefix) {
                    Some(start) => Peeked::Done(start),
                    None => Peeked::NeedMore,
                };
            }
            self.tls = true;
            let earlier = std::mem::take(&mut self.prefix);
            if held > 0 {
                // The bytes held back so far go to rustls first.
                if let Peeked::Done(s) = self.push_tls(&earlier[..held]) {
                    return Peeked::Done(s);
                }
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
                        .map(str::to_ascii_lowercase);
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

    /// The stream stalled (`stalled`) or ended before the start was known;
    /// `why` says which, for the refusal.
    pub(crate) fn incomplete(&self, why: &str, stalled: bool) -> TunnelStart {
        if self.tls || (self.prefix.len() < 3 && self.prefix.first().is_some_and(|b| b & 0x80 != 0))
        {
            TunnelStart::BadHello(format!("the TLS ClientHello {why}"))
        } else if self.prefix.is_empty() {
            TunnelStart::Nothing
        } else if !stalled {
            // The client closed its side: these bytes are all there is, and
            // they are no request line.
            TunnelStart::Other
        } else {
            // Still ambiguous: it may be a request line sluice never saw.
            TunnelStart::Unfinished(format!(
                "the tunnel's first bytes could be an HTTP request line, but it {why}"
            ))
        }
    }
}

fn bad_hello(why: String) -> Peeked {
    Peeked::Done(TunnelStart::BadHello(format!("the TLS ClientHello {why}")))
}

/// RFC 9110 `tchar`: what a method token is made of.
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Do these first bytes start HTTP — an HTTP/1 request line (`METHOD SP`,
/// any token, after up to eight blank lines) or the HTTP/2 preface? `None`
/// while they could still become one.
fn http_start(b: &[u8]) -> Option<TunnelStart> {
    let mut i = 0;
    while i < b.len() && (b[i] == b'\r' || b[i] == b'\n') {
        i += 1;
        if i > MAX_LEADING_CRLF * 2 {
            return Some(TunnelStart::Other);
        }
    }
    let start = i;
    while i < b.len() {
        match b[i] {
            c if is_tchar(c) && i - start < MAX_METHOD => i += 1,
            b' ' if i > start => {
                return Some(if &b[start..i] == b"PRI" {
                    TunnelStart::Http2
                } else {
                    TunnelStart::Http
                })
            }
            _ => return Some(TunnelStart::Other),
        }
    }
    None
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
                assert!(matches!(
                    r.incomplete("stalled", true),
                    TunnelStart::BadHello(_)
                ));
            }
        }
    }

    #[test]
    fn a_stalled_or_cut_hello_is_bad() {
        let mut r = StartReader::default();
        assert_eq!(r.push(&HELLO[..40]), Peeked::NeedMore);
        assert!(matches!(
            r.incomplete("stalled before its end", true),
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
            // Review finding: each of these was relayed opaquely, Host unchecked.
            (
                "lower case method",
                b"get / HTTP/1.1\r\n",
                Some(TunnelStart::Http),
            ),
            (
                "blank line first",
                b"\r\nGET / HTTP/1.1\r\n",
                Some(TunnelStart::Http),
            ),
            (
                "token method",
                b"M-SEARCH * HTTP/1.1\r\n",
                Some(TunnelStart::Http),
            ),
            (
                "h2c preface",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                Some(TunnelStart::Http2),
            ),
            (
                "SSH banner",
                b"SSH-2.0-OpenSSH_9.6\r\n",
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
        // Nothing at all, and a start that stalls while it could still be
        // a request line (refused, never relayed unread).
        let r = StartReader::default();
        assert_eq!(r.incomplete("ended", false), TunnelStart::Nothing);
        let mut r = StartReader::default();
        assert_eq!(r.push(b"GET"), Peeked::NeedMore);
        assert!(matches!(
            r.incomplete("stalled", true),
            TunnelStart::Unfinished(_)
        ));
        // The same bytes followed by the client's close are all there is.
        assert_eq!(r.incomplete("was cut off", false), TunnelStart::Other);
    }

    /// Review finding: other TLS record types and SSLv2-style hellos were
    /// relayed opaquely, their SNI never checked.
    #[test]
    fn every_tls_looking_start_must_be_a_readable_hello() {
        let cases: &[(&str, &[u8])] = &[
            ("change_cipher_spec", &[0x14, 0x03, 0x03, 0x00, 0x01, 0x01]),
            ("alert", &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]),
            ("application data", &[0x17, 0x03, 0x03, 0x00, 0x00]),
            ("heartbeat", &[0x18, 0x03, 0x03, 0x00, 0x01, 0x01]),
            ("sslv2 hello", &[0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15]),
        ];
        for (what, bytes) in cases {
            let mut r = StartReader::default();
            let p = r.push(bytes);
            let bad = is_bad(&p)
                || (p == Peeked::NeedMore
                    && matches!(r.incomplete("stalled", true), TunnelStart::BadHello(_)));
            assert!(bad, "case {what}: {p:?}");
        }
        // The SSLv2 length byte alone waits for the third byte.
        let mut r = StartReader::default();
        assert_eq!(r.push(&[0x80]), Peeked::NeedMore);
        assert!(
            is_bad(&r.push(&[0x2e, 0x01, 0x03, 0x01]))
                || r.push(&[0; 64]) != Peeked::Done(TunnelStart::Other)
        );
    }
}
