//! Operating sluice: reload (file, SIGHUP, admin), the admin API and
//! metrics, `sluice report`, and learning an allow-list in shadow mode.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn editing_the_file_reloads_and_an_invalid_edit_changes_nothing() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let base = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .admin();
    let s = base.start();
    let other = format!("http://other.example.com:{p}/");
    assert_eq!(get(&s, &other), 403);

    // Add a host: allowed without a restart, within 2 s.
    s.write_config(&s.pin(&base.allow(&[format!("other.example.com:{p}")]).config()));
    let started = Instant::now();
    eventually("the new host is allowed", Duration::from_secs(2), || {
        get(&s, &other) == 200
    });
    assert!(started.elapsed() < Duration::from_secs(2));
    // Nothing but the edit was sent: the file watcher did it.
    s.wait_reloads_by("file change", 1);
    // The allowed request's row (the refused ones before it are there too).
    let row = row_where(&s, "t", "other.example.com", |r| r["status"] == 200);
    assert_eq!(row["generation"], 2);

    // An invalid edit: the old config stays in force; POST /reload says why.
    s.write_config(
        "[[task]]\nid = \"t\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"bad host\"]\n",
    );
    s.wait_line(|l| l.contains("config reload refused"));
    assert_eq!(get(&s, &other), 200, "the previous config is still served");
    let (code, body) = s.admin_call("POST", "/reload");
    assert_eq!(code, 400);
    assert!(body.contains("sluice.toml:4: task[t].allow"), "{body}");
    let (_, metrics) = s.admin_call("GET", "/metrics");
    assert!(
        metrics.contains("sluice_reloads_total{result=\"error\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
}

#[test]
fn rename_over_and_symlink_swap_are_picked_up() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let dir = tempfile::tempdir().unwrap();
    let real_a = dir.path().join("a.toml");
    let link = dir.path().join("sluice.toml");
    let allowing = |hosts: &[String]| SluiceBuilder::new(&dns).allow(hosts).config();
    std::fs::write(&real_a, allowing(&[format!("pkgs.example.com:{p}")])).unwrap();
    std::os::unix::fs::symlink(&real_a, &link).unwrap();
    let s = Sluice::start_in(dir, link.clone());
    let with = |hosts: &[String]| s.pin(&allowing(hosts));
    let other = format!("http://other.example.com:{p}/");
    let paste = format!("http://paste.example.com:{p}/");

    // Symlink swap: point the link at another file.
    let real_b = s.dir.path().join("b.toml");
    std::fs::write(&real_b, with(&[format!("other.example.com:{p}")])).unwrap();
    let tmp_link = s.dir.path().join("sluice.toml.new");
    std::os::unix::fs::symlink(&real_b, &tmp_link).unwrap();
    std::fs::rename(&tmp_link, &link).unwrap();
    eventually("symlink swap", Duration::from_secs(2), || {
        get(&s, &other) == 200
    });

    // Rename a new file over the link's target.
    let tmp = s.dir.path().join("b.toml.tmp");
    std::fs::write(&tmp, with(&[format!("paste.example.com:{p}")])).unwrap();
    std::fs::rename(&tmp, &real_b).unwrap();
    eventually("rename over", Duration::from_secs(2), || {
        get(&s, &paste) == 200
    });
    assert_eq!(get(&s, &other), 403);
}

/// The file watcher reloads on the same edit, so the listeners opening and
/// closing would be seen without SIGHUP: what proves the signal is
/// sluice's own `config reloaded: ... trigger="SIGHUP"` line, one per
/// signal.
#[test]
fn sighup_reloads_and_added_or_removed_tasks_open_and_close_listeners() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let b = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .admin();
    let s = b.start();
    let first = s.proxy_addr();
    let base = s.pin(&b.config());
    // A second task on its own listener (port 0: sluice logs the port).
    let with_task = format!(
        "{base}\n[[task]]\nid = \"second\"\nlisten = [\"tcp:127.0.0.1:0\"]\nallow = [\"other.example.com:{p}\"]\nallow_private = [\"127.0.0.0/8\"]\n"
    );
    assert_eq!(s.reloads_by("SIGHUP"), 0);
    s.write_config(&with_task);
    s.signal("HUP");
    let reloaded = s.wait_reloads_by("SIGHUP", 1);
    assert!(reloaded[0].contains("generation "), "{reloaded:?}");
    let line = s
        .wait_line(|l| l.contains("listening") && l.contains("listen=tcp:") && !l.contains(&first));
    let second = line[line.find("listen=tcp:").unwrap() + 11..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        get_via(
            &format!("http://{second}"),
            &format!("http://other.example.com:{p}/")
        ),
        200,
        "the new task's listener accepts"
    );
    let rows = s.access_log("second", 1);
    assert_eq!(rows[0]["task"], "second");
    let (_, tasks) = s.admin_call("GET", "/tasks");
    let v: serde_json::Value = serde_json::from_str(&tasks).unwrap();
    assert_eq!(v["tasks"].as_array().unwrap().len(), 2);

    // Remove it again: its listener refuses connections.
    s.write_config(&base);
    s.signal("HUP");
    s.wait_reloads_by("SIGHUP", 2);
    eventually(
        "the removed task's listener closes",
        Duration::from_secs(3),
        || TcpStream::connect(&second).is_err(),
    );
    assert_eq!(
        get(&s, &format!("http://pkgs.example.com:{p}/")),
        200,
        "the first task still serves"
    );
}

#[test]
fn removing_a_host_closes_its_open_tunnel() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let b = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .admin();
    let s = b.clone().allow(&[format!("other.example.com:{p}")]).start();
    let mut c = tunnel(&s, &format!("other.example.com:{p}"));
    write!(c, "GET /x HTTP/1.1\r\nHost: other.example.com:{p}\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));

    s.write_config(&s.pin(&b.config()));
    let (code, body) = s.admin_call("POST", "/reload");
    assert_eq!(code, 200, "{body}");
    let started = Instant::now();
    let mut rest = Vec::new();
    assert!(c.read_to_end(&mut rest).is_ok(), "closed, not timed out");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn requests_in_flight_keep_the_decision_they_started_with() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let b = SluiceBuilder::new(&dns).admin();
    let s = b.clone().allow(&[format!("pkgs.example.com:{p}")]).start();
    let proxy = s.proxy_addr();
    // 200 requests to a slow route (500 ms), all sent before the reload.
    let clients: Vec<TcpStream> = (0..200)
        .map(|i| {
            let mut c = TcpStream::connect(&proxy).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            write!(
                c,
                "GET http://pkgs.example.com:{p}/slow/{i} HTTP/1.1\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            c
        })
        .collect();
    eventually("all 200 reached upstream", Duration::from_secs(10), || {
        up.request_count() == 200
    });
    // Now remove the host.
    s.write_config(&s.pin(&b.allow(&["other.example.com:1"]).config()));
    let (code, _) = s.admin_call("POST", "/reload");
    assert_eq!(code, 200);
    let mut ok = 0;
    for mut c in clients {
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        if out.starts_with(b"HTTP/1.1 200") {
            ok += 1;
        }
    }
    assert_eq!(
        ok, 200,
        "every request in flight completed under the old config"
    );
    assert_eq!(
        get(&s, &format!("http://pkgs.example.com:{p}/after")),
        403,
        "new requests see the new config"
    );
    let rows = s.access_log("t", 201);
    assert_eq!(
        rows.iter()
            .filter(|r| r["decision"] == "allow" && r["generation"] == 1)
            .count(),
        200
    );
    // (The file watcher may have reloaded first: generation 2 or 3.)
    assert_eq!(
        rows.iter()
            .filter(|r| r["rule"] == "not-allowed" && r["generation"].as_u64() > Some(1))
            .count(),
        1
    );
}

#[test]
fn admin_api_answers_with_values() {
    let dns = FakeDns::start();
    let up = Upstream::start_with(std::sync::Arc::new(|req: &Seen| {
        (req.uri == "/readme").then(|| {
            hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(
                "see https://paste.example.com/x",
            )))
        })
    }));
    let p = up.port();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("docs.example.com:{p}")])
        .admin()
        .start();
    assert_eq!(get(&s, &format!("http://docs.example.com:{p}/readme")), 200);
    assert_eq!(get(&s, &format!("http://other.example.com:{p}/")), 403);
    assert_eq!(get(&s, &format!("http://other.example.com:{p}/")), 403);

    assert_eq!(s.admin_call("GET", "/healthz"), (200, "ok\n".to_string()));
    eventually(
        "metrics count the decisions",
        Duration::from_secs(3),
        || {
            s.admin_call("GET", "/metrics").1.contains(
                r#"sluice_decisions_total{task="t",decision="deny",rule="not-allowed"} 2"#,
            )
        },
    );
    let (_, m) = s.admin_call("GET", "/metrics");
    assert!(
        m.contains(r#"sluice_decisions_total{task="t",decision="allow",rule=""} 1"#),
        "{m}"
    );
    assert!(m.contains(r#"sluice_taint_hosts{task="t"} 1"#), "{m}");
    assert!(
        m.contains(r#"sluice_bytes_total{task="t",direction="down"} 31"#),
        "{m}"
    );
    assert!(m.contains("sluice_connections_active"), "{m}");
    assert!(m.contains("sluice_upstream_connect_seconds_bucket"), "{m}");
    assert!(m.contains("sluice_first_byte_seconds_count"), "{m}");

    let (code, tasks) = s.admin_call("GET", "/tasks");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&tasks).unwrap();
    assert_eq!(v["generation"], 1);
    let t = &v["tasks"][0];
    assert_eq!(t["id"], "t");
    assert_eq!(t["listen"][0], format!("tcp:{}", s.proxy_addr()));
    assert_eq!(t["decisions"]["allow"], 1);
    assert_eq!(t["decisions"]["deny"], 2);
    assert_eq!(t["taint_hosts"], 1);

    let (code, taint) = s.admin_call("GET", "/tasks/t/taint");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&taint).unwrap();
    assert_eq!(v["hosts"][0]["host"], "paste.example.com");
    assert_eq!(
        v["hosts"][0]["source"],
        format!("http://docs.example.com:{p}/readme")
    );
    assert_eq!(s.admin_call("GET", "/tasks/nope/taint").0, 404);
    assert_eq!(
        s.admin_call("GET", "/reload").0,
        405,
        "mutating routes answer only POST"
    );
    assert_eq!(s.admin_call("POST", "/metrics").0, 405);
}

#[test]
fn shadow_run_learns_an_allow_list_that_enforce_replays_exactly() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    // Shadow: nothing allowed explicitly; the run reaches two hosts.
    let s = SluiceBuilder::new(&dns)
        .task_extra("allow_mode = \"shadow\"")
        .start();
    let urls = [
        format!("http://pkgs.example.com:{p}/a"),
        format!("http://other.example.com:{p}/b"),
        format!("http://pkgs.example.com:{p}/c"),
    ];
    for u in &urls {
        assert_eq!(get(&s, u), 200, "shadow mode relays {u}");
    }
    // A private-address refusal is enforced even in shadow mode.
    assert_eq!(get(&s, &format!("http://metadata.example.com:{p}/")), 403);
    let rows = s.access_log("t", 4);
    assert_eq!(
        rows.iter()
            .filter(|r| r["decision"] == "would_deny")
            .count(),
        3
    );
    let out = s.report(&["--allow-list", "--task", "t"]);
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        line,
        format!("allow = [\"other.example.com:{p}\", \"pkgs.example.com:{p}\"]\n")
    );

    // Enforce with the learned list: the same requests pass, others do not.
    let learned: Vec<String> = vec![
        format!("other.example.com:{p}"),
        format!("pkgs.example.com:{p}"),
    ];
    let e = SluiceBuilder::new(&dns).allow(&learned).start();
    for u in &urls {
        assert_eq!(get(&e, u), 200, "enforce admits {u}");
    }
    assert_eq!(get(&e, &format!("http://paste.example.com:{p}/")), 403);
    let rows = e.access_log("t", 4);
    assert_eq!(rows.iter().filter(|r| r["decision"] == "allow").count(), 3);
}

#[test]
fn report_lists_destinations_with_counts() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .start();
    for _ in 0..3 {
        assert_eq!(get(&s, &format!("http://pkgs.example.com:{p}/x")), 200);
    }
    assert_eq!(get(&s, &format!("http://other.example.com:{p}/")), 403);
    s.access_log("t", 4);
    let out = s.report(&[]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let pkgs = text
        .lines()
        .find(|l| l.contains(&format!("pkgs.example.com:{p}")))
        .expect(&text);
    assert!(!pkgs.starts_with('!'), "{pkgs}");
    assert_eq!(counts(pkgs), [3, 3, 0, 0, 0], "{pkgs}");
    let other = text
        .lines()
        .find(|l| l.contains(&format!("other.example.com:{p}")))
        .expect(&text);
    assert!(
        other.starts_with('!') && other.ends_with("not-allowed"),
        "{other}"
    );
    assert_eq!(counts(other), [1, 0, 1, 0, 0], "{other}");
    assert!(
        text.contains("! = refused or would be refused"),
        "the legend: {text}"
    );
    let out = s.report(&["--json", "--task", "t"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[1]["requests"], 3);
    assert_eq!(v[1]["bytes_down"], 60);
}

/// A report table line's REQS, ALLOWED, REFUSED, WOULD_DENY and FAILED.
pub fn counts(line: &str) -> [u64; 5] {
    let f: Vec<&str> = line.split_whitespace().collect();
    let dest = f
        .iter()
        .position(|c| c.contains(':') && c.contains('.'))
        .expect(line);
    // FIRST and LAST are two words each: `12-03 14:57:11`.
    std::array::from_fn(|i| f[dest + 5 + i].parse().expect(line))
}

#[cfg(feature = "system-tests")] // npm (its users need it)
/// A fake npm registry route: the packument of `left-pad` and its tarball.
pub fn npm_registry(dir: &std::path::Path) -> Upstream {
    let pkg = dir.join("pkg/package");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name":"left-pad","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(
        pkg.join("index.js"),
        "module.exports = (s, n) => String(s).padStart(n);\n",
    )
    .unwrap();
    let tgz = dir.join("left-pad-1.0.0.tgz");
    let status = Command::new("tar")
        .arg("czf")
        .arg(&tgz)
        .arg("-C")
        .arg(dir.join("pkg"))
        .arg("package")
        .status()
        .unwrap();
    assert!(status.success());
    let tgz = bytes::Bytes::from(std::fs::read(&tgz).unwrap());
    let port = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
    let p2 = port.clone();
    let up = Upstream::start_with(std::sync::Arc::new(move |req: &Seen| {
        let p = p2.load(std::sync::atomic::Ordering::SeqCst);
        let body = match req.uri.as_str() {
            "/left-pad" => bytes::Bytes::from(format!(
                r#"{{"name":"left-pad","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"left-pad","version":"1.0.0","dist":{{"tarball":"http://registry.example.com:{p}/left-pad/-/left-pad-1.0.0.tgz"}}}}}}}}"#
            )),
            "/left-pad/-/left-pad-1.0.0.tgz" => tgz.clone(),
            _ => return None,
        };
        Some(hyper::Response::new(http_body_util::Full::new(body)))
    }));
    port.store(up.port(), std::sync::atomic::Ordering::SeqCst);
    up
}

#[cfg(feature = "system-tests")] // npm
#[test]
fn report_of_an_npm_install_lists_exactly_what_it_reached() {
    let dns = FakeDns::start();
    let work = tempfile::tempdir().unwrap();
    let up = npm_registry(work.path());
    let p = up.port();
    let s = SluiceBuilder::new(&dns)
        .host("registry.example.com", &["127.0.0.1"])
        .allow(&[format!("registry.example.com:{p}")])
        .start();
    let proj = work.path().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(
        proj.join("package.json"),
        r#"{"name":"proj","version":"1.0.0"}"#,
    )
    .unwrap();
    let out = npm_install(
        &proj,
        "left-pad",
        &format!("http://registry.example.com:{p}/"),
        &s.proxy(0),
        &work.path().join("cache"),
    );
    assert!(
        out.status.success(),
        "npm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        proj.join("node_modules/left-pad/index.js").exists(),
        "the package was installed"
    );

    let rows = s.access_log("t", 2);
    let report = s.report(&["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let dests = v.as_array().unwrap();
    assert_eq!(dests.len(), 1, "one destination: {v:#}");
    assert_eq!(dests[0]["host"], "registry.example.com");
    assert_eq!(dests[0]["port"], p);
    assert_eq!(
        dests[0]["requests"].as_u64().unwrap() as usize,
        rows.len(),
        "counts match the access log"
    );
    assert_eq!(
        dests[0]["requests"].as_u64().unwrap() as usize,
        up.requests().len(),
        "and the registry"
    );
    assert_eq!(dests[0]["refused"], 0);
    let learned = s.report(&["--allow-list", "--task", "t"]);
    assert_eq!(
        String::from_utf8_lossy(&learned.stdout),
        format!("allow = [\"registry.example.com:{p}\"]\n")
    );
}

fn healthcheck(s: &Sluice) -> std::process::Output {
    std::process::Command::new(bin())
        .args(["healthcheck", "--config"])
        .arg(&s.config)
        .output()
        .unwrap()
}

/// Raw GET (or another method) on a listener, the status code back.
fn status_of(addr: &str, method: &str, path: &str) -> (u16, String) {
    let ans = raw(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").as_bytes(),
    );
    let a = parse_http(&ans).expect("an HTTP answer");
    (a.status, String::from_utf8_lossy(&a.body).to_string())
}

#[test]
fn healthcheck_and_the_read_only_metrics_listener() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let (admin_port, metrics_port) = (free_port(), free_port());
    let mut s = SluiceBuilder::new(&dns)
        .allow(&[
            format!("pkgs.example.com:{}", up.port()),
            format!("pkgs.example.com:{metrics_port}"),
        ])
        .top(&format!(
            "[admin]\nlisten = \"tcp:127.0.0.1:{admin_port}\"\nmetrics_listen = \"tcp:127.0.0.1:{metrics_port}\"\n"
        ))
        .start();
    // The admin listener may bind a moment after the task's: poll (50
    // tries, 100 ms apart) until the healthcheck reaches it.
    let mut out = healthcheck(&s);
    for _ in 0..50 {
        if out.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        out = healthcheck(&s);
    }
    assert!(
        out.status.success(),
        "healthy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metrics = format!("127.0.0.1:{metrics_port}");
    assert_eq!(
        get(&s, &format!("http://pkgs.example.com:{}/", up.port())),
        200
    );
    let (status, body) = status_of(&metrics, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains("sluice_decisions_total{task=\"t\",decision=\"allow\""),
        "{body}"
    );
    assert_eq!(status_of(&metrics, "GET", "/healthz").0, 200);
    // Nothing else: no task's allow-list or taint set, no reload.
    for (method, path, want) in [
        ("GET", "/tasks", 404),
        ("GET", "/tasks/t/taint", 404),
        ("POST", "/reload", 405),
    ] {
        let (status, body) = status_of(&metrics, method, path);
        assert_eq!(status, want, "{method} {path}: {body}");
    }
    // The metrics listener is one of sluice's own addresses: refused to the
    // task even though its name and port are allowed.
    let a = via(
        &s,
        &format!("http://pkgs.example.com:{metrics_port}/metrics"),
        &[],
    );
    assert_refused(&a, 403, "private-address");
    assert!(String::from_utf8_lossy(&a.body).contains("sluice itself"));
    // Once sluice is gone, the healthcheck fails and says so.
    s.signal("KILL");
    s.wait_exit();
    let out = healthcheck(&s);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unhealthy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `Type=notify`: sluice tells systemd it is ready once its listeners are
/// bound, on the datagram socket NOTIFY_SOCKET names.
#[test]
fn readiness_is_notified_once_listeners_are_bound() {
    let dns = FakeDns::start();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = SluiceBuilder::new(&dns)
        .listen(&[format!("tcp:127.0.0.1:{port}")])
        .allow(&["pkgs.example.com:443"])
        .config();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, cfg).unwrap();
    let notify = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(&path)
        .env("NOTIFY_SOCKET", &notify)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let got = sock.recv(&mut buf);
    // Ready means listening: the task's port accepts at once.
    let listening = TcpStream::connect(("127.0.0.1", port)).is_ok();
    let _ = child.kill();
    let _ = child.wait();
    let n = got.expect("a readiness message within 20 s");
    assert_eq!(&buf[..n], b"READY=1\n");
    assert!(listening, "the listener is bound when READY=1 arrives");
}

/// A report of nothing is a mistake to say: a missing state folder, an
/// unknown task (naming the ones there) or an empty allow line exit 1.
#[test]
fn report_refuses_to_report_nothing() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    assert_eq!(
        get(&s, &format!("http://pkgs.example.com:{}/", up.port())),
        200
    );
    s.access_log("t", 1);
    let missing = s.dir.path().join("no-such-state");
    let out = Command::new(bin())
        .args(["report", "--state"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no state folder at") && err.contains("no-such-state"),
        "{err}"
    );
    let out = s.report(&["--task", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no task \"nope\"") && err.contains("tasks there: t"),
        "{err}"
    );
    let out = s.report(&["--task", "t"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("report of"),
        "names the folder"
    );
    // A task folder with no rows: no allow line (it would lock the task out).
    std::fs::create_dir_all(s.state().join("tasks/idle")).unwrap();
    let out = s.report(&["--task", "idle", "--allow-list"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("reached no destination"));
}
