//! report: `sluice report` — which destinations each task actually
//! reached, from the access logs (rotated files included), and the
//! allow-list that would have admitted exactly that.
//!
//! Reads files only; works while sluice is running (a torn last line is
//! skipped). Must not write anything.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::log::{AccessRecord, Kind};
use crate::policy::{verdict, Rule};

/// One (task, host:port) line of the report.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Destination {
    pub task: String,
    pub host: String,
    pub port: u16,
    pub first_seen: String,
    pub last_seen: String,
    /// Requests: plain HTTP, requests inside intercepted tunnels, and
    /// tunnels sluice relayed opaquely (or refused). The CONNECT of an
    /// intercepted tunnel is counted in `tunnels`, not here: the requests
    /// inside it are the requests.
    pub requests: u64,
    /// Intercepted tunnels (their CONNECT rows).
    pub tunnels: u64,
    /// Requests with decision `allow`.
    pub allowed: u64,
    /// Requests with decision `deny`.
    pub refused: u64,
    /// Requests with decision `would_deny`: a shadow mode let through what
    /// enforce would have refused.
    pub would_deny: u64,
    /// Requests with decision `error` (DNS or upstream failures): they
    /// could not be carried out; nothing was refused.
    pub failed: u64,
    /// Bytes relayed to the destination (request bodies; all bytes of an
    /// opaque tunnel). A refused request sends none.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// A request that was not refused at CONNECT carried a body.
    pub body: bool,
    /// The host is in the task's taint set.
    pub tainted: bool,
    /// Refusal rules seen, for the eye.
    pub rules: BTreeSet<String>,
    /// Admitted under shadow mode only because of `allow_mode = "shadow"`
    /// (rule `not-allowed`): it belongs in a learned allow-list.
    #[serde(skip)]
    learned: bool,
    /// Some request or tunnel to it was allowed.
    #[serde(skip)]
    admitted: bool,
}

impl Destination {
    /// `!` marks rows where something was refused, or would have been.
    pub fn flagged(&self) -> bool {
        self.refused > 0 || self.would_deny > 0
    }

    /// Counts one access-log row into this destination.
    fn add(&mut self, row: &AccessRecord) {
        if row.ts < self.first_seen {
            self.first_seen = row.ts.clone();
        }
        if row.ts > self.last_seen {
            self.last_seen = row.ts.clone();
        }
        if let Some(r) = &row.rule {
            self.rules.insert(r.to_string());
        }
        if row.decision == verdict::WOULD_DENY
            && row.rule.as_deref() == Some(Rule::NotAllowed.as_str())
        {
            self.learned = true;
        }
        if is_intercepted_tunnel(row) {
            // Its bytes are the TLS stream; the requests inside count
            // their own bodies.
            self.tunnels += 1;
            self.admitted |= row.decision == verdict::ALLOW;
            return;
        }
        self.requests += 1;
        match &*row.decision {
            verdict::ALLOW => {
                self.allowed += 1;
                self.admitted = true;
            }
            verdict::WOULD_DENY => self.would_deny += 1,
            verdict::ERROR => self.failed += 1,
            _ => self.refused += 1,
        }
        let refused_connect = row.kind == Kind::Connect && row.decision == verdict::DENY;
        self.body |= row.body && !refused_connect;
        if row.decision != verdict::DENY {
            self.bytes_up += row.bytes_up;
        }
        self.bytes_down += row.bytes_down;
    }
}

/// The CONNECT row of a tunnel sluice intercepted (served): the requests
/// inside have rows of their own.
fn is_intercepted_tunnel(row: &AccessRecord) -> bool {
    row.kind == Kind::Connect
        && matches!(
            row.note.as_deref(),
            Some(crate::log::INTERCEPTED | crate::log::CLIENT_TLS_FAILED)
        )
}

/// Access-log files of a task folder, oldest first: `access.jsonl.N` …
/// `access.jsonl.1`, `access.jsonl`.
fn access_files(dir: &Path) -> Vec<PathBuf> {
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let n = name.strip_prefix("access.jsonl.")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    files.push(dir.join("access.jsonl"));
    files
}

fn tainted_hosts(dir: &Path) -> HashSet<String> {
    std::fs::read_to_string(dir.join("taint.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["host"].as_str().map(String::from))
        .collect()
}

/// Where each of a task's tainted hosts was named, one line each:
/// `tainted: HOST (named by URL at TIME)`.
pub fn taint_lines(state_dir: &Path, task: &str) -> Vec<String> {
    std::fs::read_to_string(state_dir.join("tasks").join(task).join("taint.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let host = v["host"].as_str()?;
            Some(format!(
                "tainted: {host} (named by {} at {})",
                v["source"].as_str().unwrap_or("?"),
                v["ts"].as_str().unwrap_or("?")
            ))
        })
        .collect()
}

/// Is there something to report on? A state folder that does not exist, or
/// a task it has no folder for, is a mistake to say, not an empty report.
pub fn check_state(state_dir: &Path, task: Option<&str>) -> Result<(), String> {
    if !state_dir.is_dir() {
        return Err(format!(
            "no state folder at {}: pass --state DIR, or --config FILE for the state_dir sluice ran with",
            state_dir.display()
        ));
    }
    let Some(t) = task else {
        return Ok(());
    };
    if state_dir.join("tasks").join(t).is_dir() {
        return Ok(());
    }
    let mut known: Vec<String> = std::fs::read_dir(state_dir.join("tasks"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    known.sort();
    Err(format!(
        "no task {t:?} in {} (tasks there: {})",
        state_dir.display(),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    ))
}

/// Builds the report for every task in `state_dir` (or one task).
pub fn build(state_dir: &Path, task: Option<&str>) -> std::io::Result<Vec<Destination>> {
    build_since(state_dir, task, None)
}

/// [`build`] from the rows written at or after `since` (an RFC 3339 time
/// as the log writes it) only.
pub fn build_since(
    state_dir: &Path,
    task: Option<&str>,
    since: Option<&str>,
) -> std::io::Result<Vec<Destination>> {
    let tasks_dir = state_dir.join("tasks");
    let mut task_dirs: Vec<PathBuf> = match std::fs::read_dir(&tasks_dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    task_dirs.sort();
    let mut out: BTreeMap<(String, String, u16), Destination> = BTreeMap::new();
    for dir in task_dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if task.is_some_and(|t| t != name) {
            continue;
        }
        let tainted = tainted_hosts(&dir);
        for file in access_files(&dir) {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            for line in text.lines() {
                // A torn last line of a running sluice is skipped.
                let Ok(row) = serde_json::from_str::<AccessRecord>(line) else {
                    continue;
                };
                if since.is_some_and(|s| row.ts.as_str() < s) {
                    continue;
                }
                let key = (row.task.to_string(), row.host.clone(), row.port);
                out.entry(key)
                    .or_insert_with(|| Destination {
                        task: row.task.to_string(),
                        host: row.host.clone(),
                        port: row.port,
                        first_seen: row.ts.clone(),
                        tainted: tainted.contains(&row.host),
                        ..Default::default()
                    })
                    .add(&row);
            }
        }
    }
    Ok(out.into_values().collect())
}

/// What the table's marks and columns mean, printed under it.
pub const LEGEND: &str = "! = refused or would be refused; REFUSED = decision deny, \
WOULD_DENY = shadow mode let it through, FAILED = could not reach (DNS or upstream), \
nothing refused; UP/DOWN = bytes relayed; times UTC";

/// The table `sluice report` prints: one line per destination, every
/// column headed and aligned (numbers to the right), then [`LEGEND`].
pub fn table(rows: &[Destination]) -> String {
    if rows.is_empty() {
        return "(no access-log rows)\n".to_string();
    }
    let header = [
        "",
        "TASK",
        "DESTINATION",
        "FIRST",
        "LAST",
        "REQS",
        "ALLOWED",
        "REFUSED",
        "WOULD_DENY",
        "FAILED",
        "UP",
        "DOWN",
        "BODY",
        "TAINTED",
        "RULES",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let yes = |b: bool| if b { "yes" } else { "-" }.to_string();
    for d in rows {
        let rules: Vec<&str> = d.rules.iter().map(String::as_str).collect();
        lines.push(vec![
            if d.flagged() { "!" } else { "" }.to_string(),
            d.task.clone(),
            format!("{}:{}", d.host, d.port),
            compact_time(&d.first_seen),
            compact_time(&d.last_seen),
            d.requests.to_string(),
            d.allowed.to_string(),
            d.refused.to_string(),
            d.would_deny.to_string(),
            d.failed.to_string(),
            human_bytes(d.bytes_up),
            human_bytes(d.bytes_down),
            yes(d.body),
            yes(d.tainted),
            if rules.is_empty() {
                "-".to_string()
            } else {
                rules.join(",")
            },
        ]);
    }
    let mut out = aligned(&lines, |i| (5..=11).contains(&i));
    out.push_str(LEGEND);
    out.push('\n');
    out
}

/// Rows as columns two spaces apart; `right(i)` columns are right-aligned.
pub fn aligned(rows: &[Vec<String>], right: impl Fn(usize) -> bool) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            let w = widths[i];
            if right(i) {
                line.push_str(&format!("{c:>w$}  "));
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `2026-12-03T14:57:11.123Z` → `12-03 14:57:11` (UTC; the year and the
/// milliseconds are left out). Anything else is shown as written.
pub fn compact_time(ts: &str) -> String {
    match (ts.get(5..10), ts.get(10..11), ts.get(11..19)) {
        (Some(day), Some("T"), Some(time)) => format!("{day} {time}"),
        _ => ts.to_string(),
    }
}

/// Bytes for a person: `0 B`, `843 B`, `1.5 KiB`, `28.6 MiB`, `2.0 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The `allow = [...]` line that would have admitted exactly what `task`
/// reached: every destination with an allowed request, or one that shadow
/// mode let through as `not-allowed`. A host reached on both 80 and 443 is
/// written bare; anything else as `host:port`.
pub fn allow_list(rows: &[Destination], task: &str) -> String {
    let mut ports: BTreeMap<&str, BTreeSet<u16>> = BTreeMap::new();
    for d in rows.iter().filter(|d| d.task == task) {
        if d.admitted || d.learned {
            ports.entry(&d.host).or_default().insert(d.port);
        }
    }
    let mut entries = Vec::new();
    for (host, ps) in ports {
        if ps.contains(&80) && ps.contains(&443) {
            entries.push(format!("{host:?}"));
            for p in ps.iter().filter(|p| **p != 80 && **p != 443) {
                entries.push(format!("\"{host}:{p}\""));
            }
        } else {
            for p in ps {
                entries.push(format!("\"{host}:{p}\""));
            }
        }
    }
    format!("allow = [{}]\n", entries.join(", "))
}

#[cfg(test)]
mod tests {
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
}
