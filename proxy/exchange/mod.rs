//! exchange: the layer every request, tunnel and relay goes through,
//! below `forward` and `intercept` — who is on the other end
//! ([`ConnCtx`]), the decision pipeline ([`admit`]: name → resolve →
//! addresses → taint, each step decided by `policy`; in ask mode a
//! request may wait there for a person's answer, then is decided again
//! under the config in force), the one writer of
//! access-log rows ([`write_row`]), and adding what responses name to the
//! taint set.
//!
//! Must not parse client connections (that is `conn`), relay bytes (that
//! is `tunnel`/`forward`), or decide anything itself: every rule is a call
//! into `policy`.

use std::sync::Arc;
use std::time::Instant;

use http::{header, Method, Response};

use crate::config::{Snapshot, TaskConfig};
use crate::log::{AccessRecord, Kind, TaintedBy};
use crate::policy::{
    self, target::parse_authority, Admission, Facts, Host, HostHeader, Refusal, Resolution, Rule,
    Target, Verdict,
};
use crate::respond::{self, ProxyBody};
use crate::state::{Shared, TaskRuntime};
use crate::tunnel::{RawLine, RelayBytes};

mod taint;
pub use taint::Tally;

/// Who is on the other end of a connection.
pub struct ConnCtx {
    pub shared: Arc<Shared>,
    pub task: Arc<TaskRuntime>,
    /// `ip:port`, `unix` or `vsock:CID`.
    pub client: Arc<str>,
    /// This client connection's id: the `conn` of every row it leads to
    /// (a CONNECT row and the requests inside its tunnel share it).
    pub id: u64,
    /// The connection's place under `max_connections_per_task`. Every
    /// tunnel, intercepted session and upgraded relay born of the
    /// connection holds this context, so the slot is freed only when the
    /// last of them ends (SPEC §9: caps hold for a connection's whole life).
    pub slot: ConnSlot,
}

/// A held connection slot: the cap's permit and the active-connections
/// gauge, both released when dropped.
pub struct ConnSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl ConnSlot {
    pub fn new(
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

/// What is known of an exchange for its log line and refusal message.
#[derive(Clone)]
pub struct Exchange {
    pub kind: Kind,
    pub method: Method,
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
    /// For messages: `http://host:port/path` or `host:port`.
    pub url: String,
    pub body: bool,
    pub started: Instant,
    pub generation: u64,
    /// What else the row should say (`log::INTERCEPTED`, …).
    pub note: Option<&'static str>,
    /// The client connection ([`ConnCtx::id`]).
    pub conn: u64,
    /// The upstream address dialled, once one was.
    pub addr: Option<std::net::SocketAddr>,
}

/// A new client connection id (1, 2, …; 0 is "no connection").
pub fn next_conn_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Writes the one access-log row of an exchange and counts it in the
/// task's metrics. Every row sluice writes is written here.
pub fn write_row(
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

impl ConnCtx {
    /// Writes the one access-log row of an exchange.
    pub fn record(&self, ex: &Exchange, verdict: &Verdict, status: u16, bytes: (u64, u64)) {
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

    /// Logs a refusal and builds its response.
    pub fn refuse(&self, ex: &Exchange, refusal: Refusal) -> Response<ProxyBody> {
        let status = refusal.rule.status();
        let what = if refusal.rule.is_failure() {
            "could not reach"
        } else {
            "refused"
        };
        tracing::info!(
            task = %self.task.id, client = %self.client, method = %ex.method, url = %ex.url,
            rule = refusal.rule.as_str(), "{what}: {}", refusal.reason
        );
        let response = respond::refusal(&self.task.id, ex.method.as_str(), &ex.url, &refusal);
        self.record(ex, &Verdict::Deny(refusal), status, (0, 0));
        response
    }

    /// The task config this connection belongs to, in this snapshot.
    pub fn task_config<'a>(&self, snap: &'a Snapshot) -> Option<&'a Arc<TaskConfig>> {
        snap.task(&self.task.id)
    }

    /// Logs a request the HTTP parser rejected: the raw request line
    /// sluice answered, or (on a kept-alive connection, where hyper
    /// answered with a bare 400) what hyper said was wrong.
    pub fn record_unparsable(&self, raw: Option<RawLine>, e: &hyper::Error) {
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
            generation: self.shared.snapshot.load().generation,
            note: None,
            conn: self.id,
            addr: None,
        };
        tracing::info!(task = %self.task.id, client = %self.client, target = %raw.target,
            rule = "bad-target", "refused: {}", raw.refusal.reason);
        self.record(&ex, &Verdict::Deny(raw.refusal), 400, (0, 0));
    }
}

/// The access-log row of a tunnel, relay or streamed response that is
/// still open. It is written exactly once: when dropped, so every way an
/// exchange can end — finished, refused half-way, its task cancelled at
/// shutdown — leaves its row.
pub struct Row {
    ctx: Arc<ConnCtx>,
    pub ex: Exchange,
    pub verdict: Verdict,
    pub status: u16,
    /// Read when the row is written: the exchange's live byte counters.
    counters: Option<RelayBytes>,
    /// Or fixed totals (up, down).
    pub bytes: (u64, u64),
    /// Written when dropped (a [`Row::disarm`]ed row is not).
    armed: bool,
}

impl Row {
    pub fn new(ctx: Arc<ConnCtx>, ex: Exchange, verdict: Verdict, status: u16) -> Row {
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
    pub fn on_its_way(
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
    pub fn while_deciding(ctx: &Arc<ConnCtx>, task: &TaskConfig, ex: &Exchange) -> Option<Row> {
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
    pub fn disarm(mut self) {
        self.armed = false;
    }

    /// Logs the totals of these counters when the row is written.
    pub fn count(&mut self, bytes: &RelayBytes) {
        self.counters = Some(bytes.clone());
    }

    /// Replaces the verdict, keeping the status the client already got.
    pub fn set_verdict(&mut self, verdict: Verdict) {
        self.verdict = verdict;
    }

    /// The exchange was refused after all (a recheck, a first byte).
    pub fn deny(&mut self, refusal: Refusal) {
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

/// What a request is, besides its target: whether it carries a body
/// (SPEC §4), its method, and its path (none for a CONNECT).
#[derive(Clone, Copy, Debug)]
pub struct Sent<'a> {
    pub body: bool,
    pub method: &'a str,
    pub path: Option<&'a str>,
    pub content_type: Option<&'a str>,
}

impl<'a> Sent<'a> {
    /// What git's fetch exception looks at.
    pub fn git(&self) -> policy::owners::GitRequest<'a> {
        policy::owners::GitRequest {
            method: self.method,
            path: self.path,
            content_type: self.content_type,
        }
    }
}

/// The decision pipeline shared by plain HTTP, CONNECT and intercepted
/// requests: name rules → resolve → classify → taint. Each step is
/// `policy`'s; this only gathers what they need.
pub async fn admit(
    shared: &Shared,
    runtime: &TaskRuntime,
    task: &TaskConfig,
    target: &Target,
    host_header: &HostHeader,
    sent: Sent<'_>,
) -> Verdict<Admission> {
    let Sent { method, path, .. } = sent;
    let host = target.host.to_string();
    let carries_body = task
        .taint
        .by_owner
        .body_counts(sent.body, &host, sent.git());
    let rules = runtime.asks.effective(&task.rules);
    let name = policy::decide_name(&rules, target, host_header);
    let asking = matches!(&name, Verdict::Deny(r) if policy::askable(&rules, r));
    let name = match name {
        Verdict::Deny(r) if !asking => return Verdict::Deny(r),
        other => other,
    };
    let decide = |rules: &policy::TaskRules, name, resolution: &Resolution| {
        let taint = match &target.host {
            Host::Name(n) => runtime.taint.state(n, path, &task.taint),
            Host::Ip(ip) => runtime.taint.state(&ip.to_string(), path, &task.taint),
        };
        let facts = Facts {
            own: &shared.own.load(),
            taint: &taint,
            carries_body,
            task: &task.id,
        };
        policy::decide_addresses(rules, target, resolution, facts, name)
    };
    let resolve = || async {
        match &target.host {
            Host::Ip(ip) => Resolution::Literal(*ip),
            Host::Name(name) => shared.resolver.load_full().resolve(name).await,
        }
    };
    if !asking {
        return decide(&rules, name, &resolve().await);
    }
    // Ask mode: nothing is resolved before a person allows the name (a
    // lookup is itself a way out: the name can carry data to its DNS
    // server). Taint is refused as always, before anyone is asked.
    let unresolved = Resolution::Resolved(Vec::new());
    if let Verdict::Deny(r) = decide(&rules, Verdict::admit((), None), &unresolved) {
        if r.rule == Rule::UntrustedTarget {
            return Verdict::Deny(r);
        }
    }
    let asked = Asked {
        target,
        method,
        addrs: Vec::new(),
    };
    if let Err(r) = ask(shared, runtime, task, asked).await {
        return Verdict::Deny(r);
    }
    // Decided again under the config in force now, the grant included:
    // a reload may have changed the task while it waited.
    let snap = shared.snapshot.load();
    let Some(now) = snap.task(&task.id) else {
        return Verdict::Deny(task_gone());
    };
    let rules = runtime.asks.effective(&now.rules);
    match policy::decide_name(&rules, target, host_header) {
        Verdict::Deny(r) => Verdict::Deny(r),
        name => decide(&rules, name, &resolve().await),
    }
}

/// [`admit`] for a client's request: in ask mode, a client that leaves
/// while a person is asked still gets its row ([`Row::while_deciding`]).
pub async fn admit_for(
    ctx: &Arc<ConnCtx>,
    task: &TaskConfig,
    target: &Target,
    host_header: &HostHeader,
    ex: &Exchange,
    sent: Sent<'_>,
) -> Verdict<Admission> {
    let waiting = Row::while_deciding(ctx, task, ex);
    let verdict = admit(&ctx.shared, &ctx.task, task, target, host_header, sent).await;
    if let Some(w) = waiting {
        w.disarm();
    }
    verdict
}

/// What a question is about.
struct Asked<'a> {
    target: &'a Target,
    method: &'a str,
    addrs: Vec<String>,
}

/// `allow_mode = "ask"`: puts the question and waits for the answer; the
/// refusal when a person said no, nobody answered in time, or too many
/// questions wait already.
async fn ask(
    shared: &Shared,
    runtime: &TaskRuntime,
    task: &TaskConfig,
    a: Asked<'_>,
) -> Result<(), Refusal> {
    let (target, timeout) = (a.target, task.ask_timeout);
    let question = crate::ask::Question {
        ts: crate::log::now_rfc3339(),
        task: task.id.clone(),
        question: format!(
            "allow {target}? answer with: {} {target} (or sluice deny)",
            shared.answer_command("allow", &task.id)
        ),
        host: target.host.to_string(),
        port: target.port,
        addrs: a.addrs,
        method: a.method.to_string(),
        url: target.to_string(),
        timeout_secs: timeout.as_secs(),
    };
    tracing::info!(task = %task.id, "asking: {}", question.question);
    let refused = |why: String| {
        Refusal::new(
            Rule::NotAllowed,
            format!("{target} is not on the task's allow-list, and {why} (allow_mode = \"ask\")"),
        )
    };
    use crate::ask::{Answer, Outcome};
    match runtime.asks.ask(&shared.log, question, timeout).await {
        Outcome::Answered(Answer::Allow) => Ok(()),
        Outcome::Answered(Answer::Deny) => Err(refused("a person refused it".into())),
        Outcome::Timeout => Err(refused(format!(
            "nobody answered within {} s",
            timeout.as_secs()
        ))),
        Outcome::Busy => Err(refused(format!(
            "{} other questions are waiting already; answer those first",
            crate::ask::MAX_WAITING
        ))),
    }
}

/// Parses the Host header(s) against a default port.
pub fn host_header(headers: &http::HeaderMap, default_port: u16) -> HostHeader {
    let mut values = headers.get_all(header::HOST).iter();
    match (values.next(), values.next()) {
        (None, _) => HostHeader::Absent,
        (Some(_), Some(_)) => HostHeader::Many,
        (Some(v), None) => HostHeader::One(match v.to_str() {
            Ok(s) => parse_authority(s, Some(default_port)),
            Err(_) => Err(policy::TargetError::BadName(
                "<non-ASCII Host header>".into(),
            )),
        }),
    }
}

/// Does the request carry a body (SPEC §4)?
pub fn carries_body(headers: &http::HeaderMap) -> bool {
    let content_length = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .any(|v| v.to_str().map(|s| s.trim() != "0").unwrap_or(true));
    content_length
        || headers.contains_key(header::TRANSFER_ENCODING)
        || headers.contains_key(header::UPGRADE)
}

/// Removes the `Sluice-*` headers a client sent: only sluice says those.
pub fn strip_sluice_headers(h: &mut http::HeaderMap) {
    remove_prefixed(h, "sluice-");
}

/// Removes every header whose (lower-case) name starts with `prefix`.
pub fn remove_prefixed(h: &mut http::HeaderMap, prefix: &str) {
    let names: Vec<_> = h
        .keys()
        .filter(|k| k.as_str().starts_with(prefix))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
}

impl ConnCtx {
    /// Is a connection that is already open to `target` (connected to
    /// `addr`) still within policy under the config in force now? Called
    /// by opaque tunnels and upgraded relays right after they register, so
    /// a reload or taint that landed before registration is not missed.
    pub fn recheck_open(
        &self,
        target: &Target,
        addr: std::net::SocketAddr,
        opaque: bool,
    ) -> Verdict {
        self.recheck(target, addr, opaque.then_some(None))
    }

    /// [`ConnCtx::recheck_open`] for a request body streaming upstream:
    /// taint applies with the request's path (`None`: it does not apply,
    /// git's fetch to a forge).
    pub fn recheck_body(
        &self,
        target: &Target,
        addr: std::net::SocketAddr,
        path: Option<&str>,
    ) -> Verdict {
        self.recheck(target, addr, path.map(Some))
    }

    /// Does taint apply to a body sent to `host` with this method and path
    /// (everything but git's fetch to a forge)?
    pub fn taint_applies(&self, host: &str, sent: Sent<'_>) -> bool {
        let snap = self.shared.snapshot.load();
        self.task_config(&snap)
            .is_none_or(|t| t.taint.by_owner.body_counts(true, host, sent.git()))
    }

    /// `taint`: `None` when it does not apply; else the path to judge the
    /// owner by (`None` inside: an opaque stream, any owner).
    fn recheck(
        &self,
        target: &Target,
        addr: std::net::SocketAddr,
        taint: Option<Option<&str>>,
    ) -> Verdict {
        let snap = self.shared.snapshot.load();
        let Some(task) = self.task_config(&snap) else {
            return Verdict::Deny(task_gone());
        };
        let opaque = taint.is_some();
        let host = target.host.to_string();
        let taint = match taint {
            Some(path) => self.task.taint.state(&host, path, &task.taint),
            None => policy::TaintState::Clean,
        };
        policy::decide_open(
            &self.task.asks.effective(&task.rules),
            target,
            addr,
            &self.shared.own.load(),
            &taint,
            opaque,
            &task.id,
        )
    }
}

/// The task was removed from the config while its connection was open.
pub fn task_gone() -> Refusal {
    Refusal::new(
        Rule::NotAllowed,
        "the task this listener belonged to is no longer in the config",
    )
}
