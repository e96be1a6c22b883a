//! A CONNECT tunnel after sluice answered 200: read the client's first
//! bytes, let `policy` decide on them, then serve the tunnel as what it
//! is — intercepted TLS, plain HTTP, or an opaque relay. Writes the
//! CONNECT's one access-log row. Must not decide on targets itself.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::hello::peek;
use super::inner::{self, Scheme};
use super::rewind::Rewind;
use crate::conn::{ConnCtx, Exchange};
use crate::forward::Spare;
use crate::log::Verdict;
use crate::policy::{self, CheckedAddr, Refusal, Target, TunnelStart};
use crate::tunnel::{self, ClientIo, Counted, RelayBytes, RelayEnd};

/// Serves an answered CONNECT. `intercept` is what the CONNECT was
/// admitted as (an intercepted tunnel carries no body itself); `verdict`
/// its decision, logged with the tunnel's bytes when it ends.
#[allow(clippy::too_many_arguments)]
pub async fn tunnel_session(
    ctx: Arc<ConnCtx>,
    intercept: bool,
    target: Target,
    client: ClientIo,
    upstream: TcpStream,
    upstream_addr: CheckedAddr,
    mut ex: Exchange,
    verdict: (Verdict, Option<Refusal>),
) {
    let limits = ctx.shared.snapshot.load().limits.clone();
    let bytes = RelayBytes::default();
    let mut client = Counted::new(client, bytes.up.clone());
    let (first, start) = peek(&mut client, limits.header_timeout).await;
    if let Err(r) = policy::decide_tunnel_start(&target, &start) {
        tracing::info!(task = %ctx.task.id, url = %ex.url, rule = r.rule.as_str(), "tunnel closed: {}", r.reason);
        ctx.record(
            &ex,
            Verdict::Deny,
            Some(&r),
            r.rule.status(),
            (first.len() as u64, 0),
        );
        return;
    }
    let served_as = match start {
        TunnelStart::Nothing => None,
        TunnelStart::Http => Some((Scheme::Http, false)),
        TunnelStart::Http2 => Some((Scheme::Http, true)),
        TunnelStart::Tls { .. } if intercept => Some((Scheme::Https, false)),
        TunnelStart::Tls { .. }
        | TunnelStart::Other
        | TunnelStart::BadHello(_)
        | TunnelStart::Unfinished(_) => {
            ex.body = true;
            let verdict = Box::pin(opaque(
                &ctx,
                &target,
                client,
                upstream,
                upstream_addr,
                first,
                &bytes,
                verdict,
            ))
            .await;
            let (v, r) = match verdict {
                Ok(v) => v,
                Err(r) => {
                    ctx.record(
                        &ex,
                        Verdict::Deny,
                        Some(&r),
                        403,
                        (bytes.up.load(Ordering::Relaxed), 0),
                    );
                    return;
                }
            };
            ctx.record(&ex, v, r.as_ref(), 200, totals(&bytes));
            return;
        }
    };
    if let Some((scheme, h2c)) = served_as {
        // Each request inside is decided and logged on its own.
        ex.body = false;
        let host = target.host.to_string();
        let stop = ctx.shared.hard_stop.child_token();
        let _registered =
            ctx.task
                .tunnels
                .register(&host, upstream_addr.addr(), false, stop.clone());
        let spare: Spare = std::sync::Mutex::new(Some((upstream, upstream_addr)));
        // Count what the client is sent too: an intercepted session is
        // idle only when neither side moves.
        let (client, up) = client.into_parts();
        let io = Counted::both(Rewind::new(first, client), up, bytes.down.clone());
        let session = inner::Session {
            ctx: ctx.clone(),
            target: Arc::new(target),
            spare: Arc::new(spare),
            scheme,
            h2c,
        };
        Box::pin(session.serve(io, &limits, &bytes, stop)).await;
    }
    ctx.record(&ex, verdict.0, verdict.1.as_ref(), 200, totals(&bytes));
}

fn totals(bytes: &RelayBytes) -> (u64, u64) {
    (
        bytes.up.load(Ordering::Relaxed),
        bytes.down.load(Ordering::Relaxed),
    )
}

/// Relays a tunnel opaquely once policy, asked again now, allows it:
/// registered first, so a taint or a reload that lands while it is being
/// checked still closes it (the CONNECT's own decision may be up to a
/// head timeout old). Returns the verdict to log, or the refusal.
#[allow(clippy::too_many_arguments)]
async fn opaque(
    ctx: &ConnCtx,
    target: &Target,
    client: Counted<ClientIo>,
    upstream: TcpStream,
    addr: CheckedAddr,
    first: Vec<u8>,
    bytes: &RelayBytes,
    admitted: (Verdict, Option<Refusal>),
) -> Result<(Verdict, Option<Refusal>), Refusal> {
    let host = target.host.to_string();
    let stop = ctx.shared.hard_stop.child_token();
    let _registered = ctx
        .task
        .tunnels
        .register(&host, addr.addr(), true, stop.clone());
    let verdict = match ctx.recheck_open(target, addr.addr(), true) {
        Err(r) => {
            tracing::info!(task = %ctx.task.id, host, "tunnel closed: {}", r.reason);
            return Err(r);
        }
        Ok(Some(w)) if admitted.1.is_none() => (Verdict::WouldDeny, Some(w)),
        Ok(_) => admitted,
    };
    let snap = ctx.shared.snapshot.load();
    let idle = snap.limits.tunnel_idle_timeout;
    drop(snap);
    let end = relay_opaque(client, upstream, first, bytes, idle, &stop).await;
    match end {
        RelayEnd::Cancelled if !ctx.shared.hard_stop.is_cancelled() => {
            tracing::info!(task = %ctx.task.id, host, "opaque tunnel closed: its host became tainted or left the allow-list")
        }
        RelayEnd::Idle => tracing::debug!(host, "tunnel closed after idling"),
        _ => {}
    }
    Ok(verdict)
}

/// Relays an opaque tunnel: the peeked bytes first, then both ways, until
/// close, idle, shutdown or revocation.
async fn relay_opaque(
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
        ClientIo::Tcp(client) => match crate::splice::Pipes::new() {
            Ok(pipes) => {
                let copy = crate::splice::relay(&client, &upstream, pipes, &up, &bytes.down);
                tunnel::watch(copy, bytes, idle, stop).await
            }
            Err(e) => {
                tracing::debug!(error = %e, "no pipes for splice; relaying through buffers");
                buffered(ClientIo::Tcp(client), upstream, up, bytes, idle, stop).await
            }
        },
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
    tunnel::relay(client, upstream, &inner, idle, stop).await
}
