//! Taint benchmark (not a test; `cargo bench --bench taint`):
//!
//! 1. scanner throughput in MB/s on a realistic corpus: an HTML page, npm
//!    package metadata, minified JavaScript, a binary tarball, and the
//!    HTML page gzip-encoded (decoded for scanning);
//! 2. end-to-end download throughput through the release `sluice` binary
//!    with taint `enforce` vs `off`, with curl as the client, against an
//!    upstream on 127.0.0.1.
//!
//! Every loop is bounded in count; only 127.0.0.1 is used.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sluice::inspect::BodyScanner;

fn html(size: usize) -> Vec<u8> {
    let mut out = String::from("<!doctype html><html><head><title>Docs</title><link rel=stylesheet href=\"/static/site.css\"></head><body>\n");
    let mut i = 0;
    while out.len() < size {
        out.push_str(&format!(
            "<h2 id=\"s{i}\">Section {i}</h2><p>The quick brown fox jumps over the lazy dog. See <a href=\"https://docs{}.example.com/guide/page{i}.html\">the guide</a> \
             or <a href=\"/relative/path/{i}\">this page</a>, version 1.{i}.3, released 2026-01-0{}. Contact support@example.org.</p>\n",
            i % 50,
            i % 9
        ));
        i += 1;
    }
    out.push_str("</body></html>");
    out.into_bytes()
}

fn npm_metadata(size: usize) -> Vec<u8> {
    let mut out = String::from("{\"_id\":\"left-pad\",\"name\":\"left-pad\",\"dist-tags\":{\"latest\":\"1.3.0\"},\"versions\":{");
    let mut i = 0;
    while out.len() < size {
        out.push_str(&format!(
            "\"1.{i}.0\":{{\"name\":\"left-pad\",\"version\":\"1.{i}.0\",\"description\":\"String left pad\",\"main\":\"index.js\",\
             \"repository\":{{\"type\":\"git\",\"url\":\"git+https://github.com/stevemao/left-pad.git\"}},\
             \"dist\":{{\"shasum\":\"5b8a3a7765dfe001261dde915589e782f8c94d1e\",\"tarball\":\"https:\\/\\/registry.npmjs.org\\/left-pad\\/-\\/left-pad-1.{i}.0.tgz\",\
             \"integrity\":\"sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQEaUSDOV8VEXAjQfHNyRRFA9oaFFHdkP1Hh8mtJF+ppuW1g==\"}},\
             \"maintainers\":[{{\"name\":\"stevemao\",\"email\":\"maochenyan@gmail.com\"}}]}},"
        ));
        i += 1;
    }
    out.push_str("\"end\":{}}}");
    out.into_bytes()
}

fn minified_js(size: usize) -> Vec<u8> {
    let mut out = String::new();
    let mut i = 0;
    while out.len() < size {
        out.push_str(&format!(
            "function a{i}(e,t){{var n=e.target.value,r=t.props.items.length;return this.state.x{i}=n.trim().toLowerCase(),\
             fetch(\"/api/v1/items/\"+r).then(function(e){{return e.json()}}).catch(console.error),window.location.href.indexOf(\"#\")>-1}};"
        ));
        i += 1;
    }
    out.into_bytes()
}

fn tarball(size: usize) -> Vec<u8> {
    // Incompressible bytes, as in a .tgz.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Scans `body` in 16 KiB chunks `rounds` times; returns MB/s of body
/// bytes (as sent) and the hosts found in one pass.
/// CPU time of this thread, from the scheduler's own account (ns).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = stat
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// MB per second of this thread's CPU time (best of 5 passes, so a busy
/// neighbour on a shared machine counts least), and the hosts found.
/// `encoding` is the Content-Encoding; a corpus named `(text/html)` is
/// served with that Content-Type (its rendered text is read as well).
fn scan_rate(encoding: Option<&str>, html: bool, body: &[u8], rounds: usize) -> (f64, usize) {
    let mut hosts = 0;
    let mut best = 0f64;
    for _ in 0..5 {
        let started = thread_cpu();
        for r in 0..rounds {
            let encodings: Vec<&[u8]> = encoding.map(str::as_bytes).into_iter().collect();
            let ct = html.then_some(&b"text/html; charset=utf-8"[..]);
            let mut s = BodyScanner::for_response(&encodings, ct, u64::MAX);
            let mut n = 0;
            for c in body.chunks(16 * 1024) {
                n += s.feed(c).names.len();
            }
            n += s.finish().0.len();
            if r == 0 {
                hosts = n;
            }
        }
        let secs = (thread_cpu() - started).as_secs_f64();
        best = best.max((body.len() * rounds) as f64 / secs / 1e6);
    }
    (best, hosts)
}

fn upstream(body: Vec<u8>) -> (tokio::runtime::Runtime, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let body = Bytes::from(body);
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        async move { Ok::<_, hyper::Error>(Response::new(Full::new(body))) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (rt, addr)
}

/// Downloads `url` through `proxy` with curl; returns MB/s.
fn download(proxy: Option<&str>, url: &str) -> f64 {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "60",
        "-o",
        "/dev/null",
        "-w",
        "%{speed_download}",
    ]);
    if let Some(p) = proxy {
        cmd.args(["-x", p]);
    } else {
        cmd.args(["--noproxy", "*"]);
        cmd.args([
            "--resolve",
            &format!(
                "docs.example.com:{}:127.0.0.1",
                url.rsplit(':').next().unwrap().split('/').next().unwrap()
            ),
        ]);
    }
    let out = cmd.arg(url).output().expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<f64>()
        .unwrap_or(0.0)
        / 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Starts sluice with the given taint mode; returns the child and proxy URL.
fn sluice(dir: &std::path::Path, port: u16, mode: &str) -> (std::process::Child, String) {
    let cfg = format!(
        "state_dir = \"state-{mode}\"\n[resolver]\nnameservers = [\"127.0.0.1:9\"]\n[resolver.hosts]\n\"docs.example.com\" = [\"127.0.0.1\"]\n\
         [[task]]\nid = \"bench\"\nlisten = [\"tcp:127.0.0.1:0\"]\nallow = [\"docs.example.com:{port}\"]\nallow_private = [\"127.0.0.0/8\"]\n\
         [task.taint]\nmode = \"{mode}\"\nmax_scan_bytes = 1073741824\n"
    );
    let path = dir.join(format!("{mode}.toml"));
    std::fs::write(&path, cfg).unwrap();
    let mut child = Command::new(sluice_bin())
        .args(["run", "--config"])
        .arg(&path)
        .env("SLUICE_LOG", "warn,sluice::server=info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(i) = line.find("listen=tcp:") {
            let addr = line[i + 11..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            std::thread::spawn(move || for _ in lines {});
            return (child, format!("http://{addr}"));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("sluice did not start");
}

fn main() {
    println!("## Scanner throughput (16 KiB chunks, one core, MB per CPU second)\n");
    println!("| corpus | size | MB/s | hosts found |");
    println!("|---|---|---|---|");
    let page = html(1 << 20);
    let corpora: Vec<(&str, Option<&str>, Vec<u8>)> = vec![
        ("HTML page", None, page.clone()),
        ("npm package metadata (JSON)", None, npm_metadata(1 << 20)),
        ("minified JavaScript", None, minified_js(1 << 20)),
        ("binary tarball", None, tarball(4 << 20)),
        ("HTML page, gzip (decoded)", Some("gzip"), gzip(&page)),
        ("HTML page (text/html)", None, page.clone()),
    ];
    // `SCAN_CORPUS=JavaScript` runs only the corpora whose name holds it.
    let pick = std::env::var("SCAN_CORPUS").unwrap_or_default();
    for (name, enc, body) in corpora.iter().filter(|c| c.0.contains(pick.as_str())) {
        let rounds = (64 << 20) / body.len().max(1);
        let html = name.contains("(text/html)");
        let (rate, hosts) = scan_rate(*enc, html, body, rounds.clamp(4, 64));
        println!(
            "| {name} | {} KiB | {rate:.0} | {hosts} |",
            body.len() / 1024
        );
    }

    if std::env::var_os("SCAN_ONLY").is_some() {
        return;
    }
    println!(
        "\n## End-to-end download through sluice (curl, 64 MiB HTML-like body, median of 5)\n"
    );
    let mut big = Vec::with_capacity(64 << 20);
    while big.len() < 64 << 20 {
        big.extend_from_slice(&page);
    }
    let (_rt, up) = upstream(big);
    let url = format!("http://docs.example.com:{}/big", up.port());
    let dir = tempfile::tempdir().unwrap();
    let direct = median((0..5).map(|_| download(None, &url)).collect());
    let mut rates = Vec::new();
    for mode in ["off", "enforce"] {
        let (mut child, proxy) = sluice(dir.path(), up.port(), mode);
        let r = median((0..5).map(|_| download(Some(&proxy), &url)).collect());
        let _ = child.kill();
        let _ = child.wait();
        rates.push((mode, r));
    }
    println!("| path | MB/s | ratio to direct |");
    println!("|---|---|---|");
    println!("| direct | {direct:.0} | 1.00 |");
    for (mode, r) in &rates {
        println!("| sluice, taint {mode} | {r:.0} | {:.2} |", r / direct);
    }
    let off = rates[0].1;
    let enforce = rates[1].1;
    println!("\ntaint enforce / taint off = {:.2}", enforce / off);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average during run: {}", load.trim());
}

/// The sluice binary measured: this build's, or `SLUICE_BIN` (to compare
/// two builds with one load generator).
fn sluice_bin() -> std::path::PathBuf {
    std::env::var_os("SLUICE_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sluice").into())
}
