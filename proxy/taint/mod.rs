//! taint: which hosts a task's fetched responses have named, and where.
//!
//! [`scan`] finds host names in bytes, [`body`] undoes Content-Encoding
//! and bounds the work, [`ws`] reads what an upgraded connection's
//! upstream sends (WebSocket frames and messages) for the scanner, [`TaintStore`] keeps each task's set with its
//! provenance, bounded by `max_hosts`, persisted to `taint.jsonl` and
//! reloaded on start. [`Recorder`] adds what one response names to its
//! task's set (the interface response relays call). [`TunnelRegistry`]
//! lets a new taint close opaque tunnels to that host. Decisions stay in `policy`: this module only
//! answers "is this host tainted, and by what?".

pub(crate) mod body;
mod record;
pub(crate) mod scan;
mod store;
pub(crate) mod ws;

pub(crate) use record::{Now, Recorder, TaskTaint};
pub(crate) use store::{Inserted, TaintStore};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::policy::{Host, Target};

/// Open tunnels of a task by host, so that tainting a host can close the
/// opaque ones (SPEC §8: within a second) and a reload can close any whose
/// destination is no longer allowed. Keyed by the typed [`Host`]; each
/// entry keeps its whole [`Target`], so nothing is re-parsed from text.
#[derive(Default)]
pub(crate) struct TunnelRegistry {
    next: AtomicU64,
    open: Mutex<HashMap<Host, HashMap<u64, TunnelEntry>>>,
}

struct TunnelEntry {
    target: Target,
    addr: SocketAddr,
    /// Opaque tunnels carry a body; intercepted ones are decided per request.
    opaque: bool,
    /// A request body's path (for the owner on a multi-tenant host); none
    /// for a tunnel.
    path: Option<Arc<str>>,
    token: CancellationToken,
}

/// What a revocation is shown of one open tunnel or body.
pub(crate) struct OpenStream<'a> {
    pub(crate) target: &'a Target,
    /// The address it is connected to.
    pub(crate) addr: SocketAddr,
    /// Taint applies to it (an opaque tunnel, or a body other than git's
    /// fetch to a forge).
    pub(crate) opaque: bool,
    /// A request body's path; none for a tunnel.
    pub(crate) path: Option<&'a str>,
}

/// Removes a tunnel from the registry when dropped.
pub(crate) struct TunnelGuard<'a> {
    registry: &'a TunnelRegistry,
    host: Host,
    id: u64,
}

impl TunnelRegistry {
    pub(crate) fn register(
        &self,
        target: &Target,
        addr: SocketAddr,
        opaque: bool,
        token: CancellationToken,
    ) -> TunnelGuard<'_> {
        let id = self.insert(target, addr, (opaque, None), token);
        TunnelGuard {
            registry: self,
            host: target.host.clone(),
            id,
        }
    }

    /// Registers a body-carrying connection whose owner cannot hold a
    /// borrow (a request body streaming upstream).
    /// `opaque`: taint applies to it (not git's fetch to a forge); `path`:
    /// the request's.
    pub(crate) fn register_owned(
        self: &Arc<Self>,
        target: &Target,
        addr: SocketAddr,
        (opaque, path): (bool, &str),
        token: CancellationToken,
    ) -> OwnedTunnelGuard {
        let id = self.insert(target, addr, (opaque, Some(path.into())), token);
        OwnedTunnelGuard {
            registry: self.clone(),
            host: target.host.clone(),
            id,
        }
    }

    fn insert(
        &self,
        target: &Target,
        addr: SocketAddr,
        (opaque, path): (bool, Option<Arc<str>>),
        token: CancellationToken,
    ) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = TunnelEntry {
            target: target.clone(),
            addr,
            opaque,
            path,
            token,
        };
        // A std Mutex over a plain map, never held across an await.
        let mut open = self.lock();
        open.entry(target.host.clone())
            .or_default()
            .insert(id, entry);
        id
    }

    fn remove(&self, host: &Host, id: u64) {
        let mut open = self.lock();
        if let Some(t) = open.get_mut(host) {
            t.remove(&id);
            if t.is_empty() {
                open.remove(host);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Host, HashMap<u64, TunnelEntry>>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes every open opaque tunnel of the task (the taint set overflowed).
    pub(crate) fn revoke_all(&self) -> usize {
        self.revoke_where(|s| s.opaque)
    }

    /// Closes every stream of the task, whatever it is (its task is gone).
    pub(crate) fn close_all(&self) -> usize {
        self.revoke_where(|_| true)
    }

    /// Closes every open opaque tunnel to `host`; returns how many.
    pub(crate) fn revoke(&self, host: &Host) -> usize {
        let open = self.lock();
        let Some(tunnels) = open.get(host) else {
            return 0;
        };
        let mut n = 0;
        for t in tunnels.values().filter(|t| t.opaque) {
            t.token.cancel();
            n += 1;
        }
        n
    }

    /// Closes the open streams `pick` chooses; returns how many.
    pub(crate) fn revoke_where(&self, pick: impl Fn(&OpenStream<'_>) -> bool) -> usize {
        let open = self.lock();
        let mut n = 0;
        for t in open.values().flat_map(HashMap::values) {
            let shown = OpenStream {
                target: &t.target,
                addr: t.addr,
                opaque: t.opaque,
                path: t.path.as_deref(),
            };
            if pick(&shown) {
                t.token.cancel();
                n += 1;
            }
        }
        n
    }

    /// How many tunnels are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
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
    host: Host,
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
        let target = |h: &str| crate::policy::target::parse_authority(h, None).unwrap();
        let (ta, tb) = (target("a.example.com:443"), target("b.example.com:443"));
        let ga = reg.register(&ta, addr, true, a.clone());
        let _gb = reg.register(&tb, addr, true, b.clone());
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.revoke(&ta.host), 1);
        assert!(a.is_cancelled() && !b.is_cancelled());
        drop(ga);
        assert_eq!(reg.len(), 1);
        assert_eq!(reg.revoke(&ta.host), 0);
        assert_eq!(reg.revoke_where(|s| s.target.port == 443 && s.opaque), 1);
        assert!(b.is_cancelled());
    }
}
