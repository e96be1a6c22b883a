//! brotli and zstd, the codings with large windows, undone as they stream
//! within the window budget their layer is given.
//!
//! Must not: let a stream allocate a window beyond that budget (a small
//! body can announce a 128 MiB zstd window or a 16 MiB brotli one), or
//! hold memory its task's and the process's pools ([`Memory`]) do not
//! grant: what each decoder really holds is counted after every step.

use brotli_decompressor::{BrotliDecompressStream, BrotliResult, BrotliState, StandardAlloc};
use zstd::zstd_safe::{self, DCtx, DParameter, InBuffer, OutBuffer};

use super::coding::{bad, too_large, trailing, Coding, Fail, OUT_BUF};
use super::memory::{Held, Memory};
use super::{Flow, Skipped};

/// The decoder grew beyond what the pools grant.
fn no_memory(coding: Coding) -> Fail {
    Fail::Bad {
        why: Skipped::NoMemory {
            coding: coding.name(),
        },
        at: None,
    }
}

/// brotli (RFC 7932), without the large-window extension; a stream whose
/// window (from its first byte) exceeds the layer's budget is raw. The
/// decoder grows its ring buffer with the output, up to that window.
pub(super) struct Brotli {
    state: BrotliState<StandardAlloc, StandardAlloc, StandardAlloc>,
    window_log: u32,
    started: bool,
    done: bool,
    held: Held,
}

impl Brotli {
    /// Ended, or not started.
    pub(super) fn at_end(&self) -> bool {
        self.done || !self.started
    }

    pub(super) fn new(window_log: u32, memory: Option<Memory>) -> Brotli {
        Brotli {
            held: Held::new(memory),
            state: BrotliState::new_strict(
                StandardAlloc::default(),
                StandardAlloc::default(),
                StandardAlloc::default(),
            ),
            window_log,
            started: false,
            done: false,
        }
    }

    /// Draws its ring buffer from `memory` from now on.
    pub(super) fn draw_from(&mut self, memory: Memory) {
        self.held = Held::new(Some(memory));
    }

    pub(super) fn decode(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), Fail> {
        if self.done {
            return Err(trailing(Coding::Brotli, 0));
        }
        if !self.started {
            self.started = true;
            match brotli_window_log(input[0]) {
                Some(w) if w <= self.window_log => {}
                _ => return Err(too_large(Coding::Brotli, self.window_log)),
            }
        }
        let mut buf = [0u8; OUT_BUF];
        let (mut avail_in, mut in_off) = (input.len(), 0);
        loop {
            let (mut avail_out, mut out_off, mut total) = (buf.len(), 0, 0);
            let r = BrotliDecompressStream(
                &mut avail_in,
                &mut in_off,
                input,
                &mut avail_out,
                &mut out_off,
                &mut buf,
                &mut total,
                &mut self.state,
            );
            // The ring buffer grows with the output, up to the window.
            if !self.held.grow_to(self.state.ringbuffer_size.max(0) as u64) {
                return Err(no_memory(Coding::Brotli));
            }
            if out_off > 0 {
                out(&buf[..out_off])?;
            }
            match r {
                BrotliResult::NeedsMoreOutput => continue,
                BrotliResult::NeedsMoreInput => return Ok(()),
                BrotliResult::ResultSuccess => {
                    self.done = true;
                    if in_off < input.len() {
                        return Err(trailing(Coding::Brotli, in_off));
                    }
                    return Ok(());
                }
                BrotliResult::ResultFailure => {
                    let code = self.state.error_code as i32;
                    return Err(bad(Coding::Brotli, format!("brotli error {code}")));
                }
            }
        }
    }
}

/// The window log a brotli stream announces in its first byte (RFC 7932
/// 9.1); `None` for the large-window extension or an invalid value.
fn brotli_window_log(first: u8) -> Option<u32> {
    if first & 1 == 0 {
        return Some(16);
    }
    let n = u32::from(first >> 1 & 7);
    if n != 0 {
        return Some(17 + n);
    }
    match u32::from(first >> 4 & 7) {
        0 => Some(17),
        1 => None,
        m => Some(8 + m),
    }
}

/// zstd: frames are read to the end of the body (skippable ones skipped);
/// the window is capped with `WindowLogMax`, so a frame that needs more is
/// refused before its window is allocated.
pub(super) struct Zstd {
    dec: DCtx<'static>,
    window_log: u32,
    /// The last step ended a frame (or nothing was fed yet).
    frame_done: bool,
    /// Frames decoded to their end.
    frames: u64,
    held: Held,
}

/// zstd's name for `ZSTD_error_frameParameter_windowTooLarge`.
const ZSTD_WINDOW_TOO_LARGE: &str = "Frame requires too much memory for decoding";

impl Zstd {
    /// Between frames.
    pub(super) fn at_end(&self) -> bool {
        self.frame_done
    }

    /// Draws its window from `memory` from now on.
    pub(super) fn draw_from(&mut self, memory: Memory) {
        self.held = Held::new(Some(memory));
    }

    pub(super) fn new(window_log: u32, memory: Option<Memory>) -> Result<Zstd, Skipped> {
        let unavailable = |e: &str| Skipped::Undecodable {
            coding: "zstd",
            reason: format!("no decoder: {e}"),
        };
        let mut dec = DCtx::try_create().ok_or_else(|| unavailable("out of memory"))?;
        dec.init()
            .and_then(|_| dec.set_parameter(DParameter::WindowLogMax(window_log)))
            .map_err(|c| unavailable(zstd_safe::get_error_name(c)))?;
        Ok(Zstd {
            dec,
            window_log,
            frame_done: true,
            frames: 0,
            held: Held::new(memory),
        })
    }

    pub(super) fn decode(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Flow,
    ) -> Result<(), Fail> {
        let mut buf = [0u8; OUT_BUF];
        let mut src = InBuffer::around(input);
        loop {
            let mut dst = OutBuffer::around(&mut buf[..]);
            let start = src.pos();
            let hint = self
                .dec
                .decompress_stream(&mut dst, &mut src)
                .map_err(|c| {
                    let e = zstd_safe::get_error_name(c);
                    if e == ZSTD_WINDOW_TOO_LARGE {
                        too_large(Coding::Zstd, self.window_log)
                    } else if self.frame_done && self.frames > 0 {
                        // Frames decoded to their end: only what follows is raw.
                        trailing(Coding::Zstd, start)
                    } else {
                        bad(Coding::Zstd, e)
                    }
                })?;
            // The window is allocated when a frame's header is read.
            if !self.held.grow_to(self.dec.sizeof() as u64) {
                return Err(no_memory(Coding::Zstd));
            }
            let made = dst.pos();
            if hint == 0 && src.pos() > start {
                self.frames += 1;
            }
            self.frame_done = hint == 0;
            if made > 0 {
                out(&buf[..made])?;
            }
            if src.pos() == input.len() && made < buf.len() {
                return Ok(());
            }
        }
    }
}
