//! xz, LZMA and bzip2, undone as they stream: `.tar.xz` and `.tar.bz2`
//! files inside a body, and zip entries compressed with LZMA (method 14)
//! or bzip2 (method 12).
//!
//! Must not: hold memory its task's and the process's pools ([`Memory`])
//! do not grant (an xz dictionary can be 64 MiB; what each decoder holds is
//! counted after every step), or buffer beyond one step and a zip LZMA
//! header.

use liblzma::stream::{Action, Filters, Status as XzStatus, Stream};

use super::coding::{bad, trailing, Coding, Fail, OUT_BUF};
use super::memory::{Held, Memory};
use super::{Flow, Skipped};

/// What an xz decoder may hold first (`xz -6`, the default, needs about
/// 9 MiB), and at most (`xz -9`: 65 MiB, the whole task's pool). liblzma
/// enforces the limit; the pools grant it first.
const XZ_FIRST: u64 = 16 << 20;
const XZ_MAX: u64 = super::memory::TASK_CAP;
/// What a bzip2 decoder holds (its fast mode: about 3.7 MB).
const BZIP2_MEMORY: u64 = 4 << 20;

fn no_memory(coding: Coding) -> Fail {
    Fail::Bad {
        why: Skipped::NoMemory {
            coding: coding.name(),
        },
        at: None,
    }
}

/// An xz file (one or more streams) or a zip entry's raw LZMA data.
pub(super) struct Xz {
    stream: Option<Stream>,
    /// A zip entry: its LZMA header (version, properties) comes first.
    zip_header: Option<Vec<u8>>,
    /// Streams decoded to their end.
    streams: u64,
    held: Held,
}

impl Xz {
    /// `.xz`: streams read to the end of the input.
    pub(super) fn file(memory: Option<Memory>) -> Xz {
        Xz {
            stream: None,
            zip_header: None,
            streams: 0,
            held: Held::new(memory),
        }
    }

    /// A zip LZMA entry (APPNOTE 5.8.8: 2 bytes of version, 2 of properties
    /// size, the properties, then raw LZMA1).
    pub(super) fn zip_entry(memory: Option<Memory>) -> Xz {
        Xz {
            zip_header: Some(Vec::new()),
            ..Xz::file(memory)
        }
    }

    pub(super) fn at_end(&self) -> bool {
        self.stream.is_none()
    }

    /// The decoder for what starts here, once enough header is read.
    fn start(&mut self, input: &[u8]) -> Result<(Option<Stream>, usize), Fail> {
        let Some(head) = self.zip_header.as_mut() else {
            if !self.held.grow_to(XZ_FIRST) {
                return Err(no_memory(Coding::Xz));
            }
            let s = Stream::new_stream_decoder(XZ_FIRST, 0)
                .map_err(|e| bad(Coding::Xz, e.to_string()))?;
            return Ok((Some(s), 0));
        };
        let before = head.len();
        let want = |h: &[u8]| match h {
            [_, _, a, b, ..] => 4 + usize::from(u16::from_le_bytes([*a, *b])),
            _ => 4,
        };
        let mut at = 0;
        // Twice at most: the sizes, then the properties they announce.
        for _ in 0..2 {
            let take = want(head).saturating_sub(head.len()).min(input.len() - at);
            head.extend_from_slice(&input[at..at + take]);
            at += take;
        }
        if head.len() < want(head) {
            return Ok((None, head.len() - before));
        }
        if want(head) > 4 + 16 {
            return Err(bad(Coding::Xz, "LZMA properties too long"));
        }
        // The dictionary (properties bytes 1 to 4) is what it holds.
        let dict = match &head[4..] {
            [_, a, b, c, d, ..] => u64::from(u32::from_le_bytes([*a, *b, *c, *d])),
            _ => 0,
        };
        if !self.held.grow_to(dict + (1 << 20)) {
            return Err(no_memory(Coding::ZipLzma));
        }
        let mut f = Filters::new();
        f.lzma1_properties(&head[4..])
            .map_err(|e| bad(Coding::Xz, format!("LZMA properties: {e}")))?;
        let s = Stream::new_raw_decoder(&f).map_err(|e| bad(Coding::Xz, e.to_string()))?;
        Ok((Some(s), head.len() - before))
    }

    pub(super) fn decode(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), Fail> {
        let mut buf = [0u8; OUT_BUF];
        let mut used = 0;
        while used < input.len() {
            if self.stream.is_none() {
                if self.streams > 0 && self.zip_header.is_some() {
                    return Err(trailing(Coding::Xz, used));
                }
                let (s, took) = self.start(&input[used..])?;
                used += took;
                self.stream = s;
                continue;
            }
            let s = self
                .stream
                .as_mut()
                .ok_or_else(|| bad(Coding::Xz, "no decoder"))?;
            let (in0, out0) = (s.total_in(), s.total_out());
            let status = match s.process(&input[used..], &mut buf, Action::Run) {
                Ok(st) => st,
                Err(liblzma::stream::Error::MemLimit) if s.memlimit() < XZ_MAX => {
                    // A larger dictionary: hold more, if the pools grant it.
                    if !self.held.grow_to(XZ_MAX) || s.set_memlimit(XZ_MAX).is_err() {
                        return Err(no_memory(Coding::Xz));
                    }
                    continue;
                }
                Err(liblzma::stream::Error::MemLimit) => return Err(no_memory(Coding::Xz)),
                Err(_) if self.streams > 0 => return Err(trailing(Coding::Xz, used)),
                Err(e) => return Err(bad(Coding::Xz, e.to_string())),
            };
            let took = (s.total_in() - in0) as usize;
            let made = (s.total_out() - out0) as usize;
            used += took;
            if made > 0 {
                out(&buf[..made])?;
            }
            if status == XzStatus::StreamEnd {
                self.stream = None;
                self.streams += 1;
            } else if took == 0 && made == 0 {
                return Err(bad(Coding::Xz, "the decoder stopped taking input"));
            }
        }
        Ok(())
    }
}

/// bzip2: streams read to the end of the input (pbzip2 writes many).
pub(super) struct Bzip2 {
    dec: Option<bzip2::Decompress>,
    streams: u64,
    held: Held,
}

impl Bzip2 {
    pub(super) fn new(memory: Option<Memory>) -> Bzip2 {
        Bzip2 {
            dec: None,
            streams: 0,
            held: Held::new(memory),
        }
    }

    pub(super) fn at_end(&self) -> bool {
        self.dec.is_none()
    }

    pub(super) fn decode(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), Fail> {
        let mut buf = [0u8; OUT_BUF];
        let mut used = 0;
        while used < input.len() {
            if !self.held.grow_to(BZIP2_MEMORY) {
                return Err(no_memory(Coding::Bzip2));
            }
            let d = self
                .dec
                .get_or_insert_with(|| bzip2::Decompress::new(false));
            let (in0, out0) = (d.total_in(), d.total_out());
            let status = d.decompress(&input[used..], &mut buf).map_err(|e| {
                if self.streams > 0 {
                    trailing(Coding::Bzip2, used)
                } else {
                    bad(Coding::Bzip2, e.to_string())
                }
            })?;
            let took = (d.total_in() - in0) as usize;
            let made = (d.total_out() - out0) as usize;
            used += took;
            if made > 0 {
                out(&buf[..made])?;
            }
            if status == bzip2::Status::StreamEnd {
                self.dec = None;
                self.streams += 1;
            } else if took == 0 && made == 0 {
                return Err(bad(Coding::Bzip2, "the decoder stopped taking input"));
            }
        }
        Ok(())
    }
}
