//! A task's secrets in the send phase: the request head checked and
//! swapped (`secrets::TaskSecrets::request_head`), a small body read whole
//! and checked before a byte is sent, a larger one watched as it streams;
//! a leak refuses the request, and for a secret that says so quarantines
//! the task (SPEC §10).
//!
//! Must not: find or swap secrets itself (`secrets` does), or decide
//! (`policy::secrets`).

use std::sync::Arc;
use std::time::Duration;

use http::header;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::exchange::ReqCtx;
use crate::policy::{Refusal, Verdict};
use crate::secrets::{At, Dest, Leak, TaskSecrets, Watch};

/// A request body as it goes upstream: read whole first (and checked for
/// secrets before a byte is sent), or streamed.
pub(super) enum Upload {
    /// Read whole and checked, holding its share of memory until sent.
    Read(Holding),
    Streamed(Incoming),
}

/// Bodies up to this size are read whole before anything is sent when the
/// task has secrets, so a leak anywhere in them sends nothing upstream;
/// larger or unsized ones stream and are cut where a leak is found.
const READ_WHOLE: u64 = 1024 * 1024;

/// Bytes all bodies being read whole may hold at once; past it a body
/// streams instead (many HTTP/2 streams must not pin gigabytes).
const READ_WHOLE_TOTAL: usize = 64 * 1024 * 1024;

/// Bytes held by bodies being read whole now.
static READING_WHOLE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A share of [`READ_WHOLE_TOTAL`], given back when dropped.
pub(super) struct Held(usize);

impl Held {
    fn take(n: usize) -> Option<Held> {
        use std::sync::atomic::Ordering::AcqRel;
        READING_WHOLE
            .fetch_update(AcqRel, std::sync::atomic::Ordering::Acquire, |used| {
                (used + n <= READ_WHOLE_TOTAL).then_some(used + n)
            })
            .ok()
            .map(|_| Held(n))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        READING_WHOLE.fetch_sub(self.0, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A share of memory to read the body whole, when the request says one of
/// at most [`READ_WHOLE`] bytes follows and the total allows it.
pub(super) fn small(h: &http::HeaderMap) -> Option<Held> {
    h.get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .filter(|n| *n <= READ_WHOLE)
        .and_then(|n| Held::take(usize::try_from(n).ok()?))
}

/// Reads a small body whole, then checks it whole (so a spelling of a
/// secret however long, or however the client cut its writes, is seen at
/// once) and swaps what may be swapped. A client that pauses longer than
/// `idle` between frames is refused. `Err`: a leak (the watch says which)
/// or a body that could not be read.
pub(super) async fn read_whole(
    secrets: &Arc<TaskSecrets>,
    dest: &Dest<'_>,
    watch: &Arc<Watch>,
    mut incoming: Incoming,
    idle: Duration,
) -> Result<bytes::Bytes, Refusal> {
    let unreadable = |why: String| Refusal::new(crate::policy::Rule::BadTarget, why);
    let mut body = Vec::new();
    loop {
        let frame = match tokio::time::timeout(idle, incoming.frame()).await {
            Err(_) => {
                let secs = idle.as_secs();
                return Err(unreadable(format!("the request body stalled for {secs} s")));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(unreadable(format!(
                    "the request body could not be read: {e}"
                )))
            }
            Ok(Some(Ok(f))) => f,
        };
        // Trailers of a body read whole are not passed on.
        if let Ok(d) = frame.into_data() {
            body.extend_from_slice(&d);
        }
        if body.len() as u64 > READ_WHOLE {
            return Err(unreadable(
                "the request body is longer than its Content-Length".into(),
            ));
        }
    }
    let leak = |i: usize| {
        let l = secrets.leak(i, "the body", dest);
        let refusal = l.refusal.clone();
        watch.caught(l);
        refusal
    };
    if let Some(i) = secrets.hidden(&body) {
        return Err(leak(i));
    }
    let mut used = Vec::new();
    match secrets.swap_at(dest, At::Body, &body, &mut used) {
        Err(i) => Err(leak(i)),
        Ok(Some((out, _))) => {
            watch.swapped_in(used);
            Ok(out.into())
        }
        Ok(None) => Ok(body.into()),
    }
}

/// A body read whole, holding its share of [`READ_WHOLE_TOTAL`] until it
/// has been sent (or dropped).
pub(super) struct Holding {
    pub(super) inner: http_body_util::Full<bytes::Bytes>,
    pub(super) _held: Held,
}

impl hyper::body::Body for Holding {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A body whose length a swap changes goes without Content-Length (the
/// upstream request is chunked).
pub(super) fn up_req_headers_lose_length(parts: &mut http::request::Parts) {
    parts.headers.remove(header::CONTENT_LENGTH);
}

/// The request head checked for the task's secrets and enabled
/// placeholders swapped in (the row names them); what watches the body.
pub(super) fn guard_head(
    cx: &mut ReqCtx,
    dest: &Dest<'_>,
    secrets: Arc<TaskSecrets>,
    parts: &mut http::request::Parts,
) -> Result<(Arc<TaskSecrets>, Arc<Watch>), Refusal> {
    match secrets.request_head(dest, &parts.method, &mut parts.uri, &mut parts.headers) {
        Ok(used) => cx.ex_mut().secrets = used,
        Err(leak) => return Err(leaked(cx, &leak)),
    }
    let (conn, ex) = (cx.conn.clone(), cx.ex().clone());
    let watch = Watch::new(move |leak: &Leak, answered: bool| {
        quarantine_for(&conn.task, leak);
        if answered {
            // The answer's row is written when it ends; this one says the
            // upload was cut and why.
            let mut ex = ex.clone();
            ex.secrets = vec![leak.name.clone()];
            ex.note = Some(crate::log::UPLOAD_CUT);
            let status = leak.refusal.rule.status();
            conn.record(&ex, &Verdict::Deny(leak.refusal.clone()), status, (0, 0));
        }
    });
    Ok((secrets, Arc::new(watch)))
}

/// A leak refuses the request (its row names the secret) and, for a
/// secret that says so, quarantines the task and closes its tunnels.
pub(super) fn leaked(cx: &mut ReqCtx, leak: &Leak) -> Refusal {
    cx.ex_mut().secrets = vec![leak.name.clone()];
    quarantine_for(&cx.conn.task, leak);
    leak.refusal.clone()
}

/// For a secret that says so, a leak quarantines its task and closes the
/// task's opaque tunnels (entering twice is harmless).
fn quarantine_for(task: &crate::state::TaskRuntime, leak: &Leak) {
    if leak.quarantine {
        task.quarantine.enter(&leak.name);
        task.tunnels.revoke_all();
    }
}
