//! The opaque relay of a tunnel sluice does not look into: the bytes it
//! already peeked first, then both ways — spliced in the kernel when both
//! ends are plain TCP, buffered otherwise — until close, idle, shutdown or
//! revocation. Must not decide whether the tunnel may run.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::{relay, watch, ClientIo, Counted, RelayBytes, RelayEnd};

/// How an opaque tunnel's bytes went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelayPath {
    /// Both ends plain TCP: spliced in the kernel, never copied through
    /// sluice.
    Splice,
    /// Through sluice's buffers (a client that is not a plain TCP socket).
    Buffered,
}

impl RelayPath {
    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RelayPath::Splice => "splice",
            RelayPath::Buffered => "buffered",
        }
    }
}

/// The path an opaque tunnel with this client stream takes.
pub(crate) fn relay_path(client: &Counted<ClientIo>) -> RelayPath {
    match client.get_ref() {
        ClientIo::Tcp(_) => RelayPath::Splice,
        _ => RelayPath::Buffered,
    }
}

/// Relays an opaque tunnel: the peeked bytes first, then both ways, until
/// close, idle, shutdown or revocation.
pub(crate) async fn relay_opaque(
    client: Counted<ClientIo>,
    mut upstream: TcpStream,
    first: Vec<u8>,
    bytes: &RelayBytes,
    idle: Duration,
    stop: &CancellationToken,
) -> RelayEnd {
    if upstream.write_all(&first).await.is_err() {
        return RelayEnd::Closed;
    }
    // Not held for the tunnel's life: a relaying tunnel keeps no buffers.
    drop(first);
    // The client side is already counted (peeked bytes included).
    let (client, up) = client.into_parts();
    match client {
        // Both ends plain TCP: splice, the bytes never enter sluice.
        ClientIo::Tcp(client) => {
            let copy = crate::splice::relay(&client, &upstream, &up, &bytes.down);
            watch(copy, bytes, idle, stop).await
        }
        other => buffered(other, upstream, up, bytes, idle, stop).await,
    }
}

/// The buffered relay, for clients that are not a plain TCP socket.
async fn buffered(
    client: ClientIo,
    upstream: TcpStream,
    up: Arc<std::sync::atomic::AtomicU64>,
    bytes: &RelayBytes,
    idle: Duration,
    stop: &CancellationToken,
) -> RelayEnd {
    // Counted again from here on, into the same counter.
    let inner = RelayBytes {
        up,
        down: bytes.down.clone(),
    };
    relay(client, upstream, &inner, idle, stop).await
}
