//! zip (wheels, jars), read from its local file headers as it streams:
//! each entry's data, stored or deflated, is a stream of its own, sniffed
//! and scanned.
//!
//! Decided: entry names, extra fields and the central directory (the
//! names again) are skipped, as tar headers are. Reading ends at the
//! central directory's end record: what follows it (the archive comment)
//! is scanned raw. An entry this reader cannot follow ends the reading,
//! and the rest of the body is scanned raw (fail closed): an encrypted
//! entry, a compression method other than stored (0), deflate (8), bzip2
//! (12) or LZMA (14), a stored, bzip2 or LZMA entry with a data descriptor
//! (its end cannot be found while streaming), data that does not decode,
//! or bytes where a header should be.
//!
//! Must not: buffer more than a header and its extra field (64 KiB), or
//! inflate more than the limit.

use flate2::Decompress;

use super::codec::{Layer, LayerError};
use super::coding::Coding;
use super::flate::{inflate, InflateError};
use super::member::{Member, Step};
use super::{Flow, Sink, Skipped, Stop};

const LOCAL: [u8; 4] = *b"PK\x03\x04";
const CENTRAL: [u8; 4] = *b"PK\x01\x02";
const END: [u8; 4] = *b"PK\x05\x06";
const ZIP64_END: [u8; 4] = *b"PK\x06\x06";
const ZIP64_LOCATOR: [u8; 4] = *b"PK\x06\x07";
const DESCRIPTOR: [u8; 4] = *b"PK\x07\x08";

/// General-purpose flag bits.
const ENCRYPTED: u16 = 1;
const HAS_DESCRIPTOR: u16 = 8;

#[derive(Clone, Copy, Debug)]
enum State {
    /// A 4-byte signature.
    Sig,
    /// The 26 bytes of a local header after its signature.
    Local,
    /// An entry's name: scanned as text (a client lists it).
    Name {
        left: u64,
    },
    /// The extra field, into `buf`.
    Extra,
    Stored {
        left: u64,
    },
    Deflated,
    /// bzip2 or LZMA data: `left` compressed bytes, through `packed`.
    Packed {
        left: u64,
    },
    /// A data descriptor's first 4 bytes: its signature or the CRC.
    Descriptor,
    /// The 42 bytes of a central directory header after its signature.
    Central,
    /// A central directory entry's name, extra field and comment: scanned
    /// as text (a client shows names and comments).
    CentralText {
        left: u64,
    },
    Skip {
        left: u64,
    },
}

/// The entry being read, from its local header.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    flags: u16,
    method: u16,
    csize: u64,
    usize: u64,
    extra_len: usize,
    zip64: bool,
    /// Compressed bytes inflated so far.
    consumed: u64,
}

/// A zip being read; each entry's data goes into an `M`.
pub(super) struct Zip<M> {
    /// Archives around the zip; its entries are one deeper.
    depth: u8,
    state: State,
    /// Header bytes being gathered.
    buf: Vec<u8>,
    entry: Entry,
    /// The entry's stream.
    content: Option<M>,
    inflate: Option<Decompress>,
    /// The bzip2 or LZMA decoder of the entry.
    packed: Option<Layer>,
    /// Inflated bytes, bounded by `limit`.
    produced: u64,
    limit: u64,
    in_central: bool,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}
fn le64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Starts a text stream of its own for a name or a comment: nothing an
/// earlier entry left in the scanner (a UTF-16 byte-order mark, binary
/// mode, an unfinished token) applies to it. A line break first, so a
/// name that starts with `FF FE` is not read as UTF-16 (zip names are
/// CP437 or UTF-8).
fn fresh_text(sink: &mut Sink) -> Flow {
    sink.restart(crate::taint::scan::Charset::Auto);
    sink.text(b"\n")
}

/// The rest is raw, because of `reason`.
fn unreadable(reason: impl Into<String>, held: Vec<u8>, from: usize) -> Step {
    Step::Raw {
        why: Some(Skipped::Archive {
            kind: "zip",
            reason: reason.into(),
        }),
        held,
        from,
    }
}

impl<M: Member> Zip<M> {
    pub(super) fn new(depth: u8, limit: u64) -> Zip<M> {
        Zip {
            depth,
            state: State::Sig,
            buf: Vec::new(),
            entry: Entry::default(),
            content: None,
            inflate: None,
            packed: None,
            produced: 0,
            limit,
            in_central: false,
        }
    }

    pub(super) fn push(&mut self, input: &[u8], sink: &mut Sink) -> Result<(), Step> {
        let mut i = 0;
        loop {
            self.settle(sink)?;
            if i == input.len() {
                return Ok(());
            }
            let state = self.state;
            match state {
                State::Sig if self.gather(4, input, &mut i) => self.signature(i)?,
                State::Local if self.gather(26, input, &mut i) => {
                    self.local(i)?;
                    fresh_text(sink)?;
                }
                State::Extra if self.gather(self.entry.extra_len, input, &mut i) => {
                    self.start_entry(sink)
                }
                State::Descriptor if self.gather(4, input, &mut i) => {
                    let signed = self.buf[..] == DESCRIPTOR;
                    let sizes = if self.entry.zip64 { 16 } else { 8 };
                    self.buf.clear();
                    // CRC (unless just read), then the two sizes.
                    self.state = State::Skip {
                        left: if signed { 4 + sizes } else { sizes },
                    };
                }
                State::Central if self.gather(42, input, &mut i) => {
                    // Name, extra field and comment: three u16 lengths,
                    // summed without overflow (fuzz find).
                    let left = [24, 26, 28]
                        .iter()
                        .map(|&at| u64::from(le16(&self.buf, at)))
                        .sum();
                    self.buf.clear();
                    self.state = State::CentralText { left };
                    fresh_text(sink)?;
                }
                State::Sig | State::Local | State::Extra | State::Descriptor | State::Central => {}
                State::Name { left } | State::CentralText { left } => {
                    let take = left.min((input.len() - i) as u64);
                    sink.text(&input[i..i + take as usize])?;
                    i += take as usize;
                    self.state = match state {
                        State::Name { .. } => State::Name { left: left - take },
                        _ => State::CentralText { left: left - take },
                    };
                }
                State::Skip { left } => {
                    let take = left.min((input.len() - i) as u64);
                    i += take as usize;
                    self.state = State::Skip { left: left - take };
                }
                State::Stored { left } => {
                    let take = left.min((input.len() - i) as u64) as usize;
                    if let Some(c) = self.content.as_mut() {
                        c.push(&input[i..i + take], sink)?;
                    }
                    i += take;
                    self.state = State::Stored {
                        left: left - take as u64,
                    };
                }
                State::Deflated => i += self.inflate_some(&input[i..], i, sink)?,
                State::Packed { left } => {
                    let take = left.min((input.len() - i) as u64) as usize;
                    self.unpack(&input[i..i + take], i, sink)?;
                    i += take;
                    self.state = State::Packed {
                        left: left - take as u64,
                    };
                }
            }
        }
    }

    /// Moves on from states that need no more input.
    fn settle(&mut self, sink: &mut Sink) -> Result<(), Step> {
        loop {
            self.state = match self.state {
                State::Name { left: 0 } => {
                    // A name ends a run of text: it does not join what
                    // follows it.
                    sink.text(b"\n")?;
                    State::Extra
                }
                State::CentralText { left: 0 } => {
                    sink.text(b"\n")?;
                    State::Sig
                }
                State::Extra if self.buf.len() == self.entry.extra_len => {
                    self.start_entry(sink);
                    continue;
                }
                State::Stored { left: 0 } | State::Packed { left: 0 } => {
                    self.packed = None;
                    self.finish(sink)?;
                    State::Sig
                }
                State::Skip { left: 0 } => State::Sig,
                _ => return Ok(()),
            };
        }
    }

    /// Gathers header bytes into `buf` until it holds `want`.
    fn gather(&mut self, want: usize, input: &[u8], i: &mut usize) -> bool {
        let take = want.saturating_sub(self.buf.len()).min(input.len() - *i);
        self.buf.extend_from_slice(&input[*i..*i + take]);
        *i += take;
        self.buf.len() >= want
    }

    /// A signature; `i` is where the input goes on.
    fn signature(&mut self, i: usize) -> Result<(), Step> {
        let sig = std::mem::take(&mut self.buf);
        match <[u8; 4]>::try_from(&sig[..]) {
            Ok(LOCAL) if !self.in_central => self.state = State::Local,
            Ok(CENTRAL) => {
                self.in_central = true;
                self.state = State::Central;
            }
            // The end records, and whatever follows the directory.
            Ok(END | ZIP64_END | ZIP64_LOCATOR) => {
                return Err(Step::Raw {
                    why: None,
                    held: sig,
                    from: i,
                })
            }
            _ if self.in_central => {
                return Err(Step::Raw {
                    why: None,
                    held: sig,
                    from: i,
                })
            }
            _ => return Err(unreadable("bytes where an entry header should be", sig, i)),
        }
        Ok(())
    }

    /// A local header (after its signature) is in `buf`.
    fn local(&mut self, i: usize) -> Result<(), Step> {
        let b = std::mem::take(&mut self.buf);
        self.entry = Entry {
            flags: le16(&b, 2),
            method: le16(&b, 4),
            csize: le32(&b, 14),
            usize: le32(&b, 18),
            extra_len: usize::from(le16(&b, 24)),
            zip64: false,
            consumed: 0,
        };
        let e = self.entry;
        // A header sluice cannot follow is scanned raw from its signature
        // on: text in the header's own bytes (a fuzz find: a URL's scheme
        // there, its host after) is read with what follows.
        let raw = || [&LOCAL[..], &b[..]].concat();
        if e.flags & ENCRYPTED != 0 {
            return Err(unreadable("an entry is encrypted", raw(), i));
        }
        match e.method {
            0 | 12 | 14 if e.flags & HAS_DESCRIPTOR != 0 => Err(unreadable(
                format!("an entry (method {}) has a data descriptor: its end cannot be found while streaming", e.method),
                raw(),
                i,
            )),
            0 | 8 | 12 | 14 => {
                self.state = State::Name {
                    left: u64::from(le16(&b, 22)),
                };
                Ok(())
            }
            m => Err(unreadable(
                format!("an entry uses compression method {m}, which sluice does not decode"),
                raw(),
                i,
            )),
        }
    }

    /// Name and extra field read: the entry's data starts.
    fn start_entry(&mut self, sink: &mut Sink) {
        self.read_zip64();
        self.buf = Vec::new();
        self.content = Some(M::member(sink, self.depth + 1));
        let coding = match self.entry.method {
            12 => Some(Coding::Bzip2),
            14 => Some(Coding::ZipLzma),
            _ => None,
        };
        if let Some(c) = coding {
            // No window: the window budget does not apply.
            self.packed = Layer::new(c, 0, self.limit, sink.memory.clone()).ok();
            self.state = State::Packed {
                left: self.entry.csize,
            };
            return;
        }
        self.state = if self.entry.method == 0 {
            State::Stored {
                left: self.entry.csize,
            }
        } else {
            match self.inflate.as_mut() {
                Some(d) => d.reset(false),
                None => self.inflate = Some(Decompress::new(false)),
            }
            State::Deflated
        };
    }

    /// Zip64 sizes, from the extra field (id 1) when the header's are
    /// 0xffffffff.
    fn read_zip64(&mut self) {
        let (b, e) = (&self.buf, &mut self.entry);
        let mut at = 0;
        while at + 4 <= b.len() {
            let (id, len) = (le16(b, at), usize::from(le16(b, at + 2)));
            let end = (at + 4 + len).min(b.len());
            if id == 1 {
                e.zip64 = true;
                let mut p = at + 4;
                for size in [&mut e.usize, &mut e.csize] {
                    if *size == 0xffff_ffff && p + 8 <= end {
                        *size = le64(b, p);
                        p += 8;
                    }
                }
            }
            at = end;
        }
    }

    /// Inflates entry data from `input` (at offset `i` of the push);
    /// returns how much it took.
    fn inflate_some(&mut self, input: &[u8], i: usize, sink: &mut Sink) -> Result<usize, Step> {
        let Some(d) = self.inflate.as_mut() else {
            return Err(unreadable("no inflater", Vec::new(), i));
        };
        let (content, produced, limit) = (&mut self.content, &mut self.produced, self.limit);
        let r = inflate(d, input, &mut |out: &[u8]| {
            let room = limit.saturating_sub(*produced);
            let take = (out.len() as u64).min(room) as usize;
            *produced += take as u64;
            if let Some(c) = content.as_mut() {
                c.push(&out[..take], sink)?;
            }
            if take < out.len() {
                return Err(Stop);
            }
            Ok(())
        });
        let (used, ended) = match r {
            Ok(x) => x,
            Err(InflateError::Stop) => return Err(Step::Stop),
            Err(InflateError::Corrupt(e)) => {
                return Err(unreadable(
                    format!("an entry's data does not inflate: {e}"),
                    Vec::new(),
                    i,
                ))
            }
        };
        self.entry.consumed += used as u64;
        if ended {
            self.finish(sink)?;
            let e = self.entry;
            self.state = if e.flags & HAS_DESCRIPTOR != 0 {
                State::Descriptor
            } else {
                // Whatever the header counts beyond the deflate stream.
                State::Skip {
                    left: e.csize.saturating_sub(e.consumed),
                }
            };
        } else if used < input.len() {
            return Err(unreadable("inflate stopped taking input", Vec::new(), i));
        }
        Ok(used)
    }

    /// Decodes bzip2 or LZMA entry data (at offset `i` of the push).
    fn unpack(&mut self, input: &[u8], i: usize, sink: &mut Sink) -> Result<(), Step> {
        let (Some(layer), content) = (self.packed.as_mut(), &mut self.content) else {
            return Err(unreadable("no decoder for an entry", Vec::new(), i));
        };
        let r = layer.push(input, &mut |out| match content.as_mut() {
            Some(c) => c.push(out, sink),
            None => Ok(()),
        });
        match r {
            Ok(()) => Ok(()),
            Err(LayerError::Stop) => Err(Step::Stop),
            Err(LayerError::Broke(b)) => Err(unreadable(
                format!("an entry's data does not decode: {}", b.why),
                Vec::new(),
                i,
            )),
        }
    }

    /// Ends the open entry, if any.
    pub(super) fn finish(&mut self, sink: &mut Sink) -> Flow {
        match self.content.take() {
            Some(mut c) => c.finish(sink),
            None => Ok(()),
        }
    }

    /// Header bytes gathered when the body ended: never read as a header,
    /// so scanned raw (fuzz find: a body cut inside a local header).
    pub(super) fn held(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}
