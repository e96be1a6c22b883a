//! Side-by-side benchmark (not a test; `cargo bench --bench proxy`):
//! sluice (release), a direct connection, and — when installed — Squid and
//! tinyproxy (`benches/setup-peers.sh` installs them), each driven by the
//! same in-process load generator against the same loopback upstreams.
//!
//! Scenarios: keep-alive HTTP (1 KiB, 32 connections), CONNECT throughput
//! (1 MiB bodies, 4 connections), churn (connect + CONNECT + one 1 KiB
//! request + close, 8 in parallel), TLS through a passthrough CONNECT (32
//! connections), intercepted HTTPS (keep-alive and new connections), RSS per
//! idle tunnel (2,000 and 10,000 tunnels), taint enforce vs off on a 1 MiB
//! download. Every loop is bounded in time and count; only 127.0.0.1 is
//! used. `BENCH_SECS` sets the seconds per measurement (default 3);
//! `BENCH_ONLY=connect,taint` runs only the named scenarios.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HOST: &str = "bench.example.com";

fn secs() -> Duration {
    Duration::from_secs(
        std::env::var("BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3),
    )
}

// ---------------------------------------------------------------- upstreams

fn body(n: usize) -> Bytes {
    let unit = b"<p>Lorem ipsum dolor sit amet, see https://docs.example.org/guide for more.</p>\n";
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        v.extend_from_slice(unit);
    }
    v.truncate(n);
    Bytes::from(v)
}

/// `n` bytes that look random (xorshift, fixed seed): like a compressed
/// tarball, no host names, every byte value.
fn random_body(n: usize) -> Bytes {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    Bytes::from(v)
}

/// About 380 KiB of HTML naming 4,000 distinct hosts (links and prose),
/// each named about twice: the page a registry or a search result is.
fn hosts_body() -> Bytes {
    let mut v = Vec::with_capacity(400 * 1024);
    let mut i = 0usize;
    while v.len() < 380 * 1024 {
        let h = i % 4000;
        v.extend_from_slice(
            format!(
                "<li><a href=\"https://pkg{h}.mirror{}.example.com/dist/pkg-{h}.tgz\">pkg-{h}</a> \
                 from api{h}.vendor{}.example.net, see docs for details.</li>\n",
                h % 50,
                h % 97
            )
            .as_bytes(),
        );
        i += 1;
    }
    Bytes::from(v)
}

struct Upstreams {
    http: SocketAddr,
    https: SocketAddr,
    /// The certificate the HTTPS upstream presents (for HOST).
    cert: CertificateDer<'static>,
    cert_pem: String,
    _rt: tokio::runtime::Runtime,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn upstreams() -> Upstreams {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let small = body(1024);
    let big = body(1024 * 1024);
    let huge = body(16 * 1024 * 1024);
    let random = random_body(1024 * 1024);
    let hosts = hosts_body();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![HOST.to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let (http, https) = rt.block_on(async {
        let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        (a, b)
    });
    let (http_addr, https_addr) = (http.local_addr().unwrap(), https.local_addr().unwrap());
    let svc = move |req: Request<hyper::body::Incoming>| {
        // The new bodies say what they are, as a registry would; the
        // older ones keep the bare answer earlier figures were taken with.
        let (b, ct) = match req.uri().path() {
            "/1m" => (big.clone(), None),
            "/16m" => (huge.clone(), None),
            "/rand1m" => (random.clone(), Some("application/octet-stream")),
            "/hosts" => (hosts.clone(), Some("text/html; charset=utf-8")),
            _ => (small.clone(), None),
        };
        let mut resp = Response::new(Full::new(b));
        if let Some(ct) = ct {
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(ct),
            );
        }
        async move { Ok::<_, hyper::Error>(resp) }
    };
    let svc2 = svc.clone();
    rt.spawn(async move {
        loop {
            let Ok((s, _)) = http.accept().await else {
                continue;
            };
            let _ = s.set_nodelay(true);
            let svc = svc.clone();
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(5))
                    .serve_connection(TokioIo::new(s), hyper::service::service_fn(svc))
                    .await;
            });
        }
    });
    rt.spawn(async move {
        loop {
            let Ok((s, _)) = https.accept().await else {
                continue;
            };
            let _ = s.set_nodelay(true);
            let (acceptor, svc) = (acceptor.clone(), svc2.clone());
            tokio::spawn(async move {
                let Ok(s) = acceptor.accept(s).await else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), hyper::service::service_fn(svc))
                    .await;
            });
        }
    });
    Upstreams {
        http: http_addr,
        https: https_addr,
        cert: cert.der().clone(),
        cert_pem: cert.pem(),
        _rt: rt,
    }
}

// ------------------------------------------------------------------ proxies

struct Proxy {
    name: String,
    /// None: the direct baseline.
    addr: Option<SocketAddr>,
    child: Option<Child>,
    /// How this proxy is asked for the upstream host (sluice: a pinned
    /// name; the others: the IP).
    host: String,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Proxy {
    /// A copy for load tasks: same address and host, owns no process.
    fn handle(&self) -> Proxy {
        Proxy {
            name: self.name.clone(),
            addr: self.addr,
            child: None,
            host: self.host.clone(),
            _dir: None,
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_port(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn direct() -> Proxy {
    Proxy {
        name: "direct".into(),
        addr: None,
        child: None,
        host: "127.0.0.1".into(),
        _dir: None,
    }
}

fn sluice(up: &Upstreams, name: &str, intercept: &str, taint: &str) -> Proxy {
    sluice_with(up, name, intercept, taint, "")
}

/// [`sluice`] with `extra` TOML at the end of the task (after its taint
/// table: a `[[task.secret]]`), and files it names written first.
fn sluice_with(up: &Upstreams, name: &str, intercept: &str, taint: &str, extra: &str) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token.txt"), BENCH_TOKEN).unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("up.pem"), &up.cert_pem).unwrap();
    let cfg = format!(
        "state_dir = \"state\"\n[resolver]\nnameservers = [\"127.0.0.1:9\"]\n[resolver.hosts]\n\"{HOST}\" = [\"127.0.0.1\"]\n\
         [upstream]\nextra_roots = [\"up.pem\"]\n[limits]\nmax_connections_per_task = 100000\nheader_timeout_secs = 120\n\
         [[task]]\nid = \"bench\"\nlisten = [\"tcp:127.0.0.1:{port}\"]\n\
         allow = [\"{HOST}:{}\", \"{HOST}:{}\"]\nallow_private = [\"127.0.0.0/8\"]\nintercept = \"{intercept}\"\n\
         [task.taint]\nmode = \"{taint}\"\n{extra}",
        up.http.port(),
        up.https.port()
    );
    std::fs::write(dir.path().join("sluice.toml"), cfg).unwrap();
    let child = Command::new(sluice_bin())
        .args(["run", "--config"])
        .arg(dir.path().join("sluice.toml"))
        .env("SLUICE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_port(port), "sluice did not start");
    Proxy {
        name: name.into(),
        addr: Some(([127, 0, 0, 1], port).into()),
        child: Some(child),
        host: HOST.into(),
        _dir: Some(dir),
    }
}

/// Starts a peer proxy from Debian's packages (if installed) with `conf`,
/// written as `conf_name` in a fresh folder; `args` precede the config path.
fn peer(
    name: &str,
    bins: &[&str],
    args: &[&str],
    conf_name: &str,
    conf: impl Fn(u16, &std::path::Path) -> String,
) -> Option<Proxy> {
    let bin = bins.iter().find(|p| std::path::Path::new(p).exists())?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = dir.path().join(conf_name);
    std::fs::write(&path, conf(port, dir.path())).unwrap();
    let child = Command::new(bin)
        .args(args)
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let proxy = Proxy {
        name: name.into(),
        addr: Some(([127, 0, 0, 1], port).into()),
        child: Some(child),
        host: "127.0.0.1".into(),
        _dir: Some(dir),
    };
    wait_port(port).then_some(proxy)
}

fn squid() -> Option<Proxy> {
    // Fair: no cache, no access log, CONNECT to any port, many fds.
    peer(
        "squid",
        &["/usr/sbin/squid", "/usr/bin/squid"],
        &["-N", "-f"],
        "squid.conf",
        |port, d| {
            let d = d.display();
            format!(
            "http_port 127.0.0.1:{port}\nhttp_access allow all\ncache deny all\ncache_mem 0 MB\naccess_log none\ncache_log {d}/cache.log\n\
             pid_filename {d}/squid.pid\nmax_filedescriptors 65536\nshutdown_lifetime 0 seconds\nvia off\nforwarded_for delete\n\
             workers 1\ncoredump_dir {d}\n"
        )
        },
    )
}

fn tinyproxy() -> Option<Proxy> {
    peer(
        "tinyproxy",
        &["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"],
        &["-d", "-c"],
        "tinyproxy.conf",
        |port, d| {
            format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 20000\nLogLevel Critical\nPidFile \"{}/tp.pid\"\nDisableViaHeader Yes\n",
            d.display()
        )
        },
    )
}

/// mitmproxy (`mitmdump` on PATH, from PyPI: `pip install mitmproxy`),
/// intercepting like sluice: its own CA (the client trusts it), the
/// upstream verified against the bench's certificate. Its CA is the second
/// value.
fn mitmproxy(up: &Upstreams) -> Option<(Proxy, CertificateDer<'static>)> {
    let path = std::env::var_os("PATH")?;
    let bin = std::env::split_paths(&path)
        .map(|d| d.join("mitmdump"))
        .find(|p| p.exists())?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("up.pem"), &up.cert_pem).unwrap();
    let port = free_port();
    let d = dir.path().display().to_string();
    let child = Command::new(bin)
        .args(["-q", "--listen-host", "127.0.0.1", "--listen-port"])
        .arg(port.to_string())
        .args(["--set", &format!("confdir={d}")])
        .args([
            "--set",
            &format!("ssl_verify_upstream_trusted_ca={d}/up.pem"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let proxy = Proxy {
        name: "mitmproxy".into(),
        addr: Some(([127, 0, 0, 1], port).into()),
        child: Some(child),
        host: "127.0.0.1".into(),
        _dir: Some(dir),
    };
    if !wait_port(port) {
        return None;
    }
    use rustls::pki_types::pem::PemObject;
    let ca = CertificateDer::from_pem_file(format!("{d}/mitmproxy-ca-cert.pem")).ok()?;
    Some((proxy, ca))
}

// --------------------------------------------------------- process metrics

/// CPU time (user + system) of a process and its threads.
fn cpu(pid: Option<u32>) -> Duration {
    let Some(pid) = pid else {
        return Duration::ZERO;
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

// ------------------------------------------------------------ the client

/// Reads one HTTP/1.1 response (Content-Length framed); returns body bytes.
async fn read_response<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    buf.clear();
    let mut tmp = [0u8; 65536];
    let head_end;
    loop {
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = memchr::memmem::find(buf, b"\r\n\r\n") {
            head_end = i + 4;
            break;
        }
    }
    let head = std::str::from_utf8(&buf[..head_end]).unwrap_or("");
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(std::io::Error::other(
            head.lines().next().unwrap_or("").to_string(),
        ));
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < len {
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        have += n;
    }
    Ok(len)
}

/// Opens a tunnel to `target` through `proxy` (or connects directly).
async fn open(proxy: &Proxy, target: SocketAddr) -> std::io::Result<TcpStream> {
    match proxy.addr {
        None => {
            let s = TcpStream::connect(target).await?;
            s.set_nodelay(true)?;
            Ok(s)
        }
        Some(p) => {
            let mut s = TcpStream::connect(p).await?;
            s.set_nodelay(true)?;
            let req = format!(
                "CONNECT {h}:{port} HTTP/1.1\r\nHost: {h}:{port}\r\n\r\n",
                h = proxy.host,
                port = target.port()
            );
            s.write_all(req.as_bytes()).await?;
            let mut buf = [0u8; 1024];
            let mut got = Vec::new();
            while memchr::memmem::find(&got, b"\r\n\r\n").is_none() {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                got.extend_from_slice(&buf[..n]);
            }
            if !got.starts_with(b"HTTP/1.1 200") && !got.starts_with(b"HTTP/1.0 200") {
                return Err(std::io::Error::other(
                    String::from_utf8_lossy(&got)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string(),
                ));
            }
            Ok(s)
        }
    }
}

#[derive(Default)]
struct Run {
    ops: u64,
    bytes: u64,
    lat_us: Vec<u32>,
    errors: u64,
    elapsed: Duration,
    cpu: Duration,
}

impl Run {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
    fn mbps(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / 1e6
    }
    fn pct(&mut self, p: f64) -> f64 {
        if self.lat_us.is_empty() {
            return 0.0;
        }
        self.lat_us.sort_unstable();
        let i = ((self.lat_us.len() as f64 * p) as usize).min(self.lat_us.len() - 1);
        f64::from(self.lat_us[i]) / 1000.0
    }
}

/// Runs `workers` copies of `job` for the measurement time; each call of
/// `job` is one operation returning the bytes it moved.
async fn drive<F, Fut>(proxy: &Proxy, workers: usize, job: F) -> Run
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = std::io::Result<u64>> + Send,
{
    let stop = Instant::now() + secs();
    let ops = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu(proxy.pid());
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let (job, ops, bytes, errors) = (job.clone(), ops.clone(), bytes.clone(), errors.clone());
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            // Bounded in time and in count.
            while Instant::now() < stop && ops.load(Ordering::Relaxed) < 200_000 {
                let t = Instant::now();
                let r = match tokio::time::timeout(Duration::from_secs(10), job(w)).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
                };
                match r {
                    Ok(b) => {
                        ops.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(b, Ordering::Relaxed);
                        lat.push(t.elapsed().as_micros() as u32);
                    }
                    Err(_) => {
                        if errors.fetch_add(1, Ordering::Relaxed) > 1000 {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            lat
        }));
    }
    let mut lat_us = Vec::new();
    for h in handles {
        lat_us.extend(h.await.unwrap_or_default());
    }
    Run {
        ops: ops.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        lat_us,
        elapsed: started.elapsed(),
        cpu: cpu(proxy.pid()) - cpu0,
    }
}

/// A persistent connection per worker, made on first use.
type Conns<S> = Arc<Vec<tokio::sync::Mutex<Option<S>>>>;

async fn keepalive_http(
    proxy: &Proxy,
    up: &Upstreams,
    path: &'static str,
    workers: usize,
    tunnel: bool,
) -> Run {
    let conns: Conns<TcpStream> = Arc::new(
        (0..workers)
            .map(|_| tokio::sync::Mutex::new(None))
            .collect(),
    );
    let target = up.http;
    let host = proxy.host.clone();
    let proxy_addr = proxy.addr;
    let p2 = proxy.handle();
    let p2 = Arc::new(p2);
    drive(proxy, workers, move |w| {
        let (conns, host, p2) = (conns.clone(), host.clone(), p2.clone());
        async move {
            let mut slot = conns[w].lock().await;
            if slot.is_none() {
                *slot = Some(match proxy_addr {
                    Some(addr) if !tunnel => {
                        let s = TcpStream::connect(addr).await?;
                        s.set_nodelay(true)?;
                        s
                    }
                    _ => open(&p2, target).await?,
                });
            }
            let s = slot.as_mut().unwrap();
            let req = if proxy_addr.is_some() && !tunnel {
                format!(
                    "GET http://{host}:{}{path} HTTP/1.1\r\nHost: {host}:{}\r\n\r\n",
                    target.port(),
                    target.port()
                )
            } else {
                format!(
                    "GET {path} HTTP/1.1\r\nHost: {host}:{}\r\n\r\n",
                    target.port()
                )
            };
            let mut buf = Vec::with_capacity(4096);
            let r = async {
                s.write_all(req.as_bytes()).await?;
                read_response(s, &mut buf).await
            }
            .await;
            match r {
                Ok(n) => Ok(n as u64),
                Err(e) => {
                    *slot = None;
                    Err(e)
                }
            }
        }
    })
    .await
}

async fn churn(proxy: &Proxy, up: &Upstreams, workers: usize) -> Run {
    let target = up.http;
    let p2 = Arc::new(proxy.handle());
    drive(proxy, workers, move |_| {
        let p2 = p2.clone();
        async move {
            let mut s = open(&p2, target).await?;
            let req = format!(
                "GET /1k HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n\r\n",
                p2.host,
                target.port()
            );
            s.write_all(req.as_bytes()).await?;
            let mut buf = Vec::new();
            let n = read_response(&mut s, &mut buf).await?;
            let _ = s.shutdown().await;
            Ok(n as u64)
        }
    })
    .await
}

fn tls_client(roots: Vec<CertificateDer<'static>>) -> tokio_rustls::TlsConnector {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// HTTPS through a tunnel (passthrough or intercepted). `reuse`: keep-alive
/// on one TLS connection per worker; otherwise one new connection per op.
async fn https(
    proxy: &Proxy,
    up: &Upstreams,
    roots: Vec<CertificateDer<'static>>,
    path: &'static str,
    workers: usize,
    reuse: bool,
) -> Run {
    https_with(proxy, up, roots, path, workers, reuse, Arc::from("")).await
}

/// [`https`] with `headers` (whole lines, each ending in CRLF) in each
/// request.
async fn https_with(
    proxy: &Proxy,
    up: &Upstreams,
    roots: Vec<CertificateDer<'static>>,
    path: &'static str,
    workers: usize,
    reuse: bool,
    headers: Arc<str>,
) -> Run {
    let tls = tls_client(roots);
    let target = up.https;
    let p2 = Arc::new(proxy.handle());
    type Tls = tokio_rustls::client::TlsStream<TcpStream>;
    let conns: Conns<Tls> = Arc::new(
        (0..workers)
            .map(|_| tokio::sync::Mutex::new(None))
            .collect(),
    );
    drive(proxy, workers, move |w| {
        let (tls, p2, conns) = (tls.clone(), p2.clone(), conns.clone());
        let headers = headers.clone();
        async move {
            let mut slot = conns[w].lock().await;
            if slot.is_none() || !reuse {
                let tcp = open(&p2, target).await?;
                let name = ServerName::try_from(HOST.to_string()).unwrap();
                *slot = Some(tls.connect(name, tcp).await?);
            }
            let s = slot.as_mut().unwrap();
            let close = if reuse { "" } else { "Connection: close\r\n" };
            let req = format!(
                "GET {path} HTTP/1.1\r\nHost: {HOST}:{}\r\n{headers}{close}\r\n",
                target.port()
            );
            let mut buf = Vec::new();
            let r = async {
                s.write_all(req.as_bytes()).await?;
                read_response(s, &mut buf).await
            }
            .await;
            if r.is_err() || !reuse {
                *slot = None;
            }
            r.map(|n| n as u64)
        }
    })
    .await
}

/// The interception CA of a sluice started by [`sluice`].
fn sluice_ca(p: &Proxy) -> CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    let path = p._dir.as_ref().unwrap().path().join("state/ca.pem");
    CertificateDer::from_pem_file(path).unwrap()
}

/// The token a secrets run swaps in (only sluice and the upstream see it).
const BENCH_TOKEN: &str = "ghp_BenchSecretValue0123456789abcdefABCD";

/// Intercepted HTTPS keep-alive by a task with one secret: requests
/// without the placeholder (the header check alone) and with it (checked
/// and swapped), beside the same requests by a task without secrets.
fn secrets_scenario(rt: &tokio::runtime::Runtime, up: &Upstreams, table: &mut Table) {
    let secret = format!(
        "[[task.secret]]\nname = \"TOKEN\"\nfrom_file = \"token.txt\"\nhosts = [\"{HOST}:{}\"]\n",
        up.https.port()
    );
    let plain = sluice(up, "sluice (intercept, no secret)", "all", "enforce");
    let with = sluice_with(up, "sluice (intercept, secret)", "all", "enforce", &secret);
    let dir = with._dir.as_ref().unwrap().path();
    let kept: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("state/tasks/bench/placeholders.json")).unwrap(),
    )
    .unwrap();
    // Each fresh sluice mints its leaf and opens its upstream connections
    // on its first requests: warm both up first, unrecorded.
    for p in [&plain, &with] {
        let ca = sluice_ca(p);
        rt.block_on(https_with(p, up, vec![ca], "/1k", 32, true, Arc::from("")));
    }
    let auth: Arc<str> = format!(
        "Authorization: Bearer {}\r\n",
        kept["TOKEN"].as_str().unwrap()
    )
    .into();
    for (p, headers, what) in [
        (&plain, Arc::from(""), "no secret"),
        (&with, Arc::from(""), "secret, not used"),
        (&with, auth, "secret, swapped"),
    ] {
        let ca = sluice_ca(p);
        rt.block_on(async {
            let r = https_with(p, up, vec![ca], "/1k", 32, true, headers).await;
            let cpu_us = r.cpu.as_micros() as f64 / r.ops.max(1) as f64;
            table.add(
                "HTTPS keep-alive ×32, secrets",
                what,
                "req/s",
                r.rate(),
                format!("{cpu_us:.0} CPU µs/req, {} errors", r.errors),
            );
        });
    }
}

/// One 1 KiB request and its answer through an open tunnel to `target`,
/// so the tunnel is past its start (for the proxy: relaying) before it
/// idles. The Host names the tunnel's target: sluice reads plain HTTP in
/// a tunnel and refuses a request for another host.
async fn one_request(s: &mut TcpStream, target: SocketAddr) -> std::io::Result<()> {
    let req = format!("GET /1k HTTP/1.1\r\nHost: {HOST}:{}\r\n\r\n", target.port());
    s.write_all(req.as_bytes()).await?;
    read_response(s, &mut Vec::new()).await.map(|_| ())
}

/// What an idle connection did before it idled.
#[derive(Clone, Copy, PartialEq)]
enum Idle {
    /// A tunnel opened and never used.
    Unused,
    /// A tunnel that carried one plain HTTP request (sluice reads it).
    PlainInside,
    /// A tunnel that carried one HTTPS request sluice does not intercept
    /// (opaque bytes, spliced).
    Opaque,
    /// A tunnel sluice intercepts, after one HTTPS request (TLS both ways).
    Intercepted,
    /// A forward-proxy keep-alive connection after one plain GET.
    KeepAlive,
}

/// One idle connection of `kind`, its request answered.
async fn open_idle(
    p: &Proxy,
    up: &Upstreams,
    kind: Idle,
    tls: &tokio_rustls::TlsConnector,
) -> std::io::Result<Box<dyn Send>> {
    let name = || ServerName::try_from(HOST.to_string()).unwrap();
    let req = |port: u16| format!("GET /1k HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n");
    Ok(match kind {
        Idle::Unused => Box::new(open(p, up.http).await?),
        Idle::PlainInside => {
            let mut s = open(p, up.http).await?;
            one_request(&mut s, up.http).await?;
            Box::new(s)
        }
        Idle::Opaque | Idle::Intercepted => {
            let mut s = tls.connect(name(), open(p, up.https).await?).await?;
            s.write_all(req(up.https.port()).as_bytes()).await?;
            read_response(&mut s, &mut Vec::new()).await?;
            Box::new(s)
        }
        Idle::KeepAlive => {
            let mut s = TcpStream::connect(p.addr.unwrap()).await?;
            s.set_nodelay(true)?;
            let port = up.http.port();
            let h = &p.host;
            let r = format!("GET http://{h}:{port}/1k HTTP/1.1\r\nHost: {h}:{port}\r\n\r\n");
            s.write_all(r.as_bytes()).await?;
            read_response(&mut s, &mut Vec::new()).await?;
            Box::new(s)
        }
    })
}

/// RSS growth per idle connection of `kind`, opening `n` (bounded time).
/// `roots`: what the client trusts for the TLS kinds.
async fn idle_tunnels(
    proxy: &Proxy,
    up: &Upstreams,
    n: usize,
    kind: Idle,
    roots: Vec<CertificateDer<'static>>,
) -> Option<f64> {
    let pid = proxy.pid()?;
    let tls = tls_client(roots);
    // One connection first, unmeasured: a fresh sluice mints its leaf and
    // builds its TLS configs on the first intercepted connection.
    let warm = open_idle(proxy, up, kind, &tls).await.ok()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);
    let mut held = Vec::with_capacity(n);
    let deadline = Instant::now() + Duration::from_secs(90);
    let p2 = proxy.handle();
    // Used connections arrive in batches of 500, each left quiet for a
    // moment before the next: connections that pile up over a mission,
    // not all in one burst (sluice parks a quiet connection, and the next
    // batch reuses what the parked ones gave back).
    let (batch, settle) = match kind {
        Idle::Unused => (200, Duration::ZERO),
        _ => (500, Duration::from_millis(2500)),
    };
    for chunk in 0..n.div_ceil(batch) {
        let mut set = Vec::new();
        for _ in 0..batch.min(n - chunk * batch) {
            set.push(open_idle(&p2, up, kind, &tls));
        }
        // Bounded: a proxy that stops answering (out of descriptors, say)
        // ends the scenario instead of hanging it.
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(opened) = tokio::time::timeout(left, futures_join(set)).await else {
            eprintln!(
                "  {}: {} of {n} tunnels open at the deadline",
                proxy.name,
                held.len()
            );
            return None;
        };
        for s in opened {
            match s {
                Ok(s) => held.push(s),
                Err(e) => {
                    eprintln!("  {}: tunnel {} failed: {e}", proxy.name, held.len() + 1);
                    return None;
                }
            }
        }
        tokio::time::sleep(settle).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid);
    drop(held);
    drop(warm);
    Some((after.saturating_sub(before)) as f64 / n as f64)
}

/// KiB of the proxy's RSS per connection that sent `n` partial request
/// heads (`GET …` and half a header, never finished) and holds them.
async fn partial_heads(proxy: &Proxy, up: &Upstreams, n: usize) -> Option<f64> {
    let pid = proxy.pid()?;
    let addr = proxy.addr?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);
    let head = format!(
        "GET http://{HOST}:{}/1k HTTP/1.1\r\nHost: {HOST}:{}\r\nUser-Agent: bench\r\nAccept: */*\r\nX-Par",
        up.http.port(),
        up.http.port()
    );
    let mut held = Vec::with_capacity(n);
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(head.as_bytes()).await.ok()?;
        held.push(s);
        if Instant::now() > deadline {
            return None;
        }
    }
    let after = settled_rss(pid).await;
    drop(held);
    Some(after.saturating_sub(before) as f64 / n as f64)
}

/// KiB of the proxy's RSS per download of a 16 MiB body whose client
/// reads nothing (a 4 KiB receive buffer): what sluice holds for a slow
/// reader.
async fn stalled_downloads(proxy: &Proxy, up: &Upstreams, n: usize) -> Option<f64> {
    let pid = proxy.pid()?;
    let addr = proxy.addr?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);
    let req = format!(
        "GET http://{HOST}:{}/16m HTTP/1.1\r\nHost: {HOST}:{}\r\n\r\n",
        up.http.port(),
        up.http.port()
    );
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let sock = tokio::net::TcpSocket::new_v4().ok()?;
        sock.set_recv_buffer_size(4096).ok()?;
        let mut s = sock.connect(addr).await.ok()?;
        s.write_all(req.as_bytes()).await.ok()?;
        held.push(s);
    }
    let after = settled_rss(pid).await;
    drop(held);
    Some(after.saturating_sub(before) as f64 / n as f64)
}

/// The process's RSS once it stops growing (checked every 500 ms, at most
/// 20 s).
async fn settled_rss(pid: u32) -> u64 {
    let mut last = rss_kib(pid);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_kib(pid);
        if now <= last + last / 200 {
            return now.max(last);
        }
        last = now;
    }
    last
}

async fn futures_join<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(fs.len());
    let handles: Vec<_> = fs.into_iter().map(Box::pin).collect();
    for h in handles {
        out.push(h.await);
    }
    out
}

// ------------------------------------------------------------------ report

struct Table {
    rows: Vec<(String, String, String, f64, String)>,
}

impl Table {
    fn add(&mut self, scenario: &str, proxy: &str, metric: &str, value: f64, extra: String) {
        self.rows
            .push((scenario.into(), proxy.into(), metric.into(), value, extra));
    }

    fn print(&self) {
        println!("| scenario | path | figure | value | × direct | × squid | notes |");
        println!("|---|---|---|---|---|---|---|");
        for (scenario, proxy, metric, value, extra) in &self.rows {
            let find = |who: &str| {
                self.rows
                    .iter()
                    .find(|r| r.0 == *scenario && r.1 == who && r.2 == *metric)
                    .map(|r| r.3)
            };
            let ratio = |base: Option<f64>| match base {
                Some(b) if b > 0.0 => format!("{:.2}", value / b),
                _ => "–".into(),
            };
            println!(
                "| {scenario} | {proxy} | {metric} | {value:.1} | {} | {} | {extra} |",
                ratio(find("direct")),
                ratio(find("squid"))
            );
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The machine-wide CPU tick counters (the `cpu` line of /proc/stat).
fn cpu_ticks() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect()
}

/// Busy and stolen shares of the CPU between two `cpu_ticks` readings:
/// steal is time the hypervisor gave to other guests, which slows every
/// path of the run alike.
fn cpu_shares(before: &[u64], after: &[u64]) -> String {
    let d: Vec<u64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = d.iter().sum::<u64>().max(1);
    let at = |i: usize| d.get(i).copied().unwrap_or(0) as f64 * 100.0 / total as f64;
    // user nice system idle iowait irq softirq steal
    format!(
        "CPU busy {:.0} %, idle {:.0} %, stolen by the hypervisor {:.0} %",
        100.0 - at(3) - at(4) - at(7),
        at(3) + at(4),
        at(7)
    )
}

/// The proxy's CPU µs per unit (`n` units in the run), or "–" for the
/// direct path (no proxy process to measure).
fn cpu_per(p: &Proxy, r: &Run, n: f64) -> String {
    match p.pid() {
        Some(_) => format!("{:.0}", r.cpu.as_micros() as f64 / n.max(1.0)),
        None => "–".into(),
    }
}

/// `BENCH_ONLY=connect,taint` runs just those scenarios (keepalive,
/// connect, tlsconnect, churn, passthrough, intercept, bulk, secrets, taint, idle, held,
/// stall);
/// unset runs all.
fn only(scenario: &str) -> bool {
    match std::env::var("BENCH_ONLY") {
        Ok(list) if !list.is_empty() => list.split(',').any(|s| s.trim() == scenario),
        _ => true,
    }
}

fn main() {
    // Idle-tunnel counts need file descriptors; children inherit the limit.
    let pid = std::process::id().to_string();
    let _ = Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=65536:65536"])
        .status();
    let started = Instant::now();
    let ticks_at_start = cpu_ticks();
    println!("# sluice benchmark\n");
    println!(
        "machine: {} cores, load average at start {}",
        std::thread::available_parallelism()
            .map(std::num::NonZero::get)
            .unwrap_or(0),
        loadavg()
    );
    println!(
        "measurement: {} s per figure; CPU from /proc/PID/stat (10 ms ticks)\n",
        secs().as_secs()
    );
    let up = upstreams();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut table = Table { rows: Vec::new() };

    let mut proxies = vec![direct(), sluice(&up, "sluice", "none", "enforce")];
    proxies.extend(squid());
    proxies.extend(tinyproxy());
    let names: Vec<String> = proxies.iter().map(|p| p.name.clone()).collect();
    println!("paths: {}\n", names.join(", "));

    rt.block_on(async {
        for p in proxies.iter().filter(|_| only("keepalive")) {
            eprintln!("keep-alive HTTP: {}", p.name);
            let mut r = keepalive_http(p, &up, "/1k", 32, false).await;
            let (p50, p99) = (r.pct(0.5), r.pct(0.99));
            let cpu_us = cpu_per(p, &r, r.ops as f64);
            table.add(
                "keep-alive HTTP 1 KiB ×32",
                &p.name,
                "req/s",
                r.rate(),
                format!(
                    "p50 {p50:.2} ms, p99 {p99:.2} ms, {cpu_us} CPU µs/req, {} errors",
                    r.errors
                ),
            );
        }
        for (path, what) in [("/1m", "text"), ("/rand1m", "random bytes")] {
            for p in proxies.iter().filter(|_| only("connect")) {
                eprintln!("CONNECT, {what}: {}", p.name);
                let r = keepalive_http(p, &up, path, 4, true).await;
                let mib = r.bytes as f64 / 1048576.0;
                table.add(
                    &format!("CONNECT 1 MiB ×4 (plain HTTP inside, {what})"),
                    &p.name,
                    "MB/s",
                    r.mbps(),
                    format!("{} CPU µs/MiB, {} errors", cpu_per(p, &r, mib), r.errors),
                );
            }
        }
        // The same downloads over TLS: an opaque tunnel, which sluice
        // splices without reading (the relay's own cost).
        for p in proxies.iter().filter(|_| only("tlsconnect")) {
            eprintln!("CONNECT, TLS inside: {}", p.name);
            let r = https(p, &up, vec![up.cert.clone()], "/1m", 4, true).await;
            let mib = r.bytes as f64 / 1048576.0;
            table.add(
                "CONNECT 1 MiB ×4 (TLS inside, opaque)",
                &p.name,
                "MB/s",
                r.mbps(),
                format!("{} CPU µs/MiB, {} errors", cpu_per(p, &r, mib), r.errors),
            );
        }
        for p in proxies.iter().filter(|_| only("churn")) {
            eprintln!("churn: {}", p.name);
            let r = churn(p, &up, 8).await;
            table.add(
                "churn (connect+CONNECT+1 KiB+close) ×8",
                &p.name,
                "ops/s",
                r.rate(),
                format!(
                    "{} CPU µs/op, {} errors",
                    cpu_per(p, &r, r.ops as f64),
                    r.errors
                ),
            );
        }
        for p in proxies.iter().filter(|_| only("passthrough")) {
            eprintln!("TLS passthrough: {}", p.name);
            let r = https(p, &up, vec![up.cert.clone()], "/1k", 32, true).await;
            table.add(
                "TLS via passthrough CONNECT ×32",
                &p.name,
                "req/s",
                r.rate(),
                format!("{} errors", r.errors),
            );
        }
    });

    // Intercepted HTTPS: sluice terminates and re-originates TLS.
    if only("intercept") {
        let icpt = sluice(&up, "sluice (intercept)", "all", "enforce");
        let ca = sluice_ca(&icpt);
        let d = direct();
        rt.block_on(async {
            let r = https(&d, &up, vec![up.cert.clone()], "/1k", 32, true).await;
            table.add(
                "HTTPS keep-alive ×32",
                "direct",
                "req/s",
                r.rate(),
                format!("{} errors", r.errors),
            );
            let r = https(&icpt, &up, vec![ca.clone()], "/1k", 32, true).await;
            let cpu_us = r.cpu.as_micros() as f64 / r.ops.max(1) as f64;
            table.add(
                "HTTPS keep-alive ×32",
                "sluice (intercept)",
                "req/s",
                r.rate(),
                format!("{cpu_us:.0} CPU µs/req, {} errors", r.errors),
            );
            let r = https(&d, &up, vec![up.cert.clone()], "/1k", 8, false).await;
            table.add(
                "HTTPS new connection per request ×8",
                "direct",
                "req/s",
                r.rate(),
                format!("{} errors", r.errors),
            );
            let r = https(&icpt, &up, vec![ca.clone()], "/1k", 8, false).await;
            let cpu_us = r.cpu.as_micros() as f64 / r.ops.max(1) as f64;
            table.add(
                "HTTPS new connection per request ×8",
                "sluice (intercept)",
                "req/s",
                r.rate(),
                format!("{cpu_us:.0} CPU µs/req (cached leaf), {} errors", r.errors),
            );
        });
    }

    // The default path's bulk: keep-alive HTTPS, TLS both ways, every
    // body scanned (mitmproxy beside it, when installed).
    if only("bulk") {
        let icpt = sluice(&up, "sluice (intercept)", "all", "enforce");
        let ca = sluice_ca(&icpt);
        let d = direct();
        let mitm = mitmproxy(&up);
        rt.block_on(async {
            for (path, what) in [
                ("/rand1m", "1 MiB random bytes"),
                ("/hosts", "380 KiB HTML naming 4,000 hosts"),
            ] {
                let mut paths = vec![(&d, up.cert.clone()), (&icpt, ca.clone())];
                if let Some((m, mca)) = &mitm {
                    paths.push((m, mca.clone()));
                }
                for (p, roots) in paths {
                    let r = https(p, &up, vec![roots], path, 4, true).await;
                    let mib = r.bytes as f64 / 1048576.0;
                    table.add(
                        &format!("HTTPS keep-alive ×4, {what}"),
                        &p.name,
                        "MB/s",
                        r.mbps(),
                        format!("{} CPU µs/MiB, {} errors", cpu_per(p, &r, mib), r.errors),
                    );
                }
            }
        });
    }

    // Secrets: the same intercepted keep-alive GETs, by a task with a
    // secret, with and without its placeholder swapped into each request.
    if only("secrets") {
        secrets_scenario(&rt, &up, &mut table);
    }

    // Taint on the 1 MiB download path (plain HTTP, scanned).
    if only("taint") {
        let off = sluice(&up, "sluice taint off", "none", "off");
        rt.block_on(async {
            let r = keepalive_http(&off, &up, "/1m", 4, false).await;
            table.add(
                "1 MiB download ×4, taint",
                "sluice taint off",
                "MB/s",
                r.mbps(),
                format!("{} errors", r.errors),
            );
            let r = keepalive_http(&proxies[1], &up, "/1m", 4, false).await;
            table.add(
                "1 MiB download ×4, taint",
                "sluice taint enforce",
                "MB/s",
                r.mbps(),
                format!("{} errors", r.errors),
            );
        });
    }

    // Idle tunnels.
    // 10,000 tunnels need 20,000 descriptors in this process (client and
    // upstream ends) and the hard limit here is 20,000: 8,000 fits.
    // Each count gets fresh proxy processes: memory a process already
    // holds from an earlier run would be reused and hide the growth.
    drop(proxies);
    let idle_runs = [
        (2000usize, Idle::Unused, "idle tunnels ×2000"),
        (8000, Idle::Unused, "idle tunnels ×8000"),
        (
            2000,
            Idle::PlainInside,
            "idle tunnels ×2000, after one plain HTTP request each",
        ),
        (
            2000,
            Idle::Opaque,
            "idle tunnels ×2000, after one HTTPS request each (opaque)",
        ),
        (
            2000,
            Idle::Intercepted,
            "idle tunnels ×2000, after one HTTPS request each (intercepted)",
        ),
        (
            2000,
            Idle::KeepAlive,
            "idle keep-alive connections ×2000, after one GET each",
        ),
    ];
    for (n, kind, scenario) in idle_runs.into_iter().filter(|_| only("idle")) {
        let fresh: Vec<Proxy> = if kind == Idle::Intercepted {
            vec![sluice(&up, "sluice", "all", "enforce")]
        } else {
            [
                Some(sluice(&up, "sluice", "none", "enforce")),
                squid(),
                tinyproxy(),
            ]
            .into_iter()
            .flatten()
            .collect()
        };
        for p in &fresh {
            let roots = match kind {
                Idle::Intercepted => vec![sluice_ca(p)],
                _ => vec![up.cert.clone()],
            };
            let r = rt.block_on(idle_tunnels(p, &up, n, kind, roots));
            match r {
                Some(kib) => table.add(
                    scenario,
                    &p.name,
                    "KiB RSS per connection",
                    kib,
                    String::new(),
                ),
                None => table.add(
                    scenario,
                    &p.name,
                    "KiB RSS per connection",
                    f64::NAN,
                    "could not open them all".into(),
                ),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    // Memory per held connection: partial request heads, stalled
    // downloads (fresh processes, as for idle tunnels).
    if only("held") {
        let p = sluice(&up, "sluice", "none", "enforce");
        let n = 10_000;
        let r = rt.block_on(partial_heads(&p, &up, n));
        table.add(
            &format!("partial request heads ×{n}"),
            &p.name,
            "KiB RSS per connection",
            r.unwrap_or(f64::NAN),
            String::new(),
        );
    }
    if only("stall") {
        let p = sluice(&up, "sluice", "none", "enforce");
        let n = 100;
        let r = rt.block_on(stalled_downloads(&p, &up, n));
        table.add(
            &format!("stalled 16 MiB downloads ×{n} (client reads nothing)"),
            &p.name,
            "KiB RSS per download",
            r.unwrap_or(f64::NAN),
            String::new(),
        );
    }

    table.print();
    println!(
        "\nload average at end {}; total {:.0} s; {}",
        loadavg(),
        started.elapsed().as_secs_f64(),
        cpu_shares(&ticks_at_start, &cpu_ticks())
    );
}

/// The sluice binary measured: this build's, or `SLUICE_BIN` (to compare
/// two builds with one load generator).
fn sluice_bin() -> std::path::PathBuf {
    std::env::var_os("SLUICE_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sluice").into())
}
