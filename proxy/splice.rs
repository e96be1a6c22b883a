//! splice: zero-copy relaying of an opaque tunnel between two TCP sockets.
//!
//! Each direction starts buffered: bytes are read into a buffer made for
//! that read and written on. A direction whose read fills the buffer
//! carries bulk data: it then gets a pipe and moves bytes socket → pipe →
//! socket with splice(2), so they never enter sluice's memory (the kernel
//! hands page references from one socket to the other). A short
//! exchange (a CONNECT that carries one small request and answer) never
//! makes a pipe: two `pipe2` and four `close` calls saved per tunnel. Used
//! only when both ends are plain TCP sockets (a CONNECT from a `tcp:`
//! listener, nothing left in hyper's read buffer); everything else takes
//! the buffered relay in `tunnel`.
//!
//! Costs two pipe descriptors per direction that moved bulk data; if a
//! pipe cannot be made, that direction stays buffered. An idle direction
//! holds no buffer. Must not decide anything.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per splice call: the default pipe capacity.
const CHUNK: usize = 64 * 1024;

/// Bytes read per buffered read; a read that fills it switches its
/// direction to splice.
const START: usize = 16 * 1024;

/// Relays both ways until both directions have ended (each end passed on
/// as a half-close) or one fails. `up` counts client → upstream bytes,
/// `down` upstream → client.
pub(crate) async fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()> {
    tokio::try_join!(
        one_way(client, upstream, up),
        one_way(upstream, client, down)
    )?;
    Ok(())
}

/// Moves bytes from `from` to `to` — buffered until a read fills its
/// buffer, then through a pipe — until `from` ends, then shuts down `to`'s
/// write side.
async fn one_way(from: &TcpStream, to: &TcpStream, counter: &AtomicU64) -> io::Result<()> {
    let mut pipe: Option<(OwnedFd, OwnedFd)> = None;
    loop {
        let n = match &pipe {
            None => copy_once(from, to).await?,
            Some(p) => splice_once(from, to, p).await?,
        };
        if n == 0 {
            rustix::net::shutdown(to, rustix::net::Shutdown::Write)?;
            return Ok(());
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
        if pipe.is_none() && n == START {
            // Bulk data: a pipe from now on (none to be had: stay buffered).
            pipe = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok();
        }
    }
}

/// Reads once into a fresh buffer and writes it all on; returns the bytes
/// moved (0 at the end). The buffer exists only while its bytes are in
/// flight.
async fn copy_once(from: &TcpStream, to: &TcpStream) -> io::Result<usize> {
    let buf = loop {
        from.readable().await?;
        let mut buf = Vec::with_capacity(START);
        match from.try_read_buf(&mut buf) {
            Ok(_) => break buf,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    let mut pos = 0;
    while pos < buf.len() {
        to.writable().await?;
        match to.try_write(&buf[pos..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(m) => pos += m,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(buf.len())
}

/// Fills the pipe from `from` once and drains it all into `to`; returns
/// the bytes moved (0 at the end).
async fn splice_once(
    from: &TcpStream,
    to: &TcpStream,
    (pipe_r, pipe_w): &(OwnedFd, OwnedFd),
) -> io::Result<usize> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
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
    Ok(n)
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
        let relay = tokio::spawn(async move { relay(&proxy_client, &proxy_up, &u2, &d2).await });
        crate::tunnel::tests::half_close_both_ways(client, upstream, 1_000_000, 700_000).await;
        relay.await.unwrap().unwrap();
        assert_eq!(up.load(Ordering::Relaxed), 1_000_000);
        assert_eq!(down.load(Ordering::Relaxed), 700_000);
    }

    /// A short exchange (buffered only, no pipe made) and one exactly at
    /// the switch (a full first read, then splice) arrive intact.
    #[tokio::test]
    async fn short_and_switching_exchanges_arrive_intact() {
        for (n_up, n_down) in [(1_000, 500), (START, START + 1), (0, 3 * START)] {
            let (client, proxy_client) = pair().await;
            let (proxy_up, upstream) = pair().await;
            let up = std::sync::Arc::new(AtomicU64::new(0));
            let down = std::sync::Arc::new(AtomicU64::new(0));
            let (u2, d2) = (up.clone(), down.clone());
            let relay =
                tokio::spawn(async move { relay(&proxy_client, &proxy_up, &u2, &d2).await });
            crate::tunnel::tests::half_close_both_ways(client, upstream, n_up, n_down).await;
            relay.await.unwrap().unwrap();
            assert_eq!(up.load(Ordering::Relaxed), n_up as u64);
            assert_eq!(down.load(Ordering::Relaxed), n_down as u64);
        }
    }
}
