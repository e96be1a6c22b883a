//! The token in progress: a run of host characters (ASCII letters, digits,
//! `-`, `_`, dots, and non-ASCII letters, digits and marks), with where its
//! script changes, ended by anything else. Invisible characters are
//! skipped, non-ASCII dots stored as `.`.
//!
//! A token longer than `MAX_TOKEN` bytes is not a name: when it fills, the
//! pieces before its last script change are judged and dropped and the
//! last piece kept (if it is short enough to become a name), else the
//! token is overlong until the next script change starts a new one.
//! Bounded memory; no I/O.

use super::chars::{self, Decoded, Kind, Scripts};
use super::{Named, Scanner, HOST, MAX_TOKEN};

/// Bytes after which a `//` does not start a URL authority: base64 (or a
/// path) going on, and controls other than whitespace (binary). Anything
/// non-ASCII before it is a delimiter (a quote, a space, or binary).
static NOT_URL_BEFORE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 128 {
        let b = i as u8;
        let base64 = b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'-' || b == b'_';
        t[i] = base64 || (b.is_ascii_control() && !b.is_ascii_whitespace());
        i += 1;
    }
    t
};

#[derive(Debug)]
pub(super) struct Token {
    /// The token as UTF-8 (empty while overlong).
    pub(super) buf: Vec<u8>,
    pub(super) active: bool,
    /// Longer than any name: not stored, only its scripts followed.
    pub(super) overlong: bool,
    /// Started right after a URL's `//`: a name counts without a suffix.
    pub(super) url: bool,
    /// The decoded byte before the token (`@` for an e-mail domain; 0x80
    /// for a non-ASCII character; 0 when unknown).
    pub(super) before: u8,
    /// Holds a non-ASCII character: judged piece by piece too.
    pub(super) wide: bool,
    /// Script changes, followed while `wide` or `overlong`.
    scripts: Scripts,
    /// Where the last piece (after the last script change) starts in buf.
    piece: usize,
}

impl Default for Token {
    fn default() -> Self {
        Token {
            buf: Vec::with_capacity(64),
            active: false,
            overlong: false,
            url: false,
            before: 0,
            wide: false,
            scripts: Scripts::default(),
            piece: 0,
        }
    }
}

impl Token {
    #[inline]
    fn start(&mut self, url: bool, before: u8) {
        self.buf.clear();
        self.active = true;
        self.overlong = false;
        self.url = url;
        self.before = before;
        self.wide = false;
        self.scripts = Scripts::default();
        self.piece = 0;
    }

    /// A whole ASCII token taken from a chunk (the fast path).
    #[inline]
    pub(super) fn set_ascii(&mut self, bytes: &[u8], before: u8) {
        self.start(false, before);
        self.buf.extend_from_slice(bytes);
    }

    /// After a script change in an overlong token: a new token starts
    /// there, with no URL context.
    fn restart(&mut self, wide: bool) {
        self.buf.clear();
        self.overlong = false;
        self.url = false;
        self.before = 0;
        self.wide = wide;
        self.piece = 0;
    }
}

impl Scanner {
    /// One decoded byte.
    pub(super) fn byte(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        if b >= 0x80 || !self.utf8.idle() {
            self.wide_byte(b, found);
        } else if !self.ascii(b, found) {
            // A host byte the token cannot simply take (`ascii` opened it).
            self.token_run(std::slice::from_ref(&b), found);
        }
    }

    /// The common cases of an ASCII byte (outside a UTF-8 sequence): one
    /// that ends a token, or one more byte of a short ASCII token. False
    /// for anything else.
    #[inline(always)]
    pub(super) fn ascii(&mut self, b: u8, found: &mut impl FnMut(Named)) -> bool {
        if !HOST[b as usize] {
            if self.cap.is_some() {
                self.capture_byte(b, found);
            }
            if self.tok.active {
                self.end_token(b, found);
            }
            self.prev.push(b);
            return true;
        }
        if !self.tok.active {
            self.start_token();
        }
        let tok = &mut self.tok;
        if !tok.wide && !tok.overlong && tok.buf.len() < MAX_TOKEN {
            tok.buf.push(b);
            self.prev.push(b);
            if self.cap.is_some() {
                self.capture_byte(b, found);
            }
            return true;
        }
        false
    }

    #[inline]
    fn start_token(&mut self) {
        let url = self.prev.slashes() && !NOT_URL_BEFORE[self.prev.before() as usize];
        self.tok.start(url, self.prev.last());
    }

    /// Starts a token known to be overlong (more ASCII host bytes than any
    /// name, found by the fast path).
    pub(super) fn start_overlong(&mut self) {
        self.tok.start(false, 0);
        self.tok.overlong = true;
        self.tok.scripts = Scripts::after(b"a");
    }

    /// Ends the token: judges it (`term` is the byte that ended it, 0 for
    /// a non-ASCII character or the end of the stream).
    #[inline]
    pub(super) fn end_token(&mut self, term: u8, found: &mut impl FnMut(Named)) {
        if !self.tok.overlong && !self.tok.buf.is_empty() {
            self.judge_reading_path(self.tok.url, term, found);
        }
        self.tok.active = false;
    }

    /// Appends a run of ASCII host bytes to the open token.
    pub(super) fn token_run(&mut self, run: &[u8], found: &mut impl FnMut(Named)) {
        if self.cap.is_some() {
            for &b in run {
                self.capture_byte(b, found);
            }
        }
        self.prev.extend(run);
        let tok = &mut self.tok;
        if !tok.wide && !tok.overlong && tok.buf.len() + run.len() <= MAX_TOKEN {
            tok.buf.extend_from_slice(run);
            return;
        }
        if tok.wide || tok.overlong {
            let boundary = tok.scripts.ascii(run);
            if tok.overlong {
                if !boundary {
                    return;
                }
                tok.restart(false);
            } else if boundary {
                tok.piece = tok.buf.len();
            }
        }
        let mut rest = run;
        loop {
            let room = MAX_TOKEN - self.tok.buf.len();
            if rest.len() <= room {
                self.tok.buf.extend_from_slice(rest);
                return;
            }
            self.tok.buf.extend_from_slice(&rest[..room]);
            rest = &rest[room..];
            self.overflow(rest, found);
            if self.tok.overlong {
                return;
            }
        }
    }

    /// A byte of a non-ASCII character (or any byte while one is open).
    fn wide_byte(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        match self.utf8.push(b) {
            Decoded::Pending => {}
            Decoded::Char(c) => self.wide_char(c, found),
            Decoded::NotUtf8 => self.not_utf8(found),
            Decoded::Again => {
                self.not_utf8(found);
                self.byte(b, found);
            }
        }
    }

    /// Ends the stream inside a UTF-8 sequence.
    pub(super) fn finish_utf8(&mut self, found: &mut impl FnMut(Named)) {
        if self.utf8.take() {
            self.not_utf8(found);
        }
    }

    /// Bytes that are not UTF-8 end the token, as punctuation does.
    fn not_utf8(&mut self, found: &mut impl FnMut(Named)) {
        self.capture_char(false, found);
        if self.tok.active {
            self.end_token(0, found);
        }
        self.prev.push(0x80);
    }

    pub(super) fn wide_char(&mut self, c: char, found: &mut impl FnMut(Named)) {
        let kind = chars::kind(c);
        match kind {
            // Invisible: as if it were not there, `//` included.
            Kind::Ignore => return,
            Kind::Break => {
                self.capture_char(false, found);
                if self.tok.active {
                    self.end_token(0, found);
                }
            }
            Kind::Host | Kind::Joiner | Kind::Dot => {
                self.capture_char(kind != Kind::Dot, found);
                if !self.tok.active {
                    self.start_token();
                }
                self.token_char(c, kind, found);
            }
        }
        self.prev.push(0x80);
    }

    fn token_char(&mut self, c: char, kind: Kind, found: &mut impl FnMut(Named)) {
        let tok = &mut self.tok;
        if !tok.wide && !tok.overlong {
            tok.scripts = Scripts::after(&tok.buf);
            tok.piece = 0;
        }
        let boundary = if kind == Kind::Dot {
            tok.scripts.dot();
            false
        } else {
            tok.scripts.letter(chars::script(c))
        };
        if tok.overlong {
            if !boundary {
                return;
            }
            tok.restart(true);
        } else if boundary {
            tok.piece = tok.buf.len();
        }
        tok.wide = true;
        let mut utf8 = [0u8; 4];
        let bytes: &[u8] = match kind {
            Kind::Dot => b".",
            _ => c.encode_utf8(&mut utf8).as_bytes(),
        };
        if tok.buf.len() + bytes.len() > MAX_TOKEN {
            self.overflow(&[], found);
            if self.tok.overlong {
                return;
            }
        }
        self.tok.buf.extend_from_slice(bytes);
    }

    /// The token is full and more is coming (`rest`: ASCII bytes of the
    /// current run not yet appended). Judges the pieces before the last
    /// one and keeps that one if it can still become a name.
    fn overflow(&mut self, rest: &[u8], found: &mut impl FnMut(Named)) {
        if !self.tok.wide {
            // One script, longer than any name.
            let mut scripts = Scripts::after(&self.tok.buf);
            scripts.ascii(rest);
            self.tok.scripts = scripts;
            self.tok.overlong = true;
            self.tok.buf.clear();
            return;
        }
        let piece = self.tok.piece;
        if piece > 0 {
            let buf = std::mem::take(&mut self.tok.buf);
            self.judge_text(&buf[..piece], self.tok.url, 0, found);
            self.tok.buf = buf;
        }
        if self.tok.buf.len() - piece > MAX_TOKEN / 2 {
            self.tok.overlong = true;
            self.tok.buf.clear();
        } else {
            self.tok.buf.drain(..piece);
            self.tok.piece = 0;
            self.tok.url = false;
        }
    }
}
