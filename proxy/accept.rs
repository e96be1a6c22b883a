//! accept: each task listener's accept loop — the task is who arrived on
//! the listener, never a header; the connection cap is taken here (a
//! connection past it is answered 503 `over-capacity` and logged); each
//! connection is handed to `conn`.
//!
//! Must not parse requests or decide anything but the cap, which is a
//! count, not a rule about destinations.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::ListenAddr;
use crate::exchange::{write_row, ConnCtx, ConnSlot, Exchange};
use crate::listener::{accept, Bound, Stream};
use crate::log::Kind;
use crate::policy::{self, Refusal, Rule, Verdict};
use crate::respond;
use crate::state::{ListenerHandle, Shared, TaskRuntime};

/// Starts the accept loop of a bound listener of `task`.
pub(crate) fn spawn(shared: &Arc<Shared>, addr: ListenAddr, bound: Bound, task: &str) {
    let peer = match addr {
        ListenAddr::Vsock { peer, .. } => peer,
        _ => None,
    };
    let stop = shared.shutdown.child_token();
    let owner: Arc<ArcSwap<String>> = Arc::new(ArcSwap::from_pointee(task.to_string()));
    let handle = ListenerHandle {
        stop: stop.clone(),
        bound: bound.to_string(),
        local: bound.local_tcp(),
        owner: owner.clone(),
    };
    shared
        .listeners
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(addr, handle);
    tokio::spawn(run(bound, owner, shared.clone(), stop, peer));
}

/// Accepts until `stop` (shutdown, or a reload removing the listener).
/// Each connection belongs to the task the listener routes to now, and runs
/// in the shared tracker.
async fn run(
    listener: Bound,
    owner: Arc<arc_swap::ArcSwap<String>>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    peer: Option<u32>,
) {
    loop {
        let accepted = tokio::select! {
            // A listener a reload closed accepts nothing more, even with
            // connections queued.
            biased;
            _ = stop.cancelled() => break,
            a = accept(&listener) => a,
        };
        let (stream, client) = match accepted {
            // On vsock, task identity is the listener and the peer CID.
            Ok(a) => match policy::decide_peer(peer, a.vsock_cid) {
                Ok(()) => (a.stream, a.client),
                Err(refusal) => {
                    if let Some(task) = shared.task_runtime(&owner.load()) {
                        refuse_at_accept(a.stream, &task, &shared, a.client, refusal);
                    }
                    continue;
                }
            },
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(listen = %listener, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(task) = shared.task_runtime(&owner.load()) else {
            // The listener is being closed by a reload.
            continue;
        };
        let Ok(permit) = task.conns.clone().try_acquire_owned() else {
            let refusal = Refusal::new(
                Rule::OverCapacity,
                format!(
                    "the task already has {} open connections; retry later",
                    shared.snapshot().limits.max_connections_per_task
                ),
            );
            refuse_at_accept(stream, &task, &shared, client, refusal);
            continue;
        };
        // One id a connection: its span's `conn` is every row's `conn`.
        let id = crate::exchange::next_conn_id();
        let span = tracing::info_span!("conn", conn = id, task = %task.id, client = %client);
        let ctx = Arc::new(ConnCtx {
            id,
            shared: shared.clone(),
            task: task.clone(),
            client,
            slot: ConnSlot::new(permit, task.metrics.connections_active.clone()),
            memo: std::sync::Mutex::new(None),
        });
        shared
            .tracker
            .spawn(crate::conn::serve(stream, ctx).instrument(span));
    }
    if let Bound::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// Answers a connection refused before its request is read (past the
/// task's cap, or from the wrong vsock peer) and logs it: the row names no
/// destination.
fn refuse_at_accept(
    mut stream: Stream,
    task: &TaskRuntime,
    shared: &Shared,
    client: Arc<str>,
    refusal: Refusal,
) {
    tracing::warn!(task = %task.id, client = %client, rule = refusal.rule.as_str(),
        "connection refused: {}", refusal.reason);
    let bytes = respond::raw_refusal(&task.id, &refusal);
    let ex = Exchange {
        kind: Kind::Http,
        method: http::Method::from_bytes(b"-").unwrap_or(http::Method::GET),
        host: "-".into(),
        port: 0,
        path: None,
        url: "-".into(),
        body: false,
        started: Instant::now(),
        generation: shared.snapshot().generation,
        note: None,
        conn: crate::exchange::next_conn_id(),
        addr: None,
        secrets: Vec::new(),
    };
    let status = refusal.rule.status();
    let verdict = Verdict::Deny(refusal);
    if !task.accept_row_due() {
        // Counted, not logged: at most one such row per task per second.
        task.metrics.decision(&verdict);
    } else {
        write_row(shared, task, &client, &ex, &verdict, status, (0, 0));
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&bytes)).await;
        let _ = stream.shutdown().await;
    });
}
