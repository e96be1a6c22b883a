//! Access-log rows: what is known of an exchange ([`Exchange`]), the one
//! writer of rows ([`write_row`]), and [`Row`], the row of an exchange
//! still open, written exactly once when dropped.
//!
//! Must not: decide (a row records a verdict it is given) or write
//! anything but through `log`.

use std::sync::Arc;
use std::time::Instant;

use http::Method;

use super::ConnCtx;
use crate::config::TaskConfig;
use crate::log::{AccessRecord, Kind, TaintedBy};
use crate::policy::{self, Refusal, Rule, Verdict};
use crate::state::{Shared, TaskRuntime};
use crate::tunnel::RelayBytes;

/// What is known of an exchange for its log line and refusal message.
#[derive(Clone)]
pub(crate) struct Exchange {
    pub(crate) kind: Kind,
    pub(crate) method: Method,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: Option<String>,
    /// For messages: `http://host:port/path` or `host:port`.
    pub(crate) url: String,
    pub(crate) body: bool,
    pub(crate) started: Instant,
    pub(crate) generation: u64,
    /// What else the row should say (`log::INTERCEPTED`, …).
    pub(crate) note: Option<&'static str>,
    /// The client connection ([`ConnCtx::id`]).
    pub(crate) conn: u64,
    /// The upstream address dialled, once one was.
    pub(crate) addr: Option<std::net::SocketAddr>,
}

/// Writes the one access-log row of an exchange and counts it in the
/// task's metrics. Every row sluice writes is written here.
pub(crate) fn write_row(
    shared: &Shared,
    task: &TaskRuntime,
    client: &Arc<str>,
    ex: &Exchange,
    verdict: &Verdict,
    status: u16,
    bytes: (u64, u64),
) {
    let refusal = verdict.refusal();
    let rec = AccessRecord {
        v: crate::log::SCHEMA_VERSION,
        ts: crate::log::now_rfc3339(),
        task: task.id.clone(),
        client: client.clone(),
        kind: ex.kind,
        method: ex.method.as_str().to_string(),
        host: ex.host.clone(),
        port: ex.port,
        path: ex.path.clone(),
        decision: verdict.label().into(),
        rule: refusal.map(|r| r.rule.as_str().into()),
        status,
        body: ex.body,
        bytes_up: bytes.0,
        bytes_down: bytes.1,
        duration_ms: ex.started.elapsed().as_millis() as u64,
        tainted_by: refusal
            .and_then(|r| r.tainted_by.as_ref())
            .map(TaintedBy::from),
        generation: ex.generation,
        note: ex.note.map(Into::into),
        conn: ex.conn,
        addr: ex.addr.map(|a| a.to_string()),
        reason: refusal.map(|r| r.reason.clone()),
    };
    shared.log.access(&rec);
    if let (Verdict::WouldDeny(..), Some(r)) = (verdict, refusal) {
        if task.say_shadow(&ex.host) {
            tracing::info!(
                task = %task.id, client = %client, method = %ex.method, url = %ex.url,
                rule = r.rule.as_str(),
                "shadow: allowed what enforce would refuse: {} (said once a minute per host)",
                r.reason
            );
        }
    }
    let m = &task.metrics;
    m.decision(verdict);
    m.bytes(bytes.0, bytes.1);
}

/// The access-log row of a tunnel, relay or streamed response that is
/// still open. It is written exactly once: when dropped, so every way an
/// exchange can end — finished, refused half-way, its task cancelled at
/// shutdown — leaves its row.
pub(crate) struct Row {
    ctx: Arc<ConnCtx>,
    pub(crate) ex: Exchange,
    pub(crate) verdict: Verdict,
    pub(crate) status: u16,
    /// Read when the row is written: the exchange's live byte counters.
    counters: Option<RelayBytes>,
    /// Or fixed totals (up, down).
    pub(crate) bytes: (u64, u64),
    /// Written when dropped (a [`Row::disarm`]ed row is not).
    armed: bool,
}

impl Row {
    pub(crate) fn new(ctx: Arc<ConnCtx>, ex: Exchange, verdict: Verdict, status: u16) -> Row {
        Row {
            ctx,
            ex,
            verdict,
            status,
            counters: None,
            bytes: (0, 0),
            armed: true,
        }
    }

    /// The row of a request on its way upstream: written (status 499,
    /// note `client-left`) if the exchange ends before its response head
    /// arrives, so a request that reached the upstream always has a row.
    /// [`Row::disarm`] it once the response (or a refusal) takes over.
    pub(crate) fn on_its_way(
        ctx: Arc<ConnCtx>,
        ex: &Exchange,
        verdict: &Verdict,
        up: Arc<std::sync::atomic::AtomicU64>,
    ) -> Row {
        let mut ex = ex.clone();
        ex.note = Some(crate::log::CLIENT_LEFT);
        let mut row = Row::new(ctx, ex, verdict.clone(), 499);
        row.counters = Some(RelayBytes {
            up,
            ..RelayBytes::default()
        });
        row
    }

    /// In `allow_mode = "ask"` a request may wait on a person: if its
    /// client leaves meanwhile, this row (deny, 499, `client-left`) says
    /// so. `None` in other modes (nothing waits there).
    pub(crate) fn while_deciding(
        ctx: &Arc<ConnCtx>,
        task: &TaskConfig,
        ex: &Exchange,
    ) -> Option<Row> {
        if task.rules.allow_mode != policy::AllowMode::Ask {
            return None;
        }
        let mut ex = ex.clone();
        ex.note = Some(crate::log::CLIENT_LEFT);
        let why = Refusal::new(
            Rule::NotAllowed,
            format!(
                "the client left before sluice decided on {} (allow_mode = \"ask\": a person may have been asked)",
                ex.url
            ),
        );
        Some(Row::new(ctx.clone(), ex, Verdict::Deny(why), 499))
    }

    /// Not written after all: another row says what happened.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Logs the totals of these counters when the row is written.
    pub(crate) fn count(&mut self, bytes: &RelayBytes) {
        self.counters = Some(bytes.clone());
    }

    /// Replaces the verdict, keeping the status the client already got.
    pub(crate) fn set_verdict(&mut self, verdict: Verdict) {
        self.verdict = verdict;
    }

    /// The exchange was refused after all (a recheck, a first byte).
    pub(crate) fn deny(&mut self, refusal: Refusal) {
        self.status = refusal.rule.status();
        self.verdict = Verdict::Deny(refusal);
    }
}

impl Drop for Row {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let bytes = match &self.counters {
            Some(c) => (
                c.up.load(std::sync::atomic::Ordering::Relaxed),
                c.down.load(std::sync::atomic::Ordering::Relaxed),
            ),
            None => self.bytes,
        };
        self.ctx.record(&self.ex, &self.verdict, self.status, bytes);
    }
}
