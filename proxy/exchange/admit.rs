//! The admit phase, shared by plain HTTP, CONNECT and intercepted
//! requests ([`ReqCtx::admit`]: name → resolve → addresses → taint, each step a
//! call into `policy`), ask mode's wait for a person, and the recheck of a
//! connection that is already open.
//!
//! Must not: decide anything itself (it only gathers the facts `policy`
//! needs), touch a client or upstream stream, or write rows but through
//! the request's row.

use std::sync::Arc;

use super::{task_gone, ConnCtx, ReqCtx};
use crate::config::TaskConfig;
use crate::policy::{
    self, Admission, Facts, Host, HostHeader, Refusal, Resolution, Rule, Target, Verdict,
};
use crate::state::{Live, Shared, TaskRuntime};

/// What a request is, besides its target: whether it carries a body
/// (SPEC §4), its method, and its path (none for a CONNECT).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent<'a> {
    pub(crate) body: bool,
    pub(crate) method: &'a str,
    pub(crate) path: Option<&'a str>,
    pub(crate) content_type: Option<&'a str>,
}

impl<'a> Sent<'a> {
    /// What git's fetch exception looks at.
    pub(crate) fn git(&self) -> policy::owners::GitRequest<'a> {
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
///
/// `live` is the snapshot the caller loaded for this request; in ask mode
/// the decision after a person's answer is made under the snapshot in
/// force then, and `live` is set to it, so the caller dials with the TLS
/// settings and pools under the generation the request was admitted in.
async fn admit(
    shared: &Shared,
    live: &mut Arc<Live>,
    runtime: &TaskRuntime,
    task: &TaskConfig,
    target: &Target,
    host_header: &HostHeader,
    sent: Sent<'_>,
) -> Verdict<Admission> {
    let Sent { method, path, .. } = sent;
    let carries_body =
        task.taint
            .by_owner
            .body_counts(sent.body, &target.host.taint_name(), sent.git());
    let rules = runtime.asks.effective(&task.rules);
    let name = policy::decide_name(&rules, target, host_header);
    let asking = matches!(&name, Verdict::Deny(r) if policy::askable(&rules, r));
    let name = match name {
        Verdict::Deny(r) if !asking => return Verdict::Deny(r),
        other => other,
    };
    let decide = |live: &Live, rules: &policy::TaskRules, name, resolution: &Resolution| {
        let taint = runtime
            .taint
            .state(&target.host.taint_name(), path, &task.taint);
        let facts = Facts {
            own: &live.own,
            taint: &taint,
            carries_body,
            task: &task.id,
        };
        policy::decide_addresses(rules, target, resolution, facts, name)
    };
    let resolve = |live: Arc<Live>| async move {
        match &target.host {
            Host::Ip(ip) => Resolution::Literal(*ip),
            Host::Name(name) => live.resolver.resolve(name).await,
        }
    };
    if !asking {
        return decide(live, &rules, name, &resolve(live.clone()).await);
    }
    // Ask mode: nothing is resolved before a person allows the name (a
    // lookup is itself a way out: the name can carry data to its DNS
    // server). Taint is refused as always, before anyone is asked.
    let unresolved = Resolution::Resolved(Vec::new());
    if let Verdict::Deny(r) = decide(live, &rules, Verdict::admit((), None), &unresolved) {
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
    *live = shared.live();
    let Some(now) = live.config.task(&task.id) else {
        return Verdict::Deny(task_gone());
    };
    let rules = runtime.asks.effective(&now.rules);
    match policy::decide_name(&rules, target, host_header) {
        Verdict::Deny(r) => Verdict::Deny(r),
        name => decide(live, &rules, name, &resolve(live.clone()).await),
    }
}

impl ReqCtx {
    /// The admit phase: decides on the request under the snapshot it
    /// carries. In ask mode, the decision after a person's answer is made
    /// under the snapshot in force then, and the context moves to it, so
    /// the request dials with its TLS settings, pools under its generation
    /// and is logged with it; a client that leaves while a person is asked
    /// still gets its row (deny, 499, `client-left`).
    pub(crate) async fn admit(
        &mut self,
        target: &Target,
        host_header: &HostHeader,
        sent: Sent<'_>,
    ) -> Verdict<Admission> {
        if let Some(secret) = self.conn.task.quarantine.by() {
            return Verdict::Deny(policy::secrets::quarantined(&secret, &self.task.id));
        }
        let asking = self.task.rules.allow_mode == policy::AllowMode::Ask;
        if asking {
            let why = Refusal::new(
                Rule::NotAllowed,
                format!(
                    "the client left before sluice decided on {} (allow_mode = \"ask\": a person may have been asked)",
                    self.ex().url
                ),
            );
            self.row_mut().if_client_leaves(Verdict::Deny(why), None);
        }
        let conn = self.conn.clone();
        let task = self.task.clone();
        let verdict = admit(
            &conn.shared,
            &mut self.live,
            &conn.task,
            &task,
            target,
            host_header,
            sent,
        )
        .await;
        if asking {
            self.row_mut().unarm();
        }
        self.moved_to_live();
        verdict
    }
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
    tracing::info!("asking: {}", question.question);
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

impl ConnCtx {
    /// Is a connection that is already open to `target` (connected to
    /// `addr`) still within policy under the config in force now? Called
    /// by opaque tunnels and upgraded relays right after they register, so
    /// a reload or taint that landed before registration is not missed.
    pub(crate) fn recheck_open(
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
    pub(crate) fn recheck_body(
        &self,
        target: &Target,
        addr: std::net::SocketAddr,
        path: Option<&str>,
    ) -> Verdict {
        self.recheck(target, addr, path.map(Some))
    }

    /// Does taint apply to a body sent to `host` with this method and path
    /// (everything but git's fetch to a forge)?
    pub(crate) fn taint_applies(&self, host: &str, sent: Sent<'_>) -> bool {
        let snap = self.shared.snapshot();
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
        let live = self.shared.live();
        let Some(task) = self.task_config(&live.config) else {
            return Verdict::Deny(task_gone());
        };
        let opaque = taint.is_some();
        let taint = match taint {
            Some(path) => self
                .task
                .taint
                .state(&target.host.taint_name(), path, &task.taint),
            None => policy::TaintState::Clean,
        };
        policy::decide_open(
            &self.task.asks.effective(&task.rules),
            target,
            addr,
            &live.own,
            &taint,
            opaque,
            &task.id,
        )
    }
}
