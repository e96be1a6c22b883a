//! Access-log rows: what is known of an exchange ([`Exchange`]), the one
//! writer of rows ([`write_row`]), and [`Row`], the row of an exchange
//! still open, written at most once: when dropped, if armed (every way an
//! exchange that was answered or refused can end arms it first).
//!
//! Must not: decide (a row records a verdict it is given) or write
//! anything but through `log`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use http::Method;

use super::ConnCtx;
use crate::log::{AccessRecord, Kind, TaintedBy};
use crate::policy::{Refusal, Verdict};
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
    /// The secrets swapped into the request, or the one whose leak refused
    /// it (names only).
    pub(crate) secrets: Vec<Arc<str>>,
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
        secrets: ex.secrets.clone(),
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

/// The access-log row of an exchange that is still open — a request on
/// its way, a tunnel, a relay, a streamed response. It is written at most
/// once: when dropped, if armed, so every way an exchange can end —
/// finished, refused half-way, its client gone, its task cancelled at
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
    /// Written when dropped.
    armed: bool,
    /// Written as what happens if the client leaves now: noted
    /// `client-left` (status 499).
    if_left: bool,
}

impl Row {
    /// The row of an exchange with its verdict and the status its client
    /// got: written when dropped.
    pub(crate) fn new(ctx: Arc<ConnCtx>, ex: Exchange, verdict: Verdict, status: u16) -> Row {
        Row {
            ctx,
            ex,
            verdict,
            status,
            counters: None,
            bytes: (0, 0),
            armed: true,
            if_left: false,
        }
    }

    /// The row of a request nothing has been decided for yet: not written
    /// if the request ends now (nothing was decided or sent, nobody asked).
    pub(crate) fn pending(ctx: Arc<ConnCtx>, ex: Exchange) -> Row {
        let mut row = Row::new(ctx, ex, Verdict::Allow(()), 0);
        row.armed = false;
        row
    }

    /// What the row says if the client leaves before its answer: this
    /// verdict, status 499, noted `client-left`, with the bytes `up`
    /// counts. A request on its way upstream is armed so (a request that
    /// reached the upstream always has a row), as is one waiting on a
    /// person in ask mode.
    pub(crate) fn if_client_leaves(&mut self, verdict: Verdict, up: Option<Arc<AtomicU64>>) {
        self.verdict = verdict;
        self.status = 499;
        self.counters = up.map(|up| RelayBytes {
            up,
            ..RelayBytes::default()
        });
        self.armed = true;
        self.if_left = true;
    }

    /// Back to [`Row::pending`]: the wait is over and nothing is decided
    /// yet.
    pub(crate) fn unarm(&mut self) {
        self.armed = false;
        self.if_left = false;
        self.counters = None;
    }

    /// The client got its answer, with this status: the row says what the
    /// exchange did from here on (its bytes are counted by whoever relays).
    pub(crate) fn answered(&mut self, status: u16) {
        self.status = status;
        self.counters = None;
        self.armed = true;
        self.if_left = false;
    }

    /// Logs the totals of these counters when the row is written.
    pub(crate) fn count(&mut self, bytes: &RelayBytes) {
        self.counters = Some(bytes.clone());
    }

    /// Replaces the verdict, keeping the status the client already got.
    pub(crate) fn set_verdict(&mut self, verdict: Verdict) {
        self.verdict = verdict;
    }

    /// The exchange was refused (by the pipeline, a recheck, a first
    /// byte): the refusal's status and verdict.
    pub(crate) fn deny(&mut self, refusal: Refusal) {
        self.status = refusal.rule.status();
        self.verdict = Verdict::Deny(refusal);
        self.armed = true;
        self.if_left = false;
    }
}

impl Drop for Row {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.if_left {
            self.ex.note = Some(crate::log::CLIENT_LEFT);
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
