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
pub(crate) enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// `cid` is the local CID to bind (`u32::MAX`: any); `peer`, when set,
    /// is the only guest CID whose connections the listener accepts.
    Vsock {
        cid: u32,
        port: u32,
        peer: Option<u32>,
    },
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "tcp:{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Vsock { cid, port, peer } => {
                f.write_str("vsock:")?;
                if *cid != u32::MAX {
                    write!(f, "{cid}:")?;
                }
                write!(f, "{port}")?;
                match peer {
                    Some(p) => write!(f, "@{p}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl ListenAddr {
    /// Parses `tcp:IP:PORT`, `unix:PATH` (relative to `base`), `vsock:PORT`
    /// or `vsock:CID:PORT`, either with `@PEER`: the guest CID it accepts.
    pub(crate) fn parse(s: &str, base: &Path) -> Result<ListenAddr, String> {
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
            let num = |p: &str| {
                p.parse::<u32>()
                    .map_err(|_| format!("{p:?} is not a number"))
            };
            let (addr, peer) = match rest.split_once('@') {
                Some((a, p)) => (a, Some(num(p)?)),
                None => (rest, None),
            };
            let parts: Vec<&str> = addr.split(':').collect();
            return match parts.as_slice() {
                [port] => Ok(ListenAddr::Vsock {
                    cid: u32::MAX,
                    port: num(port)?,
                    peer,
                }),
                [cid, port] => Ok(ListenAddr::Vsock {
                    cid: num(cid)?,
                    port: num(port)?,
                    peer,
                }),
                _ => Err("expected vsock:PORT or vsock:CID:PORT, optionally @PEER_CID".into()),
            };
        }
        Err(format!(
            "{s:?} must start with tcp:, unix: or vsock: (e.g. \"tcp:127.0.0.1:3128\")"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vsock_spellings_round_trip() {
        for (text, want) in [
            ("vsock:1024", (u32::MAX, 1024, None)),
            ("vsock:3:1024", (3, 1024, None)),
            ("vsock:1024@7", (u32::MAX, 1024, Some(7))),
            ("vsock:3:1024@7", (3, 1024, Some(7))),
        ] {
            let a = ListenAddr::parse(text, Path::new(".")).unwrap();
            let ListenAddr::Vsock { cid, port, peer } = a.clone() else {
                panic!("{text}");
            };
            assert_eq!((cid, port, peer), want, "{text}");
            assert_eq!(a.to_string(), text);
        }
        for bad in ["vsock:1024@", "vsock:1024@x", "vsock:1:2:3", "vsock:@3"] {
            assert!(ListenAddr::parse(bad, Path::new(".")).is_err(), "{bad}");
        }
    }
}
