//! One decoding layer: a Content-Encoding (or a gzip archive) undone as it
//! streams, with fixed-size output buffers, its output bounded by the scan
//! limit, and a fallback to the raw bytes when it fails.
//!
//! Must not: buffer its output or allocate a window beyond the budget it
//! is given. It keeps the last [`TAIL`] bytes of its input or more (at
//! most twice that): when it fails, or the body ends inside its stream,
//! those and the rest are scanned raw. So a plain body labelled `gzip` is
//! scanned whole, and text appended to a cut-off stream is found when it
//! is within `TAIL` bytes of where decoding failed or the body ended.

use super::coding::{Coding, Fail};
use super::flate::{Deflate, Gzip};
use super::memory::Memory;
use super::text::{HtmlText, QuotedPrintable};
use super::windowed::{Brotli, Zstd};
use super::xzbz::{Bzip2, Xz};
use super::{Flow, Skipped, Stop};

/// Input a layer keeps at least (and at most twice that), to rescan raw if
/// it fails.
pub(super) const TAIL: usize = 16 * 1024;

/// Why a layer did not take its input.
pub(super) enum LayerError {
    Stop,
    Broke(Broke),
}

/// A layer that failed: from now on its input is passed through raw.
pub(super) struct Broke {
    pub(super) why: Skipped,
    /// Raw bytes to scan first: the layer's kept tail, before the input.
    pub(super) held: Vec<u8>,
    /// Where in the current input the raw bytes go on.
    pub(super) from: usize,
    /// Nothing came out of the layer and `held` is all it was fed: its
    /// whole stream, to be sniffed for archives like a body.
    pub(super) fresh: bool,
}

/// A decoding layer, or (once it failed) a pass-through.
pub(super) struct Layer {
    codec: Option<Codec>,
    /// The last [`TAIL`] or more bytes of input decoded so far.
    tail: Vec<u8>,
    /// Input decoded so far.
    fed: u64,
    /// Output so far, bounded by `limit`.
    produced: u64,
    limit: u64,
}

impl Layer {
    /// `window_log`: log2 of the largest window a zstd or brotli layer may
    /// use.
    pub(super) fn new(
        coding: Coding,
        window_log: u32,
        limit: u64,
        memory: Option<Memory>,
    ) -> Result<Layer, Skipped> {
        let codec = match coding {
            Coding::Gzip => Codec::Gzip(Gzip::new()),
            Coding::Deflate => Codec::Deflate(Deflate::default()),
            Coding::DeflateRaw => Codec::Deflate(Deflate::raw()),
            Coding::QuotedPrintable => Codec::Qp(QuotedPrintable::default()),
            Coding::HtmlText => Codec::Html(HtmlText::default()),
            Coding::Xz => Codec::Xz(Box::new(Xz::file(memory))),
            Coding::ZipLzma => Codec::Xz(Box::new(Xz::zip_entry(memory))),
            Coding::Bzip2 => Codec::Bzip2(Box::new(Bzip2::new(memory))),
            Coding::Brotli => Codec::Brotli(Box::new(Brotli::new(window_log, memory))),
            Coding::Zstd => Codec::Zstd(Zstd::new(window_log, memory)?),
        };
        Ok(Layer::with(codec, limit))
    }

    /// A gzip layer (for a gzip archive; needs no window).
    pub(super) fn gzip(limit: u64) -> Layer {
        Layer::with(Codec::Gzip(Gzip::new()), limit)
    }

    fn with(codec: Codec, limit: u64) -> Layer {
        Layer {
            codec: Some(codec),
            tail: Vec::new(),
            fed: 0,
            produced: 0,
            limit,
        }
    }

    /// Decodes `input` into `down`; once broken, passes it on as it is.
    pub(super) fn push(
        &mut self,
        input: &[u8],
        down: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), LayerError> {
        let Some(codec) = self.codec.as_mut() else {
            return down(input).map_err(|Stop| LayerError::Stop);
        };
        if input.is_empty() {
            return Ok(());
        }
        let (produced, limit) = (&mut self.produced, self.limit);
        let r = codec.decode(input, &mut |out: &[u8]| {
            let room = limit.saturating_sub(*produced);
            let take = (out.len() as u64).min(room) as usize;
            *produced += take as u64;
            down(&out[..take])?;
            if take < out.len() {
                return Err(Stop);
            }
            Ok(())
        });
        match r {
            Ok(()) => {
                self.keep(input);
                Ok(())
            }
            Err(Fail::Stop) => Err(LayerError::Stop),
            Err(Fail::Bad { why, at }) => Err(LayerError::Broke(self.break_off(why, at))),
        }
    }

    /// Keeps the end of the input: at least [`TAIL`] bytes, at most twice
    /// that.
    fn keep(&mut self, input: &[u8]) {
        self.fed += input.len() as u64;
        let input = &input[input.len().saturating_sub(TAIL)..];
        if self.tail.len() + input.len() > 2 * TAIL {
            let keep = (TAIL - input.len()).min(self.tail.len());
            self.tail.drain(..self.tail.len() - keep);
        }
        self.tail.extend_from_slice(input);
    }

    /// Its zstd or brotli decoder draws its window from `memory`.
    pub(super) fn draw_from(&mut self, memory: &Memory) {
        match &mut self.codec {
            Some(Codec::Brotli(d)) => d.draw_from(memory.clone()),
            Some(Codec::Zstd(d)) => d.draw_from(memory.clone()),
            _ => {}
        }
    }

    /// At the end of the body: a layer still inside its stream is broken.
    pub(super) fn finish(&mut self) -> Result<(), Broke> {
        match &self.codec {
            Some(codec) if !codec.at_end() => {
                let why = Skipped::Undecodable {
                    coding: codec.coding().name(),
                    reason: "the body ended inside its stream".into(),
                };
                Err(self.break_off(why, None))
            }
            _ => Ok(()),
        }
    }

    /// An outer layer broke: this one's decoder is dropped, unused.
    pub(super) fn pass_through(&mut self) {
        self.codec = None;
        self.tail = Vec::new();
    }

    /// The raw bytes from here on: those after `at` in the current input,
    /// or (`None`) the kept tail and the whole current input.
    fn break_off(&mut self, why: Skipped, at: Option<usize>) -> Broke {
        self.codec = None;
        let tail = std::mem::take(&mut self.tail);
        let fresh = at.is_none() && self.produced == 0 && self.fed == tail.len() as u64;
        Broke {
            why,
            held: if at.is_some() { Vec::new() } else { tail },
            from: at.unwrap_or(0),
            fresh,
        }
    }
}

/// A decoder's state.
enum Codec {
    Gzip(Gzip),
    Deflate(Deflate),
    Qp(QuotedPrintable),
    Html(HtmlText),
    Xz(Box<Xz>),
    Bzip2(Box<Bzip2>),
    Brotli(Box<Brotli>),
    Zstd(Zstd),
}

impl Codec {
    fn decode(&mut self, input: &[u8], out: &mut dyn FnMut(&[u8]) -> Flow) -> Result<(), Fail> {
        match self {
            Codec::Gzip(d) => d.decode(input, out),
            Codec::Deflate(d) => d.decode(input, out),
            Codec::Qp(d) => d.decode(input, out).map_err(Fail::from),
            Codec::Html(d) => d.decode(input, out).map_err(Fail::from),
            Codec::Xz(d) => d.decode(input, out),
            Codec::Bzip2(d) => d.decode(input, out),
            Codec::Brotli(d) => d.decode(input, out),
            Codec::Zstd(d) => d.decode(input, out),
        }
    }

    /// Between streams (or before any): nothing is owed.
    fn at_end(&self) -> bool {
        match self {
            Codec::Gzip(d) => d.at_end(),
            Codec::Deflate(d) => d.at_end(),
            Codec::Qp(_) | Codec::Html(_) => true,
            Codec::Xz(d) => d.at_end(),
            Codec::Bzip2(d) => d.at_end(),
            Codec::Brotli(d) => d.at_end(),
            Codec::Zstd(d) => d.at_end(),
        }
    }

    fn coding(&self) -> Coding {
        match self {
            Codec::Gzip(_) => Coding::Gzip,
            Codec::Deflate(_) => Coding::Deflate,
            Codec::Qp(_) => Coding::QuotedPrintable,
            Codec::Html(_) => Coding::HtmlText,
            Codec::Xz(_) => Coding::Xz,
            Codec::Bzip2(_) => Coding::Bzip2,
            Codec::Brotli(_) => Coding::Brotli,
            Codec::Zstd(_) => Coding::Zstd,
        }
    }
}
