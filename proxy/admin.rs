//! admin: the admin API (SPEC §7) on its own listener, a unix socket by
//! default — never a task listener, and refused to every task as one of
//! sluice's own addresses.
//!
//! ```text
//! GET  /healthz                200 "ok"
//! GET  /metrics                Prometheus text format
//! GET  /tasks                  JSON: tasks, listeners, counters
//! GET  /tasks/<id>/taint       JSON: tainted hosts with provenance
//! GET  /events[?task=ID]       server-sent events: each access row as written
//! POST /reload                 200 with summary, or 400 with the config error
//! POST /tasks/<id>/allow       body HOST[:PORT]: grant it (allow_mode = "ask")
//! POST /tasks/<id>/deny        body HOST[:PORT]: refuse the requests waiting on it
//! ```
//!
//! Mutating routes answer only POST. Must not decide on requests.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;

use crate::config::Intercept;
use crate::listener::Bound;
use crate::policy::verdict;
use crate::policy::TaintMode;
use crate::state::Shared;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    reply(status, "text/plain; charset=utf-8", body.into())
}

fn json_reply(v: serde_json::Value) -> Response<Body> {
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    reply(StatusCode::OK, "application/json", s)
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("use {allow} for this route\n"),
    );
    r.headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static(allow));
    r
}

/// Which routes a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Everything: the admin API (`[admin] listen`).
    Full,
    /// `/metrics` and `/healthz` only (`[admin] metrics_listen`).
    MetricsOnly,
}

/// Serves the admin API (or its read-only part) until shutdown.
pub(crate) async fn run(listener: Bound, shared: Arc<Shared>, scope: Scope) {
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            a = crate::listener::accept(&listener) => a,
        };
        let Ok(crate::listener::Accepted { stream, client, .. }) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        let tcp = matches!(listener, Bound::Tcp(_));
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let shared = shared.clone();
                let client = client.clone();
                async move {
                    Ok::<_, Infallible>(match scope {
                        Scope::Full => route(&shared, req, &client, tcp).await,
                        Scope::MetricsOnly => metrics_only(&shared, req),
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
    if let Bound::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// The read-only listener: health and metrics, nothing that reveals a
/// task's allow-list or taint set, nothing that changes anything.
fn metrics_only(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/');
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return method_not_allowed("GET");
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics.render(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "this listener serves only GET /metrics and /healthz; the admin API is on [admin] listen\n",
        ),
    }
}

/// Is this a person's or a tool's request, not a web page's? A browser
/// adds `Origin` to cross-site requests (a simple `text/plain` POST needs
/// no preflight), and a DNS-rebinding page reaches a TCP listener under a
/// name of its own in `Host`: neither may read or change anything. On TCP,
/// `Host` must be absent, `localhost` or an IP literal (a literal cannot be
/// rebound); a unix socket has no name to rebind.
fn from_a_tool(h: &http::HeaderMap, tcp: bool) -> Result<(), &'static str> {
    if h.contains_key(header::ORIGIN) {
        return Err("requests from a web page (with Origin) are refused here\n");
    }
    if !tcp {
        return Ok(());
    }
    let mut hosts = h.get_all(header::HOST).iter();
    let (first, second) = (hosts.next(), hosts.next());
    let ok = match (first, second) {
        (None, _) => true,
        (Some(v), None) => v.to_str().is_ok_and(local_host),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err("the admin API answers only Host: localhost or an IP address (a web page may name it otherwise)\n")
    }
}

/// `localhost` or an IP literal, with or without a port.
fn local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.starts_with(':') => {
                return v6.parse::<std::net::Ipv6Addr>().is_ok();
            }
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

async fn route(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    client: &str,
    tcp: bool,
) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let method = req.method().clone();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if let Err(why) = from_a_tool(req.headers(), tcp) {
        return text(StatusCode::FORBIDDEN, why);
    }
    match segments.as_slice() {
        ["reload"] => {
            if method != Method::POST {
                return method_not_allowed("POST");
            }
            match crate::reload::reload(shared, "admin API").await {
                Ok(summary) => text(StatusCode::OK, format!("reloaded: {summary}\n")),
                Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
            }
        }
        ["tasks", id, "untaint"] => {
            if method != Method::POST {
                return method_not_allowed("POST");
            }

            let id = id.to_string();
            let by = untaint_caller(req.headers(), client);
            let body = match http_body_util::Limited::new(req.into_body(), 1024).collect().await {
                Ok(b) => String::from_utf8_lossy(&b.to_bytes()).trim().to_string(),
                Err(_) => return text(StatusCode::BAD_REQUEST, "send HOST or HOST/OWNER, at most 1 KiB\n"),
            };
            untaint(shared, &id, &body, &by)
        }
        ["tasks", id, "release"] => {
            if method != Method::POST {
                return method_not_allowed("POST");
            }
            release(shared, id, &untaint_caller(req.headers(), client))
        }
        ["tasks", id, verb @ ("allow" | "deny")] => {
            if method != Method::POST {
                return method_not_allowed("POST");
            }
            let (id, verb) = (id.to_string(), verb.to_string());
            let body = match http_body_util::Limited::new(req.into_body(), 1024).collect().await {
                Ok(b) => String::from_utf8_lossy(&b.to_bytes()).trim().to_string(),
                Err(_) => return text(StatusCode::BAD_REQUEST, "send HOST[:PORT], at most 1 KiB\n"),
            };
            answer(shared, &id, &verb, &body)
        }
        _ if method != Method::GET && method != Method::HEAD => method_not_allowed("GET"),
        ["healthz"] => text(StatusCode::OK, "ok\n"),
        ["metrics"] => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics.render(),
        ),
        ["tasks"] => json_reply(tasks(shared)),
        ["events"] => events(shared, req.uri().query()),
        ["tasks", id, "taint"] => match taint(shared, id) {
            Some(v) => json_reply(v),
            None => text(StatusCode::NOT_FOUND, format!("no task {id:?}\n")),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "routes: GET /healthz, /metrics, /tasks, /tasks/<id>/taint, /events[?task=ID]; POST /reload, /tasks/<id>/allow, /tasks/<id>/deny, /tasks/<id>/untaint, /tasks/<id>/release\n",
        ),
    }
}

/// `POST /tasks/<id>/allow|deny` with `HOST[:PORT]` (a bare host: 80 and
/// 443, as in `allow`): a person's answer for `allow_mode = "ask"`.
fn answer(shared: &Shared, id: &str, verb: &str, body: &str) -> Response<Body> {
    let Some(rt) = shared.task_runtime(id) else {
        return text(StatusCode::NOT_FOUND, format!("no task {id:?}\n"));
    };
    let asking = shared
        .snapshot()
        .task(id)
        .is_some_and(|t| t.rules.allow_mode == crate::policy::AllowMode::Ask);
    if !asking {
        return text(
            StatusCode::CONFLICT,
            format!("task {id:?} is not in allow_mode = \"ask\"; change its allow list instead\n"),
        );
    }
    let target = match crate::policy::target::parse_authority(body, Some(0)) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{body:?}: {e}\n")),
    };
    let crate::policy::Host::Name(host) = &target.host else {
        return text(
            StatusCode::BAD_REQUEST,
            "IP literals are never asked about: name the host, or list the address in allow\n",
        );
    };
    let ports: &[u16] = if target.port == 0 {
        &[80, 443]
    } else {
        &[target.port]
    };
    let (answer, done) = match verb {
        "allow" => (crate::ask::Answer::Allow, "allowed"),
        _ => (crate::ask::Answer::Deny, "refused"),
    };
    let woken = rt
        .asks
        .answer(&shared.log, &rt.id, (host, ports), answer, "admin API");
    if answer == crate::ask::Answer::Deny {
        // Tunnels opened under a grant just withdrawn close now.
        rt.tunnels
            .revoke_where(|s| s.target.host == target.host && ports.contains(&s.target.port));
    }
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    tracing::info!(
        task = id,
        host,
        "{done} {host}:{} ({woken} waiting)",
        ports.join(",")
    );
    text(
        StatusCode::OK,
        format!(
            "{done} {host}:{} for task {id}; {woken} waiting destination(s) answered\n",
            ports.join(",")
        ),
    )
}

/// Who asked for an untaint: the admin client, and what the caller says
/// of itself (`Sluice-By`, printable ASCII, at most 100 bytes; a claim,
/// recorded as one).
fn untaint_caller(h: &http::HeaderMap, client: &str) -> String {
    let said = h
        .get("sluice-by")
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.chars()
                .filter(|c| c.is_ascii_graphic() || *c == ' ')
                .take(100)
                .collect::<String>()
        })
        .filter(|s| !s.is_empty());
    match said {
        Some(s) => format!("admin API ({client}), caller says: {s}"),
        None => format!("admin API ({client})"),
    }
}

/// `POST /tasks/<id>/untaint` with `HOST` or `HOST/OWNER`: a person has
/// checked a taint and clears it; `taint.jsonl` gets a line saying who and
/// what it cleared.
fn untaint(shared: &Shared, id: &str, body: &str, by: &str) -> Response<Body> {
    let Some(rt) = shared.task_runtime(id) else {
        return text(StatusCode::NOT_FOUND, format!("no task {id:?}\n"));
    };
    let key = match untaint_key(body) {
        Ok(k) => k,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{body:?}: {e}\n")),
    };
    match rt.taint.untaint(&key, by, &shared.log) {
        Some(p) => {
            rt.metrics.taint_hosts.set(rt.taint.len() as i64);
            tracing::info!(task = id, key = %key, by, "untainted {key} (it was {p})");
            text(
                StatusCode::OK,
                format!("untainted {key} for task {id} (it was {p}); a response that names it again taints it again\n"),
            )
        }
        None => text(
            StatusCode::NOT_FOUND,
            format!("{key} is not tainted for task {id}; see the set with: sluice report --taint --task {id}\n"),
        ),
    }
}

/// `POST /tasks/<id>/release`: a person ends a task's quarantine after a
/// secret leak; `secrets.jsonl` gets a line saying who and when.
fn release(shared: &Shared, id: &str, by: &str) -> Response<Body> {
    let Some(rt) = shared.task_runtime(id) else {
        return text(StatusCode::NOT_FOUND, format!("no task {id:?}\n"));
    };
    match rt.quarantine.release(by) {
        Some(secret) => text(
            StatusCode::OK,
            format!("released task {id} (it was quarantined for the secret {secret}); its requests are decided again\n"),
        ),
        None => text(StatusCode::NOT_FOUND, format!("task {id} is not quarantined\n")),
    }
}

/// `HOST` or `HOST/OWNER`, normalised as the store keeps it.
fn untaint_key(body: &str) -> Result<String, String> {
    let (host, owner) = match body.split_once('/') {
        Some((h, o)) => (h, Some(o)),
        None => (body, None),
    };
    let host = match crate::policy::target::normalize_host(host) {
        Ok(crate::policy::Host::Name(n)) => n,
        Ok(crate::policy::Host::Ip(ip)) => ip.to_string(),
        Err(e) => return Err(e.to_string()),
    };
    match owner {
        None => Ok(host),
        Some(o) => match crate::policy::owners::Owner::from_segment(o) {
            crate::policy::owners::Owner::Named(o) => Ok(format!("{host}/{o}")),
            _ => Err("the owner is one path segment: letters, digits, -, _ or .".into()),
        },
    }
}

/// `GET /events`: a server-sent-events stream of access rows as they are
/// written (`event: decision`, `data:` the row's JSON line), only one
/// task's with `?task=ID`. A listener that falls behind is told how many
/// rows it missed (the files have them all); a comment every 15 s keeps
/// idle connections open. Ends at shutdown.
fn events(shared: &Arc<Shared>, query: Option<&str>) -> Response<Body> {
    let task: Option<String> = query.and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("task="))
            .map(String::from)
    });
    if let Some(t) = &task {
        if shared.task_runtime(t).is_none() {
            return text(StatusCode::NOT_FOUND, format!("no task {t:?}\n"));
        }
    }
    let mut rows = shared.log.subscribe();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let stop = shared.shutdown.clone();
    tokio::spawn(async move {
        let _ = tx.send(Bytes::from_static(b": sluice decisions\n\n")).await;
        let mut keepalive = tokio::time::interval(std::time::Duration::from_secs(15));
        loop {
            let chunk = tokio::select! {
                _ = stop.cancelled() => return,
                _ = keepalive.tick() => Bytes::from_static(b": keep-alive\n\n"),
                row = rows.recv() => match row {
                    Ok(e) if task.as_deref().is_none_or(|t| t == &*e.task) => {
                        Bytes::from(format!("event: {}\ndata: {}\n\n", e.kind, e.line))
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        Bytes::from(format!(": missed {n} rows (too slow); the access log has them\n\n"))
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            };
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(EventBody { rx }.boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    r
}

/// The body of `/events`: chunks from the task that follows the rows.
struct EventBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|c| c.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

fn tasks(shared: &Shared) -> serde_json::Value {
    let snap = shared.snapshot();
    let listeners = shared
        .listeners
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let list: Vec<serde_json::Value> = snap
        .tasks
        .iter()
        .map(|t| {
            let rt = shared.task_runtime(&t.id);
            let bound: Vec<String> = t
                .listen
                .iter()
                .map(|l| {
                    listeners
                        .get(l)
                        .map(|h| h.bound.clone())
                        .unwrap_or_else(|| l.to_string())
                })
                .collect();
            let count = |v: &str| rt.as_ref().map_or(0, |r| r.metrics.verdicts(v));
            json!({
                "id": t.id,
                "listen": bound,
                "allow": t.rules.allow.sorted(),
                "allow_mode": t.rules.allow_mode,
                "allow_private": t.rules.allow_private.iter().map(std::string::ToString::to_string).collect::<Vec<_>>(),
                "intercept": match t.intercept { Intercept::All => "all", Intercept::None => "none" },
                "taint_mode": t.taint.mode,
                "asks": rt.as_ref().map(|r| {
                    let (granted, waiting) = r.asks.status();
                    let show = |v: Vec<(String, u16)>| v.into_iter().map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>();
                    json!({"granted": show(granted), "waiting": show(waiting)})
                }),
                "taint_hosts": rt.as_ref().map(|r| r.taint.len()).unwrap_or(0),
                "taint_overflow": rt.as_ref().is_some_and(|r| r.taint.overflowed()),
                "connections_active": rt.as_ref().map(|r| r.metrics.connections_active.get()).unwrap_or(0),
                "tunnels_open": rt.as_ref().map(|r| r.tunnels.len()).unwrap_or(0),
                "decisions": {
                    verdict::ALLOW: count(verdict::ALLOW),
                    verdict::DENY: count(verdict::DENY),
                    verdict::WOULD_DENY: count(verdict::WOULD_DENY),
                    verdict::ERROR: count(verdict::ERROR),
                },
            })
        })
        .collect();
    json!({ "generation": snap.generation, "tasks": list })
}

fn taint(shared: &Shared, id: &str) -> Option<serde_json::Value> {
    let snap = shared.snapshot();
    let task = snap.task(id)?;
    let rt = shared.task_runtime(id)?;
    let hosts: Vec<serde_json::Value> = if task.taint.mode == TaintMode::Off {
        Vec::new()
    } else {
        rt.taint
            .list()
            .into_iter()
            .map(|(key, p)| match key.split_once('/') {
                Some((host, owner)) => {
                    json!({ "host": host, "owner": owner, "source": &*p.source, "ts": &*p.at })
                }
                None => json!({ "host": key, "source": &*p.source, "ts": &*p.at }),
            })
            .collect()
    };
    Some(json!({
        "task": id,
        "mode": task.taint.mode,
        "overflow": rt.taint.overflowed(),
        "max_hosts": task.taint.max_hosts,
        "hosts": hosts,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn only_tools_reach_a_tcp_admin_listener() {
        type Case<'a> = (&'a [(&'a str, &'a str)], bool, bool);
        let cases: [Case; 14] = [
            (&[], true, true),
            (&[("host", "localhost")], true, true),
            (&[("host", "LOCALHOST.:9901")], true, true),
            (&[("host", "127.0.0.1:9901")], true, true),
            (&[("host", "[::1]:9901")], true, true),
            (&[("host", "10.0.0.7")], true, true),
            (&[("host", "evil.attacker.example")], true, false),
            (&[("host", "127.0.0.1.nip.example:9901")], true, false),
            (&[("host", "localhost.attacker.example")], true, false),
            (&[("host", "[::1]x")], true, false),
            (&[("host", "localhost"), ("host", "localhost")], true, false),
            (&[("host", "localhost"), ("origin", "null")], true, false),
            // A unix socket has no name to rebind, but Origin still counts.
            (&[("host", "evil.attacker.example")], false, true),
            (&[("origin", "http://evil.attacker.example")], false, false),
        ];
        for (pairs, tcp, ok) in cases {
            assert_eq!(
                from_a_tool(&headers(pairs), tcp).is_ok(),
                ok,
                "{pairs:?} tcp={tcp}"
            );
        }
    }
}
