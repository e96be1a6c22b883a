//! guest_relay: `sluice forward`, the small relay inside a NIC-less
//! microVM (or any sandbox) that turns a local TCP proxy address into the
//! unix socket or vsock port where sluice listens on the host.
//!
//! ```text
//! guest: HTTP_PROXY=http://127.0.0.1:3128 → sluice forward
//!        --listen tcp:127.0.0.1:3128 --to vsock:2:1080 → host: sluice
//! ```
//!
//! No policy of its own: the host-side sluice decides everything, and the
//! task is whoever arrives on the host listener.

use std::path::Path;
use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};

use crate::config::ListenAddr;
use crate::listener::{self, Bound};
use crate::tunnel::Io;

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    #[error("{addr}: {why}")]
    Address { addr: String, why: String },
    #[error("--to vsock needs a CID: vsock:CID:PORT (the host is CID 2)")]
    VsockWithoutCid,
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
}

/// Parses `--listen` / `--to`: `tcp:IP:PORT`, `unix:PATH`, `vsock:CID:PORT`.
pub(crate) fn parse(s: &str) -> Result<ListenAddr, RelayError> {
    ListenAddr::parse(s, Path::new(".")).map_err(|why| RelayError::Address {
        addr: s.to_string(),
        why,
    })
}

/// Opens a connection to `to`.
pub(crate) async fn connect(to: &ListenAddr) -> std::io::Result<Box<dyn Io>> {
    Ok(match to {
        ListenAddr::Tcp(a) => {
            let s = TcpStream::connect(a).await?;
            let _ = s.set_nodelay(true);
            Box::new(s)
        }
        ListenAddr::Unix(p) => Box::new(UnixStream::connect(p).await?),
        ListenAddr::Vsock { cid, port, .. } => Box::new(
            tokio_vsock::VsockStream::connect(tokio_vsock::VsockAddr::new(*cid, *port)).await?,
        ),
    })
}

/// Relays every connection on `listen` to `to` until SIGTERM/SIGINT.
pub(crate) async fn run(listen: ListenAddr, to: ListenAddr) -> Result<(), RelayError> {
    if let ListenAddr::Vsock { cid, .. } = &to {
        if *cid == u32::MAX {
            return Err(RelayError::VsockWithoutCid);
        }
    }
    let bound = listener::bind(&listen)
        .await
        .map_err(|source| RelayError::Listen {
            addr: listen.to_string(),
            source,
        })?;
    tracing::info!(listen = %bound, to = %to, "forwarding");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(RelayError::Signal)?;
    tokio::select! {
        _ = serve(&bound, &to) => {}
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    if let Bound::Unix(_, path) = &bound {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Relays every connection accepted on `bound` to `to`, for ever.
pub(crate) async fn serve(bound: &Bound, to: &ListenAddr) {
    loop {
        let (mut client, peer) = match listener::accept(bound).await {
            Ok(a) => (a.stream, a.client),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let to = to.clone();
        tokio::spawn(async move {
            match connect(&to).await {
                Ok(mut upstream) => {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
                Err(e) => {
                    tracing::warn!(client = %peer, to = %to, error = %e, "cannot reach sluice")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse("vsock:2:1080").unwrap(),
            ListenAddr::Vsock {
                cid: 2,
                port: 1080,
                peer: None
            }
        );
        assert_eq!(
            parse("tcp:127.0.0.1:3128").unwrap(),
            ListenAddr::Tcp("127.0.0.1:3128".parse().unwrap())
        );
        assert!(matches!(
            parse("unix:/run/sluice.sock").unwrap(),
            ListenAddr::Unix(_)
        ));
        assert!(parse("vsock:x:1").is_err());
        assert!(parse("127.0.0.1:3128").is_err());
    }

    #[tokio::test]
    async fn vsock_listener_binds_where_the_kernel_has_vsock() {
        // Binding needs only AF_VSOCK; a connection needs a transport
        // (vsock_loopback or a hypervisor), which CI may not have.
        // This machine kind (and CI) has AF_VSOCK; a failure here is real.
        let b = listener::bind(&ListenAddr::Vsock {
            cid: u32::MAX,
            port: 47_811,
            peer: None,
        })
        .await
        .expect("AF_VSOCK bind (needs /dev/vsock)");
        assert!(b.to_string().starts_with("vsock:"));
    }

    #[tokio::test]
    async fn relays_tcp_to_unix() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let server = tokio::net::UnixListener::bind(&sock).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let mut c = connect(&ListenAddr::Unix(sock)).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
    }
}
