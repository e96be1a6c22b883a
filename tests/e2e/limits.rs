//! Slow clients, connection caps and shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn slowloris_does_not_block_others_and_is_cut_off() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let s = Sluice::start(&config(
        &dns,
        &[format!("pkgs.example.com:{}", up.port())],
        "",
        "[limits]\nheader_timeout_secs = 2\n",
    ));
    // Twenty slow clients, each sending a few header bytes and stalling.
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
            c.write_all(b"GET http://pkgs.example.com/ HTTP/1.1\r\nX-Slow: ")
                .unwrap();
            c
        })
        .collect();
    // A normal client is served at once.
    let started = Instant::now();
    let url = format!("http://pkgs.example.com:{}/", up.port());
    let out = curl(&[
        "-x",
        &s.proxy(0),
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "served while slow clients stall"
    );
    // The slow ones are cut off once the header timeout passes.
    for c in &mut slow {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        assert!(
            buf.is_empty() || text.starts_with("HTTP/1.1 408"),
            "closed: {text}"
        );
    }
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(up.requests().len(), 1);
}

#[test]
fn connection_cap_answers_503() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let s = Sluice::start(&config(
        &dns,
        &[format!("pkgs.example.com:{}", up.port())],
        "",
        "[limits]\nmax_connections_per_task = 2\n",
    ));
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(s.proxy_addr()).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let ans = raw(
        &s.proxy_addr(),
        b"GET http://pkgs.example.com/ HTTP/1.1\r\n\r\n",
    );
    let a = parse_http(&ans).expect("a 503 answer");
    assert_refused(&a, 503, "over-capacity");
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let url = format!("http://pkgs.example.com:{}/", up.port());
    let out = curl(&[
        "-x",
        &s.proxy(0),
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        &url,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "capacity comes back"
    );
}

#[test]
fn sigterm_drains_in_flight_requests_and_flushes_the_log() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let mut s = Sluice::start(&config(
        &dns,
        &[format!("pkgs.example.com:{}", up.port())],
        "",
        "",
    ));
    // A tunnel that is open when SIGTERM arrives keeps working until the
    // client closes it, within the drain period.
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let p = up.port();
    write!(c, "CONNECT pkgs.example.com:{p} HTTP/1.1\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    s.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    write!(
        c,
        "GET /drain HTTP/1.1\r\nHost: pkgs.example.com:{p}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = Vec::new();
    let _ = c.read_to_end(&mut reply);
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    drop(c);
    let sluice_exit = s.wait_exit();
    assert_eq!(sluice_exit, Some(0));
    // The log was flushed on exit.
    let rows = wait_rows(&s.state().join("tasks/t/access.jsonl"), 1);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["kind"], "connect");
    // New connections were refused after SIGTERM.
    assert!(TcpStream::connect(s.proxy_addr()).is_err());
}
