//! server: the start-up and shutdown sequence — bind every listener,
//! build the live state, serve until SIGTERM/SIGINT, drain, flush the
//! logs. SIGHUP reloads.
//!
//! The top of the crate: it wires the layers together and must not decide
//! on, parse or relay requests itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ListenAddr, Snapshot};
use crate::dns::Resolver;
use crate::listener::{self, Bound};
use crate::metrics::Metrics;
use crate::policy::OwnAddrs;
use crate::state::{Live, Shared, TaskRuntime};

/// Why sluice could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("cannot create state_dir {path}: {source}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up the DNS resolver: {0}")]
    Resolver(#[from] crate::dns::ResolverError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Secret(#[from] crate::secrets::SecretError),
    #[error("{who}: cannot listen on {addr}: {source}")]
    Listen {
        who: String,
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

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

/// Binds every listener of `snapshot`, serves until SIGTERM/SIGINT, drains
/// and flushes the logs.
pub(crate) async fn run(
    snapshot: Snapshot,
    config_path: Option<PathBuf>,
) -> Result<(), StartError> {
    run_until(snapshot, config_path, None).await
}

/// A future that, when it completes, stops a server started by
/// [`run_until`] (`sluice exec`: the command has exited).
pub(crate) type Until = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// [`run`], stopping when `until` completes instead of on SIGTERM/SIGINT
/// (when given). SIGHUP still reloads.
pub(crate) async fn run_until(
    snapshot: Snapshot,
    config_path: Option<PathBuf>,
    until: Option<Until>,
) -> Result<(), StartError> {
    // Signal handlers first: a SIGHUP that arrives as soon as the
    // listeners are up must reload, not kill (its default action).
    let mut signals = Signals::install();
    tracing::info!(
        "sluice {} starting: config {}, state folder {}",
        env!("CARGO_PKG_VERSION"),
        snapshot.source,
        snapshot.state_dir.display()
    );
    for w in &snapshot.warnings {
        tracing::warn!("config: {w}");
    }
    raise_fd_limit();
    std::fs::create_dir_all(&snapshot.state_dir).map_err(|source| StartError::StateDir {
        path: snapshot.state_dir.clone(),
        source,
    })?;
    let resolver = Resolver::new(&snapshot.resolver)?;
    let tls = crate::tls::for_snapshot(&snapshot, None)?;
    // Values read and placeholders kept before any listener is up: a task
    // never connects before its placeholders exist.
    let secrets = crate::secrets::load_all(&snapshot)?;
    let metrics = Metrics::new();
    metrics.config_generation.set(snapshot.generation as i64);
    let mut own = OwnAddrs {
        machine: listener::machine_ips(),
        ..OwnAddrs::default()
    };
    let bound = bind_tasks(&snapshot, &mut own).await?;
    let (admin, mut admin_own) = bind_admin(&snapshot, &mut own).await?;
    let metrics_listener = bind_metrics(&snapshot, &mut own, &mut admin_own).await?;
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
    let live = Live {
        secrets: Arc::new(secrets),
        config: Arc::new(snapshot),
        resolver: Arc::new(resolver),
        tls: Arc::new(tls),
        own: Arc::new(own),
    };
    let shared = Arc::new(Shared::new(live, admin_own, tasks, metrics, config_path));
    for (addr, b, task) in bound {
        crate::accept::spawn(&shared, addr, b, &task);
    }
    use crate::admin::Scope;
    let admin_task = admin.map(|b| tokio::spawn(crate::admin::run(b, shared.clone(), Scope::Full)));
    if let Some(b) = metrics_listener {
        tokio::spawn(crate::admin::run(b, shared.clone(), Scope::MetricsOnly));
    }
    notify_ready();
    let watcher = crate::reload::watch(shared.clone());
    match until {
        None => signals.wait(&shared).await,
        Some(until) => until.await,
    }
    drop(watcher);
    stop(&shared, admin_task, drain, &mut signals).await;
    Ok(())
}

/// Binds every task listener, recording each address as sluice's own.
async fn bind_tasks(
    snapshot: &Snapshot,
    own: &mut OwnAddrs,
) -> Result<Vec<(ListenAddr, Bound, String)>, StartError> {
    let mut bound = Vec::new();
    for task in &snapshot.tasks {
        for addr in &task.listen {
            let b = listener::bind_with_mode(addr, snapshot.unix_mode)
                .await
                .map_err(|source| StartError::Listen {
                    who: format!("task {}", task.id),
                    addr: addr.to_string(),
                    source,
                })?;
            b.record_own(own);
            tracing::info!(task = %task.id, listen = %b, "listening");
            bound.push((addr.clone(), b, task.id.clone()));
        }
    }
    Ok(bound)
}

/// Binds the admin API, if configured: only sluice's own user may use it.
async fn bind_admin(
    snapshot: &Snapshot,
    own: &mut OwnAddrs,
) -> Result<(Option<Bound>, OwnAddrs), StartError> {
    let mut admin_own = OwnAddrs::default();
    let Some(addr) = &snapshot.admin else {
        return Ok((None, admin_own));
    };
    let b = listener::bind_with_mode(addr, 0o600)
        .await
        .map_err(|source| StartError::Listen {
            who: "admin".into(),
            addr: addr.to_string(),
            source,
        })?;
    b.record_own(own);
    b.record_own(&mut admin_own);
    tracing::info!(admin = %b, "admin API listening");
    Ok((Some(b), admin_own))
}

/// Binds the read-only metrics listener, if configured.
async fn bind_metrics(
    snapshot: &Snapshot,
    own: &mut OwnAddrs,
    admin_own: &mut OwnAddrs,
) -> Result<Option<Bound>, StartError> {
    let Some(addr) = &snapshot.metrics_listen else {
        return Ok(None);
    };
    let b = listener::bind(addr)
        .await
        .map_err(|source| StartError::Listen {
            who: "admin.metrics_listen".into(),
            addr: addr.to_string(),
            source,
        })?;
    b.record_own(own);
    b.record_own(admin_own);
    tracing::info!(metrics = %b, "metrics listening (/metrics and /healthz only)");
    Ok(Some(b))
}

/// Tells systemd (`Type=notify`) that sluice is ready: every listener is
/// bound. Does nothing outside systemd.
fn notify_ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = (|| -> std::io::Result<()> {
        let sock = std::os::unix::net::UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(b"READY=1\n", &addr)?;
            }
            None => {
                sock.send_to(b"READY=1\n", &path)?;
            }
        }
        Ok(())
    })();
    if let Err(e) = sent {
        tracing::warn!(error = %e, "cannot notify systemd that sluice is ready");
    }
}

/// Stops accepting, lets what is in flight finish for `drain` (or until
/// a second signal), then closes the rest and flushes the logs.
async fn stop(
    shared: &Shared,
    admin_task: Option<tokio::task::JoinHandle<()>>,
    drain: Duration,
    signals: &mut Signals,
) {
    shared.shutdown.cancel();
    if let Some(a) = admin_task {
        let _ = a.await;
    }
    // Give the accept loops a moment to close their sockets.
    tokio::time::sleep(Duration::from_millis(20)).await;
    shared.tracker.close();
    let open = shared.tracker.len();
    if open == 0 {
        tracing::info!("shutting down: no open connections");
    } else {
        tracing::info!(
            "shutting down: no new connections; waiting up to {} s for {open} open \
             connection(s) to finish (send the signal again, or Ctrl-C, to close them now)",
            drain.as_secs()
        );
    }
    let cut_short = tokio::select! {
        r = tokio::time::timeout(drain, shared.tracker.wait()) => r.is_err().then_some("drain period over"),
        _ = signals.next_stop() => Some("second signal"),
    };
    if let Some(why) = cut_short {
        tracing::warn!(
            "{why}: closing {} remaining connection(s) now",
            shared.tracker.len()
        );
        shared.hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), shared.tracker.wait()).await;
    }
    shared.log.flush().await;
    tracing::info!("stopped");
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

    /// The next SIGTERM or SIGINT.
    async fn next_stop(&mut self) {
        tokio::select! {
            _ = recv(&mut self.term) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }

    /// Serves SIGHUP reloads until SIGTERM or SIGINT.
    async fn wait(&mut self, shared: &Arc<Shared>) {
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
