//! Secrets in bodies as they stream. [`LeakGuard`] watches a request
//! body: a tail is held back so a form split across chunks is found before
//! its first byte leaves; an enabled placeholder (`body = true`, to the
//! secret's host, intercepted) is swapped for its value, anything else
//! ends the body with an error (the upstream request is aborted) and the
//! [`Watch`] says why. [`EchoBody`] gives a response from a secret's host
//! back with the placeholder wherever the value was.
//!
//! Must not: decide (`TaskSecrets::swap_at` asks `policy`).

use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};

use super::guard::{At, Dest, Leak};
use super::matcher::Held;
use super::store::TaskSecrets;
use crate::policy::Target;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A frame as a body hands it on.
type Framed = Option<Result<Frame<Bytes>, BoxError>>;

/// A leak found in a body: the body ends with this error.
#[derive(Debug, thiserror::Error)]
#[error("a secret would leave in this body: the upload was cut")]
pub(crate) struct BodyLeak;

/// What a [`Watch`] calls when it finds a leak: the leak, and whether
/// the request had been answered by then.
type OnLeak = Box<dyn Fn(&Leak, bool) + Send + Sync>;

/// What a watched request body found: the leak that cut it, and the
/// secrets swapped into it (for the row).
#[derive(Default)]
pub(crate) struct Watch {
    leak: OnceLock<Leak>,
    swapped: Mutex<Vec<Arc<str>>>,
    /// Called once, when a leak is found (the task's quarantine), with
    /// whether the request had been answered by then.
    on_leak: Option<OnLeak>,
    /// The response head came back: a leak from now on needs a row of
    /// its own.
    answered: std::sync::atomic::AtomicBool,
}

impl Watch {
    /// A watch that calls `on_leak` when it finds a leak, whenever that is
    /// (before or after the response head).
    pub(crate) fn new(on_leak: impl Fn(&Leak, bool) + Send + Sync + 'static) -> Watch {
        Watch {
            on_leak: Some(Box::new(on_leak)),
            ..Watch::default()
        }
    }

    pub(crate) fn leak(&self) -> Option<&Leak> {
        self.leak.get()
    }

    /// The request's answer came back with no leak found so far.
    pub(crate) fn answered(&self) {
        self.answered
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Names put into a body read whole.
    pub(crate) fn swapped_in(&self, names: Vec<Arc<str>>) {
        let mut swapped = self.swapped.lock().unwrap_or_else(PoisonError::into_inner);
        for name in names {
            if !swapped.contains(&name) {
                swapped.push(name);
            }
        }
    }

    /// A leak found in a body read whole.
    pub(crate) fn caught(&self, leak: Leak) {
        if self.leak.set(leak).is_ok() {
            if let (Some(f), Some(l)) = (&self.on_leak, self.leak.get()) {
                f(l, self.answered.load(std::sync::atomic::Ordering::Acquire));
            }
        }
    }

    pub(crate) fn swapped(&self) -> Vec<Arc<str>> {
        self.swapped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A request body watched for secrets as it streams (the module's first
/// lines).
pub(crate) struct LeakGuard<B> {
    inner: B,
    secrets: Arc<TaskSecrets>,
    held: Held,
    trailers: Option<HeaderMap>,
    watch: Arc<Watch>,
    dest: (Target, bool),
    changes_length: bool,
    ended: bool,
}

impl<B> LeakGuard<B> {
    pub(crate) fn new(
        inner: B,
        secrets: Arc<TaskSecrets>,
        dest: &Dest<'_>,
        watch: Arc<Watch>,
    ) -> LeakGuard<B> {
        LeakGuard {
            changes_length: secrets.body_changes_length(dest),
            inner,
            secrets,
            held: Held::default(),
            trailers: None,
            watch,
            dest: (dest.target.clone(), dest.intercepted),
            ended: false,
        }
    }

    fn dest(&self) -> Dest<'_> {
        Dest {
            target: &self.dest.0,
            intercepted: self.dest.1,
        }
    }

    fn caught(&mut self, i: usize, location: &str) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.watch
            .caught(self.secrets.leak(i, location, &self.dest()));
        self.ended = true;
        self.trailers = None;
        Poll::Ready(Some(Err(Box::new(BodyLeak))))
    }

    /// The next chunk, or the end: `Err` is a frame to hand on as it is.
    fn next(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Bytes, bool), Framed>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(Some(Err(e.into())))),
            Poll::Ready(Some(Ok(f))) => f,
            Poll::Ready(None) => return Poll::Ready(Ok((Bytes::new(), true))),
        };
        match frame.into_data() {
            Ok(d) => Poll::Ready(Ok((d, false))),
            Err(f) => {
                // Trailers end the body: what is held goes out before them.
                self.trailers = f.into_trailers().ok();
                Poll::Ready(Ok((Bytes::new(), true)))
            }
        }
    }
}

impl<B> Body for LeakGuard<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.ended {
                return Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            let (chunk, end) = match self.next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(pass)) => return Poll::Ready(pass),
                Poll::Ready(Ok(x)) => x,
            };
            if let Some(t) = &self.trailers {
                let text: Vec<u8> = t
                    .iter()
                    .flat_map(|(k, v)| [k.as_str().as_bytes(), b": ", v.as_bytes(), b"\n"].concat())
                    .collect();
                if let Some(h) = self.secrets.matcher.hits(&text).first() {
                    return self.caught(h.secret, "a trailer");
                }
            }
            let this = &mut *self;
            let (joined, release) = this.held.join(&chunk, &this.secrets.matcher, end);
            let mut used = Vec::new();
            let dest = Dest {
                target: &this.dest.0,
                intercepted: this.dest.1,
            };
            if let Some(i) = this.secrets.hidden(&joined) {
                return this.caught(i, "the body");
            }
            let (out, upto) = match this.secrets.swap_at(&dest, At::Body, &joined, &mut used) {
                Err(i) => return this.caught(i, "the body"),
                // A value put in is never held (it would be read again as
                // a leak): release at least up to the last one.
                Ok(Some((out, last))) => {
                    let upto = out.len().saturating_sub(joined.len() - release).max(last);
                    let mut swapped = this
                        .watch
                        .swapped
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    for name in used {
                        if !swapped.contains(&name) {
                            swapped.push(name);
                        }
                    }
                    (out, upto)
                }
                Ok(None) => (joined, release),
            };
            this.held.keep(&out[upto..]);
            this.ended = end;
            if upto > 0 {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(&out[..upto])))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.changes_length {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}

/// A response body from a secret's host, given to the task with the
/// placeholder wherever the value was; a value in another form cuts it.
pub(crate) struct EchoBody<B> {
    inner: B,
    secrets: Arc<TaskSecrets>,
    echoed: Vec<usize>,
    held: Held,
    /// Trailers, sent once what is held has gone.
    pending: Option<Frame<Bytes>>,
    ended: bool,
    same_length: bool,
}

impl<B> EchoBody<B> {
    pub(crate) fn new(inner: B, secrets: Arc<TaskSecrets>, dest: &Dest<'_>) -> EchoBody<B> {
        let echoed = secrets.echoed(dest);
        let same_length = echoed
            .iter()
            .all(|i| secrets.list[*i].placeholder.len() == secrets.list[*i].value().len());
        EchoBody {
            inner,
            secrets,
            echoed,
            held: Held::default(),
            pending: None,
            ended: false,
            same_length,
        }
    }
}

impl<B> EchoBody<B> {
    /// Trailers are headers too: the value in one comes back as the
    /// placeholder; in a name or encoded, the response is cut.
    fn trailers_back(&mut self, f: Frame<Bytes>) -> Result<Frame<Bytes>, BoxError> {
        let Ok(mut trailers) = f.into_trailers() else {
            return Err(Box::new(super::guard::EchoCut(
                "sent a frame sluice cannot read",
            )));
        };
        if trailers
            .keys()
            .any(|n| self.secrets.names_value(&self.echoed, n))
        {
            self.ended = true;
            return Err(Box::new(super::guard::EchoCut(
                "names a trailer after a secret's value",
            )));
        }
        for value in trailers.values_mut() {
            match self.secrets.put_back(&self.echoed, value.as_bytes()) {
                Ok(None) => {}
                Ok(Some(v)) => {
                    *value = http::HeaderValue::from_bytes(&v)
                        .map_err(|_| super::guard::EchoCut("has a trailer sluice cannot rewrite"))?
                }
                Err(e) => {
                    self.ended = true;
                    return Err(Box::new(e));
                }
            }
        }
        Ok(Frame::trailers(trailers))
    }
}

impl<B> Body for EchoBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if let Some(f) = self.pending.take() {
                return Poll::Ready(Some(self.trailers_back(f)));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            let (chunk, end) = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => (Bytes::new(), true),
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => (d, false),
                    Err(f) => {
                        // Trailers: what is held goes out before them.
                        self.pending = Some(f);
                        (Bytes::new(), false)
                    }
                },
            };
            let this = &mut *self;
            let flush = end || this.pending.is_some();
            let (joined, release) = this.held.join(&chunk, &this.secrets.matcher, flush);
            let (out, upto) = match this.secrets.put_back(&this.echoed, &joined) {
                Err(e) => {
                    this.ended = true;
                    this.pending = None;
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                // Hold back as many bytes as before the swap, from the end.
                Ok(Some(r)) => {
                    let upto = r.len().saturating_sub(joined.len() - release);
                    (r, upto)
                }
                Ok(None) => (joined, release),
            };
            this.held.keep(&out[upto..]);
            this.ended = end;
            if upto > 0 {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(&out[..upto])))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.same_length {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}
