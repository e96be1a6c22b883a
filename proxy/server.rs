//! server: the running proxy — live state shared by every connection, and
//! the start-up / shutdown sequence.
//!
//! Owns the live config (`ArcSwap<Snapshot>` and what is built from it),
//! the per-task runtime state, the listeners and the shutdown tokens. Must
//! not decide on requests (that is `policy`) or parse them (that is
//! `conn`). Reloading lives in `reload`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ListenAddr, Snapshot, TaskConfig};
use crate::dns::Resolver;
use crate::forward::Pool;
use crate::intercept::Tls;
use crate::listener::{self, Bound};
use crate::log::AccessLog;
use crate::metrics::{Metrics, TaskMetrics};
use crate::policy::OwnAddrs;
use crate::taint::{TaintStore, TunnelRegistry};

/// Per-task state that lives as long as the task (across reloads).
pub struct TaskRuntime {
    pub id: Arc<str>,
    /// Caps concurrent client connections (503 `over-capacity` past it).
    pub conns: Arc<Semaphore>,
    /// The cap `conns` was sized for, so a reload can resize it.
    pub max_conns: AtomicUsize,
    /// Idle upstream connections, keyed by checked address.
    pub pool: Arc<Pool>,
    /// Hosts named by this task's fetched responses.
    pub taint: Arc<TaintStore>,
    /// Open tunnels, so a new taint or a reload can close them.
    pub tunnels: Arc<TunnelRegistry>,
    /// This task's metric handles (no label work on the hot path).
    pub metrics: TaskMetrics,
}

impl TaskRuntime {
    /// Creates a task's runtime, reloading its taint set from disk.
    pub fn new(task: &TaskConfig, snapshot: &Snapshot, metrics: &Metrics) -> TaskRuntime {
        let path = snapshot
            .state_dir
            .join("tasks")
            .join(&task.id)
            .join("taint.jsonl");
        let (store, loaded, bad) = TaintStore::load(&task.id, &path, task.taint.max_hosts);
        if loaded > 0 || bad > 0 {
            tracing::info!(task = %task.id, hosts = loaded, unreadable_lines = bad, "taint set reloaded");
        }
        let task_metrics = TaskMetrics::new(metrics, &task.id);
        task_metrics.taint_hosts.set(loaded as i64);
        if store.overflowed() {
            task_metrics.taint_overflow.set(1);
            tracing::error!(task = %task.id, max_hosts = task.taint.max_hosts,
                "taint-overflow: the saved taint set is larger than max_hosts; the task fails closed");
        }
        let max = snapshot.limits.max_connections_per_task;
        TaskRuntime {
            id: task.id.as_str().into(),
            conns: Arc::new(Semaphore::new(max)),
            max_conns: AtomicUsize::new(max),
            pool: Arc::new(Pool::default()),
            taint: Arc::new(store),
            tunnels: Arc::default(),
            metrics: task_metrics,
        }
    }
}

/// A bound listener, as the reloader sees it.
pub struct ListenerHandle {
    /// Cancelling it closes the listening socket (open connections stay).
    pub stop: CancellationToken,
    /// What it is bound to, for the admin API (port 0 resolved).
    pub bound: String,
    /// The local TCP address, refused to every task.
    pub local: Option<std::net::SocketAddr>,
    /// The task its connections belong to; a reload may move it.
    pub owner: Arc<ArcSwap<String>>,
}

/// State every connection reads.
pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub resolver: ArcSwap<Resolver>,
    /// TLS both ways: the CA's leaves and the upstream verifier.
    pub tls: ArcSwap<Tls>,
    /// sluice's own listening addresses, refused to every task.
    pub own: ArcSwap<OwnAddrs>,
    /// The admin API's own address (fixed until restart).
    pub admin_own: OwnAddrs,
    /// Task runtimes by id. Read on accept; written only by reloads.
    pub tasks: RwLock<HashMap<String, Arc<TaskRuntime>>>,
    /// Bound task listeners; touched only by start-up and reloads.
    pub listeners: Mutex<HashMap<ListenAddr, ListenerHandle>>,
    pub log: AccessLog,
    pub metrics: Metrics,
    /// The config file (None: the embedded default).
    pub config_path: Option<PathBuf>,
    /// Reloads run one at a time.
    pub reload_lock: tokio::sync::Mutex<()>,
    /// Fired on SIGTERM/SIGINT: stop accepting, finish what is in flight.
    pub shutdown: CancellationToken,
    /// Fired when the drain period is over: close tunnels.
    pub hard_stop: CancellationToken,
    pub tracker: TaskTracker,
}

impl Shared {
    pub fn task_runtime(&self, id: &str) -> Option<Arc<TaskRuntime>> {
        self.tasks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    pub fn task_runtimes(&self) -> Vec<Arc<TaskRuntime>> {
        self.tasks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Starts the accept loop of a bound listener of `task`.
    pub fn spawn_listener(self: &Arc<Self>, addr: ListenAddr, bound: Bound, task: &str) {
        let stop = self.shutdown.child_token();
        let owner: Arc<ArcSwap<String>> = Arc::new(ArcSwap::from_pointee(task.to_string()));
        let handle = ListenerHandle {
            stop: stop.clone(),
            bound: bound.to_string(),
            local: bound.local_tcp(),
            owner: owner.clone(),
        };
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(addr, handle);
        tokio::spawn(listener::run(bound, owner, self.clone(), stop));
    }
}

/// Binds every listener of `snapshot`, serves until SIGTERM/SIGINT, drains
/// and flushes the logs.
/// Raises the soft limit on open files to the hard limit: every tunnel
/// holds two sockets (and a spliced one two pipes more), and the usual soft
/// limit of 1024 would cap sluice at a few hundred tunnels.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
        }
    }
    let now = getrlimit(Resource::Nofile).current;
    tracing::debug!(
        open_files = now.map_or("unlimited".to_string(), |n| n.to_string()),
        "open-file limit"
    );
}

pub async fn run(snapshot: Snapshot, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    // Signal handlers first: a SIGHUP that arrives as soon as the
    // listeners are up must reload, not kill (its default action).
    let signals = Signals::install();
    raise_fd_limit();
    std::fs::create_dir_all(&snapshot.state_dir)
        .with_context(|| format!("cannot create state_dir {}", snapshot.state_dir.display()))?;
    let resolver = Resolver::new(&snapshot.resolver).context("cannot set up the DNS resolver")?;
    let tls = tls_for(&snapshot, None)?;
    let metrics = Metrics::new();
    metrics.config_generation.set(snapshot.generation as i64);

    let mut bound: Vec<(ListenAddr, Bound, String)> = Vec::new();
    let mut own = OwnAddrs {
        machine: listener::machine_ips(),
        ..OwnAddrs::default()
    };
    for task in &snapshot.tasks {
        for addr in &task.listen {
            let b = listener::bind_with_mode(addr, snapshot.unix_mode)
                .await
                .with_context(|| format!("task {}: cannot listen on {addr}", task.id))?;
            b.record_own(&mut own);
            tracing::info!(task = %task.id, listen = %b, "listening");
            bound.push((addr.clone(), b, task.id.clone()));
        }
    }
    let mut admin_own = OwnAddrs::default();
    let admin = match &snapshot.admin {
        Some(addr) => {
            // Only sluice's own user may use the admin socket.
            let b = listener::bind_with_mode(addr, 0o600)
                .await
                .with_context(|| format!("admin: cannot listen on {addr}"))?;
            b.record_own(&mut own);
            b.record_own(&mut admin_own);
            tracing::info!(admin = %b, "admin API listening");
            Some(b)
        }
        None => None,
    };

    let tasks = snapshot
        .tasks
        .iter()
        .map(|t| {
            (
                t.id.clone(),
                Arc::new(TaskRuntime::new(t, &snapshot, &metrics)),
            )
        })
        .collect();
    let drain = snapshot.limits.drain;
    let shared = Arc::new(Shared {
        log: AccessLog::spawn(
            &snapshot.state_dir,
            snapshot.logs.clone(),
            metrics.log_write_errors.clone(),
        ),
        snapshot: ArcSwap::from_pointee(snapshot),
        resolver: ArcSwap::from_pointee(resolver),
        tls: ArcSwap::from_pointee(tls),
        own: ArcSwap::from_pointee(own),
        admin_own,
        tasks: RwLock::new(tasks),
        listeners: Mutex::new(HashMap::new()),
        metrics,
        config_path,
        reload_lock: tokio::sync::Mutex::new(()),
        shutdown: CancellationToken::new(),
        hard_stop: CancellationToken::new(),
        tracker: TaskTracker::new(),
    });
    for (addr, b, task) in bound {
        shared.spawn_listener(addr, b, &task);
    }
    let admin_task = admin.map(|b| tokio::spawn(crate::admin::run(b, shared.clone())));
    let watcher = crate::reload::watch(shared.clone());

    signals.wait(&shared).await;
    tracing::info!(
        drain_secs = drain.as_secs(),
        "shutting down: no new connections, draining"
    );
    drop(watcher);
    shared.shutdown.cancel();
    if let Some(a) = admin_task {
        let _ = a.await;
    }
    // Give the accept loops a moment to close their sockets.
    tokio::time::sleep(Duration::from_millis(20)).await;
    shared.tracker.close();
    if tokio::time::timeout(drain, shared.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("drain period over; closing remaining connections");
        shared.hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), shared.tracker.wait()).await;
    }
    shared.log.flush().await;
    tracing::info!("stopped");
    Ok(())
}

/// Loads (or on first use creates) the CA when a task intercepts, and
/// builds the TLS settings. `current` is reused when nothing changed.
pub fn tls_for(snapshot: &Snapshot, current: Option<&Tls>) -> anyhow::Result<Tls> {
    use crate::intercept::ca;
    let intercepting = snapshot
        .tasks
        .iter()
        .any(|t| t.intercept == crate::config::Intercept::All);
    if let Some(cur) = current {
        if cur.extra_roots == snapshot.extra_roots && (cur.ca.is_some() || !intercepting) {
            return Ok(cur.clone());
        }
    }
    let loaded = if intercepting {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let (ca, created) = crate::intercept::Ca::load_or_create(&snapshot.state_dir, &provider)
            .context("cannot set up the interception CA")?;
        if created {
            let pem = ca::cert_path(&snapshot.state_dir);
            tracing::info!(
                ca = %pem.display(),
                "created the interception CA. Trust it inside the task: curl --cacert {p}; SSL_CERT_FILE={p}; NODE_EXTRA_CA_CERTS={p}; PIP_CERT={p}; git -c http.sslCAInfo={p}",
                p = pem.display()
            );
        }
        Some(ca)
    } else {
        None
    };
    Tls::new(snapshot, loaded)
}

/// SIGTERM/SIGINT end sluice; SIGHUP reloads.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let hup = signal(SignalKind::hangup()).ok();
        if term.is_none() || hup.is_none() {
            tracing::error!("cannot watch SIGTERM/SIGHUP; Ctrl-C still stops sluice");
        }
        Signals { term, hup }
    }

    async fn wait(mut self, shared: &Arc<Shared>) {
        loop {
            tokio::select! {
                _ = recv(&mut self.term) => return,
                _ = tokio::signal::ctrl_c() => return,
                _ = recv(&mut self.hup) => {
                    let _ = crate::reload::reload(shared, "SIGHUP").await;
                }
            }
        }
    }
}

/// The next signal, or never if the handler could not be installed.
async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}
