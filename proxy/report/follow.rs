//! follow: `sluice report --follow`, a live feed of decisions, one line
//! each, read from the access logs as sluice writes them (a person can
//! watch an agent work). Refusals stand out on a terminal.
//!
//! Reads files only; must not write anything but the feed.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::log::{AccessRecord, Kind};
use crate::policy::verdict;

/// Text from a row, safe for a terminal: control characters (C0, C1)
/// and bidirectional-text controls are written as `\u{…}`, so a hostile
/// path cannot move the cursor, recolour or reorder the feed.
pub(crate) fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || bidi {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One decision as a line: `14:57:11  build  deny        POST host:80/path  rule: reason`.
pub(crate) fn line(row: &AccessRecord, color: bool) -> String {
    let time = row.ts.get(11..19).unwrap_or(&row.ts);
    let target = match row.kind {
        Kind::Connect => format!("{}:{}", row.host, row.port),
        Kind::Http => format!(
            "http://{}:{}{}",
            row.host,
            row.port,
            row.path.as_deref().unwrap_or("")
        ),
        Kind::Intercepted => format!(
            "https://{}:{}{}",
            row.host,
            row.port,
            row.path.as_deref().unwrap_or("")
        ),
        Kind::Dns => format!("dns {}", row.host),
    };
    let mut out = format!(
        "{time}  {}  {:<10}  {} {target}",
        row.task, row.decision, row.method
    );
    if let Some(rule) = &row.rule {
        out.push_str(&format!("  {rule}"));
        if let Some(reason) = &row.reason {
            out.push_str(&format!(": {reason}"));
        }
    }
    if let Some(note) = &row.note {
        out.push_str(&format!("  ({note})"));
    }
    let paint = match &*row.decision {
        verdict::DENY => Some("1;31"),
        verdict::WOULD_DENY => Some("33"),
        verdict::ERROR => Some("35"),
        _ => None,
    };
    let out = safe(&out);
    match paint {
        Some(code) if color => format!("\x1b[{code}m{out}\x1b[0m"),
        _ => out,
    }
}

/// A question `allow_mode = "ask"` put, as a line of the feed.
pub(crate) fn question_line(q: &crate::ask::Question, color: bool) -> String {
    let time = q.ts.get(11..19).unwrap_or(&q.ts);
    // The question names the command as it can be pasted (with --config).
    let out = format!(
        "{time}  {}  {:<10}  {} {}  waiting up to {} s: {}",
        q.task, "ask", q.method, q.url, q.timeout_secs, q.question
    );
    let out = safe(&out);
    if color {
        format!("\x1b[1;36m{out}\x1b[0m")
    } else {
        out
    }
}

/// Where each task's `access.jsonl` has been read up to.
#[derive(Default)]
struct Tail {
    read: HashMap<PathBuf, u64>,
}

impl Tail {
    /// New complete lines of `file` since the last call (from `start` the
    /// first time; from 0 after a rotation).
    fn new_lines(&mut self, file: &Path, start: u64) -> Vec<String> {
        let Ok(mut f) = std::fs::File::open(file) else {
            return Vec::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let at = self.read.entry(file.to_path_buf()).or_insert(start);
        if len < *at {
            *at = 0; // rotated: a new file
        }
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(*at)).is_err() || f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        // Only whole lines: a line being written is read next time.
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        *at += end as u64 + 1;
        String::from_utf8_lossy(&buf[..end])
            .lines()
            .map(String::from)
            .collect()
    }
}

/// The access logs of every task folder (or one task's).
fn logs(state_dir: &Path, task: Option<&str>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(state_dir.join("tasks"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| task.is_none_or(|t| e.file_name().to_string_lossy() == t))
        .flat_map(|e| [e.path().join("access.jsonl"), e.path().join("asked.jsonl")])
        .collect();
    out.sort();
    out
}

/// Prints the decisions written from now on (with `since`, first those
/// written since then), until `out` can no longer be written to.
pub(crate) fn follow(
    state_dir: &Path,
    task: Option<&str>,
    since: Option<&str>,
    color: bool,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut tail = Tail::default();
    if let Some(since) = since {
        let mut rows = super::rows(state_dir, task, Some(since));
        rows.sort_by(|a, b| a.ts.cmp(&b.ts));
        for r in rows {
            writeln!(out, "{}", line(&r, color))?;
        }
    }
    // What exists now was printed (or skipped); folders made later are
    // read from their start.
    for file in logs(state_dir, task) {
        let len = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        tail.read.insert(file, len);
    }
    loop {
        for file in logs(state_dir, task) {
            for l in tail.new_lines(&file, 0) {
                if let Ok(row) = serde_json::from_str::<AccessRecord>(&l) {
                    writeln!(out, "{}", line(&row, color))?;
                } else if let Ok(q) = serde_json::from_str::<crate::ask::Question>(&l) {
                    writeln!(out, "{}", question_line(&q, color))?;
                }
            }
        }
        out.flush()?;
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: serde_json::Value) -> AccessRecord {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_line_says_what_happened() {
        let r = rec(
            serde_json::json!({"ts": "2026-12-03T14:57:11.123Z", "task": "build",
            "client": "unix", "kind": "http", "method": "POST", "host": "paste.example.com",
            "port": 80, "path": "/upload", "decision": "deny", "rule": "untrusted-target",
            "status": 403, "reason": "paste.example.com is tainted"}),
        );
        assert_eq!(
            line(&r, false),
            "14:57:11  build  deny        POST http://paste.example.com:80/upload  untrusted-target: paste.example.com is tainted"
        );
        assert!(line(&r, true).starts_with("\x1b[1;31m14:57:11"));
        assert_eq!(
            safe("/a\x1b[2J\u{9b}b\u{202e}c"),
            "/a\\u{1b}[2J\\u{9b}b\\u{202e}c"
        );
        let ok = rec(
            serde_json::json!({"ts": "2026-12-03T14:57:12.000Z", "task": "build",
            "client": "unix", "kind": "connect", "method": "CONNECT", "host": "a.example.com",
            "port": 443, "path": null, "decision": "allow", "rule": null, "status": 200,
            "note": "intercepted"}),
        );
        assert_eq!(
            line(&ok, true),
            "14:57:12  build  allow       CONNECT a.example.com:443  (intercepted)"
        );
    }

    #[test]
    fn tail_reads_whole_lines_and_follows_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("access.jsonl");
        std::fs::write(&f, "one\ntw").unwrap();
        let mut t = Tail::default();
        assert_eq!(t.new_lines(&f, 0), vec!["one"]);
        std::fs::write(&f, "one\ntwo\n").unwrap();
        assert_eq!(t.new_lines(&f, 0), vec!["two"]);
        assert!(t.new_lines(&f, 0).is_empty());
        std::fs::write(&f, "new\n").unwrap();
        assert_eq!(
            t.new_lines(&f, 0),
            vec!["new"],
            "rotated: read from the start"
        );
    }
}
