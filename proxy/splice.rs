//! splice: zero-copy relaying of an opaque tunnel between two TCP sockets.
//!
//! Each direction moves bytes socket → pipe → socket with splice(2), so
//! they never enter sluice's memory: the kernel hands page references
//! from one socket to the other. Used only when both ends are plain TCP
//! sockets (a CONNECT from a `tcp:` listener, nothing left in hyper's read
//! buffer); everything else takes the buffered relay in `tunnel`.
//!
//! Costs four pipe descriptors per relaying tunnel (two pipes), made when
//! the relay starts; if they cannot be made, the caller falls back to the
//! buffered relay. Must not decide anything.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per splice call: the default pipe capacity.
const CHUNK: usize = 64 * 1024;

/// A pipe per direction.
pub struct Pipes {
    up: (OwnedFd, OwnedFd),
    down: (OwnedFd, OwnedFd),
}

impl Pipes {
    /// Makes the two pipes (non-blocking, close-on-exec).
    pub fn new() -> io::Result<Pipes> {
        let flags = PipeFlags::CLOEXEC | PipeFlags::NONBLOCK;
        Ok(Pipes {
            up: pipe_with(flags)?,
            down: pipe_with(flags)?,
        })
    }
}

/// Relays both ways until both directions have ended (each end passed on
/// as a half-close) or one fails. `up` counts client → upstream bytes,
/// `down` upstream → client.
pub async fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    pipes: Pipes,
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()> {
    let (up_r, up_w) = pipes.up;
    let (down_r, down_w) = pipes.down;
    tokio::try_join!(
        one_way(client, upstream, (&up_r, &up_w), up),
        one_way(upstream, client, (&down_r, &down_w), down),
    )?;
    Ok(())
}

/// Moves bytes from `from` to `to` through the pipe until `from` ends, then
/// shuts down `to`'s write side.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    (pipe_r, pipe_w): (&OwnedFd, &OwnedFd),
    counter: &AtomicU64,
) -> io::Result<()> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        // Fill: the pipe is empty here, so EAGAIN can only mean the socket
        // has nothing to read.
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from, None, pipe_w, None, CHUNK, flags).map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            rustix::net::shutdown(to, rustix::net::Shutdown::Write)?;
            return Ok(());
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
        // Drain: everything in the pipe goes out before the next fill.
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(pipe_r, None, to, None, left, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// Bytes both ways, many pipe-fulls, arrive intact and counted; a
    /// half-close passes through and the other direction goes on.
    #[tokio::test]
    async fn relays_both_ways_with_half_close() {
        let (client, proxy_client) = pair().await;
        let (proxy_up, upstream) = pair().await;
        let up = std::sync::Arc::new(AtomicU64::new(0));
        let down = std::sync::Arc::new(AtomicU64::new(0));
        let (u2, d2) = (up.clone(), down.clone());
        let relay = tokio::spawn(async move {
            relay(&proxy_client, &proxy_up, Pipes::new().unwrap(), &u2, &d2).await
        });
        crate::tunnel::tests::half_close_both_ways(client, upstream, 1_000_000, 700_000).await;
        relay.await.unwrap().unwrap();
        assert_eq!(up.load(Ordering::Relaxed), 1_000_000);
        assert_eq!(down.load(Ordering::Relaxed), 700_000);
    }
}
