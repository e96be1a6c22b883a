//! html: `sluice report --html FILE`, one self-contained page per state
//! folder: per task, the destinations table, a timeline of decisions, and
//! the provenance graph (which response named which host, and which later
//! requests to that host were refused), drawn as inline SVG. No scripts,
//! no styles or fonts from the network: it reads the same without
//! JavaScript and offline.
//!
//! Pure: builds text from rows. Must not read or write files itself.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::Destination;
use crate::log::AccessRecord;
use crate::policy::verdict;

/// Timeline rows shown per task at most (the newest are kept).
const TIMELINE_ROWS: usize = 2000;

/// Where a tainted host was named: (host, source URL, when).
pub(crate) type TaintLine = (String, String, String);

/// One task's part of the page.
pub(crate) struct TaskPart<'a> {
    pub(crate) task: &'a str,
    pub(crate) destinations: &'a [Destination],
    pub(crate) rows: &'a [AccessRecord],
    pub(crate) taint: &'a [TaintLine],
}

/// Escapes text for HTML element content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\
td.n{text-align:right}tr.refused td{background:#fde8e8}tr.would td{background:#fdf6e0}\
tr.failed td{background:#eee}code{font-size:13px}h2{margin-top:2em}svg text{font:12px monospace}";

/// The whole page.
pub(crate) fn page(state: &str, parts: &[TaskPart]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>sluice report: {s}</title><style>{STYLE}</style></head><body>\n\
         <h1>sluice report</h1><p>State folder <code>{s}</code>. Times are UTC. \
         Rows refused are red, rows a shadow mode let through are yellow, \
         failures (DNS or upstream) grey.</p>\n",
        s = esc(state)
    );
    if parts.is_empty() {
        out.push_str("<p>No access-log rows.</p>\n");
    }
    for p in parts {
        task_section(&mut out, p);
    }
    out.push_str("</body></html>\n");
    out
}

fn row_class(decision: &str) -> &'static str {
    match decision {
        verdict::DENY => "refused",
        verdict::WOULD_DENY => "would",
        verdict::ERROR => "failed",
        _ => "",
    }
}

fn task_section(out: &mut String, p: &TaskPart) {
    let _ = write!(
        out,
        "<h2>Task <code>{}</code></h2>\n<h3>Destinations</h3>\n",
        esc(p.task)
    );
    out.push_str(
        "<table><tr><th>destination</th><th>requests</th><th>allowed</th><th>refused</th>\
         <th>would_deny</th><th>failed</th><th>up</th><th>down</th><th>body</th><th>tainted</th>\
         <th>rules</th></tr>\n",
    );
    for d in p.destinations {
        let class = if d.refused > 0 {
            "refused"
        } else if d.would_deny > 0 {
            "would"
        } else {
            ""
        };
        let rules: Vec<&str> = d.rules.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "<tr class=\"{class}\"><td><code>{}:{}</code></td><td class=n>{}</td><td class=n>{}</td>\
             <td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td>\
             <td class=n>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&d.host),
            d.port,
            d.requests,
            d.allowed,
            d.refused,
            d.would_deny,
            d.failed,
            super::human_bytes(d.bytes_up),
            super::human_bytes(d.bytes_down),
            if d.body { "yes" } else { "-" },
            if d.tainted { "yes" } else { "-" },
            esc(&rules.join(", "))
        );
    }
    out.push_str("</table>\n");
    provenance(out, p);
    timeline(out, p.rows);
}

fn timeline(out: &mut String, rows: &[AccessRecord]) {
    let _ = writeln!(out, "<h3>Timeline</h3>");
    let skip = rows.len().saturating_sub(TIMELINE_ROWS);
    if skip > 0 {
        let _ = writeln!(out, "<p>The {skip} oldest rows are left out.</p>");
    }
    out.push_str(
        "<table><tr><th>time</th><th>decision</th><th>request</th><th>rule and reason</th>\
         <th>conn</th></tr>\n",
    );
    for r in &rows[skip..] {
        let why = match (&r.rule, &r.reason) {
            (Some(rule), Some(reason)) => format!("{rule}: {reason}"),
            (Some(rule), None) => rule.to_string(),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td><code>{} {}:{}{}</code></td><td>{}</td><td class=n>{}</td></tr>",
            row_class(&r.decision),
            esc(&super::compact_time(&r.ts)),
            esc(&r.decision),
            esc(&r.method),
            esc(&r.host),
            r.port,
            esc(r.path.as_deref().unwrap_or("")),
            esc(&why),
            r.conn
        );
    }
    out.push_str("</table>\n");
}

/// Which response named which host (left), the tainted host (middle),
/// and the requests to it refused because of it (right), as SVG; then
/// the same as a list.
fn provenance(out: &mut String, p: &TaskPart) {
    let _ = writeln!(out, "<h3>Provenance</h3>");
    if p.taint.is_empty() {
        out.push_str("<p>No host was tainted.</p>\n");
        return;
    }
    let mut refused: BTreeMap<&str, Vec<&AccessRecord>> = BTreeMap::new();
    for r in p
        .rows
        .iter()
        .filter(|r| r.tainted_by.is_some() && r.decision == verdict::DENY)
    {
        refused.entry(r.host.as_str()).or_default().push(r);
    }
    let sources: Vec<&str> = {
        let mut s: Vec<&str> = p.taint.iter().map(|t| t.1.as_str()).collect();
        s.sort();
        s.dedup();
        s
    };
    let line_h = 22;
    let height = line_h * (p.taint.len().max(sources.len()) + 1) + 10;
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1100\" height=\"{height}\" role=\"img\" \
         aria-label=\"taint provenance\">"
    );
    let y = |i: usize| (i + 1) * line_h;
    for (i, s) in sources.iter().enumerate() {
        let _ = writeln!(
            out,
            "<text x=\"5\" y=\"{}\">{}</text>",
            y(i),
            esc(&clip(s, 50))
        );
    }
    for (i, (host, source, _)) in p.taint.iter().enumerate() {
        let from = sources.iter().position(|s| s == source).unwrap_or(0);
        let _ = writeln!(
            out,
            "<line x1=\"400\" y1=\"{}\" x2=\"450\" y2=\"{}\" stroke=\"#888\"/>\
             <text x=\"455\" y=\"{}\">{}</text>",
            y(from) - 4,
            y(i) - 4,
            y(i),
            esc(&clip(host, 40))
        );
        if let Some(rs) = refused.get(host.as_str()) {
            let _ = writeln!(
                out,
                "<line x1=\"760\" y1=\"{yy}\" x2=\"800\" y2=\"{yy}\" stroke=\"#c00\"/>\
                 <text x=\"805\" y=\"{}\" fill=\"#c00\">{} refused ({} {}…)</text>",
                y(i),
                rs.len(),
                esc(&rs[0].method),
                esc(&clip(rs[0].path.as_deref().unwrap_or(""), 20)),
                yy = y(i) - 4
            );
        }
    }
    out.push_str("</svg>\n<ul>\n");
    for (host, source, at) in p.taint {
        let n = refused.get(host.as_str()).map_or(0, Vec::len);
        let _ = writeln!(
            out,
            "<li><code>{}</code> named <code>{}</code> at {}; later refused requests to it: {n}</li>",
            esc(source),
            esc(host),
            esc(at)
        );
    }
    out.push_str("</ul>\n");
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut c: String = s.chars().take(n.saturating_sub(1)).collect();
    c.push('…');
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_draws_provenance_without_scripts() {
        let rows: Vec<AccessRecord> = vec![serde_json::from_value(serde_json::json!({
            "ts": "2026-12-03T10:00:04.000Z", "task": "t", "client": "unix", "kind": "http",
            "method": "POST", "host": "paste.example", "port": 80, "path": "/<x>",
            "decision": "deny", "rule": "untrusted-target", "status": 403,
            "tainted_by": {"source": "http://evil.example/", "at": "2026-12-03T10:00:03Z"},
            "reason": "paste.example is tainted"}))
        .unwrap()];
        let taint = vec![(
            "paste.example".to_string(),
            "http://evil.example/".to_string(),
            "2026-12-03T10:00:03Z".to_string(),
        )];
        let page = page(
            "/st<ate>",
            &[TaskPart {
                task: "t",
                destinations: &[],
                rows: &rows,
                taint: &taint,
            }],
        );
        assert!(!page.contains("<script"), "no scripts");
        assert!(
            !page.contains("src=") && !page.contains("href="),
            "nothing fetched"
        );
        assert!(page.contains("/st&lt;ate&gt;") && page.contains("/&lt;x&gt;"));
        assert!(page.contains("<svg") && page.contains("1 refused (POST"));
        assert!(page.contains("<code>http://evil.example/</code> named <code>paste.example</code>"));
        assert!(page.contains("<tr class=\"refused\">"));
    }
}
