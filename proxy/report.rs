//! report: `sluice report` — which destinations each task actually
//! reached, from the access logs (rotated files included), and the
//! allow-list that would have admitted exactly that.
//!
//! Reads files only; works while sluice is running (a torn last line is
//! skipped). Must not write anything.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::log::AccessRecord;
use crate::policy::{verdict, Rule};

/// One (task, host:port) line of the report.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Destination {
    pub task: String,
    pub host: String,
    pub port: u16,
    pub first_seen: String,
    pub last_seen: String,
    pub requests: u64,
    pub allowed: u64,
    pub refused: u64,
    pub would_refuse: u64,
    /// Requests that could not be carried out (decision `error`: DNS or
    /// upstream failures); nothing was refused.
    pub failed: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Any request to it carried a body.
    pub body: bool,
    /// The host is in the task's taint set.
    pub tainted: bool,
    /// Refusal rules seen, for the eye.
    pub rules: BTreeSet<String>,
    /// Admitted under shadow mode only because of `allow_mode = "shadow"`
    /// (rule `not-allowed`): it belongs in a learned allow-list.
    #[serde(skip)]
    learned: bool,
}

impl Destination {
    /// `!` marks rows that were refused (or would be) or are tainted.
    pub fn flagged(&self) -> bool {
        self.refused > 0 || self.would_refuse > 0 || self.failed > 0 || self.tainted
    }
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
                let key = (row.task.to_string(), row.host.clone(), row.port);
                let d = out.entry(key).or_insert_with(|| Destination {
                    task: row.task.to_string(),
                    host: row.host.clone(),
                    port: row.port,
                    first_seen: row.ts.clone(),
                    tainted: tainted.contains(&row.host),
                    ..Default::default()
                });
                if row.ts < d.first_seen {
                    d.first_seen = row.ts.clone();
                }
                if row.ts > d.last_seen {
                    d.last_seen = row.ts.clone();
                }
                d.requests += 1;
                match &*row.decision {
                    verdict::ALLOW => d.allowed += 1,
                    verdict::WOULD_DENY => d.would_refuse += 1,
                    verdict::ERROR => d.failed += 1,
                    _ => d.refused += 1,
                }
                if row.decision == verdict::WOULD_DENY
                    && row.rule.as_deref() == Some(Rule::NotAllowed.as_str())
                {
                    d.learned = true;
                }
                if let Some(r) = &row.rule {
                    d.rules.insert(r.to_string());
                }
                d.body |= row.body;
                d.bytes_up += row.bytes_up;
                d.bytes_down += row.bytes_down;
            }
        }
    }
    Ok(out.into_values().collect())
}

/// The table `sluice report` prints.
pub fn table(rows: &[Destination]) -> String {
    let mut lines: Vec<[String; 10]> = vec![[
        "".into(),
        "TASK".into(),
        "DESTINATION".into(),
        "FIRST SEEN".into(),
        "LAST SEEN".into(),
        "REQUESTS".into(),
        "ALLOWED/REFUSED/WOULD/FAILED".into(),
        "UP".into(),
        "DOWN".into(),
        "BODY RULES".into(),
    ]];
    for d in rows {
        let mut notes = vec![if d.body { "body" } else { "-" }.to_string()];
        if d.tainted {
            notes.push("tainted".into());
        }
        notes.extend(d.rules.iter().cloned());
        lines.push([
            if d.flagged() { "!".into() } else { "".into() },
            d.task.clone(),
            format!("{}:{}", d.host, d.port),
            d.first_seen.clone(),
            d.last_seen.clone(),
            d.requests.to_string(),
            format!(
                "{}/{}/{}/{}",
                d.allowed, d.refused, d.would_refuse, d.failed
            ),
            d.bytes_up.to_string(),
            d.bytes_down.to_string(),
            notes.join(" "),
        ]);
    }
    let mut widths = [0usize; 10];
    for l in &lines {
        for (i, c) in l.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let mut out = String::new();
    for l in &lines {
        let mut s = String::new();
        for (i, c) in l.iter().enumerate() {
            s.push_str(&format!("{c:<w$} ", w = widths[i]));
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    if rows.is_empty() {
        out.push_str("(no access-log rows)\n");
    }
    out
}

/// The `allow = [...]` line that would have admitted exactly what `task`
/// reached: every destination with an allowed request, or one that shadow
/// mode let through as `not-allowed`. A host reached on both 80 and 443 is
/// written bare; anything else as `host:port`.
pub fn allow_list(rows: &[Destination], task: &str) -> String {
    let mut ports: BTreeMap<&str, BTreeSet<u16>> = BTreeMap::new();
    for d in rows.iter().filter(|d| d.task == task) {
        if d.allowed > 0 || d.learned {
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
        assert!(a.flagged(), "tainted");
        assert_eq!(rows[1].refused, 1);
        assert_eq!(rows[2].would_refuse, 1);
        assert_eq!(
            allow_list(&rows, "t"),
            "allow = [\"a.example.com:443\", \"c.example.com:80\"]\n"
        );
        let t = table(&rows);
        assert!(t.lines().nth(2).unwrap().starts_with('!'), "{t}");
        assert!(build(dir.path(), Some("other")).unwrap().is_empty());
    }

    use std::io::Write;
}
