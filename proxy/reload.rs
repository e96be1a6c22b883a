//! reload: replace the config during a mission without dropping
//! connections.
//!
//! A new config is validated whole, and everything built from it (resolver,
//! TLS, new listeners) is built before anything is swapped: an invalid
//! config, or one whose listener cannot be bound, changes nothing. Then the
//! snapshot is swapped atomically (requests in flight finish under the one
//! they started with), removed listeners close, added ones open, and live
//! tunnels and idle upstream connections the new config no longer allows
//! are closed. Taint sets live in the task runtimes and survive.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, ListenAddr, Snapshot};
use crate::dns::Resolver;
use crate::listener::{self, Bound};
use crate::metrics::ResultLabels;
use crate::policy::{self, OwnAddrs, TaintState};
use crate::state::{Live, Shared, TaskRuntime};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReloadError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("resolver: {0}")]
    Resolver(#[from] crate::dns::ResolverError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Secret(#[from] crate::secrets::SecretError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) generation: u64,
    /// The config text was the same: nothing was swapped, and the
    /// generation did not move.
    pub(crate) unchanged: bool,
    /// Outside the tasks: resolver, admin, limits… (`config::diff`).
    pub(crate) changes: Vec<String>,
    /// Per task: added, removed, or what changed (`config::diff`).
    pub(crate) task_changes: Vec<String>,
    pub(crate) tasks_added: usize,
    pub(crate) tasks_removed: usize,
    pub(crate) listeners_opened: usize,
    pub(crate) listeners_closed: usize,
    pub(crate) tunnels_closed: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unchanged {
            return write!(
                f,
                "nothing changed; generation {} stays in force",
                self.generation
            );
        }
        write!(f, "generation {}: ", self.generation)?;
        for c in self.changes.iter().chain(&self.task_changes) {
            write!(f, "{c}; ")?;
        }
        write!(
            f,
            "tasks +{} -{}, listeners +{} -{}, tunnels closed {}",
            self.tasks_added,
            self.tasks_removed,
            self.listeners_opened,
            self.listeners_closed,
            self.tunnels_closed
        )
    }
}

fn count(shared: &Shared, ok: bool) {
    let result = if ok { "ok" } else { "error" };
    shared
        .metrics
        .reloads
        .get_or_create(&ResultLabels {
            result: result.into(),
        })
        .inc();
}

/// Reloads the config file. Returns what changed, or why nothing did (the
/// old config then stays in force).
pub(crate) async fn reload(shared: &Arc<Shared>, why: &str) -> Result<Summary, ReloadError> {
    let _serial = shared.reload_lock.lock().await;
    let result = apply(shared).await;
    match &result {
        Ok(summary) => {
            count(shared, true);
            if !summary.unchanged {
                shared.metrics.config_loaded_now();
            }
            tracing::info!(trigger = why, "config reloaded: {summary}");
        }
        Err(e) => {
            count(shared, false);
            tracing::error!(
                trigger = why,
                "config reload refused; the previous config stays in force: {e}"
            );
        }
    }
    result
}

/// Everything a reload needs, built before anything is swapped.
struct Prepared {
    new: Snapshot,
    /// Outside the tasks, named before the restart-only ones are undone.
    changes: Vec<String>,
    resolver: Option<Arc<Resolver>>,
    tls: crate::tls::Tls,
    secrets: crate::secrets::ByTask,
    wanted: HashSet<ListenAddr>,
    current: HashSet<ListenAddr>,
    fresh: Vec<(ListenAddr, Bound)>,
}

async fn apply(shared: &Arc<Shared>) -> Result<Summary, ReloadError> {
    let old = shared.snapshot();
    let Some(p) = prepare(shared, &old).await? else {
        rotate_secrets(shared, &old)?;
        return Ok(Summary {
            generation: old.generation,
            unchanged: true,
            ..Summary::default()
        });
    };
    let task_changes = config::diff::task_changes(&old, &p.new);
    let changes = p.changes;
    let owners: HashMap<ListenAddr, String> = p
        .new
        .tasks
        .iter()
        .flat_map(|t| t.listen.iter().map(move |l| (l.clone(), t.id.clone())))
        .collect();
    let generation = p.new.generation;
    let new = Arc::new(p.new);
    let closed: Vec<ListenAddr> = p.current.difference(&p.wanted).cloned().collect();
    // Everything of the new generation goes live in one swap: config,
    // resolver, TLS settings and own addresses (the new listeners' too,
    // before they accept).
    let before = shared.live();
    shared.publish(Live {
        config: new.clone(),
        resolver: p.resolver.unwrap_or_else(|| before.resolver.clone()),
        tls: Arc::new(p.tls),
        own: Arc::new(own_addrs(shared, &closed, &p.fresh)),
        secrets: Arc::new(p.secrets),
    });
    // Only now are removed tasks' runtimes dropped and their streams
    // closed: a tunnel that registers before this was decided under the
    // old snapshot and is closed here; one that registers after finds its
    // task gone in the new one.
    let (tasks_added, tasks_removed) = swap_tasks(shared, &new);
    for t in &new.tasks {
        crate::state::record_allow_list(&new, t);
    }
    shared.metrics.config_generation.set(generation as i64);
    close_and_move_listeners(shared, &closed, &owners);
    let listeners_opened = p.fresh.len();
    for (addr, b) in p.fresh {
        let task = owners.get(&addr).cloned().unwrap_or_default();
        tracing::info!(task, listen = %b, "listening");
        crate::accept::spawn(shared, addr, b, &task);
    }
    // Limits and revocation.
    let mut tunnels_closed = 0;
    for rt in shared.task_runtimes() {
        rt.resize(new.limits.max_connections_per_task);
        rt.pool.renew(new.generation);
        tunnels_closed += revoke_disallowed(shared, &new, &rt);
    }
    Ok(Summary {
        generation,
        unchanged: false,
        changes,
        task_changes,
        tasks_added,
        tasks_removed,
        listeners_opened,
        listeners_closed: closed.len(),
        tunnels_closed,
    })
}

/// Loads and validates the new config and builds what can fail —
/// resolver, TLS, new listeners — touching nothing live. `None` when the
/// config text is the one in force.
/// An unchanged config still re-reads its secrets' values (a rotated
/// token file or variable); placeholders stay as they are. A value that
/// cannot be read fails the reload and the old values stay.
fn rotate_secrets(shared: &Shared, old: &Snapshot) -> Result<(), ReloadError> {
    if old.tasks.iter().all(|t| t.secrets.is_empty()) {
        return Ok(());
    }
    let secrets = crate::secrets::load_all(old)?;
    let live = shared.live();
    shared.publish(Live {
        config: live.config.clone(),
        resolver: live.resolver.clone(),
        tls: live.tls.clone(),
        own: live.own.clone(),
        secrets: Arc::new(secrets),
    });
    Ok(())
}

async fn prepare(shared: &Shared, old: &Snapshot) -> Result<Option<Prepared>, ReloadError> {
    let mut new = config::load(shared.config_path.as_deref(), old.generation + 1)?;
    if new.fingerprint == old.fingerprint && new.source == old.source {
        return Ok(None);
    }
    for w in &new.warnings {
        tracing::warn!("config: {w}");
    }
    let changes = config::diff::global_changes(old, &new);
    if new.state_dir != old.state_dir {
        tracing::warn!("state_dir changed; it takes effect only after a restart");
        new.state_dir = old.state_dir.clone();
    }
    if new.admin != old.admin {
        tracing::warn!("admin.listen changed; it takes effect only after a restart");
        new.admin = old.admin.clone();
    }
    if new.metrics_listen != old.metrics_listen {
        tracing::warn!("admin.metrics_listen changed; it takes effect only after a restart");
        new.metrics_listen = old.metrics_listen.clone();
    }
    let resolver = if new.resolver != old.resolver {
        Some(Arc::new(Resolver::new(&new.resolver)?))
    } else {
        None
    };
    let tls = crate::tls::for_snapshot(&new, Some(&shared.live().tls))?;
    let secrets = crate::secrets::load_all(&new)?;
    let wanted: HashSet<ListenAddr> = new.tasks.iter().flat_map(|t| t.listen.clone()).collect();
    let current = current_listeners(shared, &wanted);
    let mut fresh: Vec<(ListenAddr, Bound)> = Vec::new();
    for addr in wanted.difference(&current) {
        match listener::bind_with_mode(addr, new.unix_mode).await {
            Ok(b) => fresh.push((addr.clone(), b)),
            // `fresh` is dropped: the new sockets close, nothing changed.
            Err(source) => {
                return Err(ReloadError::Listen {
                    addr: addr.to_string(),
                    source,
                })
            }
        }
    }
    Ok(Some(Prepared {
        new,
        changes,
        resolver,
        tls,
        secrets,
        wanted,
        current,
        fresh,
    }))
}

/// The bound listeners' addresses. A listener bound with port 0 is the
/// same socket as the new config's entry naming the port it got: it is
/// renamed so.
fn current_listeners(shared: &Shared, wanted: &HashSet<ListenAddr>) -> HashSet<ListenAddr> {
    let mut listeners = shared
        .listeners
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let renamed: Vec<(ListenAddr, ListenAddr)> = listeners
        .iter()
        .filter_map(|(k, h)| match (k, h.local) {
            (ListenAddr::Tcp(a), Some(local))
                if a.port() == 0 && wanted.contains(&ListenAddr::Tcp(local)) =>
            {
                Some((k.clone(), ListenAddr::Tcp(local)))
            }
            _ => None,
        })
        .collect();
    for (from, to) in renamed {
        if let Some(h) = listeners.remove(&from) {
            listeners.insert(to, h);
        }
    }
    listeners.keys().cloned().collect()
}

/// Adds runtimes for new tasks and removes those of tasks no longer in
/// the config (their tunnels close; their open connections drain, and
/// their next request finds no task and is refused). Returns (added,
/// removed).
fn swap_tasks(shared: &Shared, new: &Snapshot) -> (usize, usize) {
    let mut tasks = shared
        .tasks
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut added = 0;
    for t in &new.tasks {
        if !tasks.contains_key(&t.id) {
            tasks.insert(
                t.id.clone(),
                Arc::new(TaskRuntime::new(t, new, &shared.metrics)),
            );
            added += 1;
        }
    }
    let keep: HashSet<&str> = new.tasks.iter().map(|t| t.id.as_str()).collect();
    let gone: Vec<String> = tasks
        .keys()
        .filter(|id| !keep.contains(id.as_str()))
        .cloned()
        .collect();
    for id in &gone {
        if let Some(rt) = tasks.remove(id) {
            rt.tunnels.close_all();
        }
        shared.metrics.remove_task(id);
    }
    (added, gone.len())
}

/// Closes the listeners no longer wanted; a listener may move between
/// tasks.
fn close_and_move_listeners(
    shared: &Shared,
    closed: &[ListenAddr],
    owners: &HashMap<ListenAddr, String>,
) {
    let mut listeners = shared
        .listeners
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for addr in closed {
        if let Some(h) = listeners.remove(addr) {
            h.stop.cancel();
        }
    }
    for (addr, h) in listeners.iter() {
        if let Some(task) = owners.get(addr) {
            if h.owner.load().as_str() != task {
                h.owner.store(Arc::new(task.clone()));
            }
        }
    }
}

/// Resizes a task's connection cap.
/// sluice's own addresses: the admin API and every bound task listener.
fn own_addrs(shared: &Shared, closing: &[ListenAddr], fresh: &[(ListenAddr, Bound)]) -> OwnAddrs {
    let mut own = shared.admin_own.clone();
    own.machine = crate::listener::machine_ips();
    let listeners = shared
        .listeners
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let staying = listeners
        .iter()
        .filter(|(addr, _)| !closing.contains(addr))
        .filter_map(|(_, h)| h.local);
    for a in staying.chain(fresh.iter().filter_map(|(_, b)| b.local_tcp())) {
        own.add_listener(a);
    }
    own
}

/// Closes the task's tunnels whose destination the new config refuses.
fn revoke_disallowed(shared: &Shared, snap: &Snapshot, rt: &TaskRuntime) -> usize {
    let Some(task) = snap.task(&rt.id) else {
        return rt.tunnels.close_all();
    };
    let own = shared.live().own.clone();
    let rules = rt.asks.effective(&task.rules);
    rt.tunnels.revoke_where(|s| {
        let taint = if s.opaque {
            rt.taint
                .state(&s.target.host.taint_name(), s.path, &task.taint)
        } else {
            TaintState::Clean
        };
        // The same decision a tunnel meets when it registers.
        policy::decide_open(&rules, s.target, s.addr, &own, &taint, s.opaque, &task.id).is_deny()
    })
}

/// Watches the config file (and its folder, so editors that replace the
/// file, and symlink swaps, are seen) and reloads when its content changes.
/// Also checks once a second, in case an event is missed. Dropping the
/// returned guard stops it.
pub(crate) fn watch(shared: Arc<Shared>) -> Option<WatchGuard> {
    let path = shared.config_path.clone()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = path.parent() {
        dirs.push(if d.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            d.to_path_buf()
        });
    }
    if let Some(d) = std::fs::canonicalize(&path)
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
    {
        dirs.push(d);
    }
    let watcher = {
        use notify::Watcher;
        let tx = tx.clone();
        match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Reading the file (ours included) raises access events: only
            // changes count, or the check would wake itself forever.
            use notify::event::{AccessKind, AccessMode, EventKind};
            if let Ok(e) = event {
                let write_closed = matches!(
                    e.kind,
                    EventKind::Access(AccessKind::Close(AccessMode::Write))
                );
                if write_closed || !matches!(e.kind, EventKind::Access(_)) {
                    let _ = tx.send(());
                }
            }
        }) {
            Ok(mut w) => {
                for d in &dirs {
                    if let Err(e) = w.watch(d, notify::RecursiveMode::NonRecursive) {
                        tracing::warn!(dir = %d.display(), error = %e, "cannot watch the config folder; checking once a second instead");
                    }
                }
                Some(w)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the config file; checking once a second instead");
                None
            }
        }
    };
    let stop = shared.shutdown.child_token();
    let stop2 = stop.clone();
    // What is in force now: a change made before this task first runs is
    // still seen.
    let mut last = Some(shared.snapshot().fingerprint);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop2.cancelled() => return,
                _ = tick.tick() => {}
                got = rx.recv() => {
                    if got.is_none() { return; }
                    // Let a burst of events (write, then rename) settle.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    while rx.try_recv().is_ok() {}
                }
            }
            let now = fingerprint(&path);
            if now != last {
                last = now;
                let _ = reload(&shared, "file change").await;
            }
        }
    });
    Some(WatchGuard {
        _watcher: watcher,
        stop,
    })
}

/// Keeps the watcher alive; stops it when dropped.
pub(crate) struct WatchGuard {
    _watcher: Option<notify::RecommendedWatcher>,
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A hash of the file's content (following symlinks); None if unreadable.
fn fingerprint(path: &std::path::Path) -> Option<u64> {
    std::fs::read(path).ok().map(|b| config::fingerprint(&b))
}
