//! state: the live state every connection reads — the config in force
//! (`ArcSwap<Snapshot>`) and what is built from it (resolver, TLS, own
//! addresses), each task's runtime (connection cap, upstream pool, taint
//! set, open tunnels, metrics), the bound listeners and the shutdown
//! tokens.
//!
//! Plain data with lookups: must not decide, serve, or change itself — a
//! reload (`reload`) builds new values and swaps them in.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ListenAddr, Snapshot, TaskConfig};
use crate::dns::Resolver;
use crate::log::AccessLog;
use crate::metrics::{Metrics, TaskMetrics};
use crate::policy::OwnAddrs;
use crate::taint::{TaintStore, TunnelRegistry};
use crate::tls::Tls;
use crate::upstream::Pool;

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
    /// The second (since the epoch) of the last access-log row written for
    /// a connection refused at accept: such rows are written at most once a
    /// second per task, so a connection flood cannot fill the shared log
    /// queue (every refusal is still counted in the metrics).
    pub accept_row_second: std::sync::atomic::AtomicU64,
    /// When a shadow-mode `would_deny` for each host was last said on the
    /// console: at most once a minute per host.
    shadow_said: Mutex<HashMap<String, Instant>>,
    /// `allow_mode = "ask"`: grants and the questions waiting.
    pub asks: crate::ask::Asks,
    /// Window memory this task's response decoders hold.
    pub decoder_memory: Arc<crate::taint::body::memory::Pool>,
}

/// Hosts remembered for the shadow-mode console lines at most; past it
/// the memory is cleared (a few lines may then repeat).
const SHADOW_HOSTS: usize = 4096;

impl TaskRuntime {
    /// Whether a shadow-mode decision about `host` should reach the
    /// console now (once a minute per host).
    pub fn say_shadow(&self, host: &str) -> bool {
        let mut said = self.shadow_said.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if said
            .get(host)
            .is_some_and(|t| now.duration_since(*t) < Duration::from_secs(60))
        {
            return false;
        }
        if said.len() >= SHADOW_HOSTS {
            said.clear();
        }
        said.insert(host.to_string(), now);
        true
    }

    /// Creates a task's runtime, reloading its taint set from disk.
    pub fn new(task: &TaskConfig, snapshot: &Snapshot, metrics: &Metrics) -> TaskRuntime {
        record_allow_list(snapshot, task);
        let path = snapshot
            .state_dir
            .join("tasks")
            .join(&task.id)
            .join("taint.jsonl");
        let (store, loaded, bad) = TaintStore::load(&task.id, &path, task.taint.max_hosts);
        let asks = crate::ask::Asks::load(&path.with_file_name("granted.jsonl"));
        if loaded > 0 || bad > 0 {
            tracing::info!(task = %task.id, hosts = loaded, unreadable_lines = bad, "taint set reloaded");
        }
        let task_metrics = TaskMetrics::new(metrics, &task.id);
        task_metrics.taint_hosts.set(loaded as i64);
        if task.taint.mode != crate::policy::TaintMode::Off {
            if let Err(why) = crate::log::taint_saved(&snapshot.state_dir, &task.id) {
                tracing::error!(task = %task.id, "{why}");
                store.fail_closed();
            }
        }
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
            accept_row_second: Default::default(),
            shadow_said: Default::default(),
            asks,
            decoder_memory: crate::taint::body::memory::Pool::new(
                crate::taint::body::memory::TASK_CAP,
            ),
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
    /// Window memory all response decoders hold.
    pub decoder_memory: Arc<crate::taint::body::memory::Pool>,
}

impl Shared {
    /// The command a person runs to answer a question of `task`, as it
    /// can be pasted: `sluice allow --config FILE --task T` (no
    /// `--config` when sluice runs on its embedded default).
    pub fn answer_command(&self, verb: &str, task: &str) -> String {
        use crate::shell::sh_quote;
        let config = match &self.config_path {
            Some(p) => {
                // Absolute: the person may answer from another folder.
                let p = std::path::absolute(p).unwrap_or_else(|_| p.clone());
                format!(" --config {}", sh_quote(&p.to_string_lossy()))
            }
            None => String::new(),
        };
        format!("sluice {verb}{config} --task {}", sh_quote(task))
    }

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
}

/// The file in a task's state folder that says what its allow-list is now
/// (`host:port` a line), so `sluice report` can tell which tainted names
/// the task may reach. Rewritten at start and on each reload; a failure
/// to write it only costs the report that knowledge.
pub const ALLOW_LIST_FILE: &str = "allow-list.txt";

/// Writes [`ALLOW_LIST_FILE`] for a task.
pub fn record_allow_list(snapshot: &Snapshot, task: &TaskConfig) {
    let dir = snapshot.state_dir.join("tasks").join(&task.id);
    let text: String = task
        .rules
        .allow
        .sorted()
        .into_iter()
        .map(|e| e + "\n")
        .collect();
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join(ALLOW_LIST_FILE), text));
    if let Err(e) = written {
        tracing::warn!(task = %task.id, error = %e, "cannot record the allow-list for sluice report");
    }
}
