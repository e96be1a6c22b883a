//! gzip and deflate, undone as they stream with fixed-size buffers (for
//! Content-Encoding layers, gzip archives and zip entries).
//!
//! Must not: buffer input or output beyond one step, or check what a
//! client checks (CRC, sizes): the scanner needs the text, not its
//! integrity.

use flate2::{Decompress, FlushDecompress, Status};

use super::coding::{bad, trailing, Coding, Fail, OUT_BUF};
use super::{Flow, Skipped, Stop};

/// Inflates as much of `input` as it can into `out`. Returns the bytes
/// consumed and whether the deflate stream ended there.
pub(super) fn inflate(
    d: &mut Decompress,
    input: &[u8],
    out: &mut dyn FnMut(&[u8]) -> Flow,
) -> Result<(usize, bool), InflateError> {
    let mut buf = [0u8; OUT_BUF];
    let mut used = 0;
    loop {
        let (in0, out0) = (d.total_in(), d.total_out());
        let status = d
            .decompress(&input[used..], &mut buf, FlushDecompress::None)
            .map_err(|e| InflateError::Corrupt(e.to_string()))?;
        let took = (d.total_in() - in0) as usize;
        let made = (d.total_out() - out0) as usize;
        used += took;
        if made > 0 {
            out(&buf[..made]).map_err(|Stop| InflateError::Stop)?;
        }
        match status {
            Status::StreamEnd => return Ok((used, true)),
            // More output may be waiting while the buffer fills up.
            _ if made == buf.len() => continue,
            _ if used == input.len() || took == 0 && made == 0 => return Ok((used, false)),
            _ => continue,
        }
    }
}

/// Why [`inflate`] stopped.
pub(super) enum InflateError {
    Stop,
    Corrupt(String),
}

/// gzip flag bits (RFC 1952 2.3.1).
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
/// The optional header fields, in the order they appear.
const FIELDS: [u8; 4] = [FEXTRA, FNAME, FCOMMENT, FHCRC];

/// Where a gzip decoder is in its member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GzState {
    /// The 10 fixed header bytes, `n` read so far.
    Fixed {
        n: u8,
    },
    /// FEXTRA's two length bytes.
    ExtraLen {
        n: u8,
        len: u16,
    },
    Extra {
        left: u16,
    },
    /// Zero-terminated FNAME or FCOMMENT (`field` indexes [`FIELDS`]).
    Text {
        field: usize,
    },
    HeaderCrc {
        left: u8,
    },
    Data,
    /// CRC32 and ISIZE: not checked (the scanner needs the text, not its
    /// integrity; a client checks it).
    Trailer {
        left: u8,
    },
}

/// Multi-member gzip (RFC 1952): members are read to the end of the body;
/// bytes after a member that do not start another are raw. The header's
/// name, comment and extra fields are skipped: a decoder shows only the
/// data.
pub(super) struct Gzip {
    state: GzState,
    flags: u8,
    members: u32,
    inflate: Decompress,
    /// A body labelled gzip that starts with a zlib header instead of
    /// gzip's magic: read as zlib, as curl's decoder does.
    other: Option<Deflate>,
}

impl Gzip {
    pub(super) fn new() -> Gzip {
        Gzip {
            state: GzState::Fixed { n: 0 },
            flags: 0,
            members: 0,
            inflate: Decompress::new(false),
            other: None,
        }
    }

    pub(super) fn at_end(&self) -> bool {
        match &self.other {
            Some(d) => d.at_end(),
            None => self.state == GzState::Fixed { n: 0 },
        }
    }

    /// The first optional field at or after `from` the flags announce.
    fn field(&self, from: usize) -> GzState {
        match FIELDS[from.min(FIELDS.len())..]
            .iter()
            .position(|f| self.flags & f != 0)
            .map(|i| FIELDS[from + i])
        {
            Some(FEXTRA) => GzState::ExtraLen { n: 0, len: 0 },
            Some(FNAME) => GzState::Text { field: 1 },
            Some(FCOMMENT) => GzState::Text { field: 2 },
            Some(_) => GzState::HeaderCrc { left: 2 },
            None => GzState::Data,
        }
    }

    pub(super) fn decode(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), Fail> {
        let starts = self.members == 0 && self.state == GzState::Fixed { n: 0 };
        if starts && self.other.is_none() && input.first().is_some_and(|b| *b != 0x1f) {
            self.other = Some(Deflate::zlib());
        }
        if let Some(d) = self.other.as_mut() {
            return d.decode(input, out);
        }
        let mut i = 0;
        while i < input.len() {
            match self.state {
                GzState::Data => {
                    let (used, ended) =
                        inflate(&mut self.inflate, &input[i..], out).map_err(|e| match e {
                            InflateError::Stop => Fail::Stop,
                            InflateError::Corrupt(e) => bad(Coding::Gzip, e),
                        })?;
                    i += used;
                    if ended {
                        self.state = GzState::Trailer { left: 8 };
                    } else if i < input.len() {
                        return Err(bad(Coding::Gzip, "inflate stopped taking input"));
                    }
                }
                GzState::Trailer { left } => {
                    let take = (left as usize).min(input.len() - i);
                    i += take;
                    self.state = match left as usize - take {
                        0 => {
                            self.members += 1;
                            GzState::Fixed { n: 0 }
                        }
                        n => GzState::Trailer { left: n as u8 },
                    };
                }
                _ => {
                    let at = i;
                    i += 1;
                    let between = self.members > 0 && self.at_end();
                    self.header_byte(input[at])
                        .map_err(|reason| match between {
                            // Everything before decoded: only the rest is raw.
                            true => Fail::Bad {
                                why: Skipped::Undecodable {
                                    coding: "gzip",
                                    reason: "bytes after the last member are not another one"
                                        .into(),
                                },
                                at: Some(at),
                            },
                            false => bad(Coding::Gzip, reason),
                        })?;
                }
            }
        }
        Ok(())
    }

    /// One byte of a member header.
    fn header_byte(&mut self, b: u8) -> Result<(), &'static str> {
        self.state = match self.state {
            GzState::Fixed { n } => {
                match (n, b) {
                    (0, 0x1f) | (1, 0x8b) | (2, 8) => {}
                    (0 | 1, _) => return Err("not gzip data (no 1f 8b magic)"),
                    (2, _) => return Err("not a deflate member (unknown method)"),
                    (3, flags) if flags & 0xe0 != 0 => return Err("reserved header flags set"),
                    (3, flags) => self.flags = flags,
                    _ => {}
                }
                if n == 9 {
                    self.field(0)
                } else {
                    GzState::Fixed { n: n + 1 }
                }
            }
            GzState::ExtraLen { n: 0, .. } => GzState::ExtraLen {
                n: 1,
                len: u16::from(b),
            },
            GzState::ExtraLen { len, .. } => match len | u16::from(b) << 8 {
                0 => self.field(1),
                left => GzState::Extra { left },
            },
            GzState::Extra { left: 1 } => self.field(1),
            GzState::Extra { left } => GzState::Extra { left: left - 1 },
            GzState::Text { field } if b == 0 => self.field(field + 1),
            s @ GzState::Text { .. } => s,
            GzState::HeaderCrc { left: 1 } => self.field(4),
            GzState::HeaderCrc { left } => GzState::HeaderCrc { left: left - 1 },
            GzState::Data | GzState::Trailer { .. } => unreachable!("not header states"),
        };
        if self.state == GzState::Data {
            self.inflate.reset(false);
        }
        Ok(())
    }
}

/// `deflate`: zlib (RFC 1950) as specified, or the raw deflate some
/// servers send; the first two bytes tell. Two bytes can be both a zlib
/// header and the start of raw deflate: the body scanner then also reads
/// it as raw ([`Deflate::raw`]), as clients do when zlib fails.
#[derive(Default)]
pub(super) struct Deflate {
    head: Vec<u8>,
    inflate: Option<Decompress>,
    done: bool,
    /// Only a zlib stream is this coding (a gzip label's other reading).
    only_zlib: bool,
}

/// Do these first two bytes make a zlib header (RFC 1950: CM = 8 and the
/// header checksum divides by 31)?
pub(super) fn zlib_header(a: u8, b: u8) -> bool {
    a & 0x0f == 8 && (u16::from(a) << 8 | u16::from(b)) % 31 == 0
}

impl Deflate {
    /// A zlib stream, or not this coding at all.
    pub(super) fn zlib() -> Deflate {
        Deflate {
            only_zlib: true,
            ..Deflate::default()
        }
    }

    /// Raw deflate from the first byte.
    pub(super) fn raw() -> Deflate {
        Deflate {
            inflate: Some(Decompress::new(false)),
            ..Deflate::default()
        }
    }

    /// Ended, or not started.
    pub(super) fn at_end(&self) -> bool {
        self.done || self.head.is_empty() && self.inflate.is_none()
    }

    pub(super) fn decode(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), Fail> {
        if self.done {
            return Err(trailing(Coding::Deflate, 0));
        }
        let Some(d) = self.inflate.as_mut() else {
            self.head.extend_from_slice(input);
            if self.head.len() < 2 {
                return Ok(());
            }
            let zlib = zlib_header(self.head[0], self.head[1]);
            if self.only_zlib && !zlib {
                return Err(bad(Coding::Gzip, "not gzip data (no 1f 8b magic)"));
            }
            self.inflate = Some(Decompress::new(zlib));
            let head = std::mem::take(&mut self.head);
            // `head` ends with `input`: decoding it all decodes both.
            return self.decode(&head, out).map_err(|f| match f {
                Fail::Bad { why, .. } => Fail::Bad { why, at: None },
                f => f,
            });
        };
        let (used, ended) = inflate(d, input, out).map_err(|e| match e {
            InflateError::Stop => Fail::Stop,
            InflateError::Corrupt(e) => bad(Coding::Deflate, e),
        })?;
        if used < input.len() {
            if !ended {
                return Err(bad(Coding::Deflate, "inflate stopped taking input"));
            }
            self.done = true;
            return Err(trailing(Coding::Deflate, used));
        }
        self.done = ended;
        Ok(())
    }
}
