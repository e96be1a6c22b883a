//! Parking: an HTTP/1 connection that goes quiet between requests (a
//! client's keep-alive connection, plain HTTP inside a tunnel, an
//! intercepted session) gives hyper's memory back and waits on its socket
//! alone; its next request is served as if nothing happened, not a byte
//! of it lost. Each test waits (polling the `sluice_parked_connections`
//! gauge, never sleeping) until the connection is parked, then checks
//! what the client gets and that it came over the same connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::util::*;

/// sluice allowing `up.example.com` on `up`'s port, with its admin API.
fn start(up: &Upstream, extra_task: &str) -> (FakeDns, Sluice) {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("up.example.com:{}", up.port())])
        .host("up.example.com", &["127.0.0.1"])
        .task_extra(extra_task)
        .admin()
        .start();
    (dns, s)
}

/// Waits until `n` connections are parked.
fn parked(s: &Sluice, n: u64) {
    eventually(
        &format!("{n} parked connection(s)"),
        Duration::from_secs(15),
        || s.metric("sluice_parked_connections") == n,
    );
}

/// Every row for up.example.com came over one client connection.
fn one_connection(s: &Sluice, rows: usize) {
    let rows: Vec<_> = s
        .access_log("t", rows)
        .into_iter()
        .filter(|r| r["host"] == "up.example.com")
        .collect();
    assert!(rows.len() >= 2, "{rows:?}");
    assert!(
        rows.iter().all(|r| r["conn"] == rows[0]["conn"]),
        "{rows:?}"
    );
}

#[test]
fn a_quiet_keep_alive_connection_is_parked_and_serves_its_next_request_whole() {
    let up = Upstream::start();
    let (_dns, s) = start(&up, "");
    let p = up.port();
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let get = |n: usize| {
        format!(
            "GET http://up.example.com:{p}/big?n={n} HTTP/1.1\r\nHost: up.example.com:{p}\r\n\r\n"
        )
    };
    c.write_all(get(1000).as_bytes()).unwrap();
    assert_eq!(read_one(&mut c).2, pattern(1000));
    parked(&s, 1);
    // A large answer after the wake: every byte arrives.
    c.write_all(get(300_000).as_bytes()).unwrap();
    let (status, _, body) = read_one(&mut c);
    assert_eq!(status, 200);
    assert_eq!(body, pattern(300_000));
    parked(&s, 1);
    c.write_all(get(10).as_bytes()).unwrap();
    assert_eq!(read_one(&mut c).2, pattern(10));
    one_connection(&s, 3);
    assert_eq!(up.requests_to("up.example.com"), 3);
}

/// hyper held half of the next head when the connection was parked: it
/// hands those bytes back, and the rest completes them.
#[test]
fn a_head_half_read_when_the_connection_parks_loses_no_byte() {
    let up = Upstream::start();
    let (_dns, s) = start(&up, "");
    let p = up.port();
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let get = format!(
        "GET http://up.example.com:{p}/big?n=5000 HTTP/1.1\r\nHost: up.example.com:{p}\r\nX-Long: {}\r\n\r\n",
        "v".repeat(3000)
    );
    c.write_all(get.as_bytes()).unwrap();
    assert_eq!(read_one(&mut c).2, pattern(5000));
    let (half, rest) = get.split_at(1800);
    c.write_all(half.as_bytes()).unwrap();
    parked(&s, 1);
    c.write_all(rest.as_bytes()).unwrap();
    let (status, _, body) = read_one(&mut c);
    assert_eq!(status, 200);
    assert_eq!(body, pattern(5000));
    one_connection(&s, 2);
    let seen = up.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].headers.get("x-long").map(String::len), Some(3000));
}

/// After a quiet second the connection starts over: a head hyper cannot
/// parse gets sluice's answer (rule, sentence, row), not a bare 400.
#[test]
fn a_malformed_request_on_a_parked_connection_gets_sluices_refusal() {
    let up = Upstream::start();
    let (_dns, s) = start(&up, "");
    let p = up.port();
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET http://up.example.com:{p}/big?n=10 HTTP/1.1\r\nHost: up.example.com:{p}\r\n\r\n"
    )
    .unwrap();
    assert_eq!(read_one(&mut c).0, 200);
    parked(&s, 1);
    c.write_all(b"GET http://[[bad HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (status, head, body) = read_one(&mut c);
    assert_eq!(status, 400);
    assert!(
        head.to_ascii_lowercase()
            .contains("sluice-rule: bad-target"),
        "{head}"
    );
    assert!(String::from_utf8_lossy(&body).contains("could not be parsed"));
    assert_eq!(
        up.requests_to("up.example.com"),
        1,
        "nothing more went upstream"
    );
    let rows = s.access_log("t", 2);
    assert!(
        rows.iter()
            .any(|r| r["rule"] == "bad-target" && r["decision"] == "deny"),
        "{rows:?}"
    );
}

#[test]
fn plain_http_inside_a_quiet_tunnel_is_parked_and_served_again() {
    let up = Upstream::start();
    let (_dns, s) = start(&up, "");
    let p = up.port();
    let mut c = tunnel(&s, &format!("up.example.com:{p}"));
    let get = |n: usize| format!("GET /big?n={n} HTTP/1.1\r\nHost: up.example.com:{p}\r\n\r\n");
    c.write_all(get(2000).as_bytes()).unwrap();
    assert_eq!(read_one(&mut c).2, pattern(2000));
    parked(&s, 1);
    c.write_all(get(200_000).as_bytes()).unwrap();
    assert_eq!(read_one(&mut c).2, pattern(200_000));
    assert_eq!(up.requests_to("up.example.com"), 2);
    one_connection(&s, 3);
}

#[test]
fn an_intercepted_session_is_parked_and_served_again() {
    let ca = test_ca();
    let up = Upstream::start_tls(
        std::sync::Arc::new(|_req: &Seen| None),
        server_config(&ca, &["up.example.com"]),
    );
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("up.example.com:{}", up.port())])
        .host("up.example.com", &["127.0.0.1"])
        .file("upstream-ca.pem", ca.pem.as_str())
        .top("[upstream]\nextra_roots = [\"upstream-ca.pem\"]")
        .admin()
        .start();
    let p = up.port();
    let mut tcp = tunnel(&s, &format!("up.example.com:{p}"));
    let ca_file = s.state().join("ca.pem").display().to_string();
    let mut tls = rustls_client(&ca_file, "up.example.com");
    let mut c = rustls::Stream::new(&mut tls, &mut tcp);
    let get = |n: usize| format!("GET /big?n={n} HTTP/1.1\r\nHost: up.example.com:{p}\r\n\r\n");
    c.write_all(get(3000).as_bytes()).unwrap();
    assert_eq!(read_one(&mut c).2, pattern(3000));
    parked(&s, 1);
    c.write_all(get(150_000).as_bytes()).unwrap();
    let (status, _, body) = read_one(&mut c);
    assert_eq!(status, 200);
    assert_eq!(body, pattern(150_000));
    assert_eq!(up.requests_to("up.example.com"), 2);
    one_connection(&s, 3);
}

/// A request that asks for the connection to close gets its answer and
/// then the close: parking never keeps a connection hyper was ending.
#[test]
fn a_connection_close_request_is_answered_and_closed_not_parked() {
    let up = Upstream::start();
    let (_dns, s) = start(&up, "");
    let p = up.port();
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "GET http://up.example.com:{p}/big?n=5000 HTTP/1.1\r\nHost: up.example.com:{p}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (status, _, body) = read_one(&mut c);
    assert_eq!((status, body), (200, pattern(5000)));
    let mut rest = [0u8; 16];
    assert_eq!(c.read(&mut rest).unwrap(), 0, "the connection closed");
    assert_eq!(s.metric("sluice_parked_connections"), 0);
}
