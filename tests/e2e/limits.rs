//! Slow clients, connection caps and shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::*;

/// `n` clients that each send part of a request head and then stall.
fn slowloris(s: &Sluice, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
            c.write_all(b"GET http://pkgs.example.com/ HTTP/1.1\r\nX-Slow: ")
                .unwrap();
            c
        })
        .collect()
}

#[test]
fn slowloris_does_not_block_others_and_is_cut_off() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "[limits]\nheader_timeout_secs = 2\n");
    // Twenty slow clients, each sending a few header bytes and stalling.
    let mut slow = slowloris(&s, 20);
    // A normal client is served at once.
    let started = Instant::now();
    let url = format!("http://pkgs.example.com:{}/", up.port());
    assert_eq!(get(&s, &url), 200);
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
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "[limits]\nmax_connections_per_task = 2\n");
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(s.proxy_addr()).unwrap())
        .collect();
    // Once sluice has accepted both, a third connection is refused at
    // accept. (A probe that slips in first is answered 403 — port 80 is
    // not allowed — and closed, so it holds no slot.)
    let a = wait_for(
        "a third connection is answered 503",
        Duration::from_secs(5),
        || {
            parse_http(&raw(
                &s.proxy_addr(),
                b"GET http://pkgs.example.com/ HTTP/1.1\r\n\r\n",
            ))
            .filter(|a| a.status == 503)
        },
    );
    assert_refused(&a, 503, "over-capacity");
    // The refusal is logged like any other (the request was never read,
    // so the row names no destination).
    let row = row_where(&s, "t", "-", |r| r["rule"] == "over-capacity");
    assert_eq!(
        (row["decision"].as_str(), row["status"].as_u64()),
        (Some("deny"), Some(503))
    );
    drop(held);
    let url = format!("http://pkgs.example.com:{}/", up.port());
    eventually("capacity comes back", Duration::from_secs(5), || {
        get(&s, &url) == 200
    });
}

#[test]
fn sigterm_drains_in_flight_requests_and_flushes_the_log() {
    let up = Upstream::start();
    let (_dns, mut s) = pkgs_sluice(&up, "", "");
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
    // The request below goes through the tunnel only once sluice is
    // draining.
    s.wait_line(|l| l.contains("shutting down"));
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
    // The log was flushed on exit: the request served inside the tunnel,
    // then the tunnel.
    let rows = s.access_log("t", 2);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["kind"], "intercepted");
    assert_eq!(rows[0]["path"], "/drain");
    assert_eq!(rows[1]["kind"], "connect");
    // New connections were refused after SIGTERM.
    assert!(TcpStream::connect(s.proxy_addr()).is_err());
}

#[test]
fn kill_9_under_traffic_loses_at_most_the_last_second() {
    let up = Upstream::start_with(std::sync::Arc::new(|req: &Seen| {
        req.uri.strip_prefix("/name/").map(|n| {
            hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(format!(
                "see https://host{n}.example.com/"
            ))))
        })
    }));
    let dns = FakeDns::start();
    let p = up.port();
    let mut s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .admin()
        .start();
    let proxy = s.proxy_addr();
    // Phase 1: 50 pages, each naming a host; then more than a second passes.
    for i in 0..50 {
        let mut c = TcpStream::connect(&proxy).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "GET http://pkgs.example.com:{p}/name/{i} HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        assert!(out.starts_with(b"HTTP/1.1 200"));
    }
    // Not a wait for something: the age is what is under test. The SPEC
    // bounds a crash's loss to the last second, so what phase 1 did, now
    // 1.5 s old, must survive the kill below.
    std::thread::sleep(Duration::from_millis(1500));
    // Phase 2: heavy traffic from 8 threads, killed mid-flight.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (proxy, stop) = (proxy.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 5000 {
                    if let Ok(mut c) = TcpStream::connect(&proxy) {
                        let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                        let _ = write!(c, "GET http://pkgs.example.com:{p}/name/{w}x{i} HTTP/1.1\r\nConnection: close\r\n\r\n");
                        let mut out = Vec::new();
                        let _ = c.read_to_end(&mut out);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    // Kill once the traffic is in full flow.
    eventually(
        "phase-2 traffic reaches the upstream",
        Duration::from_secs(20),
        || up.request_count() >= 50 + 200,
    );
    s.kill_and_restart();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    // Every phase-1 host is still tainted after the restart.
    let (_, taint) = s.admin_call("GET", "/tasks/t/taint");
    let v: serde_json::Value = serde_json::from_str(&taint).unwrap();
    let hosts: Vec<&str> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["host"].as_str())
        .collect();
    for i in 0..50 {
        assert!(
            hosts.contains(&format!("host{i}.example.com").as_str()),
            "host{i} lost"
        );
    }
    // The access log is readable: at most the one line torn by the kill,
    // which the restarted sluice ends before appending.
    let text = std::fs::read_to_string(s.task_file("t", "access.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let bad = lines
        .iter()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_err())
        .count();
    assert!(bad <= 1, "{bad} unreadable lines");
    assert!(lines.len() >= 50);
    assert_eq!(s.report(&[]).status.code(), Some(0));
}

/// Heavy: `cargo test --test e2e ten_thousand -- --ignored --nocapture`.
/// Holds 10,000 idle client connections open against sluice, then measures
/// sluice's memory and the latency of normal requests beside them.
#[test]
#[ignore = "heavy (10,000 connections, minutes on 2 cores): run by hand with --ignored"]
fn ten_thousand_concurrent_connections() {
    let n = 10_000;
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(
        &up,
        "",
        "[limits]\nmax_connections_per_task = 20000\nheader_timeout_secs = 120\n",
    );
    let pid = s.child_id();
    let before = rss_kib(pid);
    let started = Instant::now();
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = TcpStream::connect(s.proxy_addr()).expect("connect");
        // A partial request head keeps each connection busy in sluice.
        c.write_all(b"GET http://pkgs.example.com/ HTTP/1.1\r\n")
            .unwrap();
        held.push(c);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "opening took too long"
        );
    }
    let after = steady_rss(pid, Duration::from_secs(15));
    let url = format!("http://pkgs.example.com:{}/", up.port());
    let mut lat = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let out = curl(&[
            "-x",
            &s.proxy(0),
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
        lat.push(t.elapsed());
    }
    lat.sort();
    eprintln!(
        "10,000 connections: opened in {:?}; sluice RSS {} KiB -> {} KiB ({:.1} KiB per connection); curl request beside them p50 {:?}, max {:?}",
        started.elapsed(),
        before,
        after,
        (after - before) as f64 / n as f64,
        lat[lat.len() / 2],
        lat[lat.len() - 1]
    );
    assert!(lat[lat.len() / 2] < Duration::from_millis(500));
    drop(held);
}

/// sluice's resident memory, from /proc.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// sluice's resident memory once it stops changing (two readings 500 ms
/// apart agree), or after `limit` whatever it is then.
fn steady_rss(pid: u32, limit: Duration) -> u64 {
    let mut last = 0;
    poll(limit, || {
        // The sampling interval of a measurement, not a wait for an event.
        std::thread::sleep(Duration::from_millis(500));
        let now = rss_kib(pid);
        let steady = now == last;
        last = now;
        steady.then_some(now)
    })
    .unwrap_or_else(|| rss_kib(pid))
}

/// p50, p99 and max of a set of latencies, in milliseconds.
fn percentiles(mut lat: Vec<Duration>) -> (f64, f64, f64) {
    lat.sort();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99), at(1.0))
}

#[test]
fn slowloris_and_slow_readers_beside_normal_clients() {
    let dns = FakeDns::start();
    // The 8 MiB body is made once (the built-in /big route computes it per
    // request, which would make the upstream, not sluice, the bottleneck).
    let big = 8 << 20;
    let body = bytes::Bytes::from(pattern(big));
    let up = Upstream::start_with(std::sync::Arc::new(move |req: &Seen| {
        (req.uri == "/huge").then(|| hyper::Response::new(http_body_util::Full::new(body.clone())))
    }));
    let p = up.port();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .top("[limits]\nheader_timeout_secs = 30")
        .start();
    let pid = s.child_id();
    let rss_before = rss_kib(pid);
    // 100 slowloris clients: a partial head each, then nothing.
    let mut slow = slowloris(&s, 100);
    // 50 slow readers: each asks for 8 MiB and reads nothing, so sluice's
    // writes to them stall. Backpressure must hold the rest upstream, not in
    // sluice's memory (50 × 8 MiB would be 400 MiB; hyper's read and write
    // buffers bound each stalled stream near 1 MiB, measured 53 MiB in all).
    for _ in 0..50 {
        let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
        write!(
            c,
            "GET http://pkgs.example.com:{p}/huge HTTP/1.1\r\nHost: pkgs.example.com:{p}\r\n\r\n"
        )
        .unwrap();
        slow.push(c);
    }
    // Let the slow readers' buffers fill (sluice's memory stops growing),
    // so what follows is the steady state, not the start-up burst.
    steady_rss(pid, Duration::from_secs(15));
    // Normal clients, four at a time, 50 requests each.
    let addr = s.proxy_addr();
    let lat: Vec<Duration> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let addr = addr.clone();
                sc.spawn(move || {
                    (0..50)
                        .map(|i| {
                            let t = Instant::now();
                            let ans = raw(
                                &addr,
                                format!("GET http://pkgs.example.com:{p}/n/{w}/{i} HTTP/1.1\r\nHost: pkgs.example.com:{p}\r\nConnection: close\r\n\r\n").as_bytes(),
                            );
                            let a = parse_http(&ans).unwrap_or_else(|| panic!("no answer after {:?}: {:?}", t.elapsed(), String::from_utf8_lossy(&ans)));
                            assert_eq!(a.status, 200);
                            assert_eq!(a.body, b"hello from upstream\n");
                            t.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let rss_after = rss_kib(pid);
    let (p50, p99, max) = percentiles(lat);
    eprintln!(
        "200 normal requests beside 100 slowloris and 50 slow readers: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms; sluice RSS {rss_before} KiB -> {rss_after} KiB"
    );
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r.uri.starts_with("/n/"))
            .count(),
        200,
        "every normal request reached upstream once"
    );
    assert!(
        rss_after < rss_before + 160 * 1024,
        "slow readers' bodies stay upstream, not in sluice: {rss_before} -> {rss_after} KiB"
    );
    // No normal request waited on a slow client (the header timeout is 30 s,
    // so a request queued behind one would take that long).
    assert!(max < 5_000.0, "max {max:.0} ms");
    // The slow readers still get their bytes intact once they read.
    let mut c = slow.pop().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if let Some(a) = parse_http(&got) {
            if a.body.len() >= big {
                assert_eq!(a.body, pattern(big));
                return;
            }
        }
    }
    panic!(
        "the slow reader's 8 MiB did not arrive: {} bytes",
        got.len()
    );
}

#[test]
fn sigterm_under_load_finishes_every_request_in_flight() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let mut s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .start();
    let addr = s.proxy_addr();
    let stop = std::sync::atomic::AtomicBool::new(false);
    // 16 clients, each sending requests that take 500 ms upstream, one after
    // another, until sluice stops accepting.
    let (done, failed, signalled) = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..16)
            .map(|w| {
                let addr = addr.clone();
                let stop = &stop;
                sc.spawn(move || {
                    let (mut done, mut failed) = (Vec::new(), Vec::new());
                    for i in 0..20 {
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                        let Ok(mut c) = TcpStream::connect(&addr) else {
                            break;
                        };
                        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                        let id = format!("/slow/{w}/{i}");
                        if write!(c, "GET http://pkgs.example.com:{p}{id} HTTP/1.1\r\nHost: pkgs.example.com:{p}\r\nConnection: close\r\n\r\n").is_err() {
                            break;
                        }
                        let mut ans = Vec::new();
                        let _ = c.read_to_end(&mut ans);
                        match parse_http(&ans) {
                            Some(a) if a.status == 200 && a.body == b"hello from upstream\n" => {
                                done.push(id)
                            }
                            _ => failed.push((id, String::from_utf8_lossy(&ans).to_string())),
                        }
                    }
                    (done, failed)
                })
            })
            .collect();
        // Let a round finish, then SIGTERM while the next 16 requests are
        // upstream.
        eventually(
            "a first round done and a second upstream",
            Duration::from_secs(20),
            || up.request_count() >= 32,
        );
        s.signal("TERM");
        let signalled = Instant::now();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for h in workers {
            let (d, f) = h.join().unwrap();
            done.extend(d);
            failed.extend(f);
        }
        (done, failed, signalled)
    });
    let code = s.wait_exit();
    eprintln!(
        "SIGTERM with 16 clients busy: {} requests finished, {} refused after the signal; exit {:?} {:?} after SIGTERM",
        done.len(),
        failed.len(),
        code,
        signalled.elapsed()
    );
    assert_eq!(code, Some(0));
    // Every request that reached upstream was answered in full: none was
    // cut off by the shutdown.
    let reached: Vec<String> = up
        .requests()
        .into_iter()
        .map(|r| r.uri)
        .filter(|u| u.starts_with("/slow/"))
        .collect();
    for id in &reached {
        assert!(
            done.contains(id),
            "{id} reached upstream but its answer was lost: {failed:?}"
        );
    }
    assert!(done.len() >= 16, "at least one round finished: {done:?}");
    // And each finished request has its line in the flushed access log.
    let rows = s.access_log("t", done.len());
    assert_eq!(
        rows.iter().filter(|r| r["status"] == 200).count(),
        done.len(),
        "one log line per answered request"
    );
}

/// "Max open files" soft and hard limits of a process, from /proc.
fn nofile(pid: &str) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .to_string();
    let mut f = line.split_whitespace().skip(3);
    (
        f.next().unwrap_or_default().to_string(),
        f.next().unwrap_or_default().to_string(),
    )
}

#[test]
fn the_open_file_soft_limit_is_raised_to_the_hard_limit() {
    let (_, hard) = nofile("self");
    let dns = FakeDns::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(
        &path,
        SluiceBuilder::new(&dns)
            .allow(&["pkgs.example.com:443"])
            .config(),
    )
    .unwrap();
    // Started with a soft limit of 256, as a default shell might give it.
    // `ulimit -Sn` in sh, then exec: the limit is set on sluice itself.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "ulimit -Sn 256 && exec \"$0\" run --config \"$1\""])
        .arg(bin())
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sh runs");
    let pid = child.id().to_string();
    // Read the limits once sluice itself runs (sh has exec'd it) and
    // has made its state folder, which it does after raising the limit.
    eventually("sluice started", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sluice")
            && dir.path().join("state").is_dir()
    });
    let seen = nofile(&pid);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        seen,
        (hard.clone(), hard),
        "soft limit raised to the hard one"
    );
}

/// sluice reads a connection's first head itself before hyper takes over
/// (so a held, unfinished head costs little memory): a head that arrives
/// in pieces is still served, and bytes that cannot start a head — TLS
/// sent to the plain port — are refused at once with the usual answer,
/// not left waiting for the header timeout.
#[test]
fn a_head_in_pieces_is_served_and_tls_bytes_are_refused_at_once() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "[limits]\nheader_timeout_secs = 60\n");
    let mut c = TcpStream::connect(s.proxy_addr()).unwrap();
    c.set_nodelay(true).unwrap();
    let head = format!(
        "GET http://pkgs.example.com:{p}/pieces HTTP/1.1\r\nHost: pkgs.example.com:{p}\r\nConnection: close\r\n\r\n",
        p = up.port()
    );
    for piece in head.as_bytes().chunks(9) {
        c.write_all(piece).unwrap();
        // Apart, so they arrive as separate reads.
        std::thread::sleep(Duration::from_millis(15));
    }
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(up.requests().len(), 1);

    let mut t = TcpStream::connect(s.proxy_addr()).unwrap();
    t.write_all(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03")
        .unwrap();
    // Far less than the 60 s header timeout: the answer comes at once.
    t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    let _ = t.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("bad-target"), "{text}");
    assert_eq!(up.requests().len(), 1, "nothing more reached upstream");
}
