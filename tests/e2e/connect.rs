//! CONNECT tunnels through sluice.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use crate::util::*;

#[test]
fn allowed_connect_relays_both_ways_and_logs_bytes() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let size = 10 * 1024 * 1024;
    let url = format!("http://pkgs.example.com:{}/big?n={size}", up.port());
    let file = s.dir.path().join("tunnel.bin");
    let out = curl(&[
        "-p",
        "-x",
        &s.proxy(0),
        "-o",
        file.to_str().unwrap(),
        "-w",
        "%{http_connect} %{http_code}",
        &url,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200 200",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&file).unwrap() == pattern(size),
        "tunnelled bytes differ"
    );
    let row = row_where(&s, "t", "pkgs.example.com", |r| r["kind"] == "connect");
    assert_eq!(row["method"], "CONNECT");
    assert_eq!(row["decision"], "allow");
    assert_eq!(row["path"], serde_json::Value::Null);
    assert_eq!(
        row["body"], false,
        "plain HTTP through CONNECT is served as HTTP: the requests inside are decided, not the tunnel"
    );
    let inner = row_where(&s, "t", "pkgs.example.com", |r| r["kind"] == "intercepted");
    assert_eq!(inner["path"], "/big");
    assert_eq!(inner["decision"], "allow");
    assert!(row["bytes_down"].as_u64().unwrap() > size as u64);
    assert!(row["bytes_up"].as_u64().unwrap() > 0);
}

#[test]
fn connect_half_close_is_passed_on() {
    // An echo-until-EOF upstream: it answers only after the client shuts
    // down its sending side, so the reply proves the half-close arrived.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        c.write_all(format!("got {} bytes", got.len()).as_bytes())
            .unwrap();
    });
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{port}")])
        .start();
    let mut c = tunnel(&s, &format!("pkgs.example.com:{port}"));
    c.write_all(b"hello").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut reply = String::new();
    c.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, "got 5 bytes");
    server.join().unwrap();
    let row = last_row_for(&s, "t", "pkgs.example.com");
    assert_eq!(row["bytes_up"], 5);
    assert_eq!(row["bytes_down"], 11);
}

#[test]
fn connect_not_allowed_is_refused_before_dialling() {
    let up = Upstream::start();
    // A task that does not intercept: the refusal is in the status line
    // (one that does answers inside the tunnel: tls.rs).
    let (_dns, s) = pkgs_sluice(&up, "intercept = \"none\"", "");
    let url = format!("http://other.example.com:{}/", up.port());
    let out = curl(&[
        "-p",
        "-x",
        &s.proxy(0),
        "-w",
        "%{http_connect}",
        "-o",
        "/dev/null",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");
    let raw_answer = raw(
        &s.proxy_addr(),
        format!(
            "CONNECT other.example.com:{p} HTTP/1.1\r\nHost: other.example.com:{p}\r\n\r\n",
            p = up.port()
        )
        .as_bytes(),
    );
    assert_refused(&parse_http(&raw_answer).unwrap(), 403, "not-allowed");
    assert_eq!(up.conns(), 0, "nothing reached the upstream");
    let row = last_row_for(&s, "t", "other.example.com");
    assert_eq!(row["kind"], "connect");
    assert_eq!(row["decision"], "deny");
    assert_eq!(row["rule"], "not-allowed");
    assert_eq!(row["status"], 403);
}

#[test]
fn connect_to_dead_upstream_is_502_before_200() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{port}")])
        .start();
    let raw_answer = raw(
        &s.proxy_addr(),
        format!("CONNECT pkgs.example.com:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    let a = parse_http(&raw_answer).unwrap();
    assert_refused(&a, 502, "upstream-failed");
    assert!(String::from_utf8_lossy(&a.body).contains("cannot connect"));
    let row = last_row_for(&s, "t", "pkgs.example.com");
    assert_eq!(row["rule"], "upstream-failed");
    assert_eq!(
        row["decision"], "error",
        "a failure, not a refusal (SPEC §6)"
    );
}

#[test]
fn connect_bad_authorities_are_bad_target() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let p = up.port();
    let cases = [
        ("no port", "pkgs.example.com".to_string()),
        ("port zero", "pkgs.example.com:0".to_string()),
        ("leading zero port", format!("pkgs.example.com:0{p}")),
        ("named port", "pkgs.example.com:http".to_string()),
        ("brackets around a name", format!("[pkgs.example.com]:{p}")),
    ];
    for (what, authority) in cases {
        let ans = raw(
            &s.proxy_addr(),
            format!("CONNECT {authority} HTTP/1.1\r\n\r\n").as_bytes(),
        );
        match parse_http(&ans) {
            Some(a) => assert_eq!(
                a.status,
                400,
                "case {what}: {}",
                String::from_utf8_lossy(&a.body)
            ),
            None => panic!("case {what}: no answer"),
        }
    }
    assert_eq!(up.conns(), 0);
}

/// A refused CONNECT's body is thrown away by most clients: for a task
/// that does not intercept, the status line itself says which rule and
/// why.
#[test]
fn refused_connect_says_why_in_the_status_line() {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&["pkgs.example.com:443"])
        .task_extra("intercept = \"none\"")
        .start();
    let ans = raw(
        &s.proxy_addr(),
        b"CONNECT other.example.com:443 HTTP/1.1\r\nHost: other.example.com:443\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&ans);
    let status_line = text.lines().next().unwrap_or_default();
    assert_eq!(
        status_line,
        "HTTP/1.1 403 not-allowed: other.example.com:443 is not on the task's allow-list"
    );
}

/// Python (so pip) shows the status line of a refused CONNECT.
#[cfg(feature = "system-tests")] // python3
#[test]
fn python_shows_why_a_connect_was_refused() {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&["pkgs.example.com:443"])
        .task_extra("intercept = \"none\"")
        .start();
    let py = format!(
        "import http.client\nc = http.client.HTTPConnection('{}')\nc.set_tunnel('other.example.com', 443)\ntry:\n    c.connect()\nexcept OSError as e:\n    print(e)\n",
        s.proxy_addr()
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(py)
        .output()
        .expect("python3 runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("Tunnel connection failed: 403 not-allowed: other.example.com:443 is not on the task's allow-list"),
        "python said: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An opaque tunnel between two plain TCP sockets is spliced in the
/// kernel: the bytes never enter sluice. The metric says which path each
/// opaque tunnel took, so a wrapper around the client stream that loses
/// the splice path fails here.
#[test]
fn an_opaque_tunnel_between_tcp_sockets_is_spliced() {
    let up = Upstream::start();
    let p = up.port();
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .task_extra("intercept = \"none\"")
        .admin()
        .start();
    let spliced = r#"sluice_opaque_relays_total{path="splice"}"#;
    let buffered = r#"sluice_opaque_relays_total{path="buffered"}"#;
    assert_eq!(s.metric(spliced), 0);
    let mut c = tunnel(&s, &format!("pkgs.example.com:{p}"));
    // Neither TLS nor HTTP: relayed as it is. The upstream (an HTTP
    // server) answers the garbage with 400 through the relay.
    c.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").unwrap();
    let back = drain(&mut c);
    assert!(
        back.starts_with(b"HTTP/1.1 400"),
        "the upstream's answer came back: {:?}",
        String::from_utf8_lossy(&back)
    );
    drop(c);
    let row = row_where(&s, "t", "pkgs.example.com", |r| r["kind"] == "connect");
    assert_eq!(row["decision"], "allow");
    assert_eq!(row["bytes_down"].as_u64(), Some(back.len() as u64));
    assert_eq!(s.metric(spliced), 1, "the tunnel was spliced");
    assert_eq!(s.metric(buffered), 0);
}
