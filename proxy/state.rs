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
pub(crate) struct TaskRuntime {
    pub(crate) id: Arc<str>,
    /// Caps concurrent client connections (503 `over-capacity` past it).
    pub(crate) conns: Arc<Semaphore>,
    /// The cap `conns` was sized for ([`TaskRuntime::resize`]).
    max_conns: AtomicUsize,
    /// Idle upstream connections, keyed by checked address.
    pub(crate) pool: Arc<Pool>,
    /// Hosts named by this task's fetched responses.
    pub(crate) taint: Arc<TaintStore>,
    /// Open tunnels, so a new taint or a reload can close them.
    pub(crate) tunnels: Arc<TunnelRegistry>,
    /// This task's metric handles (no label work on the hot path).
    pub(crate) metrics: TaskMetrics,
    /// The second (since the epoch) of the last access-log row written for
    /// a connection refused at accept: such rows are written at most once a
    /// second per task, so a connection flood cannot fill the shared log
    /// queue (every refusal is still counted in the metrics).
    accept_row_second: std::sync::atomic::AtomicU64,
    /// When a shadow-mode `would_deny` for each host was last said on the
    /// console: at most once a minute per host.
    shadow_said: Mutex<HashMap<String, Instant>>,
    /// `allow_mode = "ask"`: grants and the questions waiting.
    pub(crate) asks: crate::ask::Asks,
    /// Window memory this task's response decoders hold.
    pub(crate) decoder_memory: Arc<crate::taint::body::memory::Pool>,
    /// Set when a secret would have leaked (`on_violation = "quarantine"`).
    pub(crate) quarantine: crate::secrets::Quarantine,
}

/// Hosts remembered for the shadow-mode console lines at most; past it
/// the memory is cleared (a few lines may then repeat).
const SHADOW_HOSTS: usize = 4096;

impl TaskRuntime {
    /// Resizes the connection cap (a reload changed it). Permits in use
    /// come back later: what is free now is forgotten, the rest as it
    /// returns (best effort).
    pub(crate) fn resize(&self, max: usize) {
        let old = self
            .max_conns
            .swap(max, std::sync::atomic::Ordering::AcqRel);
        if max > old {
            self.conns.add_permits(max - old);
        } else if max < old {
            self.conns.forget_permits(old - max);
        }
    }

    /// May a connection refused at accept get an access-log row now? At
    /// most one a second per task (the rest are only counted), so a flood
    /// cannot fill the shared log queue.
    pub(crate) fn accept_row_due(&self) -> bool {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let previous = self
            .accept_row_second
            .swap(second, std::sync::atomic::Ordering::Relaxed);
        previous != second
    }

    /// Whether a shadow-mode decision about `host` should reach the
    /// console now (once a minute per host).
    pub(crate) fn say_shadow(&self, host: &str) -> bool {
        let mut said = self
            .shadow_said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
    pub(crate) fn new(task: &TaskConfig, snapshot: &Snapshot, metrics: &Metrics) -> TaskRuntime {
        record_allow_list(snapshot, task);
        let path = snapshot
            .state_dir
            .join("tasks")
            .join(&task.id)
            .join("taint.jsonl");
        let (store, loaded, bad) = TaintStore::load(&task.id, &path, task.taint.max_hosts);
        let asks = crate::ask::Asks::load(&path.with_file_name("granted.jsonl"));
        let quarantine = crate::secrets::Quarantine::load(path.parent().unwrap_or(&path));
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
            pool: Arc::new(Pool::new(snapshot.generation)),
            taint: Arc::new(store),
            tunnels: Arc::default(),
            metrics: task_metrics,
            accept_row_second: Default::default(),
            shadow_said: Default::default(),
            asks,
            decoder_memory: crate::taint::body::memory::Pool::new(
                crate::taint::body::memory::TASK_CAP,
            ),
            quarantine,
        }
    }
}

/// A bound listener, as the reloader sees it.
pub(crate) struct ListenerHandle {
    /// Cancelling it closes the listening socket (open connections stay).
    pub(crate) stop: CancellationToken,
    /// What it is bound to, for the admin API (port 0 resolved).
    pub(crate) bound: String,
    /// The local TCP address, refused to every task.
    pub(crate) local: Option<std::net::SocketAddr>,
    /// The task its connections belong to; a reload may move it.
    pub(crate) owner: Arc<ArcSwap<String>>,
}

/// The config in force and everything built from it, swapped in whole by
/// a reload: a request that loads it once sees one generation throughout
/// (never the new allow-lists with the old TLS settings or own addresses).
pub(crate) struct Live {
    pub(crate) config: Arc<Snapshot>,
    pub(crate) resolver: Arc<Resolver>,
    /// TLS both ways: the CA's leaves and the upstream verifier.
    pub(crate) tls: Arc<Tls>,
    /// sluice's own listening addresses, refused to every task.
    pub(crate) own: Arc<OwnAddrs>,
    /// Each task's secrets (values read for this generation).
    pub(crate) secrets: Arc<crate::secrets::ByTask>,
}

/// State every connection reads.
pub(crate) struct Shared {
    /// The one live snapshot ([`Shared::live`], [`Shared::publish`]).
    live: ArcSwap<Live>,
    /// The admin API's own address (fixed until restart).
    pub(crate) admin_own: OwnAddrs,
    /// Task runtimes by id. Read on accept; written only by reloads.
    pub(crate) tasks: RwLock<HashMap<String, Arc<TaskRuntime>>>,
    /// Bound task listeners; touched only by start-up and reloads.
    pub(crate) listeners: Mutex<HashMap<ListenAddr, ListenerHandle>>,
    pub(crate) log: AccessLog,
    pub(crate) metrics: Metrics,
    /// The config file (None: the embedded default).
    pub(crate) config_path: Option<PathBuf>,
    /// Reloads run one at a time.
    pub(crate) reload_lock: tokio::sync::Mutex<()>,
    /// Fired on SIGTERM/SIGINT: stop accepting, finish what is in flight.
    pub(crate) shutdown: CancellationToken,
    /// Fired when the drain period is over: close tunnels.
    pub(crate) hard_stop: CancellationToken,
    pub(crate) tracker: TaskTracker,
    /// Window memory all response decoders hold.
    pub(crate) decoder_memory: Arc<crate::taint::body::memory::Pool>,
}

impl Shared {
    /// The state of a starting server, before any listener accepts.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        live: Live,
        admin_own: OwnAddrs,
        tasks: HashMap<String, Arc<TaskRuntime>>,
        metrics: Metrics,
        config_path: Option<PathBuf>,
    ) -> Shared {
        let config = &live.config;
        Shared {
            log: AccessLog::spawn(
                &config.state_dir,
                config.logs.clone(),
                metrics.log_write_errors.clone(),
            ),
            live: ArcSwap::from_pointee(live),
            admin_own,
            tasks: RwLock::new(tasks),
            listeners: Mutex::new(HashMap::new()),
            metrics,
            config_path,
            reload_lock: tokio::sync::Mutex::new(()),
            shutdown: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            decoder_memory: crate::taint::body::memory::Pool::new(
                crate::taint::body::memory::TOTAL_CAP,
            ),
        }
    }

    /// The live snapshot: load it once per request and use it throughout.
    pub(crate) fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The config in force (part of [`Shared::live`]).
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.live.load().config.clone()
    }

    /// Swaps in a reload's whole new state at once.
    pub(crate) fn publish(&self, live: Live) {
        self.live.store(Arc::new(live));
    }

    /// The command a person runs to answer a question of `task`, as it
    /// can be pasted: `sluice allow --config FILE --task T` (no
    /// `--config` when sluice runs on its embedded default).
    pub(crate) fn answer_command(&self, verb: &str, task: &str) -> String {
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

    pub(crate) fn task_runtime(&self, id: &str) -> Option<Arc<TaskRuntime>> {
        self.tasks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    pub(crate) fn task_runtimes(&self) -> Vec<Arc<TaskRuntime>> {
        self.tasks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

impl crate::taint::Now for Shared {
    fn snapshot(&self) -> Arc<Snapshot> {
        Shared::snapshot(self)
    }
}

/// The file in a task's state folder that says what its allow-list is now
/// (`host:port` a line), so `sluice report` can tell which tainted names
/// the task may reach. Rewritten at start and on each reload; a failure
/// to write it only costs the report that knowledge.
pub(crate) const ALLOW_LIST_FILE: &str = "allow-list.txt";

/// Writes [`ALLOW_LIST_FILE`] for a task.
pub(crate) fn record_allow_list(snapshot: &Snapshot, task: &TaskConfig) {
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
