//! listen: the address a task listener or the admin API listens on
//! ([`ListenAddr`]), parsed from its config spelling and shown back in it.
//!
//! Must not: bind, open or check anything on the system (the listener
//! does), or decide which kinds a caller accepts (the validator does).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where a listener listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    Vsock { cid: u32, port: u32 },
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "tcp:{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Vsock { cid, port } if *cid == u32::MAX => write!(f, "vsock:{port}"),
            ListenAddr::Vsock { cid, port } => write!(f, "vsock:{cid}:{port}"),
        }
    }
}

impl ListenAddr {
    /// Parses `tcp:IP:PORT`, `unix:PATH` (relative to `base`), `vsock:PORT`
    /// or `vsock:CID:PORT`.
    pub fn parse(s: &str, base: &Path) -> Result<ListenAddr, String> {
        if let Some(rest) = s.strip_prefix("tcp:") {
            return rest
                .parse::<SocketAddr>()
                .map(ListenAddr::Tcp)
                .map_err(|_| format!("{rest:?} is not IP:PORT (a name is not accepted)"));
        }
        if let Some(rest) = s.strip_prefix("unix:") {
            if rest.is_empty() {
                return Err("a unix listener needs a path".into());
            }
            return Ok(ListenAddr::Unix(base.join(rest)));
        }
        if let Some(rest) = s.strip_prefix("vsock:") {
            let parts: Vec<&str> = rest.split(':').collect();
            let num = |p: &str| {
                p.parse::<u32>()
                    .map_err(|_| format!("{p:?} is not a number"))
            };
            return match parts.as_slice() {
                [port] => Ok(ListenAddr::Vsock {
                    cid: u32::MAX,
                    port: num(port)?,
                }),
                [cid, port] => Ok(ListenAddr::Vsock {
                    cid: num(cid)?,
                    port: num(port)?,
                }),
                _ => Err("expected vsock:PORT or vsock:CID:PORT".into()),
            };
        }
        Err(format!(
            "{s:?} must start with tcp:, unix: or vsock: (e.g. \"tcp:127.0.0.1:3128\")"
        ))
    }
}
