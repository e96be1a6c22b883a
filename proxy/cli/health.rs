//! `sluice healthcheck`: ask a running sluice's `/healthz` (admin API, or
//! the metrics listener) — for container HEALTHCHECKs and probes. A
//! blocking client of a few lines; must not start sluice or read its state.

use crate::config::{self, Snapshot};

/// Asks `/healthz` of the admin API, or of the metrics listener when the
/// config has no admin API, within 3 s.
pub(super) fn healthcheck(snap: &Snapshot) -> Result<(), String> {
    use std::io::Read;
    let addr = snap
        .admin
        .as_ref()
        .or(snap.metrics_listen.as_ref())
        .ok_or("the config has no [admin] listen or metrics_listen to ask")?;
    let timeout = std::time::Duration::from_secs(3);
    let request = b"GET /healthz HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n";
    let mut answer = Vec::new();
    let mut talk = |s: &mut dyn ReadWrite| -> std::io::Result<()> {
        s.write_all(request)?;
        s.take(4096).read_to_end(&mut answer).map(|_| ())
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
        config::ListenAddr::Vsock { .. } => return Err("the admin API is never on vsock".into()),
    };
    result.map_err(|e| format!("cannot ask {addr}: {e}"))?;
    if answer.starts_with(b"HTTP/1.1 200") {
        Ok(())
    } else {
        let line = answer.split(|b| *b == b'\n').next().unwrap_or_default();
        Err(format!(
            "{addr} answered {:?}",
            String::from_utf8_lossy(line).trim()
        ))
    }
}

/// A blocking byte stream (TCP or unix).
trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}
