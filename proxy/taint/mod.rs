//! taint: which hosts a task's fetched responses have named, and where.
//!
//! [`scan`] finds host names in bytes, [`body`] undoes Content-Encoding
//! and bounds the work, [`TaintStore`] keeps each task's set with its
//! provenance, bounded by `max_hosts`, persisted to `taint.jsonl` and
//! reloaded on start. [`TunnelRegistry`] lets a new taint close opaque
//! tunnels to that host. Decisions stay in `policy`: this module only
//! answers "is this host tainted, and by what?".

pub mod body;
pub mod scan;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::TaintSettings;
use crate::log::AccessLog;
use crate::policy::{Provenance, TaintMode, TaintState};

/// One line of `taint.jsonl`.
#[derive(Debug, Serialize, Deserialize)]
pub struct TaintRecord {
    pub ts: String,
    pub task: String,
    pub host: String,
    pub source: String,
}

/// The line `taint.jsonl` gets when the set first overflows: the task
/// then stays failed-closed across restarts and reloads until its state is
/// cleared by hand (SPEC §9 "Overflow persists").
#[derive(Debug, Serialize, Deserialize)]
pub struct OverflowRecord {
    pub ts: String,
    pub task: String,
    /// Always [`OVERFLOW_EVENT`].
    pub event: String,
    pub max_hosts: usize,
}

pub const OVERFLOW_EVENT: &str = "taint-overflow";

/// The outcome of offering a host to the store.
#[derive(Debug, PartialEq, Eq)]
pub enum Inserted {
    New,
    Known,
    Exempt,
    /// The set is full; `first` is true the first time this happens.
    Overflow {
        first: bool,
    },
}

/// A task's taint set. Reads take no global lock (a sharded map).
pub struct TaintStore {
    task: Arc<str>,
    hosts: DashMap<String, Provenance>,
    count: AtomicUsize,
    overflow: AtomicBool,
}

impl TaintStore {
    pub fn new(task: &str) -> TaintStore {
        TaintStore {
            task: task.into(),
            hosts: DashMap::new(),
            count: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
        }
    }

    /// Loads `taint.jsonl` (a restart never forgets taint). Unreadable
    /// lines are skipped and counted; a missing file is an empty set.
    pub fn load(task: &str, path: &Path, max_hosts: usize) -> (TaintStore, usize, usize) {
        let store = TaintStore::new(task);
        let mut bad = 0;
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                match serde_json::from_str::<TaintRecord>(line) {
                    Ok(r) => {
                        if store.hosts.len() >= max_hosts {
                            store.overflow.store(true, Ordering::Relaxed);
                            continue;
                        }
                        store.hosts.entry(r.host).or_insert(Provenance {
                            source: r.source.into(),
                            at: r.ts.into(),
                        });
                    }
                    Err(_) => match serde_json::from_str::<OverflowRecord>(line) {
                        Ok(o) if o.event == OVERFLOW_EVENT => {
                            store.overflow.store(true, Ordering::Relaxed);
                        }
                        // A torn last line after a crash, or foreign junk.
                        _ => bad += 1,
                    },
                }
            }
        }
        store.count.store(store.hosts.len(), Ordering::Relaxed);
        let n = store.hosts.len();
        (store, n, bad)
    }

    /// What the store knows of `host` for a body check.
    pub fn state(&self, host: &str, settings: &TaintSettings) -> TaintState {
        if settings.mode == TaintMode::Off || settings.exempt.contains(host) {
            return TaintState::Clean;
        }
        if let Some(p) = self.hosts.get(host) {
            return TaintState::Tainted(p.clone());
        }
        if self.overflow.load(Ordering::Relaxed) {
            return TaintState::Overflow;
        }
        TaintState::Clean
    }

    /// Offers a host named by `source`. New hosts are persisted.
    pub fn insert(
        &self,
        host: &str,
        source: &Arc<str>,
        settings: &TaintSettings,
        log: &AccessLog,
    ) -> Inserted {
        if settings.exempt.contains(host) {
            return Inserted::Exempt;
        }
        if self.hosts.contains_key(host) {
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
        let mut new = false;
        self.hosts.entry(host.to_string()).or_insert_with(|| {
            new = true;
            Provenance {
                source: source.clone(),
                at: at.clone(),
            }
        });
        if !new {
            self.count.fetch_sub(1, Ordering::AcqRel);
            return Inserted::Known;
        }
        let rec = TaintRecord {
            ts: at.to_string(),
            task: self.task.to_string(),
            host: host.to_string(),
            source: source.to_string(),
        };
        log.taint_line(self.task.clone(), &rec);
        Inserted::New
    }

    /// Every tainted host with its provenance, sorted by host.
    pub fn list(&self) -> Vec<(String, Provenance)> {
        let mut v: Vec<_> = self
            .hosts
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn overflowed(&self) -> bool {
        self.overflow.load(Ordering::Relaxed)
    }
}

/// Open tunnels of a task by host, so that tainting a host can close the
/// opaque ones (SPEC §8: within a second) and a reload can close any whose
/// destination is no longer allowed.
#[derive(Default)]
pub struct TunnelRegistry {
    next: AtomicU64,
    open: Mutex<HashMap<String, HashMap<u64, TunnelEntry>>>,
}

struct TunnelEntry {
    port: u16,
    addr: SocketAddr,
    /// Opaque tunnels carry a body; intercepted ones are decided per request.
    opaque: bool,
    token: CancellationToken,
}

/// Removes a tunnel from the registry when dropped.
pub struct TunnelGuard<'a> {
    registry: &'a TunnelRegistry,
    host: String,
    id: u64,
}

impl TunnelRegistry {
    pub fn register(
        &self,
        host: &str,
        addr: SocketAddr,
        opaque: bool,
        token: CancellationToken,
    ) -> TunnelGuard<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = TunnelEntry {
            port: addr.port(),
            addr,
            opaque,
            token,
        };
        // A std Mutex over a plain map, never held across an await.
        let mut open = self.lock();
        open.entry(host.to_string()).or_default().insert(id, entry);
        TunnelGuard {
            registry: self,
            host: host.to_string(),
            id,
        }
    }

    /// Registers a body-carrying connection whose owner cannot hold a
    /// borrow (a request body streaming upstream).
    pub fn register_owned(
        self: &Arc<Self>,
        host: &str,
        addr: SocketAddr,
        token: CancellationToken,
    ) -> OwnedTunnelGuard {
        let guard = self.register(host, addr, true, token);
        let id = guard.id;
        std::mem::forget(guard);
        OwnedTunnelGuard {
            registry: self.clone(),
            host: host.to_string(),
            id,
        }
    }

    fn remove(&self, host: &str, id: u64) {
        let mut open = self.lock();
        if let Some(t) = open.get_mut(host) {
            t.remove(&id);
            if t.is_empty() {
                open.remove(host);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, TunnelEntry>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes every open opaque tunnel of the task (the taint set overflowed).
    pub fn revoke_all(&self) -> usize {
        self.revoke_where(|_, _, _, opaque| opaque)
    }

    /// Closes every open opaque tunnel to `host`; returns how many.
    pub fn revoke(&self, host: &str) -> usize {
        self.revoke_where(|h, _, _, opaque| opaque && h == host)
    }

    /// Closes the tunnels `(host, port, connected address, opaque)` picks.
    pub fn revoke_where(&self, pick: impl Fn(&str, u16, SocketAddr, bool) -> bool) -> usize {
        let open = self.lock();
        let mut n = 0;
        for (host, tunnels) in open.iter() {
            for t in tunnels.values() {
                if pick(host, t.port, t.addr, t.opaque) {
                    t.token.cancel();
                    n += 1;
                }
            }
        }
        n
    }

    /// How many tunnels are open.
    pub fn len(&self) -> usize {
        self.lock().values().map(|t| t.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for TunnelGuard<'_> {
    fn drop(&mut self) {
        self.registry.remove(&self.host, self.id);
    }
}

/// A registration that owns its registry handle, for what cannot borrow
/// it: a request body streaming upstream.
pub struct OwnedTunnelGuard {
    registry: Arc<TunnelRegistry>,
    host: String,
    id: u64,
}

impl Drop for OwnedTunnelGuard {
    fn drop(&mut self) {
        self.registry.remove(&self.host, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn settings(max: usize, exempt: &[&str]) -> TaintSettings {
        TaintSettings {
            mode: TaintMode::Enforce,
            exempt: exempt.iter().map(|s| s.to_string()).collect::<HashSet<_>>(),
            max_hosts: max,
            max_scan_bytes: 1 << 20,
            self_taint: crate::config::SelfTaint::Exclude,
        }
    }

    #[tokio::test]
    async fn insert_exempt_overflow_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let log = AccessLog::spawn(dir.path(), Default::default(), Default::default());
        let s = settings(2, &["api.example.com"]);
        let store = TaintStore::new("t");
        let src: Arc<str> = "http://docs.example.com/readme".into();
        assert_eq!(store.insert("a.example.com", &src, &s, &log), Inserted::New);
        assert_eq!(
            store.insert("a.example.com", &src, &s, &log),
            Inserted::Known
        );
        assert_eq!(
            store.insert("api.example.com", &src, &s, &log),
            Inserted::Exempt
        );
        assert_eq!(store.insert("b.example.com", &src, &s, &log), Inserted::New);
        assert_eq!(
            store.insert("c.example.com", &src, &s, &log),
            Inserted::Overflow { first: true }
        );
        assert_eq!(
            store.insert("d.example.com", &src, &s, &log),
            Inserted::Overflow { first: false }
        );
        assert!(
            matches!(store.state("a.example.com", &s), TaintState::Tainted(p) if &*p.source == "http://docs.example.com/readme")
        );
        assert_eq!(store.state("api.example.com", &s), TaintState::Clean);
        assert_eq!(store.state("zzz.example.com", &s), TaintState::Overflow);
        log.flush().await;

        let path = dir.path().join("tasks/t/taint.jsonl");
        let (reloaded, n, bad) = TaintStore::load("t", &path, 100);
        assert_eq!((n, bad), (2, 0));
        assert!(matches!(
            reloaded.state("b.example.com", &s),
            TaintState::Tainted(_)
        ));
        // Regression (issue 11, finding 6): the overflow itself is saved, so
        // a restart — even with a larger max_hosts — stays failed closed for
        // the host that was dropped.
        assert!(reloaded.overflowed());
        assert_eq!(reloaded.state("c.example.com", &s), TaintState::Overflow);
        // A torn last line (crash mid-write) is skipped, not fatal.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"ts\":\"2026");
        std::fs::write(&path, text).unwrap();
        let (_, n, bad) = TaintStore::load("t", &path, 100);
        assert_eq!((n, bad), (2, 1));
        // Loading more than max_hosts starts overflowed.
        let (small, _, _) = TaintStore::load("t", &path, 1);
        assert!(small.overflowed());
    }

    #[test]
    fn off_mode_sees_nothing() {
        let mut s = settings(10, &[]);
        let store = TaintStore::new("t");
        store.hosts.insert(
            "a.example.com".into(),
            Provenance {
                source: "x".into(),
                at: "y".into(),
            },
        );
        s.mode = TaintMode::Off;
        assert_eq!(store.state("a.example.com", &s), TaintState::Clean);
    }

    #[test]
    fn revoking_cancels_only_that_host() {
        let reg = TunnelRegistry::default();
        let a = CancellationToken::new();
        let b = CancellationToken::new();
        let addr: SocketAddr = "93.184.216.34:443".parse().unwrap();
        let ga = reg.register("a.example.com", addr, true, a.clone());
        let _gb = reg.register("b.example.com", addr, true, b.clone());
        assert_eq!(reg.revoke("a.example.com"), 1);
        assert!(a.is_cancelled() && !b.is_cancelled());
        drop(ga);
        assert_eq!(reg.revoke("a.example.com"), 0);
    }
}
