//! What a task's taint set holds, for a person: the taints that change
//! what the task may send (their host is on the allow-list) first, each
//! with where it was named; the rest as a count (`--taint` lists them);
//! and the requests a shadow-mode taint would have refused.
//!
//! Reads `taint.jsonl` through the store's own replay (removals a person
//! made with `sluice untaint` included). Must not write anything.

use std::path::Path;

use crate::log::AccessRecord;
use crate::policy::owners::ByOwner;
use crate::policy::{verdict, Rule};

/// One taint: a host or `root/owner`, where and when it was named.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Taint {
    pub(crate) key: String,
    pub(crate) source: String,
    pub(crate) at: String,
}

/// The task's taint set as `taint.jsonl` leaves it, sorted.
pub(crate) fn taint_set(state_dir: &Path, task: &str) -> Vec<Taint> {
    let path = state_dir.join("tasks").join(task).join("taint.jsonl");
    let (store, _, _) = crate::taint::TaintStore::load(task, &path, usize::MAX);
    store
        .list()
        .into_iter()
        .map(|(key, p)| Taint {
            key,
            source: p.source.to_string(),
            at: p.at.to_string(),
        })
        .collect()
}

/// The hosts a task's allow-list names, as sluice last recorded them
/// (`state::ALLOW_LIST_FILE`), if it did.
pub(crate) fn recorded_allow_list(state_dir: &Path, task: &str) -> Option<Vec<String>> {
    let path = state_dir
        .join("tasks")
        .join(task)
        .join(crate::state::ALLOW_LIST_FILE);
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.rsplit_once(':').map(|(h, _)| h.to_string()))
            .collect(),
    )
}

/// Is this taint's host (for an owner, any host of its family) one that
/// `allowed` says the task may reach?
pub(crate) fn on_allow_list(key: &str, allowed: &dyn Fn(&str) -> bool) -> bool {
    let Some((root, _)) = key.split_once('/') else {
        return allowed(key);
    };
    let by = ByOwner::default_families();
    let family = by.family_of(root).map(|f| f.root.clone());
    allowed(root)
        || by
            .hosts()
            .any(|h| by.family_of(h).map(|f| &f.root) == family.as_ref() && allowed(h))
}

/// The taint part of a report: the taints on the allow-list with their
/// provenance, then how many others there are (all of them with `full`).
pub(crate) fn section(
    state_dir: &Path,
    task: &str,
    allowed: &dyn Fn(&str) -> bool,
    full: bool,
) -> String {
    let set = taint_set(state_dir, task);
    let (mine, rest): (Vec<&Taint>, Vec<&Taint>) =
        set.iter().partition(|t| on_allow_list(&t.key, allowed));
    let mut out = String::new();
    if set.is_empty() {
        out.push_str(&format!("taint ({task}): nothing tainted\n"));
        return out;
    }
    if mine.is_empty() {
        out.push_str(&format!(
            "taint ({task}): no tainted host is on the allow-list: no request the task may make is refused by taint\n"
        ));
    } else {
        out.push_str(&format!(
            "taint ({task}): {} tainted on the allow-list (a body to these is refused; after checking one, clear it with: sluice untaint --task {task} NAME)\n",
            mine.len()
        ));
        for t in &mine {
            out.push_str(&format!("  {}  named by {} at {}\n", t.key, t.source, t.at));
        }
    }
    if full {
        for t in &rest {
            out.push_str(&format!(
                "  {}  named by {} at {}  (not on the allow-list)\n",
                t.key, t.source, t.at
            ));
        }
    } else if !rest.is_empty() {
        out.push_str(&format!(
            "taint ({task}): {} more tainted name{} not on the allow-list; list them with: sluice report --taint\n",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        ));
    }
    out
}

/// What `sluice report` (and `sluice exec` after its command) prints
/// about one task's taint before the destinations: the requests a
/// shadow-mode taint would have refused, then [`section`]. The allow-list
/// is the one sluice recorded; without it, the destinations the task was
/// admitted to or refused only by taint.
pub(crate) fn leading(
    state_dir: &Path,
    task: &str,
    rows: &[super::Destination],
    raw: &[AccessRecord],
    full: bool,
) -> String {
    let recorded = recorded_allow_list(state_dir, task);
    let allowed = |h: &str| match &recorded {
        Some(list) => list.iter().any(|a| a == h),
        None => rows.iter().any(|d| {
            d.task == task
                && d.host == h
                && (d.allowed + d.tunnels > 0 || d.rules.contains(Rule::UntrustedTarget.as_str()))
        }),
    };
    let mut out = String::new();
    for line in would_deny_lines(raw.iter().filter(|r| &*r.task == task)) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&section(state_dir, task, &allowed, full));
    // Hosts and sources come from files a person may have edited by hand.
    out.lines().map(|l| super::follow::safe(l) + "\n").collect()
}

/// Requests a shadow-mode taint let through that enforce would have
/// refused, with the provenance: `WOULD_DENY POST https://… (named by …)`.
pub(crate) fn would_deny_lines<'a>(
    rows: impl IntoIterator<Item = &'a AccessRecord>,
) -> Vec<String> {
    rows.into_iter()
        .filter(|r| {
            r.decision == verdict::WOULD_DENY
                && r.rule.as_deref() == Some(Rule::UntrustedTarget.as_str())
        })
        .map(|r| {
            let by = r
                .tainted_by
                .as_ref()
                .map(|p| format!(" (tainted: named by {} at {})", p.source, p.at))
                .unwrap_or_default();
            format!(
                "WOULD_DENY {} {}:{}{}{by}",
                r.method,
                r.host,
                r.port,
                r.path.as_deref().unwrap_or("")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_count_as_allowed_through_their_family() {
        let allowed = |h: &str| h == "api.github.com" || h == "pkgs.example.com";
        assert!(on_allow_list("github.com/acme", &allowed));
        assert!(on_allow_list("pkgs.example.com", &allowed));
        assert!(!on_allow_list("gitlab.com/acme", &allowed));
        assert!(!on_allow_list("date.now", &allowed));
    }

    #[test]
    fn the_section_leads_with_what_is_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("tasks/build");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(
            t.join("taint.jsonl"),
            concat!(
                r#"{"ts":"2026-12-04T10:00:00Z","task":"build","host":"github.com","owner":"acme","source":"https://docs.example.com/readme"}"#,
                "\n",
                r#"{"ts":"2026-12-04T10:00:01Z","task":"build","host":"paste.example.net","source":"https://docs.example.com/readme"}"#,
                "\n",
                r#"{"ts":"2026-12-04T10:00:02Z","task":"build","host":"cdn.example.org","source":"https://docs.example.com/readme"}"#,
                "\n",
                r#"{"ts":"2026-12-04T10:00:03Z","task":"build","event":"untaint","host":"cdn.example.org","by":"test","cleared_source":"x","cleared_at":"y"}"#,
                "\n",
            ),
        )
        .unwrap();
        let allowed = |h: &str| h == "github.com";
        let s = section(dir.path(), "build", &allowed, false);
        assert!(s.contains("1 tainted on the allow-list"), "{s}");
        assert!(
            s.contains("  github.com/acme  named by https://docs.example.com/readme"),
            "{s}"
        );
        assert!(
            s.contains("1 more tainted name not on the allow-list"),
            "{s}"
        );
        assert!(!s.contains("cdn.example.org"), "{s}");
        let full = section(dir.path(), "build", &allowed, true);
        assert!(full.contains("paste.example.net"), "{full}");
        let none = section(dir.path(), "build", &|_| false, false);
        assert!(
            none.contains("no tainted host is on the allow-list"),
            "{none}"
        );
    }
}
