//! diff: what changed between two snapshots, task by task, in words a
//! person reads in the reload log line ("task build: allow +a.com:443;
//! allow_mode shadow → enforce").
//!
//! Must not: decide anything or touch live state; it only compares.

use std::collections::BTreeSet;
use std::fmt::Debug;

use super::{Snapshot, TaskConfig};

/// One line per task added, removed or changed, in config order (removed
/// tasks last). Empty when the tasks are the same.
pub(crate) fn task_changes(old: &Snapshot, new: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for t in &new.tasks {
        match old.task(&t.id) {
            None => out.push(format!(
                "task {} added ({} allow entries, allow_mode {})",
                t.id,
                t.rules.allow.len(),
                word(&t.rules.allow_mode)
            )),
            Some(o) => {
                let changes = changes(o, t);
                if !changes.is_empty() {
                    out.push(format!("task {}: {}", t.id, changes.join("; ")));
                }
            }
        }
    }
    for o in &old.tasks {
        if new.task(&o.id).is_none() {
            out.push(format!("task {} removed", o.id));
        }
    }
    out
}

/// What differs between two versions of one task.
fn changes(old: &TaskConfig, new: &TaskConfig) -> Vec<String> {
    let mut out = Vec::new();
    let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<String>>();
    let lists: [(&str, BTreeSet<String>, BTreeSet<String>); 5] = [
        (
            "allow",
            set(old.rules.allow.sorted()),
            set(new.rules.allow.sorted()),
        ),
        (
            "allow_private",
            old.rules
                .allow_private
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            new.rules
                .allow_private
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        ),
        (
            "listen",
            old.listen
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            new.listen
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        ),
        (
            "passthrough",
            old.passthrough.iter().cloned().collect(),
            new.passthrough.iter().cloned().collect(),
        ),
        (
            "taint.exempt",
            old.taint.exempt.iter().cloned().collect(),
            new.taint.exempt.iter().cloned().collect(),
        ),
    ];
    for (name, before, after) in lists {
        let added = after.difference(&before).map(|e| format!("+{e}"));
        let removed = before.difference(&after).map(|e| format!("-{e}"));
        let all: Vec<String> = added.chain(removed).collect();
        if !all.is_empty() {
            out.push(format!("{name} {}", all.join(" ")));
        }
    }
    let modes = [
        (
            "allow_mode",
            word(&old.rules.allow_mode),
            word(&new.rules.allow_mode),
        ),
        ("taint", word(&old.taint.mode), word(&new.taint.mode)),
        ("intercept", word(&old.intercept), word(&new.intercept)),
        (
            "taint.self",
            word(&old.taint.self_taint),
            word(&new.taint.self_taint),
        ),
        (
            "taint.max_hosts",
            old.taint.max_hosts.to_string(),
            new.taint.max_hosts.to_string(),
        ),
        (
            "taint.max_scan_bytes",
            old.taint.max_scan_bytes.to_string(),
            new.taint.max_scan_bytes.to_string(),
        ),
    ];
    for (name, before, after) in modes {
        if before != after {
            out.push(format!("{name} {before} → {after}"));
        }
    }
    out
}

/// What changed outside the tasks: the resolver, the admin and metrics
/// listeners, the state folder, limits, logs and upstream roots. Settings
/// a reload cannot apply say so ("after a restart").
pub(crate) fn global_changes(old: &Snapshot, new: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let (o, n) = (&old.resolver, &new.resolver);
    if o.nameservers != n.nameservers {
        out.push(format!(
            "resolver.nameservers {} → {}",
            nameservers(&o.nameservers),
            nameservers(&n.nameservers)
        ));
    }
    let names = |h: &std::collections::HashMap<String, Vec<std::net::IpAddr>>,
                 other: &std::collections::HashMap<String, Vec<std::net::IpAddr>>| {
        let mut v: Vec<&str> = h
            .iter()
            .filter(|(k, a)| other.get(*k) != Some(*a))
            .map(|(k, _)| k.as_str())
            .collect();
        v.sort_unstable();
        v.join(",")
    };
    let (added, dropped) = (names(&n.hosts, &o.hosts), names(&o.hosts, &n.hosts));
    if !added.is_empty() || !dropped.is_empty() {
        out.push(format!("resolver.hosts +{added} -{dropped}"));
    }
    let listen = |l: &Option<super::ListenAddr>| {
        l.as_ref()
            .map_or("none".to_string(), std::string::ToString::to_string)
    };
    let restart = [
        ("admin.listen", listen(&old.admin), listen(&new.admin)),
        (
            "admin.metrics_listen",
            listen(&old.metrics_listen),
            listen(&new.metrics_listen),
        ),
        (
            "state_dir",
            old.state_dir.display().to_string(),
            new.state_dir.display().to_string(),
        ),
    ];
    for (name, before, after) in restart {
        if before != after {
            out.push(format!("{name} {before} → {after} (after a restart)"));
        }
    }
    for (name, differs) in [
        ("limits", old.limits != new.limits),
        ("logs", old.logs != new.logs),
        ("upstream.extra_roots", old.extra_roots != new.extra_roots),
        ("publish_ca", old.publish_ca != new.publish_ca),
    ] {
        if differs {
            out.push(format!("{name} changed"));
        }
    }
    out
}

fn nameservers(n: &super::Nameservers) -> String {
    match n {
        super::Nameservers::System => "system".to_string(),
        super::Nameservers::List(l) => {
            let v: Vec<String> = l.iter().map(std::string::ToString::to_string).collect();
            v.join(",")
        }
    }
}

/// `Shadow` → `shadow`.
fn word(v: &impl Debug) -> String {
    format!("{v:?}").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{validate, Source};
    use std::path::Path;

    fn snap(text: &str) -> Snapshot {
        validate(text, Source::Embedded, Path::new("."), 1).unwrap()
    }

    #[test]
    fn names_hosts_added_and_removed_and_modes() {
        let old = snap(
            "[[task]]\nid = \"b\"\nlisten = [\"tcp:127.0.0.1:0\"]\nallow = [\"a.example.com\"]\nallow_mode = \"shadow\"\n\
             [[task]]\nid = \"gone\"\nlisten = [\"tcp:127.0.0.1:1\"]\n",
        );
        let new = snap(
            "[[task]]\nid = \"b\"\nlisten = [\"tcp:127.0.0.1:0\"]\nallow = [\"a.example.com:443\", \"c.example.com:8443\"]\n\
             [[task]]\nid = \"new\"\nlisten = [\"tcp:127.0.0.1:2\"]\nallow = [\"d.example.com\"]\n",
        );
        assert_eq!(
            task_changes(&old, &new),
            vec![
                "task b: allow +c.example.com:8443 -a.example.com:80; allow_mode shadow → enforce"
                    .to_string(),
                "task new added (2 allow entries, allow_mode enforce)".to_string(),
                "task gone removed".to_string(),
            ]
        );
        assert!(task_changes(&new, &new).is_empty());
    }

    #[test]
    fn names_resolver_admin_and_other_settings() {
        let task = "[[task]]\nid = \"b\"\nlisten = [\"tcp:127.0.0.1:0\"]\n";
        let old = snap(&format!(
            "[admin]\nlisten = \"tcp:127.0.0.1:9\"\n[resolver]\nnameservers = [\"127.0.0.1:53\"]\n\
             [resolver.hosts]\n\"a.example.com\" = [\"127.0.0.1\"]\n{task}"
        ));
        let new = snap(&format!(
            "[admin]\nlisten = \"tcp:127.0.0.1:10\"\n[resolver]\nnameservers = [\"127.0.0.2:53\"]\n\
             [resolver.hosts]\n\"b.example.com\" = [\"127.0.0.1\"]\n[limits]\ndrain_secs = 3\n{task}"
        ));
        assert_eq!(
            global_changes(&old, &new),
            vec![
                "resolver.nameservers 127.0.0.1:53 → 127.0.0.2:53".to_string(),
                "resolver.hosts +b.example.com -a.example.com".to_string(),
                "admin.listen tcp:127.0.0.1:9 → tcp:127.0.0.1:10 (after a restart)".to_string(),
                "limits changed".to_string(),
            ]
        );
        assert!(global_changes(&new, &new).is_empty());
        assert!(task_changes(&old, &new).is_empty());
    }
}
