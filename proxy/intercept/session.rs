//! A CONNECT tunnel after sluice answered 200: read the client's first
//! bytes, let `policy` decide on them, then serve the tunnel as what it
//! is — intercepted TLS, plain HTTP, or an opaque relay. Its one
//! access-log row is an `exchange::Row`, written however the tunnel ends.
//! Must not decide on targets itself.

use std::sync::Arc;

use tokio::net::TcpStream;

use super::hello::peek;
use super::inner::{self, Scheme};
use crate::exchange::{ConnCtx, Row};
use crate::policy::{self, CheckedAddr, Target, TunnelStart, Verdict};
use crate::tunnel::{self, ClientIo, Counted, RelayBytes, RelayEnd, Rewind};
use crate::upstream::Spare;

/// An admitted CONNECT, dialled, as `conn` planned it.
pub(crate) struct Tunnel {
    pub(crate) target: Target,
    pub(crate) upstream: TcpStream,
    pub(crate) addr: CheckedAddr,
    /// The CONNECT's row: its verdict (allow, or a shadow-mode
    /// would-deny), written when the tunnel ends, or when it is dropped
    /// before it starts.
    pub(crate) row: Row,
    /// The TLS settings to intercept with, when the CONNECT was admitted
    /// as intercepted (decided once, at CONNECT time).
    pub(crate) intercept: Option<Arc<rustls::ServerConfig>>,
}

/// Serves an answered CONNECT until it closes.
pub(crate) async fn tunnel_session(ctx: Arc<ConnCtx>, client: ClientIo, t: Tunnel) {
    let limits = ctx.shared.snapshot().limits.clone();
    let bytes = RelayBytes::default();
    let mut row = t.row;
    row.count(&bytes);
    let mut client = Counted::new(client, bytes.up.clone());
    // A client that has not spoken yet is closed at the end of a drain
    // like any tunnel (its row is written as the row is dropped).
    let peeked = tokio::select! {
        p = peek(&mut client, limits.header_timeout) => Some(p),
        _ = ctx.shared.hard_stop.cancelled() => None,
    };
    let Some((first, start)) = peeked else {
        return;
    };
    if let Err(r) = policy::decide_tunnel_start(&t.target, &start) {
        tracing::info!(url = %row.ex.url, rule = r.rule.as_str(), "tunnel closed: {}", r.reason);
        row.deny(r);
        return;
    }
    let served_as = match start {
        TunnelStart::Nothing => None,
        TunnelStart::Http => Some((Scheme::Http, false, None)),
        TunnelStart::Http2 => Some((Scheme::Http, true, None)),
        TunnelStart::Tls { .. } if t.intercept.is_some() => {
            Some((Scheme::Https, false, t.intercept.clone()))
        }
        TunnelStart::Tls { .. }
        | TunnelStart::Other
        | TunnelStart::BadHello(_)
        | TunnelStart::Unfinished(_) => {
            row.ex.body = true;
            let opened = Opened {
                target: &t.target,
                upstream: t.upstream,
                addr: t.addr,
            };
            Box::pin(opaque(&ctx, opened, client, first, &bytes, &mut row)).await;
            return;
        }
    };
    if let Some((scheme, h2c, tls)) = served_as {
        // Each request inside is decided and logged on its own.
        row.ex.body = false;
        row.ex.note = Some(crate::log::INTERCEPTED);
        let stop = ctx.shared.hard_stop.child_token();
        let _registered = ctx
            .task
            .tunnels
            .register(&t.target, t.addr.addr(), false, stop.clone());
        let spare: Spare = std::sync::Mutex::new(Some((t.upstream, t.addr)));
        // Count what the client is sent too: an intercepted session is
        // idle only when neither side moves.
        let (client, up) = client.into_parts();
        let io = Counted::both(Rewind::new(first, client), up, bytes.down.clone());
        let session = inner::Session {
            ctx: ctx.clone(),
            target: Arc::new(t.target),
            spare: Arc::new(spare),
            scheme,
            h2c,
            tls,
        };
        if Box::pin(session.serve(io, &limits, &bytes, stop)).await
            == inner::Served::ClientTlsFailed
        {
            row.ex.note = Some(crate::log::CLIENT_TLS_FAILED);
        }
    }
}

/// The upstream end of an admitted tunnel.
struct Opened<'a> {
    target: &'a Target,
    upstream: TcpStream,
    addr: CheckedAddr,
}

/// Relays a tunnel opaquely once policy, asked again now, allows it:
/// registered first, so a taint or a reload that lands while it is being
/// checked still closes it (the CONNECT's own decision may be up to a
/// head timeout old). A refusal, or a new shadow-mode would-deny, goes on
/// the row.
async fn opaque(
    ctx: &ConnCtx,
    o: Opened<'_>,
    client: Counted<ClientIo>,
    first: Vec<u8>,
    bytes: &RelayBytes,
    row: &mut Row,
) {
    let host = o.target.host.to_string();
    let stop = ctx.shared.hard_stop.child_token();
    let _registered = ctx
        .task
        .tunnels
        .register(o.target, o.addr.addr(), true, stop.clone());
    match ctx.recheck_open(o.target, o.addr.addr(), true) {
        Verdict::Deny(r) => {
            tracing::info!(host, "tunnel closed: {}", r.reason);
            row.deny(r);
            return;
        }
        Verdict::WouldDeny((), w) if row.verdict.would_deny().is_none() => {
            row.verdict = Verdict::WouldDeny((), w)
        }
        _ => {}
    }
    let idle = ctx.shared.snapshot().limits.tunnel_idle_timeout;
    let path = tunnel::opaque::relay_path(&client);
    ctx.shared.metrics.opaque_relay(path.as_str());
    let end = tunnel::opaque::relay_opaque(client, o.upstream, first, bytes, idle, &stop).await;
    match end {
        RelayEnd::Cancelled if !ctx.shared.hard_stop.is_cancelled() => {
            tracing::info!(
                host,
                "opaque tunnel closed: its host became tainted or left the allow-list"
            )
        }
        RelayEnd::Idle => tracing::debug!(host, "tunnel closed after idling"),
        _ => {}
    }
}
