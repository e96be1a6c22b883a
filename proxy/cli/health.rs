//! `sluice healthcheck`, `sluice allow`, `sluice deny` and `sluice
//! untaint`: ask a running
//! sluice's admin API (`/healthz` also on the metrics listener) — for
//! container HEALTHCHECKs and probes, and for a person answering
//! `allow_mode = "ask"`. A blocking client of a few lines; must not start
//! sluice or read its state.

use crate::config::{self, ConfigError, Snapshot};

/// Why a command could not get its answer from a running sluice.
#[derive(Debug, thiserror::Error)]
pub(super) enum AskError {
    /// The config could not be loaded.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The config names no listener to ask (the sentence says which).
    #[error("the config has no {0}")]
    NoListener(&'static str),
    /// The admin API could not be reached.
    #[error("cannot ask {addr}: {source}")]
    Unreachable {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// What came back is not an HTTP answer.
    #[error("{addr} answered {first_line:?}")]
    NotHttp { addr: String, first_line: String },
    /// The admin API answered, but not 200: its own sentence.
    #[error("{0}")]
    Answered(String),
    /// Several tasks and no `--task`.
    #[error("the config has several tasks; name one with --task ({0})")]
    WhichTask(String),
}

/// Asks `/healthz` of the admin API, or of the metrics listener when the
/// config has no admin API, within 3 s.
pub(super) fn healthcheck(snap: &Snapshot) -> Result<(), AskError> {
    let addr = snap
        .admin
        .as_ref()
        .or(snap.metrics_listen.as_ref())
        .ok_or(AskError::NoListener(
            "[admin] listen or metrics_listen to ask",
        ))?;
    let (status, body) = call(addr, "GET", "/healthz", "")?;
    if status == 200 {
        Ok(())
    } else {
        Err(AskError::Answered(format!(
            "{addr} answered {status}: {}",
            body.trim()
        )))
    }
}

/// One request to the admin API at `addr` (3 s at most): status and body.
pub(super) fn call(
    addr: &config::ListenAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), AskError> {
    call_with(addr, method, path, body, "")
}

/// [`call`] saying who asks (`Sluice-By`, when not empty).
fn call_with(
    addr: &config::ListenAddr,
    method: &str,
    path: &str,
    body: &str,
    by: &str,
) -> Result<(u16, String), AskError> {
    use std::io::Read;
    let timeout = std::time::Duration::from_secs(3);
    let by: String = by
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .collect();
    let by = if by.is_empty() {
        String::new()
    } else {
        format!("Sluice-By: {by}\r\n")
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{by}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut answer = Vec::new();
    let mut talk = |s: &mut dyn ReadWrite| -> std::io::Result<()> {
        s.write_all(request.as_bytes())?;
        s.take(64 * 1024).read_to_end(&mut answer).map(|_| ())
    };
    let result = match addr {
        config::ListenAddr::Tcp(a) => {
            let ip = if a.ip().is_unspecified() {
                std::net::IpAddr::from([127, 0, 0, 1])
            } else {
                a.ip()
            };
            std::net::TcpStream::connect_timeout(&(ip, a.port()).into(), timeout).and_then(
                |mut s| {
                    s.set_read_timeout(Some(timeout))?;
                    talk(&mut s)
                },
            )
        }
        config::ListenAddr::Unix(p) => {
            std::os::unix::net::UnixStream::connect(p).and_then(|mut s| {
                s.set_read_timeout(Some(timeout))?;
                talk(&mut s)
            })
        }
        config::ListenAddr::Vsock { .. } => {
            return Err(AskError::NoListener(
                "admin API on vsock (it is never there)",
            ))
        }
    };
    result.map_err(|source| AskError::Unreachable {
        addr: addr.to_string(),
        source,
    })?;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| AskError::NotHttp {
            addr: addr.to_string(),
            first_line: text.lines().next().unwrap_or("").to_string(),
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// `sluice allow` / `sluice deny`: a person's answer for a task in
/// `allow_mode = "ask"`, through the running sluice's admin API.
pub(super) fn answer(
    snap: &Snapshot,
    task: Option<&str>,
    verb: &str,
    dest: &str,
) -> Result<String, AskError> {
    let addr = snap.admin.as_ref().ok_or(AskError::NoListener(
        "[admin] listen: sluice allow and deny answer through the admin API",
    ))?;
    let task = task_or_only(snap, task)?;
    let (status, body) = call(addr, "POST", &format!("/tasks/{task}/{verb}"), dest)?;
    if status == 200 {
        Ok(body)
    } else {
        Err(AskError::Answered(body.trim().to_string()))
    }
}

/// `--task`, or the config's only task when it was not given.
fn task_or_only(snap: &Snapshot, task: Option<&str>) -> Result<String, AskError> {
    match task {
        Some(t) => Ok(t.to_string()),
        None if snap.tasks.len() == 1 => Ok(snap.tasks[0].id.clone()),
        None => {
            let ids: Vec<&str> = snap.tasks.iter().map(|t| t.id.as_str()).collect();
            Err(AskError::WhichTask(ids.join(", ")))
        }
    }
}

/// `sluice untaint`: removes a taint from a running task through the
/// admin API, saying who asks (`Sluice-By`).
pub(super) fn untaint(snap: &Snapshot, task: Option<&str>, name: &str) -> Result<String, AskError> {
    let addr = snap.admin.as_ref().ok_or(AskError::NoListener(
        "[admin] listen: sluice untaint asks the admin API",
    ))?;
    let task = task_or_only(snap, task)?;
    let uid = rustix::process::getuid().as_raw();
    let user = std::env::var("USER").unwrap_or_default();
    let by = format!("sluice untaint, uid {uid} {user}");
    let (status, body) = call_with(addr, "POST", &format!("/tasks/{task}/untaint"), name, &by)?;
    if status == 200 {
        Ok(body)
    } else {
        Err(AskError::Answered(body.trim().to_string()))
    }
}

/// `sluice release`: asks the admin API to end a task's quarantine.
pub(super) fn release(snap: &Snapshot, task: Option<&str>) -> Result<String, AskError> {
    let addr = snap.admin.as_ref().ok_or(AskError::NoListener(
        "[admin] listen: sluice release asks the admin API",
    ))?;
    let task = task_or_only(snap, task)?;
    let uid = rustix::process::getuid().as_raw();
    let user = std::env::var("USER").unwrap_or_default();
    let by = format!("sluice release, uid {uid} {user}");
    let (status, body) = call_with(addr, "POST", &format!("/tasks/{task}/release"), "", &by)?;
    if status == 200 {
        Ok(body)
    } else {
        Err(AskError::Answered(body.trim().to_string()))
    }
}

/// A blocking byte stream (TCP or unix).
trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}
