//! The connection context: who is on the other end of a client
//! connection ([`ConnCtx`]: task, client, id, its place under the cap),
//! the connection ids, and the refusals and rechecks a connection asks
//! for on its way.
//!
//! Owns: the context's lifetime (the cap's slot is freed when the last
//! tunnel or relay born of the connection ends). Must not: parse, relay,
//! or decide (every rule is `policy`'s).

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Response};

use super::{write_row, Exchange};
use crate::config::{Snapshot, TaskConfig};
use crate::log::Kind;
use crate::policy::{Refusal, Rule, Verdict};
use crate::respond::{self, ProxyBody};
use crate::state::{Shared, TaskRuntime};
use crate::taint::scan::memo::{Memo, MemoKey, Seen};
use crate::tunnel::RawLine;

/// Who is on the other end of a connection.
pub(crate) struct ConnCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) task: Arc<TaskRuntime>,
    /// `ip:port`, `unix` or `vsock:CID`.
    pub(crate) client: Arc<str>,
    /// This client connection's id: the `conn` of every row it leads to
    /// (a CONNECT row and the requests inside its tunnel share it).
    pub(crate) id: u64,
    /// The connection's place under `max_connections_per_task`. Every
    /// tunnel, intercepted session and upgraded relay born of the
    /// connection holds this context, so the slot is freed only when the
    /// last of them ends (SPEC §9: caps hold for a connection's whole life).
    #[allow(dead_code)] // held for its Drop: the slot is the point
    pub(crate) slot: ConnSlot,
    /// The tokens this connection's responses judged, for the next
    /// response to skip (`taint::scan::memo`). Taken by a response while
    /// it is scanned; locked once per response, never per token.
    pub(crate) memo: std::sync::Mutex<Option<Memo>>,
}

/// A held connection slot: the cap's permit and the active-connections
/// gauge, both released when dropped.
pub(crate) struct ConnSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl ConnSlot {
    pub(crate) fn new(
        permit: tokio::sync::OwnedSemaphorePermit,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> ConnSlot {
        gauge.inc();
        ConnSlot {
            _permit: permit,
            gauge,
        }
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// A new client connection id (1, 2, …; 0 is "no connection").
pub(crate) fn next_conn_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ConnCtx {
    /// Writes the one access-log row of an exchange.
    pub(crate) fn record(&self, ex: &Exchange, verdict: &Verdict, status: u16, bytes: (u64, u64)) {
        write_row(
            &self.shared,
            &self.task,
            &self.client,
            ex,
            verdict,
            status,
            bytes,
        );
    }

    /// Says a refusal on the console and builds its response (the row is
    /// the caller's to write).
    pub(crate) fn refusal(&self, ex: &Exchange, refusal: &Refusal) -> Response<ProxyBody> {
        let what = if refusal.rule.is_failure() {
            "could not reach"
        } else {
            "refused"
        };
        tracing::info!(
            method = %ex.method, url = %ex.url,
            rule = refusal.rule.as_str(), "{what}: {}", refusal.reason
        );
        respond::refusal(&self.task.id, ex.method.as_str(), &ex.url, refusal)
    }

    /// Refuses an exchange that has no open row: the console line, the
    /// row, the response.
    pub(crate) fn refuse(&self, ex: &Exchange, refusal: Refusal) -> Response<ProxyBody> {
        let response = self.refusal(ex, &refusal);
        let status = refusal.rule.status();
        self.record(ex, &Verdict::Deny(refusal), status, (0, 0));
        response
    }

    /// A recorder for what the response at `source` (served by
    /// `served_by`) names, into this connection's task's taint set.
    pub(crate) fn recorder(
        &self,
        task: &Arc<TaskConfig>,
        source: Arc<str>,
        served_by: Arc<str>,
    ) -> crate::taint::Recorder {
        let rt = &self.task;
        let sink = crate::taint::TaskTaint {
            id: rt.id.clone(),
            store: rt.taint.clone(),
            tunnels: rt.tunnels.clone(),
            gauges: (
                rt.metrics.taint_hosts.clone(),
                rt.metrics.taint_overflow.clone(),
            ),
            log: self.shared.log.clone(),
            now: self.shared.clone(),
        };
        crate::taint::Recorder::new(sink, task.clone(), source, served_by)
    }

    /// The memo for a response served by `served_by`: the connection's,
    /// if what it learned still holds (same config generation, no taint
    /// removed since, the same host serving), else a fresh one.
    pub(crate) fn memo(&self, served_by: &Arc<str>) -> Arc<Memo> {
        let key = self.memo_key(served_by.clone());
        let kept = self.memo.lock().ok().and_then(|mut m| m.take());
        Arc::new(
            kept.filter(|m| m.key == key)
                .unwrap_or_else(|| Memo::new(key)),
        )
    }

    /// Forgets what the connection's responses taught the scanner (a
    /// parked connection holds nothing it can do without).
    pub(crate) fn forget_memo(&self) {
        if let Ok(mut m) = self.memo.lock() {
            *m = None;
        }
    }

    /// Does what `memo` learned still hold now (no reload, no taint
    /// removed since it was taken)?
    pub(crate) fn memo_holds(&self, memo: &Memo) -> bool {
        memo.key == self.memo_key(memo.key.served_by.clone())
    }

    /// The settings a response's names are judged under now: the config
    /// generation and the taint set's epoch.
    pub(crate) fn judged_under(&self) -> (u64, u64) {
        (self.shared.snapshot().generation, self.task.taint.epoch())
    }

    fn memo_key(&self, served_by: Arc<str>) -> MemoKey {
        MemoKey {
            generation: self.shared.snapshot().generation,
            epoch: self.task.taint.epoch(),
            served_by,
        }
    }

    /// Keeps `memo` with what a response `learned`, once every name the
    /// response gave was recorded — unless the config or the taint set
    /// changed meanwhile (then its knowledge may be stale: dropped).
    pub(crate) fn keep_memo(&self, memo: Arc<Memo>, learned: Vec<Seen>) {
        let Ok(mut memo) = Arc::try_unwrap(memo) else {
            return;
        };
        if !self.memo_holds(&memo) {
            return;
        }
        memo.learn(learned);
        if let Ok(mut slot) = self.memo.lock() {
            // A response scanned beside this one (HTTP/2) may have put its
            // own back: the larger one stays.
            if slot.as_ref().is_none_or(|m| m.len() <= memo.len()) {
                *slot = Some(memo);
            }
        }
    }

    /// The task config this connection belongs to, in this snapshot.
    pub(crate) fn task_config<'a>(&self, snap: &'a Snapshot) -> Option<&'a Arc<TaskConfig>> {
        snap.task(&self.task.id)
    }

    /// Logs a request the HTTP parser rejected: the raw request line
    /// sluice answered, or (on a kept-alive connection, where hyper
    /// answered with a bare 400) what hyper said was wrong.
    pub(crate) fn record_unparsable(&self, raw: Option<RawLine>, e: &hyper::Error) {
        let raw = raw.unwrap_or_else(|| RawLine {
            method: "-".into(),
            target: "-".into(),
            refusal: Refusal::new(
                Rule::BadTarget,
                format!("a later request on a kept-alive connection could not be parsed: {e}"),
            ),
        });
        let ex = Exchange {
            kind: Kind::Http,
            method: Method::from_bytes(raw.method.as_bytes())
                .or_else(|_| Method::from_bytes(b"-"))
                .unwrap_or(Method::GET),
            host: raw.target.clone(),
            port: 0,
            path: None,
            url: raw.target.clone(),
            body: false,
            started: Instant::now(),
            generation: self.shared.snapshot().generation,
            note: None,
            conn: self.id,
            addr: None,
            secrets: Vec::new(),
        };
        tracing::info!(target = %raw.target,
            rule = "bad-target", "refused: {}", raw.refusal.reason);
        self.record(&ex, &Verdict::Deny(raw.refusal), 400, (0, 0));
    }
}

/// The task was removed from the config while its connection was open.
pub(crate) fn task_gone() -> Refusal {
    Refusal::new(
        Rule::NotAllowed,
        "the task this listener belonged to is no longer in the config",
    )
}
