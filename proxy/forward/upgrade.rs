//! Upgraded connections (WebSocket, h2c) after the upstream's 101: relayed
//! both ways like an opaque tunnel — registered, decided again under the
//! config in force, closed when their host becomes tainted or leaves the
//! allow-list — and logged once when they end. Must not decide itself.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::exchange::{ConnCtx, Row};
use crate::policy::{Refusal, Target, Verdict};
use crate::tunnel::{self, RelayBytes};

/// An exchange that switched protocols, ready to relay.
pub(super) struct Upgraded {
    pub(super) ctx: Arc<ConnCtx>,
    pub(super) target: Target,
    /// The checked address the upstream connection went to.
    pub(super) addr: SocketAddr,
    pub(super) idle: Duration,
    /// The request's row (its decision, status 101), written when the
    /// relay ends.
    pub(super) row: Row,
    /// Request-body bytes sent before the switch.
    pub(super) bytes_up: Arc<AtomicU64>,
}

impl Upgraded {
    /// Waits for both sides' upgraded connections, relays, then logs.
    /// The row counts the relay's bytes (the request body's included)
    /// however it ends, a task cancelled at shutdown too.
    pub(super) fn spawn(mut self, client: OnUpgrade, upstream: OnUpgrade) {
        let tracker = self.ctx.shared.tracker.clone();
        tracker.spawn(async move {
            let bytes = RelayBytes::default();
            bytes
                .up
                .store(self.bytes_up.load(Ordering::Relaxed), Ordering::Relaxed);
            self.row.count(&bytes);
            let relayed = match (client.await, upstream.await) {
                (Ok(c), Ok(u)) => self.relay(TokioIo::new(c), TokioIo::new(u), &bytes).await,
                _ => Ok(()),
            };
            if let Err(r) = relayed {
                // Still the 101 the client got, now refused.
                self.row.set_verdict(Verdict::Deny(r));
            }
        });
    }

    /// Registered first, so that a taint landing meanwhile, or a reload
    /// that no longer allows the host, closes it; then decided again under
    /// the config in force now (the upstream's 101 may have taken a while).
    async fn relay<A, B>(&self, client: A, upstream: B, bytes: &RelayBytes) -> Result<(), Refusal>
    where
        A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let ctx = &self.ctx;
        let host = self.target.host.to_string();
        let stop = ctx.shared.hard_stop.child_token();
        let _registered = ctx
            .task
            .tunnels
            .register(&host, self.addr, true, stop.clone());
        if let Verdict::Deny(r) = ctx.recheck_open(&self.target, self.addr, true) {
            tracing::info!(task = %ctx.task.id, host, "upgraded connection closed: {}", r.reason);
            return Err(r);
        }
        let end = tunnel::relay(client, upstream, bytes, self.idle, &stop).await;
        if end == tunnel::RelayEnd::Cancelled && !ctx.shared.hard_stop.is_cancelled() {
            tracing::info!(task = %ctx.task.id, host, "upgraded connection closed: its host became tainted or left the allow-list");
        }
        Ok(())
    }
}
