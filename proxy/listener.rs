//! listener: the sockets — bind TCP, unix and vsock listeners (with the
//! right modes), accept, and name the peer. sluice's own addresses.
//!
//! Must not know tasks or requests: `accept` turns an accepted stream
//! into a task's connection.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};

use crate::config::ListenAddr;
use crate::policy::OwnAddrs;
use crate::tunnel::Io;

/// A bound listener.
pub(crate) enum Bound {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
    Vsock(tokio_vsock::VsockListener),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Tcp(l) => match l.local_addr() {
                Ok(a) => write!(f, "tcp:{a}"),
                Err(_) => f.write_str("tcp:?"),
            },
            Bound::Unix(_, p) => write!(f, "unix:{}", p.display()),
            Bound::Vsock(l) => match l.local_addr() {
                Ok(a) => write!(f, "vsock:{}:{}", a.cid(), a.port()),
                Err(_) => f.write_str("vsock:?"),
            },
        }
    }
}

impl Bound {
    /// The local address of a TCP listener.
    pub(crate) fn local_tcp(&self) -> Option<std::net::SocketAddr> {
        match self {
            Bound::Tcp(l) => l.local_addr().ok(),
            Bound::Unix(..) | Bound::Vsock(_) => None,
        }
    }

    /// Adds this listener's address to sluice's own addresses.
    pub(crate) fn record_own(&self, own: &mut OwnAddrs) {
        if let Some(a) = self.local_tcp() {
            own.add_listener(a);
        }
    }
}

/// The addresses of this machine's interfaces, canonical, for
/// `OwnAddrs::machine`. An error leaves the set empty (non-public
/// addresses on a wildcard listener's port are refused anyway).
pub(crate) fn machine_ips() -> std::collections::HashSet<std::net::IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(ifs) => ifs
            .into_iter()
            .map(|i| crate::policy::addr::canonical(i.ip()))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the machine's interface addresses");
            Default::default()
        }
    }
}

/// Binds a listener. A stale unix socket file (nobody accepting on it) is
/// replaced; a live one, or another kind of file, is an error. Unix
/// sockets get mode `unix_mode` (0660 unless the config says otherwise).
pub(crate) async fn bind(addr: &ListenAddr) -> std::io::Result<Bound> {
    bind_with_mode(addr, 0o660).await
}

pub(crate) async fn bind_with_mode(addr: &ListenAddr, unix_mode: u32) -> std::io::Result<Bound> {
    match addr {
        ListenAddr::Tcp(a) => {
            // A deep accept queue: with the default 128, a burst of
            // connects overflows it while the runtime is busy and the
            // kernel drops SYNs (clients stall for a 1 s retransmit).
            let socket = if a.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            socket.set_reuseaddr(true)?;
            // Set once here: Linux gives an accepted socket its
            // listener's TCP_NODELAY, which saves a system call on every
            // connection (pinned by a test below).
            socket.set_nodelay(true)?;
            socket.bind(*a)?;
            Ok(Bound::Tcp(socket.listen(4096)?))
        }
        ListenAddr::Unix(path) => {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                use std::os::unix::fs::FileTypeExt;
                if !meta.file_type().is_socket() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!("{} exists and is not a socket", path.display()),
                    ));
                }
                if tokio::net::UnixStream::connect(path).await.is_ok() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::AddrInUse,
                        format!("another process is listening on {}", path.display()),
                    ));
                }
                std::fs::remove_file(path)?;
            }
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let l = UnixListener::bind(path)?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(unix_mode))?;
            Ok(Bound::Unix(l, path.clone()))
        }
        ListenAddr::Vsock { cid, port, .. } => {
            let cid = if *cid == u32::MAX {
                tokio_vsock::VMADDR_CID_ANY
            } else {
                *cid
            };
            Ok(Bound::Vsock(tokio_vsock::VsockListener::bind(
                tokio_vsock::VsockAddr::new(cid, *port),
            )?))
        }
    }
}

/// A stream from any listener kind.
pub(crate) type Stream = Box<dyn Io>;

pub(crate) async fn accept(l: &Bound) -> std::io::Result<Accepted> {
    match l {
        Bound::Tcp(l) => {
            let (s, peer) = l.accept().await?;
            Ok(Accepted {
                stream: Box::new(s),
                client: peer.to_string().into(),
                vsock_cid: None,
            })
        }
        Bound::Unix(l, _) => {
            let (s, _) = l.accept().await?;
            Ok(Accepted {
                stream: Box::new(s),
                client: "unix".into(),
                vsock_cid: None,
            })
        }
        Bound::Vsock(l) => {
            let (s, peer) = l.accept().await?;
            Ok(Accepted {
                stream: Box::new(s),
                client: format!("vsock:{}", peer.cid()).into(),
                vsock_cid: Some(peer.cid()),
            })
        }
    }
}

/// An accepted connection and who is on the other end.
pub(crate) struct Accepted {
    pub(crate) stream: Stream,
    /// `ip:port`, `unix` or `vsock:CID`, for logs.
    pub(crate) client: Arc<str>,
    /// The peer's CID, for a vsock listener.
    pub(crate) vsock_cid: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listener's TCP_NODELAY reaches every accepted socket (so
    /// `accept` need not set it again).
    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay() {
        let addr = ListenAddr::Tcp("127.0.0.1:0".parse().unwrap());
        let Bound::Tcp(l) = bind(&addr).await.unwrap() else {
            panic!("a TCP listener")
        };
        let to = l.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(to).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert!(s.nodelay().unwrap());
    }
}
