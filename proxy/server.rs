//! server: the running proxy — live state shared by every connection, and
//! the start-up / shutdown sequence.
//!
//! Owns the live config (`ArcSwap<Snapshot>`), the per-task runtime state
//! and the shutdown tokens. Must not decide on requests (that is `policy`)
//! or parse them (that is `conn`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ListenAddr, Snapshot};
use crate::dns::Resolver;
use crate::forward::Pool;
use crate::listener::{self, Bound};
use crate::log::AccessLog;
use crate::policy::OwnAddrs;
use crate::taint::{TaintStore, TunnelRegistry};

/// Per-task state that lives as long as the task.
pub struct TaskRuntime {
    pub id: Arc<str>,
    /// Caps concurrent client connections (503 `over-capacity` past it).
    pub conns: Arc<Semaphore>,
    /// Idle upstream connections, keyed by checked address.
    pub pool: Arc<Pool>,
    /// Hosts named by this task's fetched responses.
    pub taint: Arc<TaintStore>,
    /// Open opaque tunnels, so a new taint can close them.
    pub tunnels: TunnelRegistry,
}

/// State every connection reads.
pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub resolver: Resolver,
    pub log: AccessLog,
    /// sluice's own listening addresses, refused to every task.
    pub own: OwnAddrs,
    /// TLS both ways: the CA's leaves and the upstream verifier.
    pub tls: crate::intercept::Tls,
    pub tasks: HashMap<String, Arc<TaskRuntime>>,
    /// Fired on SIGTERM/SIGINT: stop accepting, finish what is in flight.
    pub shutdown: CancellationToken,
    /// Fired when the drain period is over: close tunnels.
    pub hard_stop: CancellationToken,
    pub tracker: TaskTracker,
}

/// Binds every listener of `snapshot`, serves until SIGTERM/SIGINT, drains
/// and flushes the logs.
pub async fn run(snapshot: Snapshot) -> anyhow::Result<()> {
    std::fs::create_dir_all(&snapshot.state_dir)
        .with_context(|| format!("cannot create state_dir {}", snapshot.state_dir.display()))?;
    let resolver = Resolver::new(&snapshot.resolver).context("cannot set up the DNS resolver")?;
    let tls = tls_for(&snapshot)?;

    let mut bound: Vec<(Arc<str>, Bound)> = Vec::new();
    let mut own = OwnAddrs::default();
    for task in &snapshot.tasks {
        for addr in &task.listen {
            if let ListenAddr::Vsock { .. } = addr {
                anyhow::bail!(
                    "task {}: vsock listeners are not supported yet ({addr})",
                    task.id
                );
            }
            let b = listener::bind(addr)
                .await
                .with_context(|| format!("task {}: cannot listen on {addr}", task.id))?;
            b.record_own(&mut own);
            tracing::info!(task = %task.id, listen = %b, "listening");
            bound.push((task.id.as_str().into(), b));
        }
    }
    if let Some(ListenAddr::Tcp(a)) = &snapshot.admin {
        // The admin API is not served by this build, but its address is
        // still sluice's own and refused to tasks.
        own.exact.insert(*a);
    }

    let limits = snapshot.limits.clone();
    let tasks = snapshot
        .tasks
        .iter()
        .map(|t| {
            let path = snapshot.state_dir.join("tasks").join(&t.id).join("taint.jsonl");
            let (store, loaded, bad) = TaintStore::load(&t.id, &path, t.taint.max_hosts);
            if loaded > 0 || bad > 0 {
                tracing::info!(task = %t.id, hosts = loaded, unreadable_lines = bad, "taint set reloaded");
            }
            if store.overflowed() {
                tracing::error!(task = %t.id, max_hosts = t.taint.max_hosts, "taint-overflow: the saved taint set is larger than max_hosts; the task fails closed");
            }
            let rt = TaskRuntime {
                id: t.id.as_str().into(),
                conns: Arc::new(Semaphore::new(limits.max_connections_per_task)),
                pool: Arc::new(Pool::default()),
                taint: Arc::new(store),
                tunnels: TunnelRegistry::default(),
            };
            (t.id.clone(), Arc::new(rt))
        })
        .collect();
    let shared = Arc::new(Shared {
        log: AccessLog::spawn(&snapshot.state_dir),
        snapshot: ArcSwap::from_pointee(snapshot),
        resolver,
        own,
        tls,
        tasks,
        shutdown: CancellationToken::new(),
        hard_stop: CancellationToken::new(),
        tracker: TaskTracker::new(),
    });

    let mut accept_loops = Vec::new();
    for (task, b) in bound {
        let rt = shared.tasks.get(&*task).cloned().context("task runtime")?;
        accept_loops.push(tokio::spawn(listener::run(b, rt, shared.clone())));
    }

    wait_for_signal().await;
    tracing::info!(
        drain_secs = limits.drain.as_secs(),
        "shutting down: no new connections, draining"
    );
    shared.shutdown.cancel();
    for l in accept_loops {
        let _ = l.await;
    }
    shared.tracker.close();
    if tokio::time::timeout(limits.drain, shared.tracker.wait())
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
/// builds the TLS settings.
fn tls_for(snapshot: &Snapshot) -> anyhow::Result<crate::intercept::Tls> {
    use crate::intercept::ca;
    let intercepting = snapshot
        .tasks
        .iter()
        .any(|t| t.intercept == crate::config::Intercept::All);
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
    crate::intercept::Tls::new(snapshot, loaded)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops sluice");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
