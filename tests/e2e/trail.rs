//! Round 3, findings 5, 13 and 17: the audit trail under stress. A
//! request that went upstream has a row even when its client leaves before
//! the response head comes back (plain HTTP and intercepted HTTPS, a
//! fixed-length and a chunked body); so does a question whose client gives
//! up; and a hand-edited log cannot make `report` write terminal controls.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::*;

/// Reads one request head and `body_len` bytes of body (or, chunked, up to
/// the last chunk), records them, then answers nothing for a while.
fn read_and_stall(s: &mut impl Read, r: &Arc<Mutex<Vec<u8>>>, body_len: usize) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let Ok(n) = s.read(&mut buf) else { break };
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        r.lock().unwrap().extend_from_slice(&buf[..n]);
        let Some(head) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let body = &got[head + 4..];
        if body.len() >= body_len || body.ends_with(b"0\r\n\r\n") {
            break;
        }
    }
    // No answer: the client gives up first.
    std::thread::sleep(Duration::from_secs(3));
}

fn wait_for_body(r: &Arc<Mutex<Vec<u8>>>, secret: &[u8]) {
    wait_for("the body upstream", Duration::from_secs(10), || {
        r.lock()
            .unwrap()
            .windows(secret.len())
            .any(|w| w == secret)
            .then_some(())
    });
}

fn the_row(s: &Sluice, method: &str) -> serde_json::Value {
    row_where(s, "t", "pkgs.example.com", |r| r["method"] == method)
}

#[test]
fn a_request_whose_client_leaves_before_the_answer_has_a_row() {
    let secret = b"PLAIN-HTTP-SECRET";
    let up = RawUpstream::start(move |mut c: TcpStream, r| read_and_stall(&mut c, &r, 17));
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{}", up.port)])
        .start();
    let host = format!("pkgs.example.com:{}", up.port);
    let requests = [
        (
            "POST",
            format!("POST http://{host}/slow HTTP/1.1\r\nHost: {host}\r\nContent-Length: 17\r\n\r\nPLAIN-HTTP-SECRET"),
        ),
        (
            "PUT",
            format!("PUT http://{host}/slow HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n11\r\nPLAIN-HTTP-SECRET\r\n0\r\n\r\n"),
        ),
    ];
    for (method, req) in requests {
        up.received.lock().unwrap().clear();
        let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        wait_for_body(&up.received, secret);
        drop(c);
        let row = the_row(&s, method);
        assert_eq!(row["status"], 499, "{row}");
        assert_eq!(row["note"], "client-left", "{row}");
        assert_eq!(row["decision"], "allow", "{row}");
        assert!(row["bytes_up"].as_u64().unwrap() >= 17, "{row}");
    }
}

#[test]
fn an_intercepted_request_whose_client_leaves_has_a_row() {
    let ca = test_ca();
    let mut cfg = (*server_config(&ca, &["pkgs.example.com"])).clone();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let cfg = Arc::new(cfg);
    let up = RawUpstream::start(move |c: TcpStream, r| {
        let conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, c);
        read_and_stall(&mut tls, &r, 18);
    });
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{}", up.port)])
        .file("upstream-ca.pem", ca.pem.as_str())
        .top("[upstream]\nextra_roots = [\"upstream-ca.pem\"]")
        .start();
    let host = format!("pkgs.example.com:{}", up.port);
    let c = tunnel(&s, &host);
    let ca_file = s.state().join("ca.pem").display().to_string();
    let mut tls = rustls::StreamOwned::new(rustls_client(&ca_file, "pkgs.example.com"), c);
    let req = format!(
        "PUT /slow HTTP/1.1\r\nHost: {host}\r\nContent-Length: 18\r\n\r\nINTERCEPTED-SECRET"
    );
    tls.write_all(req.as_bytes()).unwrap();
    tls.flush().unwrap();
    wait_for_body(&up.received, b"INTERCEPTED-SECRET");
    drop(tls);
    let row = the_row(&s, "PUT");
    assert_eq!(row["status"], 499, "{row}");
    assert_eq!(row["note"], "client-left", "{row}");
    assert_eq!(row["kind"], "intercepted", "{row}");
}

/// Round 3, finding 17: a hand-edited state folder cannot make `sluice
/// report` write terminal controls (ESC, BEL, C1, U+202E) from a row's host
/// or a taint line's source: the table and the taint section escape them.
#[test]
fn report_escapes_control_characters_from_edited_logs() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    assert_eq!(get(&s, &format!("http://other.example.com:{p}/x")), 403);
    let mut row = s.access_log("t", 1).remove(0);
    let hostile = "evil\u{1b}[2J\u{7}\u{9b}31m\u{202e}moc.example";
    row["host"] = hostile.into();
    row["task"] = "t\u{1b}]0;owned\u{7}".into();
    let edited = tempfile::tempdir().unwrap();
    let task = edited.path().join("tasks/t");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(task.join("access.jsonl"), format!("{row}\n")).unwrap();
    let taint = serde_json::json!({
        "ts": "2026-12-04T10:00:00Z", "task": "t", "host": hostile,
        "source": "https://docs.example.com/\u{1b}[31m\u{202e}",
    });
    std::fs::write(task.join("taint.jsonl"), format!("{taint}\n")).unwrap();
    for extra in [&[][..], &["--taint"][..]] {
        let out = Command::new(bin())
            .args(["report", "--state"])
            .arg(edited.path())
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{extra:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("evil\\u{1b}[2J"), "{extra:?}: {text}");
        for c in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(c), "{extra:?}: {c:?} in {text:?}");
        }
    }
}

/// Round 3, finding 5: a client that gives up while a person is asked
/// leaves a row (deny, 499, `client-left`), for a GET and a CONNECT.
#[test]
fn a_question_whose_client_gives_up_has_a_row() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, s) = crate::audit::ask_sluice(&up, 30);
    let out = curl(&[
        "-s",
        "-m",
        "1",
        "-x",
        &s.proxy(0),
        &format!("http://paste.example.com:{p}/x"),
    ]);
    assert_ne!(out.status.code(), Some(0), "curl gave up");
    crate::audit::asked(&s, "paste.example.com");
    let row = row_where(&s, "t", "paste.example.com", |r| r["note"] == "client-left");
    assert_eq!(row["decision"], "deny", "{row}");
    assert_eq!(row["status"], 499, "{row}");
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    let host = format!("other.example.com:{p}");
    c.write_all(format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    crate::audit::asked(&s, "other.example.com");
    drop(c);
    let row = row_where(&s, "t", "other.example.com", |r| r["note"] == "client-left");
    assert_eq!(row["method"], "CONNECT", "{row}");
    assert_eq!(up.request_count(), 0);
}
