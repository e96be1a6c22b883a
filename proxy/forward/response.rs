//! The respond phase: the upstream's response head is scanned, cleaned of
//! hop-by-hop headers and answered; the request's context becomes its row,
//! handed to what relays the rest — the body ([`RelayBody`]: scanned chunk
//! by chunk, the connection pooled again when it ends) or, after a 101,
//! the upgraded connection ([`upgrade::Upgraded`]). That relay writes the
//! row when the exchange ends.
//!
//! Must not decide, or read a chunk itself (`body`, `upgrade` do).

use std::sync::Arc;

use http::{Response, StatusCode};
use http_body_util::BodyExt;

use super::body::{self, Finish, RelayBody, Scan};
use super::headers::{body_scanner, scan_headers, source_url, strip_hop_by_hop};
use super::send::Exchanged;
use super::{upgrade, Origin};
use crate::exchange::ReqCtx;
use crate::policy::{TaintMode, Target};
use crate::respond::{self, ProxyBody};
use crate::secrets::{Dest, EchoBody};
use crate::taint::body::memory::Memory;
use crate::upstream::PoolKey;

/// Answers the client with the upstream's response, relayed as it
/// streams; the row goes with the relay.
pub(super) fn respond(
    cx: ReqCtx,
    target: &Target,
    origin: &Origin<'_>,
    x: Exchanged,
) -> Response<ProxyBody> {
    let (mut rparts, rbody) = x.resp.into_parts();
    // Each hop speaks its own protocol: an HTTP/1.0 or HTTP/2 upstream does
    // not change what the client speaks.
    rparts.version = x.client_version;
    let dest = Dest {
        target,
        intercepted: origin.tls.is_some(),
    };
    // A response from a secret's host gets its placeholder back where it
    // echoes the value, before anything reads it (the taint scan too).
    let echo = match cx
        .secrets()
        .map(|s| (s.echo_head(&dest, &mut rparts.headers), s))
    {
        None | Some((Ok(false), _)) => None,
        Some((Ok(true), s)) => {
            // The reason phrase is the upstream's own text: not passed on.
            rparts.extensions.remove::<hyper::ext::ReasonPhrase>();
            Some(s)
        }
        Some((Err(cut), _)) => {
            return cx.refuse(crate::policy::secrets::echo_cut(&cut.to_string()))
        }
    };
    let scan = scan_for(&cx, target, origin, &x.path, &rparts);
    let switching = rparts.status == StatusCode::SWITCHING_PROTOCOLS;
    let upgrade = x.client_upgrade.is_some();
    strip_hop_by_hop(&mut rparts.headers, switching && upgrade);
    let (conn, generation) = (cx.conn.clone(), cx.snap().generation);
    let limits = cx.snap().limits.clone();
    let row = cx.answered(rparts.status.as_u16());
    if let (true, Some(client_upgrade)) = (switching, x.client_upgrade) {
        // hyper hands out the upgraded upstream connection through the
        // response's extensions.
        let mut holder = Response::new(());
        *holder.extensions_mut() = std::mem::take(&mut rparts.extensions);
        // Read as the client will read it: the headers it gets.
        let scan = scan.map(|s| upgrade::DownScan::for_switch(s, &rparts.headers));
        let relay = upgrade::Upgraded {
            ctx: conn,
            target: target.clone(),
            addr: x.addr,
            idle: limits.tunnel_idle_timeout,
            row,
            bytes_up: x.bytes_up,
            scan,
        };
        relay.spawn(client_upgrade, hyper::upgrade::on(holder));
        drop(x.sender);
        return Response::from_parts(rparts, respond::empty());
    }
    let finish = Finish {
        row,
        bytes_up: x.bytes_up,
        reuse: (!upgrade).then(|| {
            let key = PoolKey {
                addr: x.addr,
                tls: origin.tls.clone(),
                generation,
            };
            (conn.task.pool.clone(), key, x.sender)
        }),
    };
    let stall = body::Stall::new(limits.first_byte_timeout);
    let body = match echo {
        Some(s) => relay(EchoBody::new(rbody, s, &dest), scan, finish, stall),
        None => relay(rbody, scan, finish, stall),
    };
    Response::from_parts(rparts, body)
}

/// The response body as the client gets it: scanned chunk by chunk, the
/// row written (and the connection pooled again) when it ends.
fn relay<B>(inner: B, scan: Option<Scan>, finish: Finish, stall: body::Stall) -> ProxyBody
where
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin + Send + Sync + 'static,
    B::Error: Into<crate::respond::BodyError>,
{
    RelayBody {
        inner,
        bytes_down: 0,
        since_yield: 0,
        stall,
        scan,
        finish: Some(finish),
    }
    .boxed()
}

/// How the response is scanned (none when the task's taint is off): its
/// head now, into the recorder the body or upgrade relay then feeds.
fn scan_for(
    cx: &ReqCtx,
    target: &Target,
    origin: &Origin<'_>,
    path: &str,
    rparts: &http::response::Parts,
) -> Option<Scan> {
    let task = &cx.task;
    if task.taint.mode == TaintMode::Off {
        return None;
    }
    let path = path.split('?').next().unwrap_or("/");
    let source: Arc<str> = source_url(origin.scheme, target, path).into();
    let served_by: Arc<str> = target.host.to_string().into();
    let owners = task.taint.by_owner.scan_hosts();
    let reason = rparts
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .map(hyper::ext::ReasonPhrase::as_bytes);
    let named = scan_headers(&rparts.headers, reason, owners.clone());
    let memo = cx.conn.memo(&served_by);
    let mut record = cx.conn.recorder(task, source, served_by);
    if !named.is_empty() {
        record.add(named, Vec::new());
    }
    let memory = Memory {
        task: cx.conn.task.decoder_memory.clone(),
        total: cx.conn.shared.decoder_memory.clone(),
    };
    let mut body =
        body_scanner(&rparts.headers, task.taint.max_scan_bytes, owners).with_memory(memory);
    body.with_memo(&memo);
    Some(Scan {
        body,
        task: task.clone(),
        record,
        judged_under: (memo.key.generation, memo.key.epoch),
        memo: Some((cx.conn.clone(), memo)),
    })
}
