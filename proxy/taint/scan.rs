//! The host-name scanner: a streaming, pure reader of response bytes.
//!
//! Finds host names in URLs of any scheme (`scheme://host`), `//host`
//! forms, JSON-escaped `https:\/\/host`, percent-encoded
//! `https%3A%2F%2Fhost`, `\u002F`-escaped forms, and bare domain names
//! whose last label is a public suffix (Mozilla's list, via `psl`).
//! Works chunk by chunk with a few bytes of state, so a name split across
//! chunks is found, and nothing is buffered but the current token.
//!
//! Decided and documented:
//! - e-mail addresses: the domain after `@` counts as a bare domain (it is
//!   named, and tainting it costs nothing);
//! - version numbers (`1.2.3`) and IP literals are not hosts;
//! - file names are hosts only when their extension is a public suffix
//!   (`readme.md` and `setup.py` are, `index.html` and `app.js` are not):
//!   a false taint only refuses bodies to a host nobody meant to reach;
//! - in URL context (`//` before the token) any valid name counts, even one
//!   without a dot (`http://intranet/`).
//!
//! Must not do I/O, allocate per byte, or decide anything.

use std::collections::HashSet;

use crate::policy::target::normalize_host;
use crate::policy::Host;

/// Longest token considered (a DNS name is at most 253 bytes; IDN text in
/// UTF-8 can take up to four bytes a character).
const MAX_TOKEN: usize = 1024;

/// Bytes that can be part of a host name token. Bytes ≥ 0x80 are UTF-8 of
/// internationalised names.
const fn host_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_' || b >= 0x80;
        i += 1;
    }
    t
}
static HOST_BYTE: [bool; 256] = host_table();

/// The unescaping front end: `%XX`, `\/` and `\uXXXX` decoded on the fly.
#[derive(Clone, Copy, Debug, Default)]
enum Escape {
    #[default]
    Plain,
    /// After `%`, with n hex digits read.
    Percent { n: u8, val: u8 },
    /// After `\`.
    Backslash,
    /// After `\u`, with n hex digits read.
    Unicode { n: u8, val: u32 },
}

/// Streaming host scanner. Feed it chunks; it reports each host name it
/// completes, and at the end of every chunk the name in progress (so a host
/// is known before the last byte of its name is passed on).
#[derive(Debug)]
pub struct Scanner {
    escape: Escape,
    token: Vec<u8>,
    in_token: bool,
    overlong: bool,
    url_context: bool,
    /// The two bytes before the current position (for `//`).
    prev: [u8; 2],
    /// Tokens already judged in this stream (bounded): a page names the
    /// same hosts again and again, and each is reported once.
    seen: HashSet<Vec<u8>>,
}

/// Distinct tokens remembered per stream.
const SEEN_MAX: usize = 4096;

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            escape: Escape::Plain,
            token: Vec::with_capacity(64),
            in_token: false,
            overlong: false,
            url_context: false,
            prev: [0; 2],
            seen: HashSet::new(),
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

impl Scanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scans one chunk. `found` receives normalised host names; the same
    /// name may be reported more than once.
    ///
    /// Most bytes cannot matter: a host needs a `.` in it or a `/` (or an
    /// escape, `%` or `\\`) before it. So the scanner jumps with memchr
    /// from one such trigger to the next, and only steps byte by byte
    /// through the token around a trigger.
    pub fn feed(&mut self, chunk: &[u8], found: &mut impl FnMut(String)) {
        let n = chunk.len();
        let mut i = 0;
        // Next backslash at or after i (memchr3 takes three needles).
        let mut next_bs = memchr::memchr(b'\\', chunk);
        while i < n {
            if !matches!(self.escape, Escape::Plain) {
                self.step(chunk[i], found);
                i += 1;
                continue;
            }
            if self.in_token {
                // Take the whole run of host bytes at once; the byte that
                // ends it (maybe an escape) goes through the state machine.
                let run = chunk[i..]
                    .iter()
                    .position(|&b| !HOST_BYTE[b as usize])
                    .unwrap_or(n - i);
                self.extend_token(&chunk[i..i + run]);
                i += run;
                if i < n {
                    self.step(chunk[i], found);
                    i += 1;
                }
                continue;
            }
            // Right after `//` a URL host follows, dot or not.
            if self.prev == *b"//" {
                self.step(chunk[i], found);
                i += 1;
                continue;
            }
            if next_bs.is_some_and(|b| b < i) {
                next_bs = memchr::memchr(b'\\', &chunk[i..]).map(|b| b + i);
            }
            let trig = memchr::memchr3(b'.', b'/', b'%', &chunk[i..]).map(|t| t + i);
            let p = match (trig, next_bs) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(p) => p,
                    None => {
                        self.tail(&chunk[i..], found);
                        return;
                    }
                },
            };
            // The token around a dot (or an escape, which may decode to
            // one) starts at the last non-host byte.
            let mut s = p;
            if chunk[p] != b'/' {
                while s > i && HOST_BYTE[chunk[s - 1] as usize] && p - s < MAX_TOKEN {
                    s -= 1;
                }
                if s > i && HOST_BYTE[chunk[s - 1] as usize] {
                    // A run longer than any name: not a host.
                    self.prev = prev_after(self.prev, &chunk[i..p]);
                    self.in_token = true;
                    self.overlong = true;
                    self.token.clear();
                    i = p;
                    continue;
                }
            }
            // Fast path: a dot whose whole token lies in this chunk and
            // ends at a plain byte (not an escape, which could continue
            // it) is judged straight from the chunk, without stepping the
            // state machine byte by byte. No `/`, `%` or `\\` lies between
            // i and p, so the token is bare (no URL context) and unescaped.
            if chunk[p] == b'.' {
                let e = p + chunk[p..]
                    .iter()
                    .position(|&b| !HOST_BYTE[b as usize])
                    .unwrap_or(n - p);
                if e < n && e - s <= MAX_TOKEN && chunk[e] != b'%' && chunk[e] != b'\\' {
                    self.token.clear();
                    self.token.extend_from_slice(&chunk[s..e]);
                    self.url_context = false;
                    self.overlong = false;
                    self.report(found);
                    self.prev = [chunk[e - 1], chunk[e]];
                    i = e + 1;
                    continue;
                }
            }
            self.prev = prev_after(self.prev, &chunk[i..s]);
            // Start the token (or take the trigger); the loop goes on.
            self.step(chunk[s], found);
            i = s + 1;
        }
    }

    /// Appends host bytes to the open token.
    fn extend_token(&mut self, bytes: &[u8]) {
        let room = MAX_TOKEN.saturating_sub(self.token.len());
        if bytes.len() > room {
            self.token.extend_from_slice(&bytes[..room]);
            self.overlong = true;
        } else {
            self.token.extend_from_slice(bytes);
        }
        self.prev = prev_after(self.prev, bytes);
    }

    /// The rest of a chunk holds no trigger: only a trailing run of host
    /// bytes matters, as the start of a token the next chunk may finish.
    fn tail(&mut self, rest: &[u8], found: &mut impl FnMut(String)) {
        let mut s = rest.len();
        while s > 0 && HOST_BYTE[rest[s - 1] as usize] && rest.len() - s <= MAX_TOKEN {
            s -= 1;
        }
        self.prev = prev_after(self.prev, &rest[..s]);
        for &b in &rest[s..] {
            self.step(b, found);
        }
    }

    /// Reports the name in progress without ending it.
    pub fn peek(&mut self, found: &mut impl FnMut(String)) {
        if self.in_token {
            self.report(found);
        }
    }

    /// Ends the stream: reports the last token.
    pub fn finish(&mut self, found: &mut impl FnMut(String)) {
        // A partial escape at the very end cannot start a host.
        self.escape = Escape::Plain;
        if self.in_token {
            self.report(found);
            self.in_token = false;
        }
    }

    /// One byte through the unescaping front end.
    #[inline]
    fn step(&mut self, b: u8, found: &mut impl FnMut(String)) {
        if matches!(self.escape, Escape::Plain) && b != b'%' && b != b'\\' {
            self.byte(b, found);
        } else {
            self.escaped(b, found);
        }
    }

    fn escaped(&mut self, b: u8, found: &mut impl FnMut(String)) {
        match self.escape {
            Escape::Plain => match b {
                b'%' => self.escape = Escape::Percent { n: 0, val: 0 },
                b'\\' => self.escape = Escape::Backslash,
                _ => self.byte(b, found),
            },
            Escape::Percent { n, val } => match hex(b) {
                Some(h) if n == 1 => {
                    self.escape = Escape::Plain;
                    self.byte(val << 4 | h, found);
                }
                Some(h) => self.escape = Escape::Percent { n: 1, val: h },
                None => {
                    // Not an escape: the `%` ends any token; re-read b.
                    self.escape = Escape::Plain;
                    self.byte(b'%', found);
                    self.escaped(b, found);
                }
            },
            Escape::Backslash => match b {
                b'/' => {
                    self.escape = Escape::Plain;
                    self.byte(b'/', found);
                }
                b'u' | b'U' => self.escape = Escape::Unicode { n: 0, val: 0 },
                _ => {
                    self.escape = Escape::Plain;
                    self.byte(b'\\', found);
                    self.escaped(b, found);
                }
            },
            Escape::Unicode { n, val } => match hex(b) {
                Some(h) if n == 3 => {
                    self.escape = Escape::Plain;
                    let c = char::from_u32(val << 4 | u32::from(h)).unwrap_or('\u{fffd}');
                    let mut buf = [0u8; 4];
                    for &x in c.encode_utf8(&mut buf).as_bytes() {
                        self.byte(x, found);
                    }
                }
                Some(h) => {
                    self.escape = Escape::Unicode {
                        n: n + 1,
                        val: val << 4 | u32::from(h),
                    }
                }
                None => {
                    self.escape = Escape::Plain;
                    self.byte(b'\\', found);
                    self.escaped(b, found);
                }
            },
        }
    }

    #[inline]
    fn byte(&mut self, b: u8, found: &mut impl FnMut(String)) {
        if HOST_BYTE[b as usize] {
            if !self.in_token {
                self.in_token = true;
                self.overlong = false;
                self.token.clear();
                self.url_context = self.prev == *b"//";
            }
            if self.token.len() < MAX_TOKEN {
                self.token.push(b);
            } else {
                self.overlong = true;
            }
        } else if self.in_token {
            self.report(found);
            self.in_token = false;
        }
        self.prev = [self.prev[1], b];
    }

    /// Reports the current token if it is a host name.
    fn report(&mut self, found: &mut impl FnMut(String)) {
        if self.overlong || self.token.is_empty() {
            return;
        }
        // Bare tokens that cannot end in a public suffix are rejected at
        // once; the rest are judged once per stream.
        if !self.url_context && !plausible_bare(&self.token) {
            return;
        }
        self.token.push(self.url_context as u8);
        let known = self.seen.contains(&self.token);
        if !known && self.seen.len() < SEEN_MAX {
            self.seen.insert(self.token.clone());
        }
        self.token.pop();
        if known {
            return;
        }
        if memchr::memmem::find(&self.token, b"..").is_none() {
            if let Some(h) = host_of(&self.token, self.url_context) {
                found(h);
            }
            return;
        }
        // An ellipsis joins names ("see a.example.com...b.example.org"):
        // judge each piece; only the first keeps the URL context.
        let mut url_context = self.url_context;
        let mut start = 0;
        let t = &self.token;
        let mut i = 0;
        while i <= t.len() {
            let at_break = i == t.len() || (t[i] == b'.' && t.get(i + 1) == Some(&b'.'));
            if at_break {
                if let Some(h) = host_of(&t[start..i], url_context) {
                    found(h);
                }
                url_context = false;
                while i < t.len() && t[i] == b'.' {
                    i += 1;
                }
                start = i;
                if i == t.len() {
                    break;
                }
            } else {
                i += 1;
            }
        }
    }
}

/// Could this token be a bare domain? It needs a dot, and a last label
/// that is a known top-level suffix (non-ASCII labels go on to IDNA).
fn plausible_bare(token: &[u8]) -> bool {
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
    let last = &t[dot + 1..];
    if !last.is_ascii() {
        return true;
    }
    let mut buf = [0u8; 63];
    let Some(label) = buf.get_mut(..last.len()) else {
        return false;
    };
    label.copy_from_slice(last);
    label.make_ascii_lowercase();
    psl::suffix(label).is_some_and(|s| s.is_known())
}

/// The last two bytes of the stream after `bytes` follow `prev`.
fn prev_after(prev: [u8; 2], bytes: &[u8]) -> [u8; 2] {
    match bytes {
        [] => prev,
        [b] => [prev[1], *b],
        [.., a, b] => [*a, *b],
    }
}

/// Is this token a host name? Returns it normalised.
fn host_of(token: &[u8], url_context: bool) -> Option<String> {
    let trim = |b: &u8| matches!(b, b'.' | b'-' | b'_');
    let start = token.iter().position(|b| !trim(b))?;
    let end = token.len() - token.iter().rev().position(|b| !trim(b))?;
    let t = &token[start..end];
    let s = std::str::from_utf8(t).ok()?;
    match normalize_host(s) {
        Ok(Host::Name(n)) if url_context || bare_domain(&n) => Some(n),
        _ => None,
    }
}

/// A bare name counts when its suffix is on the public suffix list and
/// there is a label in front of it (`example.com`, not `com` or `co.uk`).
fn bare_domain(name: &str) -> bool {
    match psl::suffix(name.as_bytes()) {
        Some(s) if s.is_known() => psl::domain(name.as_bytes()).is_some(),
        _ => false,
    }
}

/// Scans a whole buffer (headers, tests).
pub fn scan_all(bytes: &[u8]) -> Vec<String> {
    let mut s = Scanner::new();
    let mut out = Vec::new();
    s.feed(bytes, &mut |h| out.push(h));
    s.finish(&mut |h| out.push(h));
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(s: &str) -> Vec<String> {
        scan_all(s.as_bytes())
    }

    #[test]
    fn forms_table() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "https url",
                "see https://paste.example.com/x?y",
                &["paste.example.com"],
            ),
            (
                "url with port",
                "http://paste.example.com:8080/",
                &["paste.example.com"],
            ),
            (
                "other scheme",
                "wss://ws.example.net/socket",
                &["ws.example.net"],
            ),
            (
                "ftp scheme",
                "ftp://files.example.org",
                &["files.example.org"],
            ),
            (
                "scheme-relative",
                "<script src=\"//cdn.example.net/a.js\">",
                &["cdn.example.net"],
            ),
            (
                "json escaped",
                r#"{"u":"https:\/\/paste.example.com\/x"}"#,
                &["paste.example.com"],
            ),
            (
                "percent encoded",
                "?next=https%3A%2F%2Fpaste.example.com%2Fx",
                &["paste.example.com"],
            ),
            (
                "percent lower",
                "https%3a%2f%2fpaste.example.com",
                &["paste.example.com"],
            ),
            (
                "percent dots",
                "paste%2Eexample%2Ecom",
                &["paste.example.com"],
            ),
            (
                "unicode escaped",
                r#""https:\u002F\u002Fpaste.example.com""#,
                &["paste.example.com"],
            ),
            (
                "bare domain",
                "post it to paste.example.com now",
                &["paste.example.com"],
            ),
            (
                "bare domain end of sentence",
                "Send it to paste.example.com.",
                &["paste.example.com"],
            ),
            (
                "upper case",
                "HTTPS://PASTE.EXAMPLE.COM/",
                &["paste.example.com"],
            ),
            (
                "idn url",
                "https://bücher.example/",
                &["xn--bcher-kva.example"],
            ),
            ("idn bare", "visit bücher.de today", &["xn--bcher-kva.de"]),
            ("punycode", "xn--bcher-kva.de", &["xn--bcher-kva.de"]),
            (
                "email domain",
                "mail admin@corp.example.com",
                &["corp.example.com"],
            ),
            (
                "userinfo",
                "https://user:pw@evil.example.com/",
                &["evil.example.com", "user"],
            ),
            ("single label in url", "http://intranet/wiki", &["intranet"]),
            ("version number", "version 1.2.3 and v10.4.1", &[]),
            ("ip literal", "http://127.0.0.1/ and 10.0.0.1", &[]),
            ("file names", "index.html app.js main.css", &[]),
            (
                "file name with tld extension",
                "see readme.md",
                &["readme.md"],
            ),
            ("bare suffix only", "co.uk com", &[]),
            ("unknown tld", "foo.notatld", &[]),
            (
                "unknown tld in url",
                "http://foo.internal/",
                &["foo.internal"],
            ),
            (
                "leading dots trimmed",
                "..paste.example.com",
                &["paste.example.com"],
            ),
            (
                "two hosts",
                "a.example.com,b.example.org",
                &["a.example.com", "b.example.org"],
            ),
            (
                "html attribute",
                "<a href='https://x.example.com'>",
                &["x.example.com"],
            ),
            (
                "percent not escape",
                "100%sure.example.com",
                &["sure.example.com"],
            ),
            (
                "backslash not escape",
                r"C:\path\host.example.com",
                &["host.example.com"],
            ),
            ("nothing", "plain words only", &[]),
        ];
        for (what, input, want) in cases {
            let got = hosts(input);
            let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            assert_eq!(got, want, "case {what:?}: {input:?}");
        }
    }

    #[test]
    fn host_split_across_chunks() {
        let text = b"see https://paste.example.com/x and more.example.org.";
        let whole = scan_all(text);
        for split in 1..text.len() {
            let mut s = Scanner::new();
            let mut out = Vec::new();
            s.feed(&text[..split], &mut |h| out.push(h));
            s.feed(&text[split..], &mut |h| out.push(h));
            s.finish(&mut |h| out.push(h));
            // Every full host is found at every split; partial prefixes may
            // be reported too (over-tainting is the safe side).
            for h in &whole {
                assert!(out.contains(h), "split at {split}: {out:?}");
            }
        }
    }

    #[test]
    fn name_in_progress_is_reported_at_chunk_end() {
        let mut s = Scanner::new();
        let mut out = Vec::new();
        s.feed(b"post to https://paste.example.com", &mut |h| out.push(h));
        assert!(out.is_empty());
        s.peek(&mut |h| out.push(h));
        assert_eq!(out, vec!["paste.example.com"]);
    }

    #[test]
    fn escapes_split_across_chunks() {
        let text = b"x=https%3A%2F%2Fpaste.example.com&y=https:\\/\\/z.example.net";
        for split in 1..text.len() {
            let mut s = Scanner::new();
            let mut out = Vec::new();
            s.feed(&text[..split], &mut |h| out.push(h));
            s.feed(&text[split..], &mut |h| out.push(h));
            s.finish(&mut |h| out.push(h));
            assert!(
                out.contains(&"paste.example.com".to_string()),
                "split {split}: {out:?}"
            );
            assert!(
                out.contains(&"z.example.net".to_string()),
                "split {split}: {out:?}"
            );
        }
    }

    /// The reference: every byte through the state machine, no skipping.
    fn slow_hosts(bytes: &[u8]) -> Vec<String> {
        let mut s = Scanner::new();
        let mut out = Vec::new();
        for &b in bytes {
            s.step(b, &mut |h| out.push(h));
        }
        s.finish(&mut |h| out.push(h));
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn skipping_finds_what_stepping_finds_at_any_chunking() {
        let corpus = concat!(
            "<a href=\"https://docs.example.com/a.html\">x</a> mail ops@corp.example.org. ",
            "{\"t\":\"https:\\/\\/registry.example.net\\/p\\/-\\/p-1.0.0.tgz\"} ",
            "q=https%3A%2F%2Fpaste.example.com%2Fnew&r=1 //intranet/x http://foo.internal/ ",
            "v1.2.3 index.html readme.md bücher.de \\u002F\\u002Fesc.example.io ",
            "a.b.c.d.e.f.example.com...trailing.example.com- ",
        )
        .as_bytes();
        let reference = slow_hosts(corpus);
        assert!(reference.len() >= 10, "{reference:?}");
        let mut seed: u64 = 7;
        for round in 0..300 {
            let mut s = Scanner::new();
            let mut out = Vec::new();
            let mut i = 0;
            while i < corpus.len() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let len = 1 + (seed >> 33) as usize % if round % 2 == 0 { 8 } else { 64 };
                let end = (i + len).min(corpus.len());
                s.feed(&corpus[i..end], &mut |h| out.push(h));
                i = end;
            }
            s.finish(&mut |h| out.push(h));
            for h in &reference {
                assert!(out.contains(h), "round {round}: missing {h}: {out:?}");
            }
        }
        let mut whole = scan_all(corpus);
        whole.sort();
        assert_eq!(whole, reference);
    }

    #[test]
    fn overlong_tokens_are_ignored() {
        let long = format!("{}.example.com", "a".repeat(5000));
        assert!(hosts(&long).is_empty());
    }

    #[test]
    fn binary_junk_does_not_panic() {
        let junk: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let _ = scan_all(&junk);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn corpus() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just("https://paste.example.com/x ".to_string()),
            Just("//cdn.example.net/a.js".to_string()),
            Just(r"https:\/\/json.example.org\/p".to_string()),
            Just("https%3A%2F%2Fpct.example.com%2F".to_string()),
            Just(" bare.example.io ".to_string()),
            Just("v1.2.3 index.html ".to_string()),
            "[a-z ./:%\\\\]{0,12}",
            "[a-zA-Z0-9 ./:%\\\\@<>_é-]{0,16}",
            Just("see docs.example.com. or a.example.org...b.example.net".to_string()),
        ];
        prop::collection::vec(piece, 1..12).prop_map(|v| v.concat().into_bytes())
    }

    proptest! {
        #[test]
        fn same_hosts_however_the_body_is_split(body in corpus(), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
            let whole = scan_all(&body);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            cuts.sort();
            let mut s = Scanner::new();
            let mut found = Vec::new();
            let mut last = 0;
            for c in cuts.into_iter().chain([body.len()]) {
                s.feed(&body[last..c], &mut |h| found.push(h));
                last = c;
            }
            s.finish(&mut |h| found.push(h));
            for h in &whole {
                prop_assert!(found.contains(h), "missing {} in {:?}", h, found);
            }
        }

        /// Byte-at-a-time feeding never takes the in-chunk fast path, so
        /// this holds the fast path to exactly what the state machine finds.
        #[test]
        fn fast_path_finds_what_the_state_machine_finds(body in corpus()) {
            let mut whole: Vec<String> = scan_all(&body);
            let mut s = Scanner::new();
            let mut slow = Vec::new();
            for b in &body {
                s.feed(std::slice::from_ref(b), &mut |h| slow.push(h));
            }
            s.finish(&mut |h| slow.push(h));
            whole.sort();
            whole.dedup();
            slow.sort();
            slow.dedup();
            prop_assert_eq!(whole, slow);
        }

        #[test]
        fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..2000), split in any::<usize>()) {
            let mut s = Scanner::new();
            let cut = split % (body.len() + 1);
            s.feed(&body[..cut], &mut |_| {});
            s.feed(&body[cut..], &mut |_| {});
            s.finish(&mut |_| {});
        }
    }
}
