//! Test harness: the real `sluice` binary on port 0, in-process upstreams
//! and a fake DNS server on 127.0.0.1, curl as the client. Every wait is
//! bounded; nothing leaves loopback.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

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
    /// Routes: `/big?n=BYTES` answers `pattern(n)`; `/page?text=...` is
    /// answered with the configured page; anything else answers
    /// "hello from upstream" and, for requests with a body, its length.
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
                                .map(|b| b.to_bytes())
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
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                version: parts.version,
                                headers,
                                body: body.to_vec(),
                            };
                            seen.lock().unwrap().push(rec.clone());
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
}

/// A DNS server on 127.0.0.1:0 that answers NXDOMAIN to every query, so
/// no test ever asks a real resolver.
pub struct FakeDns {
    pub addr: SocketAddr,
    pub queries: Arc<AtomicUsize>,
}

impl FakeDns {
    pub fn start() -> FakeDns {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        let queries = Arc::new(AtomicUsize::new(0));
        let q = queries.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 1500];
            // Bounded: the thread ends with the test process.
            while let Ok((n, peer)) = sock.recv_from(&mut buf) {
                if n < 12 {
                    continue;
                }
                q.fetch_add(1, Ordering::SeqCst);
                let mut resp = buf[..n].to_vec();
                resp[2] = 0x81 | (buf[2] & 0x01); // QR, opcode 0, RD copied
                resp[3] = 0x83; // RA, RCODE 3 = NXDOMAIN
                resp[6..12].fill(0); // no answer, authority or additional
                                     // Strip any EDNS OPT record: keep header + question only.
                let qend = question_end(&resp).unwrap_or(n);
                resp.truncate(qend);
                let _ = sock.send_to(&resp, peer);
            }
        });
        FakeDns { addr, queries }
    }
}

fn question_end(msg: &[u8]) -> Option<usize> {
    let mut i = 12;
    while *msg.get(i)? != 0 {
        i += 1 + *msg.get(i)? as usize;
    }
    Some(i + 1 + 4)
}

/// A running sluice.
pub struct Sluice {
    child: Child,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    /// Bound addresses, in the order of the config's listeners.
    pub listeners: Vec<String>,
    /// Every stderr line so far.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

impl Sluice {
    /// Writes `config` (TOML; `{dns}` is replaced by the fake DNS address)
    /// into a temp folder and starts `sluice run` on it.
    pub fn start(config: &str) -> Sluice {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.toml");
        std::fs::write(&path, config).unwrap();
        Self::start_in(dir, path)
    }

    pub fn start_in(dir: tempfile::TempDir, path: PathBuf) -> Sluice {
        let (child, listeners, stderr) = spawn(&path);
        Sluice {
            child,
            dir,
            config: path,
            listeners,
            stderr,
        }
    }

    /// The admin API's `host:port` (config `admin.listen = "tcp:127.0.0.1:0"`).
    pub fn admin(&self) -> String {
        let line = self.wait_line(|l| l.contains("admin=tcp:"));
        let i = line.find("admin=tcp:").unwrap();
        line[i + 10..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    }

    /// Waits (bounded, 10 s) for a stderr line that `pred` accepts.
    pub fn wait_line(&self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self.stderr.lock().unwrap().iter().find(|l| pred(l)) {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no such line in {:#?}",
                self.stderr.lock().unwrap()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// An admin API request with curl: (status, body).
    pub fn admin_call(&self, method: &str, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.admin());
        let out = curl(&["-s", "-X", method, "-w", "\n%{http_code}", &url]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// Kills sluice hard (SIGKILL, no flush) and starts it again on the
    /// same config and state.
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, listeners, stderr) = spawn(&self.config);
        self.child = child;
        self.listeners = listeners;
        self.stderr = stderr;
    }

    /// `http://127.0.0.1:PORT` of the n-th TCP listener.
    pub fn proxy(&self, n: usize) -> String {
        let l = self
            .listeners
            .iter()
            .filter(|l| l.starts_with("tcp:"))
            .nth(n)
            .unwrap();
        format!("http://{}", &l[4..])
    }

    pub fn proxy_addr(&self) -> String {
        self.proxy(0)[7..].to_string()
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Access-log rows of a task, waiting (bounded) until at least `n`.
    pub fn access_log(&self, task: &str, n: usize) -> Vec<Value> {
        wait_rows(
            &self.state().join("tasks").join(task).join("access.jsonl"),
            n,
        )
    }

    /// The sluice process id.
    pub fn child_id(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`"TERM"`, `"HUP"`, ...).
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
    }

    /// Waits (bounded) for exit; returns the exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `sluice run --config path`; waits (bounded) until every
/// listener is bound and returns their addresses.
fn spawn(path: &Path) -> (Child, Vec<String>, Arc<Mutex<Vec<String>>>) {
    let expected = count_listeners(&std::fs::read_to_string(path).unwrap());
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(path)
        .env("SLUICE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let stderr = child.stderr.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = lines.clone();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(i) = line.find("listen=") {
                let addr = line[i + 7..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let _ = tx.send(addr);
            }
            if std::env::var_os("SLUICE_TEST_STDERR").is_some() {
                eprintln!("sluice: {line}");
            }
            l2.lock().unwrap().push(line);
        }
    });
    let mut listeners = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while listeners.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(a) => listeners.push(a),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "sluice did not start listening: {:#?}",
                    lines.lock().unwrap()
                );
            }
        }
    }
    (child, listeners, lines)
}

fn count_listeners(config: &str) -> usize {
    let parsed: toml::Value = toml::from_str(config).unwrap();
    parsed
        .get("task")
        .and_then(|t| t.as_array())
        .map(|tasks| {
            tasks
                .iter()
                .filter_map(|t| t.get("listen").and_then(|l| l.as_array()))
                .map(|l| l.len())
                .sum()
        })
        .unwrap_or(0)
}

/// JSON rows of a JSON-lines file, waiting up to 5 s for at least `n`.
pub fn wait_rows(path: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let rows: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("access log line is JSON"))
            .collect();
        if rows.len() >= n || Instant::now() > deadline {
            return rows;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// A fake DNS server and sluice with one task `t` allowing
/// pkgs.example.com on `up`'s port (the most common test setup).
pub fn pkgs_sluice(up: &Upstream, extra_task: &str, extra_top: &str) -> (FakeDns, Sluice) {
    let dns = FakeDns::start();
    let s = Sluice::start(&config(
        &dns,
        &[format!("pkgs.example.com:{}", up.port())],
        extra_task,
        extra_top,
    ));
    (dns, s)
}

/// A standard test config: one task `t` whose names are pinned to
/// 127.0.0.1, with loopback allowed as a private range.
pub fn config(dns: &FakeDns, allow: &[String], extra_task: &str, extra_top: &str) -> String {
    let allow: Vec<String> = allow.iter().map(|a| format!("{a:?}")).collect();
    format!(
        r#"state_dir = "state"
{extra_top}
[resolver]
nameservers = ["{dns}"]
[resolver.hosts]
"pkgs.example.com" = ["127.0.0.1"]
"other.example.com" = ["127.0.0.1"]
"paste.example.com" = ["127.0.0.1"]
"docs.example.com" = ["127.0.0.1"]
"private.example.com" = ["127.0.0.1"]
"metadata.example.com" = ["169.254.169.254"]
"mixed.example.com" = ["10.1.2.3", "127.0.0.1"]

[[task]]
id = "t"
listen = ["tcp:127.0.0.1:0"]
allow = [{allow}]
allow_private = ["127.0.0.0/8"]
{extra_task}
"#,
        dns = dns.addr,
        allow = allow.join(", ")
    )
}

/// Runs curl through nothing by default; pass `-x` yourself. Bounded by
/// --max-time.
pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "30", "--noproxy", ""])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .expect("curl runs")
}

/// Status, headers (lower-case names) and body of a `curl -i` answer.
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// Parses the last response of `curl -i` output (after any 100/200
/// CONNECT preamble).
pub fn answer(out: &Output) -> Answer {
    parse_http(&out.stdout).unwrap_or_else(|| {
        panic!(
            "no HTTP answer; curl stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn parse_http(raw: &[u8]) -> Option<Answer> {
    let mut rest = raw;
    loop {
        let end = find(rest, b"\r\n\r\n")?;
        let head = std::str::from_utf8(&rest[..end]).ok()?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let body = &rest[end + 4..];
        // `curl -i` shows interim answers (100, the CONNECT 200) first.
        let preamble = (status == 100 || status == 200) && body.starts_with(b"HTTP/");
        if preamble {
            rest = body;
            continue;
        }
        return Some(Answer {
            status,
            headers,
            body: body.to_vec(),
        });
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Sends raw bytes to `addr` and reads the answer until close or 5 s.
pub fn raw(addr: &str, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // sluice may answer and close before the whole request is written (a
    // refusal at accept): what comes back decides, not the write.
    let _ = s.write_all(request);
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

/// A request through sluice's first listener with curl (`-i`, so the
/// answer has its head), `extra` arguments before the URL.
pub fn via(s: &Sluice, url: &str, extra: &[&str]) -> Answer {
    let proxy = s.proxy(0);
    let mut args = vec!["-i", "-x", proxy.as_str()];
    args.extend_from_slice(extra);
    args.push(url);
    answer(&curl(&args))
}

/// Asserts a refusal: status, rule header, task header, sentence.
pub fn assert_refused(a: &Answer, status: u16, rule: &str) {
    let body = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, status, "status; body: {body}");
    assert_eq!(
        a.headers.get("sluice-rule").map(String::as_str),
        Some(rule),
        "rule; body: {body}"
    );
    assert_eq!(a.headers.get("sluice-task").map(String::as_str), Some("t"));
    assert!(body.starts_with("sluice: refused "), "sentence: {body}");
    assert!(
        body.trim_end().ends_with(&format!("[{rule}]")),
        "sentence: {body}"
    );
}

/// The last access-log row for `host`, waiting until one exists.
pub fn last_row_for(s: &Sluice, task: &str, host: &str) -> Value {
    row_where(s, task, host, |_| true)
}

/// The last access-log row for `host` that `pred` accepts, waiting
/// (bounded) until one exists.
pub fn row_where(s: &Sluice, task: &str, host: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let rows = s.access_log(task, 0);
        if let Some(r) = rows.iter().rev().find(|r| r["host"] == host && pred(r)) {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no access-log row for {host}: {rows:#?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// `npm install SPEC` in `dir` through `proxy` against a loopback registry
/// at `registry` (its own cache in `cache`, no proxy variables from the
/// environment). Panics if npm is missing: `.ci/run` installs it.
pub fn npm_install(dir: &Path, spec: &str, registry: &str, proxy: &str, cache: &Path) -> Output {
    let mut c = Command::new("npm");
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
    c.args([
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
