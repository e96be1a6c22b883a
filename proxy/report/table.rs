//! table: the report as a person reads it: aligned columns, a legend,
//! human sizes and compact times. Pure text; reads nothing.

use super::follow::safe;
use super::Destination;

/// What the table's marks and columns mean, printed under it.
pub(crate) const LEGEND: &str = "! = refused or would be refused; REFUSED = decision deny, \
WOULD_DENY = shadow mode let it through, FAILED = could not reach (DNS or upstream), \
nothing refused; UP/DOWN = bytes relayed; times UTC";

/// The table `sluice report` prints: one line per destination, every
/// column headed and aligned (numbers to the right), then [`LEGEND`].
pub(crate) fn table(rows: &[Destination]) -> String {
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
    let mut lines: Vec<Vec<String>> = vec![header
        .iter()
        .map(std::string::ToString::to_string)
        .collect()];
    let yes = |b: bool| if b { "yes" } else { "-" }.to_string();
    for d in rows {
        let rules: Vec<&str> = d.rules.iter().map(String::as_str).collect();
        lines.push(vec![
            if d.flagged() { "!" } else { "" }.to_string(),
            d.task.clone(),
            // Port 0: a name the task's DNS refused (no connection).
            match d.port {
                0 => format!("{} (dns)", d.host),
                p => format!("{}:{p}", d.host),
            },
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
/// Every cell is made safe for a terminal first ([`safe`]): a row's host
/// or task in a hand-edited log cannot move the cursor or reorder text.
pub(crate) fn aligned(rows: &[Vec<String>], right: impl Fn(usize) -> bool) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| safe(c)).collect())
        .collect();
    let rows = &rows[..];
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
pub(crate) fn compact_time(ts: &str) -> String {
    match (ts.get(5..10), ts.get(10..11), ts.get(11..19)) {
        (Some(day), Some("T"), Some(time)) => format!("{day} {time}"),
        _ => ts.to_string(),
    }
}

/// Bytes for a person: `0 B`, `843 B`, `1.5 KiB`, `28.6 MiB`, `2.0 GiB`.
pub(crate) fn human_bytes(n: u64) -> String {
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
