//! `sluice check`: what each task of a valid config may reach, one block
//! per task (one host a line) or, with `--wide`, one table row per task.
//! `!` marks what is wider than the shipped default; the shipped default's
//! own choices carry no mark. Reads the snapshot only.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{self, Intercept, Snapshot, TaskConfig};
use crate::policy::{AllowMode, TaintMode};

/// The fields of a task, in order: (block label, table header).
const FIELDS: [(&str, &str); 7] = [
    ("listen", "LISTEN"),
    ("allow", "ALLOW"),
    ("allow_mode", "ALLOW_MODE"),
    ("taint", "TAINT"),
    ("intercept", "INTERCEPT"),
    ("private", "PRIVATE"),
    ("secrets", "SECRETS"),
];

/// `sluice check`'s report of a valid config.
pub(crate) fn check_report(s: &Snapshot, wide: bool) -> String {
    let mut out = format!("config {} is valid: {} task(s)\n", s.source, s.tasks.len());
    let shipped = shipped_exempt();
    let tasks: Vec<(String, [Vec<String>; 7])> = s
        .tasks
        .iter()
        .map(|t| (t.id.clone(), fields(t, &shipped)))
        .collect();
    if wide {
        // The secrets column only when a task has one.
        let shown = if tasks.iter().any(|(_, f)| !f[6].is_empty()) {
            7
        } else {
            6
        };
        let mut header = vec!["TASK".to_string()];
        header.extend(FIELDS.iter().take(shown).map(|(_, h)| h.to_string()));
        let mut rows = vec![header];
        for (id, f) in &tasks {
            let mut row = vec![id.clone()];
            row.extend(f.iter().take(shown).map(|v| v.join(" ")));
            rows.push(row);
        }
        out.push_str(&crate::report::aligned(&rows, |_| false));
    } else {
        for (id, f) in &tasks {
            out.push_str(&format!("\ntask {id}\n"));
            for ((label, _), values) in FIELDS.iter().zip(f) {
                for (i, v) in values.iter().enumerate() {
                    let label = if i == 0 { label } else { "" };
                    out.push_str(&format!("  {label:<11} {v}\n"));
                }
            }
        }
        out.push('\n');
    }
    out.push_str(
        "! = wider than the shipped default: a shadow mode, taint exemptions or off,\n    \
         no interception, private ranges, or a private or metadata address in allow\n",
    );
    for w in &s.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// The hosts the shipped default itself exempts from taint: not marked.
fn shipped_exempt() -> BTreeSet<String> {
    config::load(None, 1)
        .map(|d| {
            d.tasks
                .iter()
                .flat_map(|t| t.taint.exempt.iter().cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// One task's values, a list per field (one line each in a block).
fn fields(t: &TaskConfig, shipped: &BTreeSet<String>) -> [Vec<String>; 7] {
    let allow_mode = match t.rules.allow_mode {
        AllowMode::Enforce => "enforce",
        AllowMode::Shadow => "!shadow",
        AllowMode::Ask => "ask",
    };
    let listen = t
        .listen
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    [
        listen,
        allow_column(t),
        vec![allow_mode.to_string()],
        taint_column(t, shipped),
        intercept_column(t),
        vec![private_column(t)],
        secrets_column(t),
    ]
}

/// Each secret: its name, where its value comes from, its hosts and where
/// it goes in (no line without secrets). Never a value.
fn secrets_column(t: &TaskConfig) -> Vec<String> {
    t.secrets
        .iter()
        .map(|s| {
            let from = match &s.source {
                crate::config::SecretSource::Env(v) => format!("${v}"),
                crate::config::SecretSource::File(p) => p.display().to_string(),
            };
            let mut hosts: Vec<String> =
                s.hosts.entries().map(|(h, p)| format!("{h}:{p}")).collect();
            hosts.sort();
            let mut at = s.headers.clone();
            at.extend(s.query.then(|| "query".to_string()));
            at.extend(s.body.then(|| "body".to_string()));
            let on = match s.on_violation {
                crate::config::OnViolation::Refuse => "",
                crate::config::OnViolation::Quarantine => ", quarantine",
            };
            format!(
                "{} (from {from}) to {} in {}{on}",
                s.name,
                hosts.join(","),
                at.join(",")
            )
        })
        .collect()
}

/// The allowed destinations: ports grouped per host, "github.com:80,443".
fn allow_column(t: &TaskConfig) -> Vec<String> {
    let mut by_host: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for (host, port) in t.rules.allow.entries() {
        by_host.entry(host.to_string()).or_default().push(port);
    }
    if by_host.is_empty() {
        return vec!["(nothing)".to_string()];
    }
    by_host
        .into_iter()
        .map(|(h, mut ports)| {
            ports.sort_unstable();
            // Admitted as listed, but not a public destination.
            let ip = h.trim_start_matches('[').trim_end_matches(']');
            let mark = match ip.parse::<std::net::IpAddr>() {
                Ok(ip) if crate::policy::addr::classify(ip).is_err() => "!",
                _ => "",
            };
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            format!("{mark}{h}:{}", ports.join(","))
        })
        .collect()
}

/// The taint mode, then exemptions and a raised `max_hosts`.
fn taint_column(t: &TaskConfig, shipped: &BTreeSet<String>) -> Vec<String> {
    let mode = match t.taint.mode {
        TaintMode::Enforce => "enforce",
        TaintMode::Shadow => "!shadow",
        TaintMode::Off => "!off",
    };
    let mut out = vec![mode.to_string()];
    let (as_shipped, wider): (BTreeSet<&String>, BTreeSet<&String>) =
        t.taint.exempt.iter().partition(|h| shipped.contains(*h));
    for (mark, set) in [("", as_shipped), ("!", wider)] {
        if !set.is_empty() {
            let hosts: Vec<&str> = set.into_iter().map(String::as_str).collect();
            out.push(format!("{mark}exempt={}", hosts.join(",")));
        }
    }
    if t.taint.max_hosts > 100_000 {
        out.push(format!("!max_hosts={}", t.taint.max_hosts));
    }
    // Forges beyond the built-in ones are tainted by owner, not whole.
    let defaults = crate::policy::owners::default_roots();
    let extra: Vec<&str> = t
        .taint
        .by_owner
        .roots()
        .into_iter()
        .filter(|r| !defaults.iter().any(|d| d == r))
        .collect();
    if !extra.is_empty() {
        out.push(format!("!by_owner+={}", extra.join(",")));
    }
    out
}

/// The interception setting, then the passthrough hosts.
fn intercept_column(t: &TaskConfig) -> Vec<String> {
    let mut out = vec![match t.intercept {
        Intercept::All => "all".to_string(),
        Intercept::None => "!none".to_string(),
    }];
    if !t.passthrough.is_empty() {
        let mut p: Vec<_> = t.passthrough.iter().cloned().collect();
        p.sort();
        out.push(format!("!passthrough={}", p.join(",")));
    }
    out
}

/// The private ranges allowed, or "-".
fn private_column(t: &TaskConfig) -> String {
    if t.rules.allow_private.is_empty() {
        return "-".to_string();
    }
    let nets: Vec<String> = t
        .rules
        .allow_private
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    format!("!{}", nets.join(","))
}
