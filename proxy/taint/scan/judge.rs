//! Judging a finished token: is it, or does it hold, a host name?
//!
//! A token is judged whole; one with non-ASCII characters also piece by
//! piece where its script changes, and, when that finds nothing, by its
//! ASCII runs. Each candidate is split at ellipses (`a.example.com...b.org`),
//! trimmed of `.`, `-` and `_`, and normalised by the target normaliser
//! (IDNA included); in URL context any valid name counts, else only a bare
//! domain with a known public suffix and a label before it. Pure.

use super::chars::Scripts;
use super::{Named, Scanner, Seen, SEEN_MAX};
use crate::policy::names::bare_evidence;
use crate::policy::target::normalize_host;
use crate::policy::Host;

/// Where a candidate sits: in URL context, the bytes before and after it,
/// and whether only URL-context names count (binary content).
#[derive(Clone, Copy)]
struct Ctx {
    url: bool,
    before: u8,
    term: u8,
    urls_only: bool,
}

impl Scanner {
    /// Judges the token in progress (once per distinct token and
    /// context in a stream).
    pub(super) fn judge_token(&mut self, url: bool, term: u8, found: &mut impl FnMut(Named)) {
        let tok = &mut self.tok;
        let cheap_no = if tok.wide {
            !url && memchr::memchr(b'.', &tok.buf).is_none()
        } else {
            !url && !plausible_bare(&tok.buf)
        };
        if !cheap_no {
            self.judge_plausible(url, term, found);
        }
    }

    /// Judges the token in progress, known to be plausible.
    pub(super) fn judge_plausible(&mut self, url: bool, term: u8, found: &mut impl FnMut(Named)) {
        let tok = &mut self.tok;
        // The key: the token and everything its judgement depends on: its
        // context, whether base64 goes on after it (which drops a
        // URL-context single label), and the bytes around it.
        tok.buf.push(
            u8::from(url) | u8::from(base64_goes_on(term)) << 1 | u8::from(self.urls_only) << 2,
        );
        tok.buf.push(tok.before);
        tok.buf.push(term);
        let known = self.seen.contains(&tok.buf)
            || self.memo.as_ref().is_some_and(|m| m.contains(&tok.buf));
        if !known && self.seen.len() < SEEN_MAX {
            self.seen.insert(tok.buf.clone());
        }
        tok.buf.truncate(tok.buf.len() - 3);
        if !known {
            self.judge_fresh(url, term, found);
        }
    }

    /// Judges the token in progress, whether or not it was judged before.
    pub(super) fn judge_fresh(&mut self, url: bool, term: u8, found: &mut impl FnMut(Named)) {
        let tok = &self.tok;
        let ctx = Ctx {
            url,
            before: tok.before,
            term,
            urls_only: self.urls_only,
        };
        if tok.wide {
            judge_wide(&tok.buf, ctx, found);
        } else {
            names(&tok.buf, ctx, found);
        }
    }

    /// Judges part of a token with non-ASCII characters (not remembered).
    pub(super) fn judge_text(
        &mut self,
        text: &[u8],
        url: bool,
        term: u8,
        found: &mut impl FnMut(Named),
    ) {
        if url || memchr::memchr(b'.', text).is_some() {
            let ctx = Ctx {
                url,
                before: 0,
                term,
                urls_only: self.urls_only,
            };
            judge_wide(text, ctx, found);
        }
    }
}

/// A token with non-ASCII characters: whole, then by pieces where the
/// script changes, then (if nothing counted yet) by ASCII runs, so a name
/// glued to text in another script is found (`请访问paste.example.com`).
fn judge_wide(text: &[u8], ctx: Ctx, found: &mut impl FnMut(Named)) {
    let mut any = names(text, ctx, found);
    let mut start = 0;
    Scripts::default().read(text, |b| {
        let piece = Ctx {
            url: ctx.url && start == 0,
            before: if start == 0 { ctx.before } else { 0 },
            term: 0,
            ..ctx
        };
        any |= names(&text[start..b], piece, found);
        start = b;
    });
    if start > 0 {
        let last = Ctx {
            url: false,
            before: 0,
            ..ctx
        };
        any |= names(&text[start..], last, found);
    }
    if any {
        return;
    }
    let mut i = 0;
    while i < text.len() {
        if text[i] >= 0x80 {
            i += 1;
            continue;
        }
        let end = text[i..]
            .iter()
            .position(|&b| b >= 0x80)
            .map_or(text.len(), |e| i + e);
        let run = Ctx {
            url: ctx.url && i == 0,
            before: if i == 0 { ctx.before } else { 0 },
            term: if end == text.len() { ctx.term } else { 0 },
            ..ctx
        };
        names(&text[i..end], run, found);
        i = end;
    }
}

/// Reports the names in a candidate; true if there was one. An ellipsis
/// joins names ("see a.example.com...b.example.org"): each piece is
/// judged, and only the first keeps the URL context.
fn names(t: &[u8], ctx: Ctx, found: &mut impl FnMut(Named)) -> bool {
    if !ctx.url && !plausible_bare(t) {
        return false;
    }
    if memchr::memmem::find(t, b"..").is_none() {
        return name(t, ctx, found);
    }
    let mut any = false;
    let mut url = ctx.url;
    let mut before = ctx.before;
    let mut start = 0;
    let mut i = 0;
    while i <= t.len() {
        if i < t.len() && !(t[i] == b'.' && t.get(i + 1) == Some(&b'.')) {
            i += 1;
            continue;
        }
        let term = if i == t.len() { ctx.term } else { b'.' };
        let piece = Ctx {
            url,
            before,
            term,
            ..ctx
        };
        any |= name(&t[start..i], piece, found);
        url = false;
        before = 0;
        while i < t.len() && t[i] == b'.' {
            i += 1;
        }
        start = i;
        if i == t.len() {
            break;
        }
    }
    any
}

/// ZWNJ and ZWJ in UTF-8.
const JOINERS: [&[u8]; 2] = ["\u{200c}".as_bytes(), "\u{200d}".as_bytes()];

/// Reports the name `t` is, if any; with ZWNJ/ZWJ in it, both as written
/// (IDNA keeps them after a virama) and without them (as a reader sees it).
fn name(t: &[u8], ctx: Ctx, found: &mut impl FnMut(Named)) -> bool {
    let mut any = false;
    if let Some(h) = host_of(t, ctx) {
        found(h);
        any = true;
    }
    if JOINERS.iter().any(|j| memchr::memmem::find(t, j).is_some()) {
        let mut plain = t.to_vec();
        for j in JOINERS {
            while let Some(at) = memchr::memmem::find(&plain, j) {
                plain.drain(at..at + j.len());
            }
        }
        if let Some(h) = host_of(&plain, ctx) {
            found(h);
            any = true;
        }
    }
    any
}

/// Is this token a host name? Returns it normalised, with how it was
/// written: in URL context, after `@`, or bare (and then whether it reads
/// as a file name or code, `policy::names::bare_evidence`).
fn host_of(token: &[u8], ctx: Ctx) -> Option<Named> {
    let Ctx { url, term, .. } = ctx;
    let trim = |b: &u8| matches!(b, b'.' | b'-' | b'_');
    let start = token.iter().position(|b| !trim(b))?;
    let end = token.len() - token.iter().rev().position(|b| !trim(b))?;
    let t = &token[start..end];
    if url && !t.contains(&b'.') && fragment(t, term) {
        return None;
    }
    let s = std::str::from_utf8(t).ok()?;
    match normalize_host(s) {
        Ok(Host::Name(n)) if url => Some(Named::new(n, Seen::Url)),
        Ok(Host::Name(n)) if bare_domain(&n) => {
            // Trimmed bytes sit between the token and what is around it.
            // One dot trimmed before is a relative import or a member
            // (`.sansio.app`); an ellipsis before (`...example.com`) is prose.
            let before = match start {
                0 => ctx.before,
                1 => token[0],
                _ if token[start - 2] == b'.' => 0,
                _ => token[start - 1],
            };
            let term = if end < token.len() { token[end] } else { term };
            // In binary content only URLs count as text; a bare name there
            // still counts where an allow-list names it.
            let seen = if ctx.urls_only {
                Seen::Weak
            } else {
                bare_evidence(t, before, term)
            };
            Some(Named::new(n, seen))
        }
        _ => None,
    }
}

/// Does base64 go on after a token ended by `term`? (`+` and `=` never
/// follow a host in a URL.)
fn base64_goes_on(term: u8) -> bool {
    term == b'+' || term == b'='
}

/// A single label that is a piece of base64 or hex, not a host: base64
/// goes on after it, or it is a digest (8+ hex digits, one a digit).
fn fragment(label: &[u8], term: u8) -> bool {
    base64_goes_on(term)
        || (label.len() >= 8
            && label.iter().all(u8::is_ascii_hexdigit)
            && label.iter().any(u8::is_ascii_digit))
}

/// Could this token be a bare domain? It needs a dot, and a last label
/// that is a known top-level suffix (a non-ASCII one as written, or as
/// IDNA maps it: `ｃｏｍ` is `com`).
pub(super) fn plausible_bare(token: &[u8]) -> bool {
    let end = token.len()
        - token
            .iter()
            .rev()
            .take_while(|b| matches!(b, b'.' | b'-' | b'_'))
            .count();
    let t = &token[..end];
    // Tokens are short: a plain loop beats memrchr's set-up here.
    let Some(dot) = t.iter().rposition(|&b| b == b'.') else {
        return false;
    };
    known_suffix(&t[dot + 1..])
}

/// Is `last` (the label after a token's last dot) a known top-level
/// suffix (a non-ASCII one as written, or as IDNA maps it: `ｃｏｍ` is
/// `com`)?
#[inline]
pub(super) fn known_suffix(last: &[u8]) -> bool {
    let known = |l: &[u8]| psl::suffix(l).is_some_and(|s| s.is_known());
    if !last.is_ascii() {
        return known(last)
            || idna::domain_to_ascii_cow(last, idna::AsciiDenyList::URL)
                .is_ok_and(|l| known(l.to_ascii_lowercase().as_bytes()));
    }
    if last.len() > 63 {
        return false;
    }
    if !last.iter().any(u8::is_ascii_uppercase) {
        return known(last);
    }
    let mut buf = [0u8; 63];
    let label = &mut buf[..last.len()];
    label.copy_from_slice(last);
    label.make_ascii_lowercase();
    known(label)
}

/// A bare name counts when its suffix is on the public suffix list and
/// there is a label in front of it (`example.com`, not `com` or `co.uk`).
/// A suffix from the list's private section (`httpbin.org`, `github.io`)
/// is itself a registered host name: it counts too.
fn bare_domain(name: &str) -> bool {
    match psl::suffix(name.as_bytes()) {
        Some(s) if s.is_known() => {
            psl::domain(name.as_bytes()).is_some() || s.typ() == Some(psl::Type::Private)
        }
        _ => false,
    }
}
