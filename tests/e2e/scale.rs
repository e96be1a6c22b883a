//! Scale: many idle connections of mixed kinds held at once, and a fresh
//! request beside them. Heavy and timed, so ignored by default; run it
//! with a raised descriptor limit:
//!
//! ```sh
//! ulimit -n 400000   # as root, or with CAP_SYS_RESOURCE
//! cargo build --release
//! SLUICE_BIN=target/release/sluice SCALE_CONNS=100000 \
//!     cargo test --test e2e scale -- --ignored --nocapture
//! ```
//!
//! `SCALE_CONNS` (default 100,000) sets how many; with a lower limit the
//! test says how many the limit allows and fails, rather than measuring
//! something else. BENCHMARKS.md has the figures it printed.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::*;

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The soft descriptor limit of this process.
fn nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reads one answer, which must be a 200.
fn answer(c: &mut TcpStream) {
    let (status, head, _) = read_one(c);
    assert_eq!(status, 200, "{head}");
}

/// One idle connection of kind `k`: an unused tunnel, a tunnel after one
/// plain GET, a keep-alive connection after one GET, or half a head.
fn open(s: &Sluice, p: u16, k: usize) -> TcpStream {
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let get_in = format!("GET /big?n=100 HTTP/1.1\r\nHost: up.example.com:{p}\r\n\r\n");
    let get = format!(
        "GET http://up.example.com:{p}/big?n=100 HTTP/1.1\r\nHost: up.example.com:{p}\r\n\r\n"
    );
    match k % 5 {
        0 | 1 => {
            write!(c, "CONNECT up.example.com:{p} HTTP/1.1\r\n\r\n").unwrap();
            answer(&mut c);
        }
        2 => {
            write!(c, "CONNECT up.example.com:{p} HTTP/1.1\r\n\r\n").unwrap();
            answer(&mut c);
            c.write_all(get_in.as_bytes()).unwrap();
            answer(&mut c);
        }
        3 => {
            c.write_all(get.as_bytes()).unwrap();
            answer(&mut c);
        }
        _ => c.write_all(&get.as_bytes()[..40]).unwrap(),
    }
    c
}

#[test]
#[ignore = "heavy: 100,000 connections, needs a raised descriptor limit (see the module notes)"]
fn a_hundred_thousand_idle_connections_fit_in_a_gibibyte_and_a_fresh_request_stays_fast() {
    let n: usize = std::env::var("SCALE_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // This process holds each client end and the upstream end of each
    // tunnel (three in five): about 1.6 descriptors a connection.
    let need = (n as u64) * 17 / 10 + 1000;
    assert!(
        nofile() >= need,
        "{n} connections need about {need} descriptors; the limit is {} (raise it: ulimit -n {need})",
        nofile()
    );
    let up = Upstream::start();
    let p = up.port();
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("up.example.com:{p}")])
        .host("up.example.com", &["127.0.0.1"])
        .top(&format!(
            "[limits]\nmax_connections_per_task = {}\nheader_timeout_secs = 600\n",
            n + 2000
        ))
        .task_extra("[task.taint]\nmode = \"enforce\"")
        .admin()
        .start();
    let pid = s.child_id();
    // Warm: the first connections set up what every later one shares.
    let warm: Vec<_> = (0..5).map(|k| open(&s, p, k)).collect();
    let before = rss_kib(pid);
    let mut held = Vec::with_capacity(n);
    // In batches, each left quiet long enough to be parked: connections
    // that pile up over a mission.
    for k in 0..n {
        held.push(open(&s, p, k));
        if k % 5000 == 4999 {
            std::thread::sleep(Duration::from_millis(2500));
        }
    }
    std::thread::sleep(Duration::from_millis(3000));
    let rss = rss_kib(pid);
    let per = (rss.saturating_sub(before)) as f64 / n as f64;
    // Fresh requests beside them: a new connection and one GET each.
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            c,
            "GET http://up.example.com:{p}/big?n=1000 HTTP/1.1\r\nHost: up.example.com:{p}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        answer(&mut c);
        times.push(t.elapsed());
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let p99 = times[times.len() * 99 / 100];
    println!(
        "{n} idle connections: sluice RSS {rss} KiB ({per:.1} KiB each, {} MiB for 100,000); fresh GET p50 {p50:?}, p99 {p99:?}; parked now: {}",
        (per * 100_000.0 / 1024.0) as u64,
        s.metric("sluice_parked_connections")
    );
    assert!(
        per * 100_000.0 < 1024.0 * 1024.0,
        "{per:.1} KiB a connection: 100,000 would take {} MiB",
        (per * 100_000.0 / 1024.0) as u64
    );
    assert!(p99 < Duration::from_millis(10), "p99 {p99:?}");
    drop(held);
    drop(warm);
}
