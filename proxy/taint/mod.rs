//! taint: which hosts a task's fetched responses have named, and where.
//!
//! [`scan`] finds host names in bytes, [`body`] undoes Content-Encoding
//! and bounds the work, [`ws`] reads what an upgraded connection's
//! upstream sends (WebSocket frames and messages) for the scanner, [`TaintStore`] keeps each task's set with its
//! provenance, bounded by `max_hosts`, persisted to `taint.jsonl` and
//! reloaded on start. [`TunnelRegistry`] lets a new taint close opaque
//! tunnels to that host. Decisions stay in `policy`: this module only
//! answers "is this host tainted, and by what?".

pub(crate) mod body;
pub(crate) mod scan;
mod store;
pub(crate) mod ws;

pub(crate) use store::{Inserted, TaintStore};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Open tunnels of a task by host, so that tainting a host can close the
/// opaque ones (SPEC §8: within a second) and a reload can close any whose
/// destination is no longer allowed.
#[derive(Default)]
pub(crate) struct TunnelRegistry {
    next: AtomicU64,
    open: Mutex<HashMap<String, HashMap<u64, TunnelEntry>>>,
}

struct TunnelEntry {
    port: u16,
    addr: SocketAddr,
    /// Opaque tunnels carry a body; intercepted ones are decided per request.
    opaque: bool,
    /// A request body's path (for the owner on a multi-tenant host); none
    /// for a tunnel.
    path: Option<Arc<str>>,
    token: CancellationToken,
}

/// Removes a tunnel from the registry when dropped.
pub(crate) struct TunnelGuard<'a> {
    registry: &'a TunnelRegistry,
    host: String,
    id: u64,
}

impl TunnelRegistry {
    pub(crate) fn register(
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
            path: None,
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
    /// `opaque`: taint applies to it (not git's fetch to a forge); `path`:
    /// the request's.
    pub(crate) fn register_owned(
        self: &Arc<Self>,
        host: &str,
        addr: SocketAddr,
        (opaque, path): (bool, &str),
        token: CancellationToken,
    ) -> OwnedTunnelGuard {
        let guard = self.register(host, addr, opaque, token);
        let id = guard.id;
        std::mem::forget(guard);
        if let Some(e) = self.lock().get_mut(host).and_then(|t| t.get_mut(&id)) {
            e.path = Some(path.into());
        }
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
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes every open opaque tunnel of the task (the taint set overflowed).
    pub(crate) fn revoke_all(&self) -> usize {
        self.revoke_where(|_, _, _, opaque| opaque)
    }

    /// Closes every open opaque tunnel to `host`; returns how many.
    pub(crate) fn revoke(&self, host: &str) -> usize {
        self.revoke_where(|h, _, _, opaque| opaque && h == host)
    }

    /// Closes the tunnels `(host, port, connected address, opaque)` picks.
    pub(crate) fn revoke_where(&self, pick: impl Fn(&str, u16, SocketAddr, bool) -> bool) -> usize {
        self.revoke_with_path(|h, port, addr, opaque, _| pick(h, port, addr, opaque))
    }

    /// [`TunnelRegistry::revoke_where`], also told a request body's path.
    pub(crate) fn revoke_with_path(
        &self,
        pick: impl Fn(&str, u16, SocketAddr, bool, Option<&str>) -> bool,
    ) -> usize {
        let open = self.lock();
        let mut n = 0;
        for (host, tunnels) in open.iter() {
            for t in tunnels.values() {
                if pick(host, t.port, t.addr, t.opaque, t.path.as_deref()) {
                    t.token.cancel();
                    n += 1;
                }
            }
        }
        n
    }

    /// How many tunnels are open.
    pub(crate) fn len(&self) -> usize {
        self.lock()
            .values()
            .map(std::collections::HashMap::len)
            .sum()
    }
}

impl Drop for TunnelGuard<'_> {
    fn drop(&mut self) {
        self.registry.remove(&self.host, self.id);
    }
}

/// A registration that owns its registry handle, for what cannot borrow
/// it: a request body streaming upstream.
pub(crate) struct OwnedTunnelGuard {
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
