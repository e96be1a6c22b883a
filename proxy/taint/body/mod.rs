//! Scanning a response body as it is relayed: undo its Content-Encoding
//! and open the archives it is (gzip, zstd, xz, bzip2, tar, zip) for the
//! scanner, while the client still receives the original bytes untouched.
//!
//! Owns: the decoding pipeline of one body ([`BodyScanner`]):
//! Content-Encoding layers (`codec`, with the decoders in `flate`,
//! `windowed` and `xzbz`, the text readings in `text`, and what they share
//! in `coding`), the memory pools window decoders draw from (`memory`),
//! why a body was not scanned as described (`skipped`), the sniffing of
//! decoded content for archive magic and the archive readers (`archive`,
//! `tar`, `zip`, and what they share in `member`), and the bounds on all
//! of it. Imports go one way: `codec` → `flate`, `windowed`, `xzbz`,
//! `text` → `coding`, `memory`, and `archive` → `tar`, `zip` → `member`.
//! Must not: do I/O, decide anything, buffer a body or an archive entry,
//! stop scanning before the body or `max_scan_bytes` ends, or hand the
//! scanner compressed bytes it can decode instead.
//!
//! Decided and documented (SPEC §9):
//! - Content-Encoding lists, in one header or several lines, are undone in
//!   reverse order; `identity` is skipped; at most [`MAX_CODINGS`] layers,
//!   as curl does: what the outer five decode to is scanned as it is. An
//!   unknown coding is scanned raw from that layer on.
//! - A layer that fails to decode (corrupt, not that coding at all, or cut
//!   off) is scanned as raw bytes from there on, starting with the last
//!   16 KiB or more it was fed and the chunk during which it failed, so a
//!   plain body labelled `gzip` is scanned whole. A layer that failed
//!   before it produced anything is replaced by its raw input, which is
//!   sniffed for archives like any body. Bytes after a complete stream
//!   that do not start another are raw from exactly there.
//! - `max_scan_bytes` counts the body as sent; every decoder's output and
//!   the text scanned count toward [`DECODED_PER_WIRE`] times that, and a
//!   body that decodes to more is a bomb: it fails closed ([`Fed::cut`]).
//! - Every reading a common client takes is scanned: `gzip` that starts
//!   with a zlib header is read as zlib; `deflate` is read both as zlib
//!   (when its first bytes allow) and as raw deflate, by a second pipeline
//!   (`alt`) that stops quietly when its reading fails.
//! - Decoder memory per response: zstd and brotli windows share 16 MiB
//!   ([`WINDOW_BUDGET_LOG`]); a larger frame or stream fails closed. What
//!   each window decoder really holds is drawn from its task's and the
//!   process's pools ([`memory`]); a dry pool fails closed. Beyond that a
//!   layer holds its inflate or Huffman state and 32 KiB of kept input;
//!   output buffers live on the stack.
//! - Archives are recognised by magic bytes, whatever the Content-Type:
//!   gzip `1f 8b`, zip `PK\3\4`, tar `ustar` at offset 257. Their members
//!   are scanned as text, each as its own stream; names and other header
//!   fields are not (see `tar` and `zip`), except that a plain tar's first
//!   bytes are scanned as they arrive, before they can be known as one.
//!   Nesting is bounded by [`MAX_ARCHIVE_DEPTH`]; deeper archives are
//!   scanned raw.
//! - `Content-Type: …; charset=utf-16|utf-16le|utf-16be|utf-32|utf-32le|
//!   utf-32be` picks that charset for the body's text (`utf-16` and
//!   `utf-32` little-endian unless a BOM says otherwise); anything else
//!   leaves the scanner to detect a UTF-16 BOM. Archive members always
//!   detect their own.

mod archive;
mod codec;
mod coding;
mod flate;
mod member;
pub(crate) mod memory;
mod skipped;
mod tar;
mod text;
mod windowed;
mod xzbz;
mod zip;

#[cfg(test)]
mod corpus;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use super::scan::memo::{Memo, Seen};
use super::scan::{Named, Scanner};
pub use archive::starts_binary;
use archive::Content;
use codec::{Broke, Layer, LayerError};
use coding::Coding;
pub(crate) use skipped::Skipped;

/// Content-Encoding layers undone at most (curl stops at five too).
pub(crate) const MAX_CODINGS: usize = 5;

/// Archives opened inside one another at most (a `.tgz` is two: gzip, then
/// tar; a `.tgz` inside a `.tgz` is four).
pub(crate) const MAX_ARCHIVE_DEPTH: u8 = 4;

/// log2 of the window memory all zstd and brotli layers of one response
/// share: 16 MiB, brotli's largest standard window (lgwin 24) and the
/// zstd window curl's decoder takes.
pub(crate) const WINDOW_BUDGET_LOG: u32 = 24;

/// Decoded bytes scanned at most per byte of `max_scan_bytes`: the limit
/// counts the body as it arrives, and a body that decodes to more than
/// this many times the limit (a decompression bomb) is cut.
pub(crate) const DECODED_PER_WIRE: u64 = 16;

/// Which text encoding the scanner reads (from the Content-Type charset).
pub(crate) use super::scan::Charset;

/// The multi-tenant hosts whose paths the scanner reads.
pub(crate) type OwnerHosts = Option<Arc<[Box<str>]>>;

/// A scanner for a new text stream (see [`Charset`]).
fn scanner_for(charset: Charset, owners: &OwnerHosts) -> Scanner {
    Scanner::with_charset(charset).with_owner_hosts(owners.clone())
}

/// What a chunk of a body named: names whose last byte has been scanned,
/// and the names in progress at the chunk's end (`pending`: a prefix may
/// still grow, as `github.co` does into `github.com`, so these are held
/// as taints only until the next chunk).
#[derive(Debug, Default)]
pub struct Fed {
    pub names: Vec<Named>,
    pub(crate) pending: Vec<Named>,
    /// The body cannot be scanned as a client would read it: it must be
    /// cut before this chunk reaches the client (fail closed).
    pub(crate) cut: Option<Skipped>,
}

/// Reaching the scan limit: every stage stops.
#[derive(Debug)]
pub(super) struct Stop;

/// What a stage returns: go on, or stop at the limit.
type Flow = Result<(), Stop>;

/// Where decoded text goes: the scanner of the current text stream, up to
/// the limit, and the record of what was not scanned as described.
pub(super) struct Sink {
    scanner: Scanner,
    /// The body's text charset, for the top-level stream (and its raw
    /// fallback).
    body_charset: Charset,
    owners: OwnerHosts,
    found: Vec<Named>,
    scanned: u64,
    limit: u64,
    skipped: Option<Skipped>,
    /// The pools archives' decoders draw from (xz, zstd, bzip2 inside).
    memory: Option<memory::Memory>,
    /// A second reading of the body: a layer that fails ends it (the first
    /// reading scans the raw bytes).
    quiet: bool,
    /// The connection's memo every stream's scanner skips by, and what
    /// the streams that ended judged (`scan::memo`).
    memo: Option<Arc<Memo>>,
    learned: Vec<Seen>,
}

impl Sink {
    fn new(limit: u64, body_charset: Charset, owners: OwnerHosts) -> Sink {
        Sink {
            quiet: false,
            memo: None,
            learned: Vec::new(),
            memory: None,
            scanner: scanner_for(body_charset, &owners),
            body_charset,
            owners,
            found: Vec::new(),
            scanned: 0,
            limit,
            skipped: None,
        }
    }

    /// Scans text of the current stream, up to the limit.
    fn text(&mut self, bytes: &[u8]) -> Flow {
        let room = self.limit.saturating_sub(self.scanned);
        let take = (bytes.len() as u64).min(room) as usize;
        let found = &mut self.found;
        self.scanner.feed(&bytes[..take], &mut |h| found.push(h));
        self.scanned += take as u64;
        if take < bytes.len() {
            return Err(Stop);
        }
        Ok(())
    }

    /// Ends the current text stream (its last token is judged) and starts
    /// a new one: a name never joins across two members or a fallback.
    fn restart(&mut self, charset: Charset) {
        self.end();
        self.learned.push(self.scanner.take_seen());
        self.scanner = scanner_for(charset, &self.owners).with_memo(self.memo.clone());
    }

    /// The current stream is binary content: only URL-context names in it
    /// count from here on (nothing of it was scanned yet).
    fn binary(&mut self) {
        let s = std::mem::take(&mut self.scanner);
        self.scanner = s.urls_only(true);
    }

    /// Ends the current text stream.
    fn end(&mut self) {
        let found = &mut self.found;
        self.scanner.finish(&mut |h| found.push(h));
    }

    /// The names in progress at the end of a chunk.
    fn peek(&mut self) -> Vec<Named> {
        let mut pending = Vec::new();
        self.scanner.peek(&mut |h| pending.push(h));
        pending
    }

    /// Records why the body was not scanned as described: the first
    /// reason, unless the limit cut it (which matters more).
    fn note(&mut self, why: Skipped) {
        let first = self.skipped.is_none() || matches!(why, Skipped::Limit(_));
        // Cutting the response matters most.
        if first && !self.skipped.as_ref().is_some_and(Skipped::fails_closed) || why.fails_closed()
        {
            self.skipped = Some(why);
        }
    }
}

/// Scans one response body, chunk by chunk.
pub struct BodyScanner {
    /// Content-Encoding layers in the order they were applied: the last
    /// is undone first.
    layers: Vec<Layer>,
    /// What the layers decode to: text or an archive.
    content: Content,
    sink: Sink,
    /// Set once the limit is reached: nothing more is decoded.
    stopped: bool,
    /// `max_scan_bytes`, counted on the body as sent, and what was fed.
    wire_limit: u64,
    wire: u64,
    /// Other readings of the same body, each a pipeline of its own whose
    /// names are added: `deflate` as raw deflate ([`Coding::DeflateRaw`]),
    /// HTML as rendered, quoted-printable undone ([`text`]).
    alts: Vec<BodyScanner>,
    /// The codings undone (innermost first), for a reading added later.
    codings: Vec<Coding>,
}

impl BodyScanner {
    /// A scanner for a body with these Content-Encoding header values (one
    /// per header line, each possibly a comma list) and Content-Type.
    /// Values are bytes: a value that is not visible ASCII is an unknown
    /// coding, never a dropped one. `limit` is `max_scan_bytes`.
    pub fn for_response(
        encodings: &[&[u8]],
        content_type: Option<&[u8]>,
        limit: u64,
    ) -> BodyScanner {
        BodyScanner::reading_owners(encodings, content_type, limit, None)
    }

    /// [`BodyScanner::for_response`] that also reads the path after the
    /// multi-tenant hosts `owners` (`Named::path`).
    pub(crate) fn reading_owners(
        encodings: &[&[u8]],
        content_type: Option<&[u8]>,
        limit: u64,
        owners: OwnerHosts,
    ) -> BodyScanner {
        let decoded = limit.saturating_mul(DECODED_PER_WIRE);
        let (charsets, unreadable) = charsets_of(content_type);
        // The last charset named leads (most clients take it); every other
        // one is read too.
        let primary = charsets.last().copied().unwrap_or_default();
        let mut sink = Sink::new(decoded, primary, owners);
        if let Some(label) = unreadable {
            sink.note(Skipped::UnreadableCharset(label));
        }
        let codings = parse_codings(encodings, &mut sink);
        let mut scanner = BodyScanner::build(codings.clone(), sink, limit);
        let mut others = charsets;
        others.sort_unstable_by_key(|c| *c as u8);
        others.dedup();
        for c in others.into_iter().filter(|c| *c != primary) {
            scanner.add_reading_in(codings.clone(), c);
        }
        if codings.contains(&Coding::Deflate) {
            let raw = codings
                .iter()
                .map(|c| match c {
                    Coding::Deflate => Coding::DeflateRaw,
                    c => *c,
                })
                .collect();
            scanner.add_reading(raw);
        }
        let ct = content_type.unwrap_or_default().to_ascii_lowercase();
        let names = |t: &[u8]| ct.windows(t.len()).any(|w| w == t);
        // HTML as rendered: any Content-Type line naming HTML (a response
        // with none: `also_html`).
        if names(b"html") {
            scanner = scanner.also_html();
        }
        if names(b"message/") || names(b"multipart/") {
            scanner = scanner.also_quoted_printable();
        }
        scanner
    }

    /// Reads the body as HTML renders it too (a browser sniffs a response
    /// that has no Content-Type, and may find HTML).
    pub(crate) fn also_html(mut self) -> BodyScanner {
        let codings = self.codings.clone();
        if !self
            .alts
            .iter()
            .any(|a| a.codings.first() == Some(&Coding::HtmlText))
        {
            self.add_reading([&[Coding::HtmlText][..], &codings].concat());
        }
        self
    }

    /// Reads the body with quoted-printable undone too (a
    /// `Content-Transfer-Encoding: quoted-printable` response, or a mail
    /// message), and its HTML as rendered.
    pub(crate) fn also_quoted_printable(mut self) -> BodyScanner {
        let codings = self.codings.clone();
        if !self
            .alts
            .iter()
            .any(|a| a.codings.contains(&Coding::QuotedPrintable))
        {
            self.add_reading([&[Coding::QuotedPrintable][..], &codings].concat());
            self.add_reading([&[Coding::HtmlText, Coding::QuotedPrintable][..], &codings].concat());
        }
        self
    }

    /// Adds a reading of the body through `codings` (innermost first): its
    /// names are added to this one's; its failures stop it quietly.
    fn add_reading(&mut self, codings: Vec<Coding>) {
        self.add_reading_in(codings, self.sink.body_charset);
    }

    /// [`BodyScanner::add_reading`] in another charset.
    fn add_reading_in(&mut self, codings: Vec<Coding>, charset: Charset) {
        let mut sink = Sink::new(self.sink.limit, charset, self.sink.owners.clone());
        sink.quiet = true;
        self.alts
            .push(BodyScanner::build(codings, sink, self.wire_limit));
    }

    /// The pipeline for `codings` (innermost first) into `sink`.
    fn build(codings: Vec<Coding>, mut sink: Sink, limit: u64) -> BodyScanner {
        let kept = codings.clone();
        let windowed = codings.iter().filter(|c| c.windowed()).count();
        // Split the window budget evenly: 8 MiB for one, 4 MiB each for
        // two, 2 MiB each for three or four, 1 MiB each for five.
        let window_log = WINDOW_BUDGET_LOG - windowed.next_power_of_two().trailing_zeros();
        let mut layers = Vec::with_capacity(codings.len());
        for coding in codings {
            match Layer::new(coding, window_log, sink.limit, None) {
                Ok(layer) => layers.push(layer),
                Err(why) => {
                    // The layers inside this one cannot be undone either.
                    sink.note(why);
                    layers.clear();
                }
            }
        }
        BodyScanner {
            layers,
            content: Content::top(),
            sink,
            stopped: false,
            wire_limit: limit,
            wire: 0,
            alts: Vec::new(),
            codings: kept,
        }
    }

    /// Draws the zstd and brotli windows from `memory` (its task's and the
    /// process's pools); a window they cannot grant cuts the response.
    pub(crate) fn with_memory(mut self, memory: memory::Memory) -> BodyScanner {
        self.sink.memory = Some(memory.clone());
        for layer in &mut self.layers {
            layer.draw_from(&memory);
        }
        self.alts = std::mem::take(&mut self.alts)
            .into_iter()
            .map(|a| a.with_memory(memory.clone()))
            .collect();
        self
    }

    /// One Content-Encoding value (or none) and no Content-Type: the
    /// single-header form benches and fuzzers use.
    pub fn new(encoding: Option<&str>, limit: u64) -> BodyScanner {
        let values: Vec<&[u8]> = encoding.map(str::as_bytes).into_iter().collect();
        BodyScanner::for_response(&values, None, limit)
    }

    /// Scans a chunk of the body as sent; returns the names it completed
    /// and those in progress at its end.
    pub fn feed(&mut self, chunk: &[u8]) -> Fed {
        let room = self.wire_limit.saturating_sub(self.wire);
        let take = (chunk.len() as u64).min(room) as usize;
        self.wire += take as u64;
        if !self.stopped {
            if run(
                &mut self.layers,
                &mut self.content,
                &mut self.sink,
                &chunk[..take],
            )
            .is_err()
            {
                // Within the wire limit: only the decoded cap stops it.
                self.stop(Skipped::Expanded(self.sink.limit));
            } else if take < chunk.len() {
                self.stop(Skipped::Limit(self.wire_limit));
            }
        }
        let mut fed = Fed {
            names: std::mem::take(&mut self.sink.found),
            pending: self.sink.peek(),
            cut: self.sink.skipped.clone().filter(Skipped::fails_closed),
        };
        for alt in &mut self.alts {
            let other = alt.feed(chunk);
            fed.names.extend(other.names);
            fed.pending.extend(other.pending);
        }
        fed
    }

    /// Ends the body: returns the last names, and why the body was not
    /// scanned exactly as encoded, if it was not.
    pub fn finish(&mut self) -> (Vec<Named>, Option<Skipped>) {
        if !self.stopped && finish_all(&mut self.layers, &mut self.content, &mut self.sink).is_err()
        {
            self.stop(Skipped::Expanded(self.sink.limit));
        }
        self.stopped = true;
        self.layers.clear();
        self.sink.end();
        let mut found = std::mem::take(&mut self.sink.found);
        for alt in &mut self.alts {
            found.extend(alt.finish().0);
        }
        (found, self.sink.skipped.clone())
    }

    /// Skips, in every reading, the tokens `memo` holds (a connection's
    /// earlier responses judged them and their names are recorded).
    pub(crate) fn with_memo(&mut self, memo: &Arc<Memo>) {
        self.sink.memo = Some(memo.clone());
        let scanner = std::mem::take(&mut self.sink.scanner);
        self.sink.scanner = scanner.with_memo(Some(memo.clone()));
        for alt in &mut self.alts {
            alt.with_memo(memo);
        }
    }

    /// Stops skipping by the memo (its knowledge no longer holds), in
    /// every reading; the tokens judged with its help are judged again.
    pub(crate) fn drop_memo(&mut self) {
        self.sink.memo = None;
        let scanner = std::mem::take(&mut self.sink.scanner);
        self.sink.scanner = scanner.with_memo(None).forget_seen();
        self.sink.learned.clear();
        for alt in &mut self.alts {
            alt.drop_memo();
        }
    }

    /// What every reading judged (after [`BodyScanner::finish`]: its names
    /// were all handed out), for the connection's memo.
    pub(crate) fn learned(&mut self) -> Vec<Seen> {
        let mut out = std::mem::take(&mut self.sink.learned);
        out.push(self.sink.scanner.take_seen());
        for alt in &mut self.alts {
            out.extend(alt.learned());
        }
        out
    }

    /// Decoded bytes scanned as text so far.
    pub fn scanned(&self) -> u64 {
        self.sink.scanned
    }

    /// Has the limit been reached (nothing more is scanned)? A caller that
    /// must not relay unscanned bytes (an upgraded connection) stops there.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// A limit is reached: drop the decoders (and their memory).
    fn stop(&mut self, why: Skipped) {
        self.stopped = true;
        if !self.sink.quiet {
            self.sink.note(why);
        }
        self.layers.clear();
        self.content = Content::top();
    }
}

/// Pushes `input` through the layers (outermost last) into the content.
fn run(layers: &mut [Layer], content: &mut Content, sink: &mut Sink, input: &[u8]) -> Flow {
    let Some((outer, inner)) = layers.split_last_mut() else {
        return content.push(input, sink);
    };
    let r = outer.push(input, &mut |out| run(inner, content, sink, out));
    match r {
        Ok(()) => Ok(()),
        Err(LayerError::Stop) => Err(Stop),
        Err(LayerError::Broke(broke)) => {
            inner.iter_mut().for_each(Layer::pass_through);
            let rest = &input[broke.from.min(input.len())..];
            fall_back(content, sink, broke, rest)
        }
    }
}

/// A layer broke: what it was fed from there on is the content now, raw.
fn fall_back(content: &mut Content, sink: &mut Sink, broke: Broke, rest: &[u8]) -> Flow {
    if sink.quiet {
        // A second reading that does not decode is no reading at all.
        return Err(Stop);
    }
    sink.note(broke.why);
    content.finish(sink)?;
    // Nothing came out of the layer yet: its input is the whole stream,
    // and may itself be an archive.
    let charset = sink.body_charset;
    *content = if broke.fresh {
        Content::fresh(sink, charset)
    } else {
        Content::raw(sink, charset)
    };
    content.push(&broke.held, sink)?;
    content.push(rest, sink)
}

/// At the end of the body: a layer still inside its stream is broken
/// there; then the content ends.
fn finish_all(layers: &mut [Layer], content: &mut Content, sink: &mut Sink) -> Flow {
    for i in (0..layers.len()).rev() {
        if let Err(broke) = layers[i].finish() {
            layers[..i].iter_mut().for_each(Layer::pass_through);
            fall_back(content, sink, broke, &[])?;
            break;
        }
    }
    content.finish(sink)
}

/// The codings to undo, in the order applied (innermost first), as far as
/// they can be undone; notes what cannot.
fn parse_codings(values: &[&[u8]], sink: &mut Sink) -> Vec<Coding> {
    let listed: Vec<&[u8]> = values
        .iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity"))
        .collect();
    // Walk from the outermost in: an unknown coding ends what can be
    // undone.
    let mut known = Vec::new();
    for raw in listed.iter().rev() {
        match Coding::parse(raw) {
            Some(c) => known.push(c),
            None => {
                sink.note(Skipped::UnknownCoding(
                    String::from_utf8_lossy(raw).into_owned(),
                ));
                break;
            }
        }
    }
    if known.len() > MAX_CODINGS {
        sink.note(Skipped::TooManyCodings(known.len()));
        known.truncate(MAX_CODINGS);
    }
    known.reverse();
    known
}

/// Every charset the Content-Type lines name (`content_type` holds them
/// all, joined by commas), in order: clients differ on which one counts
/// (the first, the last, the last line's), so each is read. A label that
/// names no charset the scanner can read is returned as the error.
fn charsets_of(content_type: Option<&[u8]>) -> (Vec<Charset>, Option<String>) {
    let (mut found, mut unreadable) = (Vec::new(), None);
    let Some(ct) = content_type else {
        return (found, unreadable);
    };
    for param in ct.split(|&b| b == b';' || b == b',') {
        let Some(eq) = param.iter().position(|&b| b == b'=') else {
            continue;
        };
        if !param[..eq].trim_ascii().eq_ignore_ascii_case(b"charset") {
            continue;
        }
        let value = param[eq + 1..].trim_ascii();
        let value = [b'"', b'\'']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(&[*q])
                    .and_then(|v| v.strip_suffix(&[*q]))
            })
            .unwrap_or(value)
            .trim_ascii();
        match charset_named(value) {
            Some(c) => found.push(c),
            None => {
                unreadable.get_or_insert_with(|| String::from_utf8_lossy(value).into_owned());
            }
        }
    }
    (found, unreadable)
}

/// The reading a charset label asks for: UTF-16 and UTF-32 by every name
/// WHATWG and Python give them, `Auto` for any ASCII-compatible charset
/// WHATWG knows; `None` for the rest (ISO-2022-JP, HZ, UTF-7, EBCDIC,
/// an unknown label).
fn charset_named(label: &[u8]) -> Option<Charset> {
    let squeezed: Vec<u8> = label
        .iter()
        .filter(|b| !matches!(b, b'-' | b'_' | b' '))
        .map(u8::to_ascii_lowercase)
        .collect();
    match &squeezed[..] {
        b"utf16" | b"utf16le" | b"ucs2" | b"unicode" | b"csunicode" | b"iso10646ucs2"
        | b"unicodefeff" | b"u16" => return Some(Charset::Utf16Le),
        b"utf16be" | b"unicodefffe" => return Some(Charset::Utf16Be),
        b"utf32" | b"utf32le" | b"ucs4" | b"u32" => return Some(Charset::Utf32Le),
        b"utf32be" => return Some(Charset::Utf32Be),
        b"utf8" | b"u8" | b"utf" | b"cp65001" => return Some(Charset::Auto),
        _ => {}
    }
    let enc = encoding_rs::Encoding::for_label(label)?;
    (enc.is_ascii_compatible() && enc != encoding_rs::REPLACEMENT).then_some(Charset::Auto)
}
