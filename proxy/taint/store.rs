//! A task's taint set: hosts, and owners on multi-tenant hosts, each with
//! its provenance; bounded by `max_hosts`, persisted to `taint.jsonl` and
//! replayed on start.
//!
//! Owns: the set and its file lines (taints, the overflow event, removals
//! a person made with `sluice untaint`), and the taints held only while a
//! name is in progress at a chunk's end (`pending`: they never reach the
//! file). Must not: decide whether a name counts (`policy::names`) or how
//! a request path reads (`policy::owners`); it answers "is this tainted,
//! and by what?".
//!
//! Keys: a host (`paste.example.com`) or an owner on a family's root
//! (`github.com/acme`), as `policy::names::TaintKey` displays them.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::config::TaintSettings;
use crate::log::AccessLog;
use crate::policy::names::TaintKey;
use crate::policy::owners::Owner;
use crate::policy::{Provenance, TaintMode, TaintState};

/// One line of `taint.jsonl`: a new taint.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaintRecord {
    pub(crate) ts: String,
    pub(crate) task: String,
    /// The host, or for an owner taint the family's root (`github.com`).
    pub(crate) host: String,
    /// The owner on a multi-tenant host (`acme`), else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    pub(crate) source: String,
}

/// The line `taint.jsonl` gets when the set first overflows: the task
/// then stays failed-closed across restarts and reloads until its state is
/// cleared by hand (SPEC §9 "Overflow persists").
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct OverflowRecord {
    pub(crate) ts: String,
    pub(crate) task: String,
    /// Always [`OVERFLOW_EVENT`].
    pub(crate) event: String,
    pub(crate) max_hosts: usize,
}

pub(crate) const OVERFLOW_EVENT: &str = "taint-overflow";

/// The line a removal by a person writes (`sluice untaint`): who, when,
/// and the provenance it cleared. A restart replays it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct UntaintRecord {
    pub(crate) ts: String,
    pub(crate) task: String,
    /// Always [`UNTAINT_EVENT`].
    pub(crate) event: String,
    pub(crate) host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    /// Who asked: `admin API` with the caller's peer, or the CLI.
    pub(crate) by: String,
    /// The provenance removed.
    pub(crate) cleared_source: String,
    pub(crate) cleared_at: String,
}

pub(crate) const UNTAINT_EVENT: &str = "untaint";

/// The outcome of offering a key to the store.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    New,
    Known,
    Exempt,
    /// The set is full; `first` is true the first time this happens.
    Overflow {
        first: bool,
    },
}

/// A task's taint set. Reads take no global lock (sharded maps).
pub(crate) struct TaintStore {
    task: Arc<str>,
    keys: DashMap<String, Provenance>,
    /// Owner taints per family root, for a request whose path names none.
    owners: DashMap<String, usize>,
    /// Taints of names in progress at a chunk's end, counted per response
    /// that holds them.
    pending: DashMap<String, (usize, Provenance)>,
    count: AtomicUsize,
    overflow: AtomicBool,
    /// Bumped by every removal: what a connection's memo learned holds
    /// only while it stays the same (`scan::memo`).
    epoch: AtomicU64,
}

fn key_string(host: &str, owner: Option<&str>) -> String {
    match owner {
        Some(o) => format!("{host}/{o}"),
        None => host.to_string(),
    }
}

impl TaintStore {
    pub(crate) fn new(task: &str) -> TaintStore {
        TaintStore {
            task: task.into(),
            keys: DashMap::new(),
            owners: DashMap::new(),
            pending: DashMap::new(),
            count: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
        }
    }

    /// Loads `taint.jsonl` (a restart never forgets taint, nor a removal
    /// a person made). Unreadable lines are skipped and counted; a
    /// missing file is an empty set.
    pub(crate) fn load(task: &str, path: &Path, max_hosts: usize) -> (TaintStore, usize, usize) {
        let store = TaintStore::new(task);
        let mut bad = 0;
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                if let Ok(r) = serde_json::from_str::<TaintRecord>(line) {
                    if store.keys.len() >= max_hosts {
                        store.overflow.store(true, Ordering::Relaxed);
                        continue;
                    }
                    let p = Provenance {
                        source: r.source.into(),
                        at: r.ts.into(),
                    };
                    store.put(&r.host, r.owner.as_deref(), p);
                } else if let Ok(u) = serde_json::from_str::<UntaintRecord>(line) {
                    if u.event == UNTAINT_EVENT {
                        store.take(&key_string(&u.host, u.owner.as_deref()));
                    }
                } else {
                    match serde_json::from_str::<OverflowRecord>(line) {
                        Ok(o) if o.event == OVERFLOW_EVENT => {
                            store.overflow.store(true, Ordering::Relaxed);
                        }
                        // A torn last line after a crash, or foreign junk.
                        _ => bad += 1,
                    }
                }
            }
        }
        store.count.store(store.keys.len(), Ordering::Relaxed);
        let n = store.keys.len();
        (store, n, bad)
    }

    /// Adds a key with no checks (loading); true if it was new.
    fn put(&self, host: &str, owner: Option<&str>, p: Provenance) -> bool {
        let mut new = false;
        self.keys.entry(key_string(host, owner)).or_insert_with(|| {
            new = true;
            p
        });
        if new && owner.is_some() {
            *self.owners.entry(host.to_string()).or_insert(0) += 1;
        }
        new
    }

    /// Removes a key; its provenance if it was there.
    fn take(&self, key: &str) -> Option<Provenance> {
        let (_, p) = self.keys.remove(key)?;
        self.epoch.fetch_add(1, Ordering::AcqRel);
        if let Some((root, _)) = key.split_once('/') {
            let mut gone = false;
            if let Some(mut n) = self.owners.get_mut(root) {
                *n = n.saturating_sub(1);
                gone = *n == 0;
            }
            if gone {
                self.owners.remove(root);
            }
        }
        Some(p)
    }

    /// A key's provenance, kept or pending.
    fn lookup(&self, key: &str) -> Option<Provenance> {
        if let Some(p) = self.keys.get(key) {
            return Some(p.clone());
        }
        self.pending.get(key).map(|e| e.1.clone())
    }

    /// What the store knows of a request to `host` with `path` (as sent;
    /// `None` for an opaque tunnel, which could carry anything to anyone)
    /// for a body check.
    pub(crate) fn state(
        &self,
        host: &str,
        path: Option<&str>,
        settings: &TaintSettings,
    ) -> TaintState {
        if settings.mode == TaintMode::Off || settings.exempt.contains(host) {
            return TaintState::Clean;
        }
        let exact = |key: &str, by: Provenance| TaintState::Tainted {
            key: key.to_string(),
            by,
            exact: true,
        };
        if let Some(p) = self.lookup(host) {
            return exact(host, p);
        }
        let owner = settings.by_owner.request_owner(host, path.unwrap_or(""));
        if owner.is_none() {
            // Not a forge here (any more: a reload may have dropped it from
            // `by_owner`): an owner taint kept for its family covers it whole.
            // One lookup for a host that never was a forge (every request
            // to a plain host passes here).
            let root = match crate::policy::owners::builtin_root(host) {
                Some(root) => Some(root),
                None => self.owners.contains_key(host).then_some(host),
            };
            if let Some((key, by)) = root.and_then(|r| self.any_owner(r)) {
                return TaintState::Tainted {
                    key,
                    by,
                    exact: false,
                };
            }
        }
        if let Some((root, owner)) = owner {
            if let Some(p) = self.lookup(root) {
                return exact(root, p);
            }
            match owner {
                Owner::Named(o) => {
                    let key = key_string(root, Some(&o));
                    if settings.exempt.contains(&key) {
                        return TaintState::Clean;
                    }
                    if let Some(p) = self.lookup(&key) {
                        return exact(&key, p);
                    }
                }
                Owner::None | Owner::Unreadable => {
                    if let Some((key, by)) = self.any_owner(root) {
                        return TaintState::Tainted {
                            key,
                            by,
                            exact: false,
                        };
                    }
                }
            }
        }
        if self.overflow.load(Ordering::Relaxed) {
            return TaintState::Overflow;
        }
        TaintState::Clean
    }

    /// Some tainted owner of the family `root` (kept or pending).
    fn any_owner(&self, root: &str) -> Option<(String, Provenance)> {
        let prefix = format!("{root}/");
        let in_family = |k: &str| k.starts_with(&prefix);
        if self.owners.get(root).is_some_and(|n| *n > 0) {
            if let Some(e) = self.keys.iter().find(|e| in_family(e.key())) {
                return Some((e.key().clone(), e.value().clone()));
            }
        }
        if self.pending.is_empty() {
            return None;
        }
        self.pending
            .iter()
            .find(|e| in_family(e.key()))
            .map(|e| (e.key().clone(), e.value().1.clone()))
    }

    /// Offers a key named by `source`. New keys are persisted.
    pub(crate) fn insert(
        &self,
        key: &TaintKey,
        source: &Arc<str>,
        settings: &TaintSettings,
        log: &AccessLog,
    ) -> Inserted {
        let (host, owner) = match key {
            TaintKey::Host(h) => (h.as_str(), None),
            TaintKey::Owner { root, owner } => (root.as_str(), Some(owner.as_str())),
        };
        let k = key_string(host, owner);
        if settings.exempt.contains(host) || settings.exempt.contains(&k) {
            return Inserted::Exempt;
        }
        if self.keys.contains_key(&k) {
            return Inserted::Known;
        }
        // Reserve a slot first so concurrent inserts cannot overshoot.
        let n = self.count.fetch_add(1, Ordering::AcqRel);
        if n >= settings.max_hosts {
            self.count.fetch_sub(1, Ordering::AcqRel);
            let first = !self.overflow.swap(true, Ordering::AcqRel);
            if first {
                let rec = OverflowRecord {
                    ts: crate::log::now_rfc3339(),
                    task: self.task.to_string(),
                    event: OVERFLOW_EVENT.into(),
                    max_hosts: settings.max_hosts,
                };
                log.taint_line(self.task.clone(), &rec);
            }
            return Inserted::Overflow { first };
        }
        let at: Arc<str> = crate::log::now_rfc3339().into();
        let p = Provenance {
            source: source.clone(),
            at: at.clone(),
        };
        if !self.put(host, owner, p) {
            self.count.fetch_sub(1, Ordering::AcqRel);
            return Inserted::Known;
        }
        let rec = TaintRecord {
            ts: at.to_string(),
            task: self.task.to_string(),
            host: host.to_string(),
            owner: owner.map(str::to_string),
            source: source.to_string(),
        };
        log.taint_line(self.task.clone(), &rec);
        Inserted::New
    }

    /// Holds keys for a name in progress (until [`TaintStore::release`]):
    /// they count in [`TaintStore::state`] but are never written down.
    pub(crate) fn hold(&self, keys: &[TaintKey], source: &Arc<str>) {
        for k in keys {
            let p = Provenance {
                source: source.clone(),
                at: crate::log::now_rfc3339().into(),
            };
            self.pending.entry(k.to_string()).or_insert((0, p)).0 += 1;
        }
    }

    /// Lets go of keys held by [`TaintStore::hold`].
    pub(crate) fn release(&self, keys: &[TaintKey]) {
        for k in keys {
            let k = k.to_string();
            let gone = match self.pending.get_mut(&k) {
                Some(mut e) => {
                    e.0 = e.0.saturating_sub(1);
                    e.0 == 0
                }
                None => false,
            };
            if gone {
                self.pending.remove_if(&k, |_, e| e.0 == 0);
            }
        }
    }

    /// Removes a key a person has checked (`sluice untaint`), with a line
    /// in `taint.jsonl` saying who and what it cleared. `key` is a host or
    /// `root/owner`. None if it was not tainted.
    pub(crate) fn untaint(&self, key: &str, by: &str, log: &AccessLog) -> Option<Provenance> {
        let p = self.take(key)?;
        self.count.fetch_sub(1, Ordering::AcqRel);
        let (host, owner) = match key.split_once('/') {
            Some((h, o)) => (h.to_string(), Some(o.to_string())),
            None => (key.to_string(), None),
        };
        let rec = UntaintRecord {
            ts: crate::log::now_rfc3339(),
            task: self.task.to_string(),
            event: UNTAINT_EVENT.into(),
            host,
            owner,
            by: by.to_string(),
            cleared_source: p.source.to_string(),
            cleared_at: p.at.to_string(),
        };
        log.taint_line(self.task.clone(), &rec);
        Some(p)
    }

    /// Every taint with its provenance, sorted by key (`host` or
    /// `root/owner`).
    pub(crate) fn list(&self) -> Vec<(String, Provenance)> {
        let mut v: Vec<_> = self
            .keys
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// How many removals the set has seen.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Fails closed from now on, as a full set does: what the saved set
    /// holds cannot be trusted whole.
    pub(crate) fn fail_closed(&self) {
        self.overflow.store(true, Ordering::Relaxed);
    }

    pub(crate) fn overflowed(&self) -> bool {
        self.overflow.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
