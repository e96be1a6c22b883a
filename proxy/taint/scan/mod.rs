//! The host-name scanner: a streaming, pure reader of response bytes.
//!
//! Owns: finding the host names a person reading the text would read —
//! URLs of any scheme (`scheme://host`), `//host` forms, and bare domain
//! names whose last label is a public suffix (Mozilla's list, via `psl`) —
//! through the encodings a page can hide them in, each normalised exactly
//! as the target normaliser does ([`normalize_host`], IDNA included).
//! Works chunk by chunk, so a name split across chunks is found.
//!
//! Must not: do I/O, allocate per byte, hold more than the current token
//! (at most `MAX_TOKEN` bytes) and a few bytes of decoder state, or
//! decide anything: it reports names; the caller taints them, filters
//! single labels against its allow-lists, and passes or holds bytes.
//!
//! A byte's path, one stage per file:
//! 1. `utf16.rs` — charset: a body that starts with a UTF-16 BOM, or that
//!    the caller declares UTF-16 ([`Scanner::with_charset`] with
//!    [`Charset::Utf16Le`] / [`Charset::Utf16Be`], from the Content-Type
//!    charset), is transcoded to UTF-8 on the fly; a BOM wins over the
//!    label. Anything else passes as it is ([`Charset::Auto`]).
//! 2. `escape.rs` — escapes, decoded once (never twice): `%XX`; `\/`,
//!    `\.`, `\-`; `\xHH`; `\uXXXX` (surrogate pairs too), `\u{X…}`,
//!    `\UXXXXXXXX`; HTML character references `&#46;`, `&#x2e;`, named
//!    ones (`&period;`, `&sol;`, `&shy;`, `&uuml;`, …; without the `;` for
//!    the legacy names and numeric references, as browsers accept them).
//!    A run of backslashes reads as one (`\\.` in JSON-quoted regexes).
//! 3. `chars.rs` — characters: UTF-8 is decoded and each character sorted
//!    by what a reader makes of it (`unicode.rs` holds the tables):
//!    letters, digits and marks of any script are host characters (and
//!    U+00B7, for IDNA's Catalan `l·l`); U+3002, U+FF0E, U+FF61 and the
//!    look-alike U+FE52 are dots; invisible format characters (zero-width
//!    space, word joiner, soft hyphen, BOM, bidi controls, variation
//!    selectors) are skipped; ZWJ/ZWNJ are kept (IDNA keeps them after a
//!    virama); whitespace, punctuation, symbols and emoji, other numbers
//!    (`²`, `①`), controls and private-use characters end a token, and so
//!    do bytes that are not UTF-8 (a windows-1252 quote or no-break space,
//!    GBK or Shift_JIS text, binary), so a Latin-1 `b\xfccher.de` reads as
//!    `cher.de`.
//! 4. `token.rs` — the token in progress, with where its script changes.
//! 5. `judge.rs` — whether a finished token is, or holds, a host name.
//!
//! Plain ASCII takes a shortcut past stages 2–4: `classify.rs` sorts 64
//! bytes at a time into host bytes, dots and stops (escape starts,
//! non-ASCII, `//`) with SSE2 compares, and `fast.rs` walks those masks,
//! handing each dotted token that a plain byte ends to the judge. At a
//! stop it hands over to the byte path at the start of the token there.
//! Both paths report exactly the same names (`properties.rs`, the
//! `taint_scan` fuzz target).
//!
//! Decided and documented:
//! - e-mail addresses: the domain after `@` counts as a bare domain;
//! - version numbers (`1.2.3`) and IP literals are not hosts;
//! - file names are hosts only when their extension is a public suffix
//!   (`readme.md` and `setup.py` are, `index.html` and `app.js` are not):
//!   a false taint only refuses bodies to a host nobody meant to reach;
//! - URL context is `scheme://`, or `//` at the start or after a character
//!   that cannot be inside base64 (`"//`, `=//`, `(//`, ` //`, `“//`, JSON
//!   `:\/\/`; an invisible character between or after the slashes is
//!   skipped). In it any valid name counts, single labels too
//!   (`http://intranet/` reports `intranet`; the caller filters single
//!   labels against its allow-lists). A `//` after a letter, digit, `+`,
//!   `/`, `-` or `_` is inside base64 or a path (`sha512-ab//cd==`,
//!   `file:///`, `-//W3C//DTD`), and one after a control is binary: they
//!   give no URL context;
//! - fragments of base64 or hex are not names: a single label in URL
//!   context is dropped when `+` or `=` follows it (base64 goes on) or when
//!   it is 8 or more hex digits with a digit among them (a digest); bare
//!   names need a dot and a public suffix, which base64 and hex never have;
//! - non-ASCII labels count as their IDNA form; a symbol-only label
//!   (`☃.net`) is not found, since symbols end tokens, and neither is one
//!   glued to text of its own script (`访问中国.cn` reads as one word);
//! - binary bodies (images, fonts) yield a few random short names per MB,
//!   as any text-blind reading of bytes does; archives are decoded by the
//!   caller before they get here;
//! - glued text: a token whose script changes between two letters with no
//!   dot between them (`请访问paste.example.com获取`, `сайтpaste.example.com`)
//!   is judged whole and piece by piece; a token with non-ASCII characters
//!   that yields no name is also judged by its ASCII runs. Latin letters
//!   with diacritics and full-width Latin count as the same script as
//!   ASCII, so `bücher.de` stays one name (`xn--bcher-kva.de`, never
//!   `cher.de`);
//! - a token longer than `MAX_TOKEN` (1024) bytes is not a name, but a script
//!   change inside it starts a new token (padding cannot hide a name);
//! - [`Scanner::peek`] reports the name in progress at a chunk end only
//!   when it is already a bare domain with a known public suffix and a
//!   label before it (`paste.example.co`, not `paste.exa` or
//!   `files.pyt`): the full name is still reported when its last byte
//!   arrives, before it is passed on. A name that counts only in URL
//!   context (a single label, an unknown suffix) is reported when the byte
//!   after it arrives.
//!
//! Chunk independence: without `peek`, the names found over a stream are
//! the same however it is split; with `peek` at chunk ends, the only
//! additions are prefixes of names that are valid bare domains themselves.
//!
//! [`normalize_host`]: crate::policy::target::normalize_host

use std::collections::HashSet;
use std::sync::Arc;

mod chars;
mod classify;
mod entities;
mod escape;
mod fast;
mod judge;
pub(crate) mod memo;
mod pad;
mod path;
mod token;
mod triggers;
mod unicode;
mod utf16;

#[cfg(test)]
mod cases;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

pub use crate::policy::names::Named;
pub(crate) use crate::policy::names::Seen;
pub use utf16::Charset;

use chars::Utf8;
use escape::Escape;
use token::Token;
use triggers::Triggers;
use utf16::Front;

/// Longest token judged, in bytes (a DNS name is at most 253 bytes; IDN
/// text in UTF-8 can take up to four bytes a character).
const MAX_TOKEN: usize = 1024;

/// Distinct tokens remembered per stream.
const SEEN_MAX: usize = 4096;

/// ASCII bytes that can be part of a host name token (bytes ≥ 0x80 are
/// decoded as characters first).
static HOST: [bool; 256] = byte_table(b"-._", true);

/// ASCII bytes that end a token and start no escape.
static PLAIN_END: [bool; 256] = plain_end_table();

const fn byte_table(extra: &[u8], alnum: bool) -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 128 {
        t[i] = alnum && (i as u8).is_ascii_alphanumeric();
        i += 1;
    }
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
}

const fn plain_end_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 128 {
        let b = i as u8;
        t[i] = !HOST[i] && b != b'%' && b != b'\\' && b != b'&';
        i += 1;
    }
    t
}

/// Streaming host scanner. Feed it chunks; it reports each host name it
/// completes, and (through [`Scanner::peek`]) the name in progress at the
/// end of a chunk.
#[derive(Debug)]
pub struct Scanner {
    /// BOM sniffing at stream start, then UTF-16 transcoding or nothing.
    front: Front,
    /// The escape being read (`%2`, `\u00`, `&#x`, …).
    escape: Escape,
    /// The letters of a named character reference being read (`&perio`).
    entity: [u8; escape::MAX_ENTITY],
    /// A UTF-8 sequence split across bytes (or chunks).
    utf8: Utf8,
    /// The token being read.
    tok: Token,
    /// The last three decoded bytes, non-ASCII characters as 0x80 and
    /// invisible ones skipped: `//` and the byte before it decide URL
    /// context.
    prev: Prev,
    /// Tokens already judged in this stream (bounded): a page names the
    /// same hosts again and again, and each is judged once.
    seen: HashSet<Vec<u8>, foldhash::fast::RandomState>,
    /// Tokens the connection's earlier responses judged (their names are
    /// in the taint set): skipped like `seen`'s.
    memo: Option<Arc<memo::Memo>>,
    /// Whether plain ASCII goes through the 64-byte fast path (`fast.rs`);
    /// off only to compare the two paths.
    fast_path: bool,
    /// Multi-tenant hosts whose path is read (`path.rs`), if any.
    owners: Option<path::OwnerHosts>,
    /// The path being read after one of them.
    cap: Option<path::Capture>,
    /// Binary content (an executable, an image): bare names there are
    /// reported as [`Seen::Weak`] (they count only where an allow-list
    /// names them); names in URL context count.
    urls_only: bool,
    /// Padding bytes (`-`, `_`, `.`) in a row at the last chunk's end.
    pad: usize,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::with_charset(Charset::Auto)
    }
}

impl Scanner {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A scanner for a body in `charset` (from the Content-Type); a BOM
    /// at the start of the body wins over it.
    pub fn with_charset(charset: Charset) -> Self {
        Scanner {
            front: Front::new(charset),
            escape: Escape::Plain,
            entity: [0; escape::MAX_ENTITY],
            utf8: Utf8::default(),
            tok: Token::default(),
            prev: Prev::default(),
            seen: HashSet::default(),
            memo: None,
            fast_path: true,
            owners: None,
            cap: None,
            urls_only: false,
            pad: 0,
        }
    }

    /// Reads the path after these (normalised) hosts, so that their names
    /// come with it (`Named::path`): the multi-tenant hosts of SPEC §4.
    pub fn with_owner_hosts(mut self, hosts: Option<Arc<[Box<str>]>>) -> Self {
        self.owners = hosts.filter(|h| !h.is_empty());
        self
    }

    /// Skips tokens `memo` holds (see `memo.rs`).
    pub(crate) fn with_memo(mut self, memo: Option<Arc<memo::Memo>>) -> Self {
        self.memo = memo;
        self
    }

    /// Forgets which tokens this stream judged: each is judged again
    /// when next seen (under the settings of that moment).
    pub(crate) fn forget_seen(mut self) -> Self {
        self.seen.clear();
        self
    }

    /// The tokens this stream judged (not those its memo held), for the
    /// connection's memo; the stream forgets them.
    pub(crate) fn take_seen(&mut self) -> memo::Seen {
        std::mem::take(&mut self.seen)
    }

    /// The text is the printable strings of binary content (an
    /// executable, an image, a font): bare names are [`Seen::Weak`].
    pub(crate) fn urls_only(mut self, on: bool) -> Self {
        self.urls_only = on;
        self
    }

    /// The same scanner with the 64-byte fast path off: every byte goes
    /// through the byte path. It finds exactly the same names (the
    /// property tests and the `taint_scan` fuzz target check it); it
    /// exists for them.
    #[doc(hidden)]
    pub fn byte_path_only(mut self) -> Self {
        self.fast_path = false;
        self
    }

    /// Scans one chunk. `found` receives normalised host names; the same
    /// name may be reported more than once.
    pub fn feed(&mut self, chunk: &[u8], found: &mut impl FnMut(Named)) {
        match self.front {
            Front::Bytes => self.feed_bytes(chunk, found),
            _ => self.feed_front(chunk, found),
        }
    }

    /// Reports the name in progress without ending it, if it is already a
    /// bare domain with a known public suffix (see the module notes).
    /// What it reports is held, not kept (the name may still grow), so
    /// it is not remembered as judged: the token is judged again when it
    /// ends.
    pub fn peek(&mut self, found: &mut impl FnMut(Named)) {
        if self.tok.active && !self.tok.overlong {
            let tok = &self.tok;
            // In URL context any valid name counts (SPEC §8: tainted before
            // its last byte is passed on), whatever its suffix.
            let url = tok.url;
            let plausible = if url {
                !tok.buf.is_empty()
            } else if tok.wide {
                memchr::memchr(b'.', &tok.buf).is_some()
            } else {
                judge::plausible_bare(&tok.buf)
            };
            if plausible {
                self.judge_fresh(url, 0, found);
            }
        }
        self.peek_capture(found);
    }

    /// Ends the stream: reads out any escape, sequence or held bytes left
    /// and reports the last token.
    pub fn finish(&mut self, found: &mut impl FnMut(Named)) {
        self.finish_front(found);
        self.finish_escape(found);
        self.finish_utf8(found);
        if self.tok.active {
            self.end_token(0, found);
        }
        self.end_capture(false, found);
    }

    /// Is a multi-byte unit (an escape or a UTF-8 sequence) open?
    fn busy(&self) -> bool {
        !matches!(self.escape, Escape::Plain) || !self.utf8.idle()
    }

    /// Scans bytes after the charset stage.
    ///
    /// Most bytes cannot matter: a host needs a dot in it or a `/` before
    /// it, or an escape or a non-ASCII dot that may give one. So the
    /// scanner jumps with memchr from one such trigger to the next and
    /// steps byte by byte only through the token around a trigger.
    fn feed_run(&mut self, chunk: &[u8], found: &mut impl FnMut(Named)) {
        let n = chunk.len();
        let mut i = 0;
        let mut next = Triggers::new();
        // The fast path is not tried again before this.
        let mut fast_from = 0;
        while i < n {
            if self.busy() {
                self.step(chunk[i], found);
                i += 1;
                continue;
            }
            if self.tok.active {
                // Take the whole run of ASCII host bytes at once; the byte
                // that ends it goes through the state machine.
                let run = chunk[i..]
                    .iter()
                    .position(|&b| !HOST[b as usize])
                    .unwrap_or(n - i);
                if run > 0 {
                    self.token_run(&chunk[i..i + run], found);
                    i += run;
                }
                if i < n && chunk[i] < 0x80 {
                    self.step(chunk[i], found);
                    i += 1;
                } else if i < n {
                    i = self.step_char(chunk, i, found);
                }
                continue;
            }
            // Right after `//` a URL host may follow, dot or not; after a
            // multi-tenant host, its path is read.
            if self.prev.slashes() || self.cap.is_some() {
                self.step(chunk[i], found);
                i += 1;
                continue;
            }
            if i >= fast_from {
                (i, fast_from) = self.fast(chunk, i, found);
                if self.cap.is_some() {
                    // A path to read: the byte path's, from here.
                    continue;
                }
            }
            let Some(p) = next.find(chunk, i) else {
                self.tail(&chunk[i..], found);
                return;
            };
            i = self.at_trigger(chunk, i, p, found);
        }
    }

    /// Handles the trigger at `p`, with `chunk[i..p]` free of triggers and
    /// the scanner outside any token at `i`; returns where to go on.
    fn at_trigger(
        &mut self,
        chunk: &[u8],
        i: usize,
        p: usize,
        found: &mut impl FnMut(Named),
    ) -> usize {
        // The token around the trigger starts after the last non-host
        // byte. A `/` starts nothing: outside a token it only goes into
        // `prev`; so does a `%`, `\\` or `&` that starts no escape.
        let mut s = p;
        let trigger = chunk[p];
        if trigger == b'/' || (trigger != b'.' && plain_escape_start(chunk, p)) {
            if p == i || chunk[p - 1] < 0x80 || trigger != b'/' {
                self.prev.extend(&chunk[i..=p]);
                return p + 1;
            }
        } else {
            while s > i && HOST[chunk[s - 1] as usize] && p - s < MAX_TOKEN {
                s -= 1;
            }
            if s > i && HOST[chunk[s - 1] as usize] {
                // More ASCII host bytes than any name has.
                self.prev.extend(&chunk[i..p]);
                self.start_overlong();
                return p;
            }
        }
        // A non-ASCII character before may belong to this token or be
        // invisible (`/\u{200b}/` reads as `//`): step from the last place
        // the state is known, unless it surely ends the token.
        if s > i && chunk[s - 1] >= 0x80 && !chars::ends_token(&chunk[i..s], Some(chunk[s])) {
            let mut t = s - 1;
            while t > i && (HOST[chunk[t - 1] as usize] || chunk[t - 1] >= 0x80) {
                t -= 1;
            }
            self.prev.extend(&chunk[i..t]);
            let mut k = t;
            while k <= p {
                k = self.step_char(chunk, k, found);
            }
            return k;
        }
        if chunk[p] == b'.' {
            if let Some(next) = self.judge_in_chunk(chunk, i, s, p, found) {
                return next;
            }
        }
        self.prev.extend(&chunk[i..s]);
        self.step(chunk[s], found);
        s + 1
    }

    /// The fast path: a dot at `p` whose ASCII token (from `s`) lies in
    /// this chunk and ends at a byte that surely ends it (not an escape or
    /// a character that could continue it) is judged straight from the
    /// chunk. No `/` lies between `i` and `p`, so the token is bare.
    /// Returns where to go on, or None to step through it instead.
    #[inline]
    fn judge_in_chunk(
        &mut self,
        chunk: &[u8],
        i: usize,
        s: usize,
        p: usize,
        found: &mut impl FnMut(Named),
    ) -> Option<usize> {
        let e = p + chunk[p..]
            .iter()
            .position(|&b| !HOST[b as usize])
            .unwrap_or(chunk.len() - p);
        // What ends the token: a plain ASCII byte, or a non-ASCII
        // character that surely ends it (then `prev` records 0x80).
        let (len, last) = match *chunk.get(e)? {
            b if PLAIN_END[b as usize] || plain_escape_start(chunk, e) => (1, b),
            b if b >= 0x80 => (chars::breaks_at(&chunk[e..])?, 0x80),
            _ => return None,
        };
        if e - s > MAX_TOKEN {
            return None;
        }
        let before = if s > i {
            chunk[s - 1]
        } else {
            self.prev.last()
        };
        self.judge_ascii(
            &chunk[s..e],
            before,
            if last < 0x80 { last } else { 0 },
            found,
        );
        self.prev.extend(&chunk[i..e]);
        self.prev.push(last);
        Some(e + len)
    }

    /// Judges a whole bare ASCII token taken from a chunk, ended by
    /// `term` (0 for a non-ASCII character). Most such tokens cannot be
    /// bare names (file names, versions): they are rejected before they
    /// are copied.
    #[inline]
    fn judge_ascii(&mut self, token: &[u8], before: u8, term: u8, found: &mut impl FnMut(Named)) {
        if judge::plausible_bare(token) {
            self.judge_known(token, before, term, found);
        }
    }

    /// Judges a bare ASCII token already known to be plausible.
    #[inline]
    fn judge_known(&mut self, token: &[u8], before: u8, term: u8, found: &mut impl FnMut(Named)) {
        self.tok.set_ascii(token, before);
        if path::starts_path(term) && self.owners.is_some() {
            self.judge_reading_path(false, term, found);
        } else {
            self.judge_plausible(false, term, found);
        }
        self.tok.active = false;
    }

    /// The rest of a chunk holds no trigger: only a trailing token
    /// matters, as the start of one the next chunk may finish.
    fn tail(&mut self, rest: &[u8], found: &mut impl FnMut(Named)) {
        let mut s = rest.len();
        while s > 0 && HOST[rest[s - 1] as usize] && rest.len() - s <= MAX_TOKEN {
            s -= 1;
        }
        if s > 0 && rest[s - 1] >= 0x80 && !chars::ends_token(&rest[..s], rest.get(s).copied()) {
            while s > 0 && (HOST[rest[s - 1] as usize] || rest[s - 1] >= 0x80) {
                s -= 1;
            }
        }
        self.prev.extend(&rest[..s]);
        while s < rest.len() {
            s = self.step_char(rest, s, found);
        }
    }

    /// Steps the byte at `k`, or the whole character that starts there
    /// when it is complete UTF-8 and nothing is open; returns where the
    /// next one starts.
    #[inline]
    fn step_char(&mut self, bytes: &[u8], k: usize, found: &mut impl FnMut(Named)) -> usize {
        if bytes[k] >= 0x80 && !self.busy() {
            if let Some((c, len)) = chars::decode(&bytes[k..]) {
                self.wide_char(c, found);
                return k + len;
            }
        }
        self.step(bytes[k], found);
        k + 1
    }
}

/// Is the `%`, `\\` or `&` at `p` plain punctuation, the byte after it
/// (in this chunk) being one no escape goes on with?
#[inline]
fn plain_escape_start(chunk: &[u8], p: usize) -> bool {
    matches!(chunk[p], b'%' | b'\\' | b'&')
        && chunk
            .get(p + 1)
            .is_some_and(|&b| !escape::continues(chunk[p], b))
}

/// The last three bytes, packed (one store a byte, no partial-register
/// stalls): the oldest in bits 16..24. The stream starts after spaces.
#[derive(Clone, Copy, Debug)]
struct Prev(u32);

impl Default for Prev {
    fn default() -> Self {
        Prev(0x20_2020)
    }
}

impl Prev {
    #[inline]
    fn push(&mut self, b: u8) {
        self.0 = (self.0 << 8 | u32::from(b)) & 0xff_ffff;
    }

    /// The stream went on with `bytes`.
    #[inline]
    fn extend(&mut self, bytes: &[u8]) {
        if let [.., a, b, c] = *bytes {
            self.0 = u32::from_be_bytes([0, a, b, c]);
        } else {
            for &b in bytes {
                self.push(b);
            }
        }
    }

    /// Do the last two bytes read `//`?
    #[inline]
    fn slashes(self) -> bool {
        self.0 & 0xffff == 0x2f2f
    }

    /// The last byte.
    #[inline]
    fn last(self) -> u8 {
        self.0 as u8
    }

    /// The byte before the last two.
    fn before(self) -> u8 {
        (self.0 >> 16) as u8
    }
}

/// Scans a whole buffer (tests): every host found, however written.
pub fn scan_all(bytes: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = scan_names(bytes, None)
        .into_iter()
        .map(|n| n.host)
        .collect();
    out.dedup();
    out
}

/// Scans a whole buffer (headers, tests), reading the path after
/// `owners`: each name found with how it was written, sorted, once.
pub(crate) fn scan_names(bytes: &[u8], owners: Option<Arc<[Box<str>]>>) -> Vec<Named> {
    let mut s = Scanner::new().with_owner_hosts(owners);
    let mut out = Vec::new();
    s.feed(bytes, &mut |h| out.push(h));
    s.finish(&mut |h| out.push(h));
    out.sort_by(|a, b| (&a.host, &a.path, a.seen as u8).cmp(&(&b.host, &b.path, b.seen as u8)));
    out.dedup();
    out
}

// Declared last so the lines above keep the numbers
// docs/scanner-mutants.md cites.
#[cfg(test)]
mod edges;
