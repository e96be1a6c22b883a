//! report: `sluice report` — which destinations each task actually
//! reached, from the access logs (rotated files included), and the
//! allow-list that would have admitted exactly that.
//!
//! Reads files only; works while sluice is running (a torn last line is
//! skipped). Must not write anything.

use crate::command_error::{CommandError, Doing};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::log::{AccessRecord, Kind};

pub(crate) mod follow;
pub(crate) mod html;
mod table;
pub(crate) mod taint;
use crate::policy::verdict;
pub(crate) use table::{aligned, compact_time, human_bytes, table};

/// One (task, host:port) line of the report.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Destination {
    pub(crate) task: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) first_seen: String,
    pub(crate) last_seen: String,
    /// Requests: plain HTTP, requests inside intercepted tunnels, and
    /// tunnels sluice relayed opaquely (or refused). The CONNECT of an
    /// intercepted tunnel is counted in `tunnels`, not here: the requests
    /// inside it are the requests.
    pub(crate) requests: u64,
    /// Intercepted tunnels (their CONNECT rows).
    pub(crate) tunnels: u64,
    /// Requests with decision `allow`.
    pub(crate) allowed: u64,
    /// Requests with decision `deny`.
    pub(crate) refused: u64,
    /// Requests with decision `would_deny`: a shadow mode let through what
    /// enforce would have refused.
    pub(crate) would_deny: u64,
    /// Requests with decision `error` (DNS or upstream failures): they
    /// could not be carried out; nothing was refused.
    pub(crate) failed: u64,
    /// Bytes relayed to the destination (request bodies; all bytes of an
    /// opaque tunnel). A refused request sends none.
    pub(crate) bytes_up: u64,
    pub(crate) bytes_down: u64,
    /// A request that was not refused at CONNECT carried a body.
    pub(crate) body: bool,
    /// The host is in the task's taint set.
    pub(crate) tainted: bool,
    /// Refusal rules seen, for the eye.
    pub(crate) rules: BTreeSet<String>,
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
    pub(crate) fn flagged(&self) -> bool {
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
        // A shadow mode let it through: it was reached, whichever rule
        // would have refused it (the allow-list, or taint).
        if row.decision == verdict::WOULD_DENY {
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

/// The hosts of a task folder's taint set (owner taints by their root).
fn tainted_hosts(dir: &Path) -> HashSet<String> {
    let path = dir.join("taint.jsonl");
    let (store, _, _) = crate::taint::TaintStore::load("", &path, usize::MAX);
    store
        .list()
        .into_iter()
        .map(|(k, _)| k.split('/').next().unwrap_or(&k).to_string())
        .collect()
}

/// Is there something to report on? A state folder that does not exist, or
/// a task it has no folder for, is a mistake to say, not an empty report.
pub(crate) fn check_state(state_dir: &Path, task: Option<&str>) -> Result<(), CommandError> {
    if !state_dir.is_dir() {
        return Err(CommandError::refused(format!(
            "no state folder at {}: pass --state DIR, or --config FILE for the state_dir sluice ran with",
            state_dir.display()
        )));
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
    Err(CommandError::refused(format!(
        "no task {t:?} in {} (tasks there: {})",
        state_dir.display(),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )))
}

/// Builds the report for every task in `state_dir` (or one task).
#[cfg(test)]
pub(crate) fn build(state_dir: &Path, task: Option<&str>) -> std::io::Result<Vec<Destination>> {
    build_since(state_dir, task, None)
}

/// [`build`] from the rows written at or after `since` (an RFC 3339 time
/// as the log writes it) only.
pub(crate) fn build_since(
    state_dir: &Path,
    task: Option<&str>,
    since: Option<&str>,
) -> std::io::Result<Vec<Destination>> {
    let mut out: BTreeMap<(String, String, u16), Destination> = BTreeMap::new();
    for (_, dir) in task_dirs(state_dir, task)? {
        let tainted = tainted_hosts(&dir);
        for row in dir_rows(&dir, since) {
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
    Ok(out.into_values().collect())
}

/// The task folders of a state folder (or the one of `task`), by name.
pub(crate) fn task_dirs(
    state_dir: &Path,
    task: Option<&str>,
) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut dirs: Vec<(String, PathBuf)> = match std::fs::read_dir(state_dir.join("tasks")) {
        Ok(rd) => rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| (e.file_name().to_string_lossy().to_string(), e.path()))
            .filter(|(name, _)| task.is_none_or(|t| t == name))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    dirs.sort();
    Ok(dirs)
}

/// A task folder's access rows, oldest file first, written at or after
/// `since`. A torn last line of a running sluice is skipped.
fn dir_rows(dir: &Path, since: Option<&str>) -> Vec<AccessRecord> {
    let mut out = Vec::new();
    for file in access_files(dir) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        out.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<AccessRecord>(l).ok())
                .filter(|r| since.is_none_or(|s| r.ts.as_str() >= s)),
        );
    }
    out
}

/// Where each taint of a task folder was named: (host or `root/owner`,
/// source, ts).
fn taint_of(dir: &Path) -> Vec<html::TaintLine> {
    let path = dir.join("taint.jsonl");
    let (store, _, _) = crate::taint::TaintStore::load("", &path, usize::MAX);
    store
        .list()
        .into_iter()
        .map(|(k, p)| (k, p.source.to_string(), p.at.to_string()))
        .collect()
}

/// `sluice report --html`: the page for a state folder (or one task).
pub(crate) fn html_page(
    state_dir: &Path,
    task: Option<&str>,
    since: Option<&str>,
) -> std::io::Result<String> {
    let mut data = Vec::new();
    for (name, dir) in task_dirs(state_dir, task)? {
        let destinations = build_since(state_dir, Some(&name), since)?;
        let mut rows = dir_rows(&dir, since);
        rows.sort_by(|a, b| a.ts.cmp(&b.ts));
        data.push((name, destinations, rows, taint_of(&dir)));
    }
    let parts: Vec<html::TaskPart> = data
        .iter()
        .map(|(task, destinations, rows, taint)| html::TaskPart {
            task,
            destinations,
            rows,
            taint,
        })
        .collect();
    Ok(html::page(&state_dir.display().to_string(), &parts))
}

/// Every access row of the state folder (or of one task), written at or
/// after `since`.
pub(crate) fn rows(state_dir: &Path, task: Option<&str>, since: Option<&str>) -> Vec<AccessRecord> {
    task_dirs(state_dir, task)
        .unwrap_or_default()
        .iter()
        .flat_map(|(_, d)| dir_rows(d, since))
        .collect()
}

/// `--since`: a duration back from `now` (`90s`, `15m`, `2h`, `7d`) or a
/// time (RFC 3339, or a date), as the log writes times.
pub(crate) fn since(arg: &str, now: time::OffsetDateTime) -> Result<String, CommandError> {
    use time::format_description::well_known::Rfc3339;
    let unit = arg.chars().last().unwrap_or(' ');
    let secs = match unit {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86_400),
        _ => None,
    };
    let at = match (
        secs,
        arg[..arg.len() - unit.len_utf8().min(arg.len())].parse::<i64>(),
    ) {
        (Some(s), Ok(n)) if n >= 0 => now - time::Duration::seconds(n.saturating_mul(s)),
        _ => match time::OffsetDateTime::parse(arg, &Rfc3339) {
            Ok(t) => t,
            Err(_) => time::Date::parse(
                arg,
                time::macros::format_description!("[year]-[month]-[day]"),
            )
            .map(|d| d.midnight().assume_utc())
            .map_err(|_| {
                CommandError::Usage(format!(
                    "--since {arg:?}: give a duration (90s, 15m, 2h, 7d) or a time \
                         (2026-12-03T14:00:00Z, 2026-12-03)"
                ))
            })?,
        },
    };
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    at.to_offset(time::UtcOffset::UTC)
        .format(&fmt)
        .doing(|| format!("--since {arg:?}: cannot write the time"))
}

/// The `allow = [...]` line that would have admitted exactly what `task`
/// reached: every destination with an allowed request, or one that shadow
/// mode let through as `not-allowed`. A host reached on both 80 and 443 is
/// written bare; anything else as `host:port`.
pub(crate) fn allow_list(rows: &[Destination], task: &str) -> String {
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
mod tests;
