//! Secrets that never enter the task (SPEC §10): the task holds a
//! placeholder; sluice swaps the real value in only on intercepted
//! requests to the secret's host, in the headers it lists; the placeholder
//! or the value anywhere else is refused (`secret-leak`) with nothing sent
//! upstream; an echo of the value comes back as the placeholder; a
//! quarantine holds until released. At the end, the value is nowhere in
//! the state folder, the console, the report or the metrics.

use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use data_encoding::{BASE64, HEXLOWER};
use http_body_util::Full;
use hyper::Response;

use crate::util::*;

/// The real value: only sluice (from a file beside its config) and the
/// upstream ever see it.
const VALUE: &str = "ghp_RealSecretValue0123456789abcdefABCD";

fn routes() -> Handler {
    Arc::new(|req: &Seen| {
        if req.uri == "/b64" {
            // The token echoed base64-encoded in the body.
            let auth = req
                .headers
                .get("authorization")
                .cloned()
                .unwrap_or_default();
            return Some(Response::new(Full::new(Bytes::from(
                BASE64.encode(auth.as_bytes()),
            ))));
        }
        if req.uri == "/gz" {
            // A server that compresses whatever it was asked.
            let auth = req
                .headers
                .get("authorization")
                .cloned()
                .unwrap_or_default();
            return Some(
                Response::builder()
                    .header("content-encoding", "gzip")
                    .body(Full::new(Bytes::from(gzip(auth.as_bytes()))))
                    .unwrap(),
            );
        }
        (req.uri == "/echo").then(|| {
            let auth = req
                .headers
                .get("authorization")
                .cloned()
                .unwrap_or_default();
            Response::builder()
                .header("x-echo", auth.clone())
                .body(Full::new(Bytes::from(format!("you sent: {auth}\n"))))
                .unwrap()
        })
    })
}

struct Setup {
    _dns: FakeDns,
    up: Upstream,
    s: Sluice,
    sluice_ca: String,
}

fn setup(on_violation: &str) -> Setup {
    setup_with(on_violation, VALUE)
}

fn setup_with(on_violation: &str, value: &str) -> Setup {
    let ca = test_ca();
    let names = ["api.example.com", "other.example.com"];
    let up = Upstream::start_tls(routes(), server_config(&ca, &names));
    let dns = FakeDns::start();
    let p = up.port();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("api.example.com:{p}"), format!("other.example.com:{p}")])
        .task_extra(&format!(
            "[[task.secret]]\nname = \"TOKEN\"\nfrom_file = \"token.txt\"\nhosts = [\"api.example.com:{p}\"]\non_violation = \"{on_violation}\""
        ))
        .file("token.txt", format!("{value}\n"))
        .file("upstream-ca.pem", ca.pem.as_str())
        .host("api.example.com", &["127.0.0.1"])
        .top(&format!(
            "[upstream]\nextra_roots = [\"upstream-ca.pem\"]\n[admin]\nlisten = \"tcp:127.0.0.1:{}\"",
            free_port()
        ))
        .start();
    let sluice_ca = s.state().join("ca.pem").display().to_string();
    Setup {
        _dns: dns,
        up,
        s,
        sluice_ca,
    }
}

impl Setup {
    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}.example.com:{}{path}", self.up.port())
    }

    fn curl(&self, extra: &[&str], url: &str) -> Answer {
        let proxy = self.s.proxy(0);
        let mut args = vec![
            "-s",
            "-i",
            "-x",
            proxy.as_str(),
            "--cacert",
            self.sluice_ca.as_str(),
        ];
        args.extend_from_slice(extra);
        args.push(url);
        answer(&curl(&args))
    }

    /// Allows other.example.com on `port` too (a reload); its `host:port`.
    fn allow_also(&self, port: u16) -> String {
        let host = format!("other.example.com:{port}");
        self.s.write_config(
            &std::fs::read_to_string(&self.s.config)
                .unwrap()
                .replace("allow = [", &format!("allow = [\"{host}\", ")),
        );
        self.s.wait_reloads_by("file change", 1);
        host
    }

    fn placeholder(&self) -> String {
        let path = self.s.task_file("t", "placeholders.json");
        let Ok(text) = std::fs::read(&path) else {
            panic!(
                "no {}: {:?}\n{}\n{:#?}",
                path.display(),
                std::fs::read_dir(path.parent().unwrap())
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>()),
                std::fs::read_to_string(&self.s.config).unwrap(),
                self.s.stderr.lock().unwrap()
            );
        };
        let kept: serde_json::Value = serde_json::from_slice(&text).unwrap();
        kept["TOKEN"].as_str().unwrap().to_string()
    }

    /// Everything a person or a tool could read of sluice's: its state
    /// folder, console, report and metrics.
    fn everything_written(&self) -> String {
        let mut all = String::new();
        let mut stack = vec![self.s.state()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(b) = std::fs::read(&p) {
                    all.push_str(&String::from_utf8_lossy(&b));
                }
            }
        }
        all.push_str(&self.s.stderr.lock().unwrap().join("\n"));
        for args in [&["--rows"][..], &[], &["--json"], &["--taint"]] {
            let out = self.s.report(args);
            all.push_str(&String::from_utf8_lossy(&out.stdout));
            all.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        all.push_str(&self.s.admin_call("GET", "/metrics").1);
        all.push_str(&self.s.admin_call("GET", "/tasks").1);
        all
    }
}

#[test]
fn the_placeholder_becomes_the_value_only_at_its_host() {
    let t = setup("refuse");
    let ph = t.placeholder();
    assert!(
        ph.starts_with("sluice_") && ph.len() == VALUE.len() && ph != VALUE,
        "{ph}"
    );
    let bearer = format!("Authorization: Bearer {ph}");
    let a = t.curl(&["-H", &bearer], &t.url("api", "/data"));
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let seen = t.up.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["authorization"], format!("Bearer {VALUE}"));
    let row = row_where(&t.s, "t", "api.example.com", |r| r["path"] == "/data");
    assert_eq!(row["secrets"], serde_json::json!(["TOKEN"]), "{row}");
    // git and pip send it as Basic credentials.
    let basic = format!("x-access-token:{ph}");
    let a = t.curl(&["-u", &basic], &t.url("api", "/basic"));
    assert_eq!(a.status, 200);
    let got = t.up.requests().pop().unwrap().headers["authorization"].clone();
    let decoded = BASE64
        .decode(got.strip_prefix("Basic ").unwrap().as_bytes())
        .unwrap();
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        format!("x-access-token:{VALUE}")
    );
    // The same header to another allowed host: refused, nothing sent.
    let a = t.curl(&["-H", &bearer], &t.url("other", "/steal"));
    assert_refused(&a, 403, "secret-leak");
    assert!(String::from_utf8_lossy(&a.body).contains("TOKEN"));
    assert_eq!(t.up.requests_to("other.example.com"), 0);
    let row = row_where(&t.s, "t", "other.example.com", |r| r["path"] == "/steal");
    assert_eq!(row["rule"], "secret-leak");
    assert_eq!(row["secrets"], serde_json::json!(["TOKEN"]));
    // A header the secret does not list, and the URL: refused too.
    let a = t.curl(&["-H", &format!("X-Token: {ph}")], &t.url("api", "/x"));
    assert_refused(&a, 403, "secret-leak");
    let a = t.curl(&[], &t.url("api", &format!("/x?token={ph}")));
    assert_refused(&a, 403, "secret-leak");
    assert_eq!(
        t.up.requests().len(),
        2,
        "only the two allowed requests arrived"
    );
    let all = t.everything_written();
    assert!(!all.contains(VALUE), "the value was written somewhere");
}

#[test]
fn a_body_with_the_secret_in_any_encoding_is_refused_and_nothing_sent() {
    let t = setup("refuse");
    let ph = t.placeholder();
    let pct: String = ph.bytes().map(|b| format!("%{b:02X}")).collect();
    let json: String = VALUE.bytes().map(|b| format!("\\u00{b:02x}")).collect();
    let bodies = [
        format!("key={ph}"),
        format!("key={VALUE}"),
        format!(
            "{{\"k\": \"{}\"}}",
            BASE64.encode(format!("u:{ph}").as_bytes())
        ),
        format!(
            "k={}",
            data_encoding::BASE64URL_NOPAD.encode(format!("xy{VALUE}").as_bytes())
        ),
        format!("k={}", HEXLOWER.encode(ph.as_bytes())),
        format!("k={pct}"),
        format!("{{\"k\": \"{json}\"}}"),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let path = format!("/upload{i}");
        // To the secret's own host (a body is not an enabled place) and to
        // another allowed host.
        for host in ["other", "api"] {
            let a = t.curl(&["--data-binary", body], &t.url(host, &path));
            assert_refused(&a, 403, "secret-leak");
        }
    }
    assert!(
        t.up.requests()
            .iter()
            .all(|r| !r.uri.starts_with("/upload")),
        "no upload reached the upstream: {:?}",
        t.up.requests()
            .iter()
            .map(|r| r.uri.clone())
            .collect::<Vec<_>>()
    );
    // A body with neither goes through intact.
    let a = t.curl(&["--data-binary", "plain text"], &t.url("other", "/ok"));
    assert_eq!(a.status, 200);
    assert_eq!(t.up.requests().pop().unwrap().body, b"plain text");
}

#[test]
fn an_echo_of_the_value_reaches_the_task_as_the_placeholder() {
    let t = setup("refuse");
    let ph = t.placeholder();
    let a = t.curl(
        &["-H", &format!("Authorization: Bearer {ph}")],
        &t.url("api", "/echo"),
    );
    assert_eq!(a.status, 200);
    let body = String::from_utf8_lossy(&a.body);
    assert_eq!(body, format!("you sent: Bearer {ph}\n"));
    assert_eq!(
        a.headers.get("x-echo").map(String::as_str),
        Some(format!("Bearer {ph}").as_str())
    );
    let seen = &t.up.requests()[0];
    assert_eq!(seen.headers["authorization"], format!("Bearer {VALUE}"));
    assert_eq!(
        seen.headers["accept-encoding"], "identity",
        "asked for an answer it can read"
    );
    // A compressed answer cannot be searched for the value: cut.
    let a = t.curl(
        &["--compressed", "-H", &format!("Authorization: Bearer {ph}")],
        &t.url("api", "/gz"),
    );
    assert_refused(&a, 403, "secret-leak");
    assert!(!String::from_utf8_lossy(&a.body).contains(VALUE));
    // Encoded in the body: cut, and the row says why.
    let a = t.curl(
        &["-H", &format!("Authorization: Bearer {ph}")],
        &t.url("api", "/b64"),
    );
    assert!(!String::from_utf8_lossy(&a.body)
        .contains(&BASE64.encode(format!("Bearer {VALUE}").as_bytes())));
    let row = row_where(&t.s, "t", "api.example.com", |r| r["path"] == "/b64");
    assert_eq!(
        (row["decision"].as_str(), row["rule"].as_str()),
        (Some("deny"), Some("secret-leak")),
        "{row}"
    );
}

#[test]
fn sluice_env_gives_the_placeholder_never_the_value() {
    let t = setup("refuse");
    let ph = t.placeholder();
    let proxy = t.s.proxy(0);
    let out = Command::new(bin())
        .args(["env", "--shell", "json", "--proxy", &proxy, "--config"])
        .arg(&t.s.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["set"]["TOKEN"], ph.as_str());
    let sh = Command::new(bin())
        .args(["env", "--proxy", &proxy, "--config"])
        .arg(&t.s.config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&sh.stdout);
    assert!(text.contains(&format!("export TOKEN={ph}")), "{text}");
    assert!(!text.contains(VALUE));
    // check says where each secret goes, never what it is.
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&t.s.config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("secrets     TOKEN (from ") && said.contains(" in authorization"),
        "{said}"
    );
    assert!(!said.contains(VALUE) && !said.contains(&ph));
}

#[test]
fn a_quarantine_refuses_everything_until_released_across_a_restart() {
    let mut t = setup("quarantine");
    let ph = t.placeholder();
    let a = t.curl(
        &["-H", &format!("Authorization: Bearer {ph}")],
        &t.url("other", "/steal"),
    );
    assert_refused(&a, 403, "secret-leak");
    // Now even a request that carries nothing is refused.
    let a = t.curl(&[], &t.url("api", "/innocent"));
    assert_refused(&a, 403, "quarantined");
    assert!(String::from_utf8_lossy(&a.body).contains("sluice release --task t"));
    t.s.kill_and_restart();
    let a = t.curl(&[], &t.url("api", "/after-restart"));
    assert_refused(&a, 403, "quarantined");
    assert_eq!(t.up.request_count(), 0, "nothing reached the upstream");
    let out = Command::new(bin())
        .args(["release", "--task", "t", "--config"])
        .arg(&t.s.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("released task t"));
    let a = t.curl(&[], &t.url("api", "/released"));
    assert_eq!(a.status, 200);
    let audit = std::fs::read_to_string(t.s.task_file("t", "secrets.jsonl")).unwrap();
    assert!(
        audit.contains("\"quarantined\"") && audit.contains("sluice release, uid"),
        "{audit}"
    );
    // Released twice: nothing to release, said so.
    let (code, said) = t.s.admin_call("POST", "/tasks/t/release");
    assert_eq!(code, 404, "{said}");
}

#[test]
fn around_the_check_upgrade_authority_multipart_and_ip_literal() {
    let t = setup("refuse");
    let ph = t.placeholder();
    let bearer = format!("Authorization: Bearer {ph}");
    // An upgrade is not passed on for a task with secrets: its frames
    // would not be read.
    let a = t.curl(
        &[
            "--http1.1",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: websocket",
            "-H",
            &bearer,
        ],
        &t.url("api", "/ws"),
    );
    assert_eq!(a.status, 200);
    let seen = t.up.requests().pop().unwrap();
    assert_eq!(seen.uri, "/ws");
    assert!(!seen.headers.contains_key("upgrade"), "{:?}", seen.headers);
    // HTTP/2 with an :authority other than the CONNECT host (and SNI).
    let a = t.curl(
        &[
            "--http2",
            "-H",
            &format!("Host: other.example.com:{}", t.up.port()),
            "-H",
            &bearer,
        ],
        &t.url("api", "/h2"),
    );
    assert_eq!(a.status, 403, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(t.up.requests_to("other.example.com"), 0);
    // The placeholder in one part of a multipart upload, which curl sends
    // base64-encoded.
    let part = format!("token={ph}");
    let form = "file=@-;type=text/plain;encoder=base64";
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-i",
            "-x",
            &t.s.proxy(0),
            "--cacert",
            &t.sluice_ca,
            "-F",
            form,
        ])
        .arg(t.url("other", "/multipart"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(part.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert_refused(&answer(&out), 403, "secret-leak");
    assert!(t.up.requests().iter().all(|r| r.uri != "/multipart"));
    // An IP literal with the secret's host as SNI: refused before TLS.
    let status = connect_status(&t.s, &format!("127.0.0.1:{}", t.up.port()));
    assert_eq!(status, 403);
    assert!(t.up.requests().iter().all(|r| !r.uri.starts_with("/h2")));
}

#[test]
fn an_echoed_value_never_reaches_the_taint_set_or_the_logs() {
    // A value that reads as a host label once echoed inside a URL.
    let value = "3f9a1c0e7b5d4a2f8e6c1b0a9d8e7f6a";
    let t = setup_with("refuse", value);
    let ph = t.placeholder();
    let a = t.curl(
        &[
            "-H",
            &format!("Authorization: Bearer https://{ph}.example.com/x"),
        ],
        &t.url("api", "/echo"),
    );
    assert_eq!(a.status, 200);
    assert!(String::from_utf8_lossy(&a.body).contains(&ph));
    assert_eq!(
        t.up.requests()[0].headers["authorization"],
        format!("Bearer https://{value}.example.com/x")
    );
    // The response was scanned as the task got it: the name it carries is
    // the placeholder's, never the value's.
    let all = t.everything_written();
    assert!(!all.contains(value), "the value was written somewhere");
}

#[test]
fn a_leak_late_in_a_streamed_upload_is_cut_logged_and_quarantines() {
    use std::io::{Read, Write};
    // An upstream that answers as soon as the head arrives, then records
    // whatever of the body still comes.
    let up = RawUpstream::start(|mut c, r| {
        let head = read_head(&mut c);
        r.lock().unwrap().extend_from_slice(&head);
        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        RawUpstream::record(c, r);
    });
    let t = setup("quarantine");
    let ph = t.placeholder();
    let host = t.allow_also(up.port);
    let mut c = std::net::TcpStream::connect(t.s.proxy_addr()).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let first = "A".repeat(5000);
    write!(
        c,
        "PUT http://{host}/up HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n",
        first.len()
    )
    .unwrap();
    let mut got = [0u8; 256];
    let n = c.read(&mut got).unwrap();
    assert!(
        got[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got[..n])
    );
    let tail = format!("x={ph}");
    let _ = write!(c, "{:x}\r\n{tail}\r\n0\r\n\r\n", tail.len());
    // The answer's row says what the client got; a second row says the
    // upload was cut, and names the secret.
    let row = row_where(&t.s, "t", "other.example.com", |r| {
        r["rule"] == "secret-leak"
    });
    assert_eq!(row["secrets"], serde_json::json!(["TOKEN"]), "{row}");
    assert_eq!(row["note"], "upload-cut", "{row}");
    drop(c);
    assert!(!String::from_utf8_lossy(&up.received.lock().unwrap()).contains(&ph));
    let a = t.curl(&[], &t.url("api", "/after"));
    assert_refused(&a, 403, "quarantined");
}

#[test]
fn a_reload_picks_up_a_rotated_value_and_keeps_the_placeholder() {
    let t = setup("refuse");
    let ph = t.placeholder();
    let rotated = "ghp_RotatedSecretValue0123456789abcdefAB";
    std::fs::write(t.s.dir.path().join("token.txt"), format!("{rotated}\n")).unwrap();
    t.s.signal("HUP");
    // Each request after the reload carries the new value (bounded poll:
    // the reload lands asynchronously).
    let bearer = format!("Authorization: Bearer {ph}");
    let mut got = String::new();
    for _ in 0..50 {
        let a = t.curl(&["-H", &bearer], &t.url("api", "/rotated"));
        assert_eq!(a.status, 200);
        got = t.up.requests().pop().unwrap().headers["authorization"].clone();
        if got.ends_with(rotated) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(got, format!("Bearer {rotated}"));
    assert_eq!(t.placeholder(), ph, "the placeholder stays");
    // A value that cannot be read fails the reload; the last one stays.
    std::fs::remove_file(t.s.dir.path().join("token.txt")).unwrap();
    t.s.signal("HUP");
    t.s.wait_line(|l| l.contains("token.txt") && l.contains("cannot read"));
    let a = t.curl(&["-H", &bearer], &t.url("api", "/after-failed-reload"));
    assert_eq!(a.status, 200);
    assert_eq!(
        t.up.requests().pop().unwrap().headers["authorization"],
        format!("Bearer {rotated}")
    );
}

#[test]
fn a_body_spelled_out_across_writes_is_read_whole_before_any_of_it_leaves() {
    use std::io::Write;
    let up = RawUpstream::start(RawUpstream::record);
    let t = setup("refuse");
    let ph = t.placeholder();
    let host = t.allow_also(up.port);
    // The placeholder with 40 line breaks after every character: longer
    // than any tail held back, and sent in two writes.
    let spread: String = ph
        .chars()
        .map(|c| format!("{c}{}", "\n".repeat(40)))
        .collect();
    let body = format!("note={spread}");
    let (first, second) = body.split_at(body.len() / 2);
    let mut c = std::net::TcpStream::connect(t.s.proxy_addr()).unwrap();
    write!(
        c,
        "POST http://{host}/spread HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{first}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    c.write_all(second.as_bytes()).unwrap();
    let a = read_answer(&mut c).expect("an answer");
    assert_refused(&a, 403, "secret-leak");
    assert_eq!(
        up.conns.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing reached the upstream"
    );
}
