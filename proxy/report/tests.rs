use super::*;

fn write(dir: &Path, task: &str, file: &str, rows: &[serde_json::Value]) {
    let d = dir.join("tasks").join(task);
    std::fs::create_dir_all(&d).unwrap();
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(d.join(file), text).unwrap();
}

fn row(
    ts: &str,
    host: &str,
    port: u16,
    decision: &str,
    rule: Option<&str>,
    body: bool,
) -> serde_json::Value {
    serde_json::json!({"ts": ts, "task": "t", "client": "unix", "kind": "connect",
            "method": "CONNECT", "host": host, "port": port, "decision": decision,
            "rule": rule, "status": 200, "body": body, "bytes_up": 10, "bytes_down": 100})
}

#[test]
fn aggregates_rotated_files_and_marks_refusals_and_taint() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "t",
        "access.jsonl.1",
        &[row(
            "2026-01-01T00:00:01Z",
            "a.example.com",
            443,
            "allow",
            None,
            false,
        )],
    );
    write(
        dir.path(),
        "t",
        "access.jsonl",
        &[
            row(
                "2026-01-01T00:00:02Z",
                "a.example.com",
                443,
                "allow",
                None,
                true,
            ),
            row(
                "2026-01-01T00:00:03Z",
                "b.example.com",
                443,
                "deny",
                Some("not-allowed"),
                false,
            ),
            row(
                "2026-01-01T00:00:04Z",
                "c.example.com",
                80,
                "would_deny",
                Some("not-allowed"),
                false,
            ),
        ],
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("tasks/t/access.jsonl"))
        .unwrap()
        .write_all(b"{\"ts\":\"torn")
        .unwrap();
    write(
        dir.path(),
        "t",
        "taint.jsonl",
        &[
            serde_json::json!({"ts": "x", "task": "t", "host": "a.example.com", "source": "http://d/"}),
        ],
    );
    let rows = build(dir.path(), None).unwrap();
    assert_eq!(rows.len(), 3);
    let a = &rows[0];
    assert_eq!(
        (a.host.as_str(), a.requests, a.allowed, a.body, a.tainted),
        ("a.example.com", 2, 2, true, true)
    );
    assert_eq!(a.first_seen, "2026-01-01T00:00:01Z");
    assert_eq!(a.last_seen, "2026-01-01T00:00:02Z");
    assert_eq!((a.bytes_up, a.bytes_down), (20, 200));
    assert!(!a.flagged(), "tainted but nothing refused");
    assert_eq!(rows[1].refused, 1);
    assert_eq!(rows[2].would_deny, 1);
    assert!(rows[2].flagged(), "would be refused");
    assert_eq!(
        allow_list(&rows, "t"),
        "allow = [\"a.example.com:443\", \"c.example.com:80\"]\n"
    );
    let t = table(&rows);
    assert!(t.lines().nth(2).unwrap().starts_with('!'), "{t}");
    assert!(build(dir.path(), Some("other")).unwrap().is_empty());
}

#[test]
fn an_intercepted_tunnel_is_not_a_request() {
    let mut d = Destination::default();
    let rec = |v: serde_json::Value| serde_json::from_value::<AccessRecord>(v).unwrap();
    let mut connect = row(
        "2026-01-01T00:00:01Z",
        "a.example.com",
        443,
        "allow",
        None,
        false,
    );
    connect["note"] = "intercepted".into();
    d.add(&rec(connect.clone()));
    assert_eq!((d.requests, d.tunnels, d.bytes_up, d.allowed), (0, 1, 0, 0));
    assert!(
        d.admitted,
        "an allowed tunnel belongs in a learned allow-list"
    );
    connect["note"] = "client-tls-failed".into();
    d.add(&rec(connect));
    assert_eq!((d.requests, d.tunnels), (0, 2));
    let mut inner = row(
        "2026-01-01T00:00:02Z",
        "a.example.com",
        443,
        "allow",
        None,
        true,
    );
    inner["kind"] = "intercepted".into();
    d.add(&rec(inner));
    assert_eq!(
        (d.requests, d.bytes_up, d.bytes_down, d.body),
        (1, 10, 100, true)
    );
    // An opaque tunnel is a request, its bytes relayed.
    d.add(&rec(row(
        "2026-01-01T00:00:03Z",
        "a.example.com",
        443,
        "allow",
        None,
        true,
    )));
    assert_eq!((d.requests, d.bytes_up), (2, 20));
}

#[test]
fn refusals_send_nothing_and_a_refused_connect_carries_no_body() {
    let mut d = Destination::default();
    let rec = |v: serde_json::Value| serde_json::from_value::<AccessRecord>(v).unwrap();
    d.add(&rec(row(
        "t",
        "b.example.com",
        443,
        "deny",
        Some("not-allowed"),
        true,
    )));
    assert_eq!((d.refused, d.body, d.bytes_up), (1, false, 0));
    let mut post = row(
        "t",
        "b.example.com",
        443,
        "deny",
        Some("untrusted-target"),
        true,
    );
    post["kind"] = "http".into();
    d.add(&rec(post));
    assert_eq!((d.refused, d.body, d.bytes_up), (2, true, 0));
    d.add(&rec(row(
        "t",
        "b.example.com",
        443,
        "error",
        Some("dns-failed"),
        false,
    )));
    assert_eq!((d.refused, d.failed), (2, 1));
    assert!(d.flagged());
    let mut failed_only = Destination::default();
    failed_only.add(&rec(row(
        "t",
        "c.example.com",
        443,
        "error",
        Some("dns-failed"),
        false,
    )));
    assert!(!failed_only.flagged(), "a failure is not a refusal");
}

#[test]
fn sizes_and_times_for_a_person() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1023), "1023 B");
    assert_eq!(human_bytes(1024), "1.0 KiB");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(30_000_873), "28.6 MiB");
    assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    assert_eq!(human_bytes(5 << 40), "5.0 TiB");
    assert_eq!(human_bytes(u64::MAX), "16777216.0 TiB");
    assert_eq!(compact_time("2026-12-03T14:57:11.123Z"), "12-03 14:57:11");
    assert_eq!(compact_time("garbage"), "garbage");
    assert_eq!(compact_time("2026-12-03 14:57:11"), "2026-12-03 14:57:11");
}

use std::io::Write;

#[test]
fn whatever_a_shadow_mode_let_through_belongs_in_the_learned_line() {
    let mut rows = vec![Destination::default()];
    let rec = |v: serde_json::Value| serde_json::from_value::<AccessRecord>(v).unwrap();
    rows[0].task = "t".into();
    rows[0].host = "paste.example.com".into();
    rows[0].port = 443;
    let mut r = row(
        "t",
        "paste.example.com",
        443,
        "would_deny",
        Some("untrusted-target"),
        true,
    );
    r["kind"] = "http".into();
    rows[0].add(&rec(r));
    assert_eq!(
        allow_list(&rows, "t"),
        "allow = [\"paste.example.com:443\"]\n"
    );
}
