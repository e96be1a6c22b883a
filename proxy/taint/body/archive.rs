//! What the Content-Encoding layers decode to: text, or an archive known by
//! its magic bytes, opened as it streams so that the text inside it is
//! scanned and its compressed bytes are not.
//!
//! Must not: hold back more than the three bytes that may start a magic
//! number (three bytes hold no whole name, so no name is reported late),
//! buffer a member, or open archives deeper than
//! [`MAX_ARCHIVE_DEPTH`].
//!
//! A plain tar is only known at byte 262 (`ustar` at 257): until then its
//! first bytes are scanned as text, as they arrive, so that a name in
//! them is reported before the client has it. A tar header's name field
//! may so be scanned once; nothing else of its headers is.

use super::codec::{Layer, LayerError};
use super::coding::Coding;
use super::member::{Member, Step};
use super::tar::Tar;
use super::zip::Zip;
use super::{Charset, Flow, Sink, Skipped, Stop, MAX_ARCHIVE_DEPTH, WINDOW_BUDGET_LOG};

/// Where a tar header's magic ends.
const TAR_MAGIC_END: usize = 262;

/// A decoded stream: being sniffed, text, or an archive being read.
pub(super) enum Content {
    Sniff(Sniff),
    Text(Text),
    Packed(Box<Packed>),
    Tar(Box<Tar<Content>>),
    Zip(Box<Zip<Content>>),
}

/// The first bytes of a stream, until they tell an archive from text.
pub(super) struct Sniff {
    head: [u8; 4],
    len: usize,
    /// Archives around this stream.
    depth: u8,
}

/// A text stream; `probe` keeps its first bytes until a tar is ruled out.
pub(super) struct Text {
    probe: Option<Vec<u8>>,
    depth: u8,
}

/// A compressed file inside the body: gzip (`.gz`, `.tgz`, `.crate`),
/// zstd (`.tar.zst`), xz (`.tar.xz`) or bzip2 (`.tar.bz2`).
pub(super) struct Packed {
    layer: Layer,
    inner: Content,
}

/// What the first bytes say.
enum Kind {
    Packed(Coding),
    Zip,
    Text,
    /// An executable, an image, a font, a compressed stream sluice does
    /// not open: only URLs in its printable strings count.
    Binary,
}

/// Magic numbers of binary content (SPEC §9): executables (ELF, PE,
/// Mach-O and fat Mach-O or Java classes, wasm), images (PNG, JPEG, GIF,
/// RIFF/WebP, ICO), fonts (WOFF, WOFF2, TrueType, OpenType) and PDF.
/// `.node` addons are ELF, PE or Mach-O. Compressed streams sluice does
/// not open stay scanned raw as before: a stored block is plain text.
const BINARY_MAGIC: &[&[u8]] = &[
    b"\x7fELF",
    b"MZ",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
    b"\0asm",
    b"\x89PNG",
    b"\xff\xd8\xff",
    b"GIF8",
    b"RIFF",
    b"\0\0\x01\0",
    b"wOFF",
    b"wOF2",
    b"\0\x01\0\0",
    b"OTTO",
    b"%PDF",
];

/// Does a stream that starts with `bytes` read as binary content?
pub fn starts_binary(bytes: &[u8]) -> bool {
    binary(&bytes[..bytes.len().min(4)]) == Some(true)
}

/// Is `head` (up to four bytes) the start of binary content? None while
/// more bytes could still tell.
fn binary(head: &[u8]) -> Option<bool> {
    let mut undecided = false;
    for m in BINARY_MAGIC {
        let n = m.len().min(head.len());
        if head[..n] != m[..n] {
            continue;
        }
        if head.len() >= m.len() {
            return Some(true);
        }
        undecided = true;
    }
    (!undecided).then_some(false)
}

impl Content {
    /// The body's own content: its stream is the sink's first.
    pub(super) fn top() -> Content {
        Content::Sniff(Sniff {
            head: [0; 4],
            len: 0,
            depth: 0,
        })
    }

    /// A new top-level stream (the raw input of a failed layer).
    pub(super) fn fresh(sink: &mut Sink, charset: Charset) -> Content {
        sink.restart(charset);
        Content::top()
    }

    /// Raw text from here on.
    pub(super) fn raw(sink: &mut Sink, charset: Charset) -> Content {
        sink.restart(charset);
        Content::Text(Text {
            probe: None,
            depth: MAX_ARCHIVE_DEPTH,
        })
    }

    /// A member of an archive, `depth` archives deep: a stream of its own.
    pub(super) fn member(sink: &mut Sink, depth: u8) -> Content {
        sink.restart(Charset::Auto);
        Content::Sniff(Sniff {
            head: [0; 4],
            len: 0,
            depth,
        })
    }

    pub(super) fn push(&mut self, input: &[u8], sink: &mut Sink) -> Flow {
        if input.is_empty() {
            return Ok(());
        }
        let r = match self {
            Content::Sniff(s) => {
                let (earlier, n, depth) = (s.head, s.len, s.depth);
                let Some(kind) = s.decide(input) else {
                    return Ok(());
                };
                *self = open(kind, depth, sink);
                self.push(&earlier[..n], sink)?;
                return self.push(input, sink);
            }
            Content::Text(t) => {
                let depth = t.depth;
                let Some((probe, used)) = t.push(input, sink)? else {
                    return Ok(());
                };
                *self = Content::Tar(Box::new(Tar::new(depth)));
                self.push(&probe, sink)?;
                return self.push(&input[used..], sink);
            }
            Content::Packed(g) => g.push(input, sink),
            Content::Tar(t) => t.push(input, sink),
            Content::Zip(z) => z.push(input, sink),
        };
        match r {
            Ok(()) => Ok(()),
            Err(Step::Stop) => Err(Stop),
            Err(Step::Raw { why, held, from }) => {
                if let Some(why) = why {
                    sink.note(why);
                }
                self.finish(sink)?;
                *self = Content::raw(sink, Charset::Auto);
                sink.text(&held)?;
                sink.text(&input[from.min(input.len())..])
            }
        }
    }

    /// The stream ended: flush what was held, end open members.
    pub(super) fn finish(&mut self, sink: &mut Sink) -> Flow {
        match self {
            // Too short to be an archive or binary.
            Content::Sniff(s) => sink.text(&s.head[..s.len]),
            Content::Text(_) => Ok(()),
            Content::Packed(g) => g.finish(sink),
            Content::Tar(t) => {
                t.finish(sink)?;
                let held = t.held();
                self.raw_tail(&held, sink)
            }
            Content::Zip(z) => {
                z.finish(sink)?;
                let held = z.held();
                self.raw_tail(&held, sink)
            }
        }
    }

    /// Scans what an archive held unread at its end as a raw stream.
    fn raw_tail(&mut self, held: &[u8], sink: &mut Sink) -> Flow {
        if held.is_empty() {
            return Ok(());
        }
        *self = Content::raw(sink, Charset::Auto);
        sink.text(held)
    }
}

/// The stream of a tar or zip member is a [`Content`] of its own.
impl Member for Content {
    fn member(sink: &mut Sink, depth: u8) -> Content {
        Content::member(sink, depth)
    }

    fn push(&mut self, input: &[u8], sink: &mut Sink) -> Flow {
        Content::push(self, input, sink)
    }

    fn finish(&mut self, sink: &mut Sink) -> Flow {
        Content::finish(self, sink)
    }
}

/// The content a stream turns out to be.
fn open(kind: Kind, depth: u8, sink: &mut Sink) -> Content {
    let nested = !matches!(kind, Kind::Text);
    if nested && depth >= MAX_ARCHIVE_DEPTH {
        sink.note(Skipped::TooDeep);
        return Content::Text(Text { probe: None, depth });
    }
    match kind {
        Kind::Packed(coding) => {
            let layer = match coding {
                Coding::Gzip => Ok(Layer::gzip(sink.limit)),
                c => Layer::new(c, WINDOW_BUDGET_LOG, sink.limit, sink.memory.clone()),
            };
            match layer {
                Ok(layer) => {
                    let inner = Content::member(sink, depth + 1);
                    Content::Packed(Box::new(Packed { layer, inner }))
                }
                Err(why) => {
                    sink.note(why);
                    Content::Text(Text { probe: None, depth })
                }
            }
        }
        Kind::Zip => Content::Zip(Box::new(Zip::new(depth, sink.limit))),
        Kind::Text => Content::Text(Text {
            probe: (depth < MAX_ARCHIVE_DEPTH).then(Vec::new),
            depth,
        }),
        Kind::Binary => {
            sink.binary();
            Content::Text(Text { probe: None, depth })
        }
    }
}

impl Sniff {
    /// Takes up to four bytes; says what the stream is once they tell.
    fn decide(&mut self, input: &[u8]) -> Option<Kind> {
        let take = (self.head.len() - self.len).min(input.len());
        self.head[self.len..self.len + take].copy_from_slice(&input[..take]);
        self.len += take;
        let head = &self.head[..self.len];
        // Whole magic numbers first; a prefix of one waits for more.
        const PACKED: [(&[u8], Kind); 5] = [
            (b"\x1f\x8b", Kind::Packed(Coding::Gzip)),
            (b"\x28\xb5\x2f\xfd", Kind::Packed(Coding::Zstd)),
            (b"\xfd7zX", Kind::Packed(Coding::Xz)),
            (b"BZh", Kind::Packed(Coding::Bzip2)),
            (b"PK\x03\x04", Kind::Zip),
        ];
        for (magic, kind) in PACKED {
            let bzip2_level = magic == b"BZh" && !matches!(head.get(3), Some(b'1'..=b'9'));
            if head.starts_with(magic) && !(bzip2_level && head.len() > 3) {
                if bzip2_level {
                    return None; // the level digit decides
                }
                return Some(kind);
            }
            if head.len() < magic.len() && magic.starts_with(head) {
                return None;
            }
        }
        match binary(head) {
            None if self.len < self.head.len() => None,
            Some(true) => Some(Kind::Binary),
            _ => Some(Kind::Text),
        }
    }
}

impl Text {
    /// Scans text; returns the first bytes and how much of `input` went
    /// into them once they show a tar.
    fn push(&mut self, input: &[u8], sink: &mut Sink) -> Result<Option<(Vec<u8>, usize)>, Stop> {
        let Some(probe) = self.probe.as_mut() else {
            sink.text(input)?;
            return Ok(None);
        };
        let need = TAR_MAGIC_END - probe.len();
        if input.len() < need {
            probe.extend_from_slice(input);
            sink.text(input)?;
            return Ok(None);
        }
        probe.extend_from_slice(&input[..need]);
        let probe = self.probe.take().unwrap_or_default();
        if &probe[257..TAR_MAGIC_END] == b"ustar" {
            return Ok(Some((probe, need)));
        }
        sink.text(input)?;
        Ok(None)
    }
}

impl Packed {
    fn push(&mut self, input: &[u8], sink: &mut Sink) -> Result<(), Step> {
        let Packed { layer, inner } = self;
        match layer.push(input, &mut |out| inner.push(out, sink)) {
            Ok(()) => Ok(()),
            Err(LayerError::Stop) => Err(Step::Stop),
            Err(LayerError::Broke(b)) => Err(Step::Raw {
                why: Some(b.why),
                held: b.held,
                from: b.from,
            }),
        }
    }

    fn finish(&mut self, sink: &mut Sink) -> Flow {
        match self.layer.finish() {
            Ok(()) => self.inner.finish(sink),
            Err(broke) => {
                sink.note(broke.why);
                self.inner.finish(sink)?;
                sink.restart(Charset::Auto);
                sink.text(&broke.held)
            }
        }
    }
}
