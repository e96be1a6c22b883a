//! A task's secrets in one request head: the URL (path and query), header
//! names and values (Basic credentials decoded) checked, and each
//! placeholder that may be swapped where it is (`policy::secrets`)
//! replaced by its value; the swaps and checks the body relays use
//! ([`TaskSecrets::swap_at`], [`TaskSecrets::put_back`]); and a response
//! head from a secret's host given back with the placeholder wherever it
//! echoes the value ([`TaskSecrets::echo_head`]).
//!
//! Must not: decide (each placement is `policy::secrets::may_swap`), or
//! write a value anywhere but into the upstream request.

use std::sync::Arc;

use data_encoding::BASE64;
use http::{HeaderMap, HeaderValue, Uri};

use super::forms::{escaped, normalize};
use super::matcher::Hit;
use super::store::TaskSecrets;
use crate::config::OnViolation;
use crate::policy::secrets::{self, Place};
use crate::policy::{Refusal, Target};

/// Where a request goes, as the secrets check needs it.
pub(crate) struct Dest<'a> {
    pub(crate) target: &'a Target,
    /// Inside an intercepted TLS tunnel.
    pub(crate) intercepted: bool,
}

/// A secret where it may not go: its name (for the row) and the refusal.
#[derive(Clone, Debug)]
pub(crate) struct Leak {
    pub(crate) name: Arc<str>,
    pub(crate) refusal: Refusal,
    /// The secret says `on_violation = "quarantine"`.
    pub(crate) quarantine: bool,
}

/// Where in a request a placeholder was found.
#[derive(Clone, Copy, Debug)]
pub(crate) enum At<'a> {
    /// A header value (lower-case name).
    Header(&'a str),
    Query,
    Body,
}

/// A response from a secret's host that cannot be given to the task: it
/// may carry the value where sluice cannot put the placeholder back.
#[derive(Debug, thiserror::Error)]
#[error("the response from a secret's host {0}: it was cut, so the value cannot reach the task")]
pub(crate) struct EchoCut(pub(crate) &'static str);

impl TaskSecrets {
    fn its_host(&self, i: usize, target: &Target) -> bool {
        self.list[i]
            .config
            .hosts
            .contains(&target.host, target.port)
    }

    pub(crate) fn leak(&self, i: usize, location: &str, dest: &Dest<'_>) -> Leak {
        let name = &self.list[i].config.name;
        Leak {
            name: Arc::from(name.as_str()),
            refusal: secrets::leak(name, location, &dest.target.to_string()),
            quarantine: self.list[i].config.on_violation == OnViolation::Quarantine,
        }
    }

    /// Checks a request head and swaps each placeholder that may be
    /// swapped where it is. Ok: the names of the secrets put in.
    pub(crate) fn request_head(
        &self,
        dest: &Dest<'_>,
        method: &http::Method,
        uri: &mut Uri,
        headers: &mut HeaderMap,
    ) -> Result<Vec<Arc<str>>, Leak> {
        if let Some(h) = self.matcher.hits(method.as_str().as_bytes()).first() {
            return Err(self.leak(h.secret, "the method", dest));
        }
        let mut used: Vec<Arc<str>> = Vec::new();
        let url = uri.to_string();
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url.as_str(), None),
        };
        let decoded = escaped(path.as_bytes()).then(|| normalize(path.as_bytes()));
        for hay in [Some(path.as_bytes()), decoded.as_deref()]
            .into_iter()
            .flatten()
        {
            if let Some(h) = self.matcher.hits(hay).first() {
                return Err(self.leak(h.secret, "the URL", dest));
            }
        }
        let swapped_query = match query {
            Some(q) => self
                .checked(dest, At::Query, q.as_bytes(), &mut used)
                .map_err(|i| self.leak(i, "the query string", dest))?,
            None => None,
        };
        if let Some(q) = swapped_query {
            let new = format!("{path}?{}", String::from_utf8_lossy(&q));
            *uri = Uri::try_from(new).map_err(|_| self.leak(0, "the query string", dest))?;
        }
        for (name, value) in headers.iter_mut() {
            if let Some(h) = self.matcher.hits(name.as_str().as_bytes()).first() {
                return Err(self.leak(h.secret, "a header name", dest));
            }
            let swapped = self
                .header_value(dest, name.as_str(), value.as_bytes(), &mut used)
                .map_err(|i| self.leak(i, &format!("the header {name}"), dest))?;
            if let Some(v) = swapped {
                // The value is printable ASCII (the loader checked).
                let mut v = HeaderValue::from_bytes(&v)
                    .map_err(|_| self.leak(0, &format!("the header {name}"), dest))?;
                v.set_sensitive(true);
                *value = v;
            }
        }
        if !self.echoed(dest).is_empty() {
            // The answer must come back readable, so an echo of a value
            // can be found and put back (a compressed one could not).
            headers.insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        let mut names: Vec<Arc<str>> = Vec::new();
        for n in used {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        Ok(names)
    }

    /// One header value: `Ok(Some)` with the value swapped in, `Ok(None)`
    /// when it holds no secret, `Err(i)` when secret `i` may not be there.
    fn header_value(
        &self,
        dest: &Dest<'_>,
        name: &str,
        bytes: &[u8],
        used: &mut Vec<Arc<str>>,
    ) -> Result<Option<Vec<u8>>, usize> {
        // Basic credentials: the placeholder sits inside base64 of
        // `user:password`, as git and pip send it.
        if let Some(b64) = strip_prefix_ci(bytes, b"basic ") {
            if let Ok(decoded) = BASE64.decode(b64.trim_ascii()) {
                if let Some(out) = self.checked(dest, At::Header(name), &decoded, used)? {
                    let mut v = b"Basic ".to_vec();
                    v.extend_from_slice(BASE64.encode(&out).as_bytes());
                    return Ok(Some(v));
                }
            }
        }
        self.checked(dest, At::Header(name), bytes, used)
    }

    /// [`TaskSecrets::swap_in`], after a look at `bytes` percent-decoded:
    /// a form spelled with escapes the raw text does not show is a leak.
    fn checked(
        &self,
        dest: &Dest<'_>,
        at: At<'_>,
        bytes: &[u8],
        used: &mut Vec<Arc<str>>,
    ) -> Result<Option<Vec<u8>>, usize> {
        if let Some(i) = self.hidden(bytes) {
            return Err(i);
        }
        self.swap_in(dest, at, bytes, used)
    }

    /// `hay` with every placeholder that may be swapped at `at` replaced
    /// by its value (percent-encoded in a query); `Err(i)`: secret `i` is
    /// there and may not be.
    pub(crate) fn swap_in(
        &self,
        dest: &Dest<'_>,
        at: At<'_>,
        hay: &[u8],
        used: &mut Vec<Arc<str>>,
    ) -> Result<Option<Vec<u8>>, usize> {
        Ok(self.swap_at(dest, at, hay, used)?.map(|(out, _)| out))
    }

    /// [`TaskSecrets::swap_in`], and where in the output the last value
    /// put in ends.
    pub(crate) fn swap_at(
        &self,
        dest: &Dest<'_>,
        at: At<'_>,
        hay: &[u8],
        used: &mut Vec<Arc<str>>,
    ) -> Result<Option<(Vec<u8>, usize)>, usize> {
        let hits = self.matcher.hits(hay);
        if hits.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(hay.len());
        let mut done = 0;
        let mut last = 0;
        for h in hits {
            let s = &self.list[h.secret];
            let place = Place {
                intercepted: dest.intercepted,
                its_host: self.its_host(h.secret, dest.target),
                enabled: match at {
                    At::Header(name) => s.config.headers.iter().any(|x| x == name),
                    At::Query => s.config.query,
                    At::Body => s.config.body,
                },
                raw_placeholder: h.placeholder && h.raw,
            };
            if h.end <= done && !out.is_empty() {
                // The same span, found by the other automaton.
                continue;
            }
            if !secrets::may_swap(place) || h.start < done {
                return Err(h.secret);
            }
            out.extend_from_slice(&hay[done..h.start]);
            match at {
                At::Query => out.extend_from_slice(percent_encode(s.value()).as_bytes()),
                _ => out.extend_from_slice(s.value()),
            }
            done = h.end;
            last = out.len();
            used.push(Arc::from(s.config.name.as_str()));
        }
        out.extend_from_slice(&hay[done..]);
        Ok(Some((out, last)))
    }

    /// The secrets whose values a response to `dest` may echo: those of
    /// its host, on an intercepted request.
    pub(crate) fn echoed(&self, dest: &Dest<'_>) -> Vec<usize> {
        // Plain HTTP too: a value stored over HTTPS must not be read back
        // over HTTP.
        (0..self.list.len())
            .filter(|i| self.its_host(*i, dest.target))
            .collect()
    }

    /// Does a body to `dest` change length when its placeholders are
    /// swapped (a body-enabled secret whose placeholder is longer than its
    /// value)? Then it cannot keep its Content-Length.
    pub(crate) fn body_changes_length(&self, dest: &Dest<'_>) -> bool {
        dest.intercepted
            && self.list.iter().enumerate().any(|(i, s)| {
                s.config.body
                    && self.its_host(i, dest.target)
                    && s.placeholder.len() != s.value().len()
            })
    }

    /// Puts the placeholder back wherever a response head from a secret's
    /// host carries its value. `Err`: a value in another form (the
    /// response is cut). Ok(true): the body must be watched too.
    pub(crate) fn echo_head(
        &self,
        dest: &Dest<'_>,
        headers: &mut HeaderMap,
    ) -> Result<bool, EchoCut> {
        let echoed = self.echoed(dest);
        if echoed.is_empty() {
            return Ok(false);
        }
        // Asked for identity: a coded answer cannot be searched for the
        // value, so it does not reach the task.
        let coded = headers
            .get_all(http::header::CONTENT_ENCODING)
            .iter()
            .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"));
        let transfer_coded = headers
            .get_all(http::header::TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .any(|t| !t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        if coded || transfer_coded {
            return Err(EchoCut("is coded though sluice asked for identity"));
        }
        if headers.keys().any(|n| self.names_value(&echoed, n)) {
            return Err(EchoCut("names a header after a secret's value"));
        }
        for value in headers.values_mut() {
            if let Some(v) = self.put_back(&echoed, value.as_bytes())? {
                *value = HeaderValue::from_bytes(&v)
                    .map_err(|_| EchoCut("has a header sluice cannot rewrite"))?;
            }
        }
        if echoed
            .iter()
            .any(|i| self.list[*i].placeholder.len() != self.list[*i].value().len())
        {
            // The body may change length.
            headers.remove(http::header::CONTENT_LENGTH);
        }
        Ok(true)
    }

    /// Is `h` the value as sluice put it into a query (percent-encoded
    /// where RFC 3986 asks, either hex case)? An echo of the request URL
    /// carries it back, and it gets the placeholder like the raw value.
    fn is_query_spelling(&self, h: &Hit, hay: &[u8]) -> bool {
        let spelled = percent_encode(self.list[h.secret].value());
        hay.get(h.start..h.end)
            .is_some_and(|s| s.eq_ignore_ascii_case(spelled.as_bytes()))
    }

    /// `hay` with each raw value of `echoed` replaced by its placeholder.
    pub(crate) fn put_back(
        &self,
        echoed: &[usize],
        hay: &[u8],
    ) -> Result<Option<Vec<u8>>, EchoCut> {
        let hits: Vec<Hit> = self
            .matcher
            .hits(hay)
            .into_iter()
            .filter(|h| !h.placeholder && echoed.contains(&h.secret))
            .collect();
        let mut out = Vec::with_capacity(hay.len());
        let mut at = 0;
        for h in &hits {
            if h.end <= at {
                // The same span, found by the other automaton.
                continue;
            }
            let query_spelling = self.is_query_spelling(h, hay);
            if (!h.raw && !query_spelling) || h.start < at {
                return Err(EchoCut("carries a secret's value encoded"));
            }
            out.extend_from_slice(&hay[at..h.start]);
            out.extend_from_slice(self.list[h.secret].placeholder.as_bytes());
            at = h.end;
        }
        out.extend_from_slice(&hay[at..]);
        // What is left, as a reader may decode it (escapes, line breaks),
        // must not spell a value either.
        let decoded = if escaped(&out) {
            normalize(&out)
        } else {
            Vec::new()
        };
        if self
            .matcher
            .hits(&decoded)
            .iter()
            .any(|h| !h.placeholder && echoed.contains(&h.secret))
        {
            return Err(EchoCut("carries a secret's value in escapes"));
        }
        Ok((!hits.is_empty()).then_some(out))
    }

    /// Does a header (or trailer) name hold one of the `echoed` values?
    /// Names come lower-cased, so they are compared so.
    pub(crate) fn names_value(&self, echoed: &[usize], name: &http::HeaderName) -> bool {
        let n = name.as_str().as_bytes();
        echoed.iter().any(|i| {
            let v = self.list[*i].value().to_ascii_lowercase();
            memchr::memmem::find(n, &v).is_some()
        })
    }

    /// Do `hay`'s escapes or line breaks hide a form its plain text does
    /// not show (a value, or a placeholder spelled in escapes)? Then it is
    /// a leak of that secret.
    pub(crate) fn hidden(&self, hay: &[u8]) -> Option<usize> {
        if !escaped(hay) {
            return None;
        }
        let plain = self.matcher.hits(hay);
        let decoded = self.matcher.hits(&normalize(hay));
        let raw_placeholders = |hits: &[Hit], i: usize| {
            hits.iter()
                .filter(|h| h.secret == i && h.placeholder && h.raw)
                .count()
        };
        decoded.iter().find_map(|h| {
            let more = raw_placeholders(&decoded, h.secret) > raw_placeholders(&plain, h.secret);
            (!(h.placeholder && h.raw) || more).then_some(h.secret)
        })
    }
}

fn strip_prefix_ci<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

/// Every byte but RFC 3986's unreserved ones as `%XX`.
fn percent_encode(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
