//! Clients that talk to sluice the way real ones do: curl (with no proxy
//! settings from the environment), raw bytes on a socket, CONNECT tunnels,
//! and npm. Every one is bounded by a timeout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::Duration;

use super::harness::Sluice;
use super::http::{answer, parse_http, Answer};

/// Removes every proxy variable the environment might pass to `c`, so a
/// client goes only where the test sends it.
pub fn without_proxy_env(c: &mut Command) -> &mut Command {
    for v in [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        c.env_remove(v);
    }
    c
}

/// Runs curl through nothing by default; pass `-x` yourself. Bounded by
/// --max-time.
pub fn curl(args: &[&str]) -> Output {
    without_proxy_env(&mut Command::new("curl"))
        .args(["-sS", "--max-time", "30", "--noproxy", ""])
        .args(args)
        .output()
        .expect("curl runs")
}

/// A request through sluice's first listener with curl (`-i`, so the
/// answer has its head), `extra` arguments before the URL.
#[track_caller]
pub fn via(s: &Sluice, url: &str, extra: &[&str]) -> Answer {
    let proxy = s.proxy(0);
    let mut args = vec!["-i", "-x", proxy.as_str()];
    args.extend_from_slice(extra);
    args.push(url);
    answer(&curl(&args))
}

/// The status of a GET of `url` through sluice's first listener, by curl
/// (0 if curl got no answer).
pub fn get(s: &Sluice, url: &str) -> u16 {
    get_via(&s.proxy(0), url)
}

/// The status of a GET of `url` through `proxy` (`http://host:port`).
pub fn get_via(proxy: &str, url: &str) -> u16 {
    let out = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        proxy,
        url,
    ]);
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

/// Sends raw bytes to `addr` and reads the answer until close or 5 s.
pub fn raw(addr: &str, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // sluice may answer and close before the whole request is written (a
    // refusal at accept): what comes back decides, not the write.
    let _ = s.write_all(request);
    read_answer(&mut s)
}

/// Reads until an answer with a Content-Length is complete, the peer
/// closes, or the socket's read timeout.
fn read_answer(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                // A refusal's body is one line: stop once it is complete.
                if let Some(a) = parse_http(&out) {
                    if let Some(len) = a.headers.get("content-length") {
                        if a.body.len() >= len.parse().unwrap_or(0) {
                            break;
                        }
                    }
                }
            }
            Err(_) => break,
        }
    }
    out
}

/// A refused CONNECT's answer, wherever sluice gives it: in the status
/// line (a task that does not intercept), or inside the tunnel (a task
/// that intercepts), where a request in plain HTTP gets it.
pub fn connect_refusal(addr: &str, request: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(request);
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        if s.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    if head.starts_with(b"HTTP/1.1 200") {
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: inside\r\n\r\n");
        head.clear();
    }
    head.extend(read_answer(&mut s));
    parse_http(&head).unwrap_or_else(|| panic!("no answer: {}", String::from_utf8_lossy(&head)))
}

/// Opens a CONNECT tunnel through sluice's first listener and reads its
/// 200 (exactly the head, nothing after it); the socket reads time out
/// after 10 s.
#[track_caller]
pub fn tunnel(s: &Sluice, authority: &str) -> TcpStream {
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        if c.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "CONNECT {authority}: {}",
        String::from_utf8_lossy(&head)
    );
    c
}

/// The status sluice answers a CONNECT with (the tunnel, if any, is
/// dropped at once); 0 if no status came back.
pub fn connect_status(s: &Sluice, authority: &str) -> u16 {
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // A refusal at accept (over capacity) may close the socket before the
    // request is written: the answer read back decides, not the write.
    let _ = write!(c, "CONNECT {authority} HTTP/1.1\r\n\r\n");
    let mut buf = [0u8; 12];
    let _ = c.read_exact(&mut buf);
    std::str::from_utf8(&buf[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Reads until the peer closes (or the socket's read timeout): what came
/// back.
pub fn drain(c: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

/// `npm install SPEC` in `dir` through `proxy` against a loopback registry
/// at `registry` (its own cache in `cache`, no proxy variables from the
/// environment). Panics if npm is missing: `.ci/run` installs it.
#[cfg(feature = "system-tests")]
pub fn npm_install(
    dir: &std::path::Path,
    spec: &str,
    registry: &str,
    proxy: &str,
    cache: &std::path::Path,
) -> Output {
    without_proxy_env(&mut Command::new("npm"))
        .args([
            "install",
            spec,
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
        ])
        .arg(format!("--registry={registry}"))
        .arg(format!("--proxy={proxy}"))
        .arg(format!("--cache={}", cache.display()))
        .current_dir(dir)
        .output()
        .expect("npm runs (the CI script installs it)")
}
