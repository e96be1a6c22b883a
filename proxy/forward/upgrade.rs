//! Upgraded connections after the upstream's 101: registered like an
//! opaque tunnel, decided again under the config in force, closed when
//! their host becomes tainted or leaves the allow-list (SPEC §9 "Upgraded
//! relays"), and logged once when they end.
//!
//! What the upstream sends is scanned for host names like a response body
//! (SPEC §4 "Taint": every response relayed in cleartext is scanned),
//! each chunk before the client gets any of it: a WebSocket's messages
//! (`taint::ws`: frames, fragments, permessage-deflate as the 101's
//! `Sec-WebSocket-Extensions` agreed), any other protocol as one raw
//! stream. What cannot be read closes the relay (`log::UNSCANNABLE` on
//! the row): nothing is passed on unscanned. h2c upgrades never get here
//! (`headers::keep_upgrade`). The client's direction is a plain relay: the
//! upgrade request was already decided as carrying a body.
//!
//! Must not decide itself, or parse frames (`taint::ws` does).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use http::header::{self, HeaderMap};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::body::Scan;
use crate::exchange::{ConnCtx, Row};
use crate::policy::{Refusal, Target, Verdict};
use crate::taint::ws::{Unscannable, UpgradeScanner};
use crate::taint::Recorder;
use crate::tunnel::{self, RelayBytes, RelayEnd};

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
    /// How the upstream's bytes are scanned (none when taint is off).
    pub(super) scan: Option<DownScan>,
}

impl Upgraded {
    /// Waits for both sides' upgraded connections, relays, then logs.
    /// The row counts the relay's bytes (the request body's included)
    /// however it ends, a task cancelled at shutdown too.
    pub(super) fn spawn(mut self, client: OnUpgrade, upstream: OnUpgrade) {
        let tracker = self.ctx.shared.tracker.clone();
        tracker.spawn(
            async move {
                let bytes = RelayBytes::default();
                bytes
                    .up
                    .store(self.bytes_up.load(Ordering::Relaxed), Ordering::Relaxed);
                self.row.count(&bytes);
                let mut scan = self.scan.take();
                let relayed = match (client.await, upstream.await) {
                    (Ok(c), Ok(u)) => {
                        let (c, u) = (TokioIo::new(c), TokioIo::new(u));
                        self.relay(c, u, &bytes, scan.as_mut()).await
                    }
                    _ => Ok(()),
                };
                if let Some(scan) = scan.as_mut() {
                    scan.finish();
                    if scan.failed {
                        self.row.ex.note = Some(crate::log::UNSCANNABLE);
                    }
                }
                if let Err(r) = relayed {
                    // Still the 101 the client got, now refused.
                    self.row.set_verdict(Verdict::Deny(r));
                }
            }
            .in_current_span(),
        );
    }

    /// Registered first, so that a taint landing meanwhile, or a reload
    /// that no longer allows the host, closes it; then decided again under
    /// the config in force now (the upstream's 101 may have taken a while).
    async fn relay<A, B>(
        &self,
        client: A,
        upstream: B,
        bytes: &RelayBytes,
        scan: Option<&mut DownScan>,
    ) -> Result<(), Refusal>
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
            .register(&self.target, self.addr, true, stop.clone());
        if let Verdict::Deny(r) = ctx.recheck_open(&self.target, self.addr, true) {
            tracing::info!(host, "upgraded connection closed: {}", r.reason);
            return Err(r);
        }
        let end = match scan {
            None => tunnel::relay(client, upstream, bytes, self.idle, &stop).await,
            Some(scan) if scan.failed => RelayEnd::Refused,
            Some(scan) => {
                let mut inspect = |chunk: &[u8]| scan.inspect(chunk);
                let (idle, stop) = (self.idle, &stop);
                tunnel::relay_inspected(client, upstream, bytes, idle, stop, &mut inspect).await
            }
        };
        if end == RelayEnd::Cancelled && !ctx.shared.hard_stop.is_cancelled() {
            tracing::info!(
                host,
                "upgraded connection closed: its host became tainted or left the allow-list"
            );
        }
        Ok(())
    }
}

/// Scanning the upstream's side of one upgraded connection, and adding
/// what it names to the task's taint set.
pub(super) struct DownScan {
    scanner: Option<UpgradeScanner>,
    /// Where what it names goes (the upgrade request's URL is the
    /// provenance).
    record: Recorder,
    /// The upstream sent what could not be scanned: the relay closed.
    failed: bool,
}

impl DownScan {
    /// For the 101 `headers` (as the client gets them): a WebSocket when
    /// its `Upgrade` says so, with the extensions it agreed; anything else
    /// as a raw stream. `scan` is the exchange's (its headers already
    /// scanned). An extension that cannot be read fails it at once.
    pub(super) fn for_switch(scan: Scan, headers: &HeaderMap) -> DownScan {
        let Scan { task, record, .. } = scan;
        let limit = task.taint.max_scan_bytes;
        let owners = task.taint.by_owner.scan_hosts();
        let websocket = headers
            .get_all(header::UPGRADE)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"websocket"));
        let scanner = if websocket {
            let ext: Vec<&[u8]> = headers
                .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
                .iter()
                .map(http::HeaderValue::as_bytes)
                .collect();
            UpgradeScanner::websocket(&ext, limit, owners)
        } else {
            Ok(UpgradeScanner::raw(limit, owners))
        };
        let mut scan = DownScan {
            scanner: None,
            record,
            failed: false,
        };
        match scanner {
            Ok(s) => scan.scanner = Some(s),
            Err(why) => scan.fail(&why),
        }
        scan
    }

    /// Scans a chunk from upstream and taints what it names, before the
    /// client gets it. False: it could not be scanned, and must not be
    /// relayed.
    fn inspect(&mut self, chunk: &[u8]) -> bool {
        let Some(scanner) = self.scanner.as_mut() else {
            return false;
        };
        match scanner.feed(chunk) {
            Ok(fed) => {
                if !fed.names.is_empty() || !fed.pending.is_empty() || self.record.holds() {
                    self.record.add(fed.names, fed.pending);
                }
                true
            }
            Err(why) => {
                self.fail(&why);
                false
            }
        }
    }

    fn fail(&mut self, why: &Unscannable) {
        self.failed = true;
        self.scanner = None;
        tracing::warn!(source = %self.record.source(),
            "upgraded connection closed: the upstream sent {why}; sluice relays only what it can scan");
    }

    /// The relay ended: the names of a message cut off, then what it held
    /// is let go.
    fn finish(&mut self) {
        if let Some(mut scanner) = self.scanner.take() {
            let names = scanner.finish();
            if !names.is_empty() || self.record.holds() {
                self.record.add(names, Vec::new());
            }
        }
        self.record.done();
    }
}
