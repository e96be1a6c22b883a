//! The start of a CONNECT tunnel: read the client's first bytes without
//! losing them, and tell a TLS ClientHello (and its SNI) from anything
//! else. Pure but for the reads in `peek`; decides nothing.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::policy::Target;

/// What the client's first bytes in a tunnel were.
pub(super) enum FirstBytes {
    Tls {
        sni: Option<String>,
    },
    Other,
    /// The client closed (or stayed silent past the timeout).
    Nothing,
}

/// Reads the start of a tunnel without losing it: enough bytes to parse a
/// TLS ClientHello, or the first bytes of anything else.
pub(super) async fn peek<S: AsyncRead + Unpin>(
    io: &mut S,
    timeout: Duration,
) -> (Vec<u8>, FirstBytes) {
    let deadline = tokio::time::Instant::now() + timeout;
    // A tunnel whose client has not spoken yet waits here holding five
    // bytes (a TLS record header), not a buffer: idle tunnels stay small.
    let mut head = [0u8; 5];
    let n = match tokio::time::timeout_at(deadline, io.read(&mut head)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return (Vec::new(), FirstBytes::Nothing),
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
    Box::pin(read_hello(io, seen, deadline)).await
}

/// Reads on until the bytes seen so far are a ClientHello, or not one.
async fn read_hello<S: AsyncRead + Unpin>(
    io: &mut S,
    mut seen: Vec<u8>,
    deadline: tokio::time::Instant,
) -> (Vec<u8>, FirstBytes) {
    let mut hello = ClientHelloReader::default();
    let mut fed = 0;
    loop {
        match hello.push(&seen[fed..]) {
            Peeked::NeedMore => fed = seen.len(),
            Peeked::NotTls => return (seen, FirstBytes::Other),
            Peeked::Tls { sni } => return (seen, FirstBytes::Tls { sni }),
        }
        seen.reserve(4096);
        match tokio::time::timeout_at(deadline, io.read_buf(&mut seen)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return (seen, FirstBytes::Other),
        }
    }
}

/// What the start of a tunnel is, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Peeked {
    NeedMore,
    /// Not a TLS ClientHello sluice can read (relayed as opaque bytes).
    NotTls,
    /// A ClientHello; its SNI, lower-cased.
    Tls {
        sni: Option<String>,
    },
}

/// Reads a TLS ClientHello from bytes pushed as they arrive (rustls parses
/// it); bounded to 64 KiB. Pure: no I/O.
#[derive(Default)]
pub struct ClientHelloReader {
    acceptor: rustls::server::Acceptor,
    first: Option<u8>,
    len: usize,
}

impl ClientHelloReader {
    pub fn push(&mut self, mut bytes: &[u8]) -> Peeked {
        if bytes.is_empty() {
            return Peeked::NeedMore;
        }
        if *self.first.get_or_insert(bytes[0]) != 0x16 {
            return Peeked::NotTls;
        }
        self.len += bytes.len();
        while !bytes.is_empty() {
            match self.acceptor.read_tls(&mut bytes) {
                Ok(0) | Err(_) => return Peeked::NotTls,
                Ok(_) => {}
            }
            match self.acceptor.accept() {
                Ok(Some(accepted)) => {
                    let sni = accepted
                        .client_hello()
                        .server_name()
                        .map(|s| s.to_ascii_lowercase());
                    return Peeked::Tls { sni };
                }
                Ok(None) => {}
                Err(_) => return Peeked::NotTls,
            }
        }
        if self.len < 64 * 1024 {
            Peeked::NeedMore
        } else {
            Peeked::NotTls
        }
    }
}

/// Does the SNI name the CONNECT host? A tunnel to an IP address (which
/// `allow` named) carries no SNI: TLS has none for addresses.
pub(super) fn sni_matches(sni: &Option<String>, target: &Target) -> bool {
    match (sni, target.host.as_name()) {
        (Some(s), Some(host)) => matches!(
            crate::policy::target::normalize_host(s),
            Ok(crate::policy::Host::Name(n)) if n == host
        ),
        (None, None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello (Python's ssl, SNI pkgs.example.com).
    const HELLO: &[u8] = include_bytes!("testdata_client_hello.bin");

    #[test]
    fn client_hello_sni_in_any_pieces() {
        for cut in [1, 5, 100, HELLO.len() - 1] {
            let mut r = ClientHelloReader::default();
            let first = r.push(&HELLO[..cut]);
            assert_eq!(first, Peeked::NeedMore, "cut {cut}");
            assert_eq!(
                r.push(&HELLO[cut..]),
                Peeked::Tls {
                    sni: Some("pkgs.example.com".into())
                },
                "cut {cut}"
            );
        }
        let mut r = ClientHelloReader::default();
        assert_eq!(r.push(b"GET / HTTP/1.1\r\n"), Peeked::NotTls);
        let mut r = ClientHelloReader::default();
        assert_eq!(
            r.push(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]),
            Peeked::NotTls
        );
    }

    #[test]
    fn sni_must_name_the_connect_host() {
        let t = crate::policy::target::parse_authority("pkgs.example.com:443", None).unwrap();
        assert!(sni_matches(&Some("PKGS.example.com.".into()), &t));
        assert!(!sni_matches(&Some("other.example.com".into()), &t));
        assert!(!sni_matches(&None, &t));
        let ip = crate::policy::target::parse_authority("10.0.0.7:443", None).unwrap();
        assert!(sni_matches(&None, &ip));
        assert!(!sni_matches(&Some("pkgs.example.com".into()), &ip));
    }
}
