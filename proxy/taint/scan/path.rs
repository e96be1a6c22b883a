//! The path after a multi-tenant host: `github.com/acme/tool` is tainted
//! as `github.com`'s owner `acme` (SPEC §4 `by_owner`), so the scanner
//! reads the path that follows such a host.
//!
//! Owns: deciding that a finished name is one whose path matters (its host
//! is among the scanner's owner hosts and a `/`, `\` or `:` ended it), and
//! collecting the decoded bytes after it — letters, digits, `-._~%` and
//! `/` (`\` read as `/`) — into
//! [`Named::path`], at most [`PATH_MAX`] bytes. The bytes still go through
//! the token machine as usual: this only listens.
//!
//! Must not: hold more than one path, or report a path it may have cut
//! where an owner could be without saying so (`path_cut`): a non-ASCII
//! letter or digit glued to the path, or the length bound, cuts it.

use std::sync::Arc;

use super::{Named, Scanner};
use crate::policy::names::PATH_MAX;

/// The path being collected after a name.
#[derive(Debug)]
pub(super) struct Capture {
    named: Named,
    buf: Vec<u8>,
}

/// Does a name followed by `term` have a path (or a port or an scp-style
/// owner, `:`) after it? `\\` reads as `/` to URL parsers.
pub(super) fn starts_path(term: u8) -> bool {
    matches!(term, b'/' | b':' | b'\\')
}

/// Path segments read at most (`:443/api/v4/projects/OWNER` has five);
/// a path that goes on is read as cut (policy takes the owner from its
/// whole segments).
const SEGMENTS: usize = 6;

/// The hosts whose paths are read, normalised.
pub(super) type OwnerHosts = Arc<[Box<str>]>;

/// Could this token (as written, before normalisation) be one of `hosts`?
/// Tokens with non-ASCII characters or escapes decoded into them are
/// judged in full: only plain ASCII is ruled out cheaply.
pub(super) fn candidate(hosts: &OwnerHosts, wide: bool, token: &[u8]) -> bool {
    if wide {
        return true;
    }
    let trim = |b: &u8| matches!(b, b'.' | b'-' | b'_');
    let Some(s) = token.iter().position(|b| !trim(b)) else {
        return false;
    };
    let e = token.len() - token.iter().rev().position(|b| !trim(b)).unwrap_or(0);
    let t = &token[s..e];
    hosts
        .iter()
        .any(|h| h.len() == t.len() && h.as_bytes().eq_ignore_ascii_case(t))
}

impl Scanner {
    /// Judges the token in progress, ended by `term`; when `term` is a
    /// `/` and a name it yields is an owner host, reads the path after it
    /// before that name is reported.
    pub(super) fn judge_reading_path(
        &mut self,
        url: bool,
        term: u8,
        found: &mut impl FnMut(Named),
    ) {
        // Every token ends here: test the byte before touching the hosts.
        let hosts = match &self.owners {
            Some(h) if starts_path(term) => h.clone(),
            _ => return self.judge_token(url, term, found),
        };
        if !candidate(&hosts, self.tok.wide, &self.tok.buf) {
            return self.judge_token(url, term, found);
        }
        let mut held = None;
        self.judge_fresh(url, term, &mut |n: Named| {
            if hosts.iter().any(|h| **h == *n.host) {
                if let Some(before) = held.replace(n) {
                    found(before);
                }
            } else {
                found(n);
            }
        });
        if let Some(n) = held {
            self.end_capture(false, found);
            let mut buf = Vec::with_capacity(32);
            if term == b':' {
                // `host:443/owner` or `git@host:owner/repo`: policy reads it.
                buf.push(b':');
            }
            self.cap = Some(Capture { named: n, buf });
        }
    }

    /// A decoded ASCII byte while a path is read.
    #[inline]
    pub(super) fn capture_byte(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        let Some(cap) = self.cap.as_mut() else { return };
        // `%`: an escape the text held twice (`&#37;61`), which policy
        // decodes once more; `\\`: a slash to URL parsers.
        let path =
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b'%');
        let b = if b == b'\\' { b'/' } else { b };
        if !path && b != b'/' {
            return self.end_capture(false, found);
        }
        if b == b'/' && cap.buf.iter().filter(|&&c| c == b'/').count() + 1 >= SEGMENTS {
            // Read no further: what follows may still move the owner (a
            // `..`), so the path counts as cut there.
            return self.end_capture(true, found);
        }
        if cap.buf.len() >= PATH_MAX {
            return self.end_capture(true, found);
        }
        cap.buf.push(b);
    }

    /// A non-ASCII character while a path is read: a letter, digit or
    /// mark may belong to the owner (`acme` then a CJK letter): cut.
    pub(super) fn capture_char(&mut self, glued: bool, found: &mut impl FnMut(Named)) {
        if self.cap.is_some() {
            self.end_capture(glued, found);
        }
    }

    /// Reports the name with the path read so far.
    pub(super) fn end_capture(&mut self, cut: bool, found: &mut impl FnMut(Named)) {
        if let Some(cap) = self.cap.take() {
            found(with_path(cap.named, &cap.buf, cut));
        }
    }

    /// The name and the path read so far, without ending it (a chunk end).
    pub(super) fn peek_capture(&self, found: &mut impl FnMut(Named)) {
        if let Some(cap) = &self.cap {
            found(with_path(cap.named.clone(), &cap.buf, false));
        }
    }
}

fn with_path(mut named: Named, buf: &[u8], cut: bool) -> Named {
    // Only the bytes above were kept: ASCII.
    named.path = Some(String::from_utf8_lossy(buf).into_owned());
    named.path_cut = cut;
    named
}
