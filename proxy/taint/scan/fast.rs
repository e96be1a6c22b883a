//! The fast path: plain ASCII text walked 64 bytes at a time by its masks.
//!
//! Owns: finding, in a window of plain ASCII bytes, each token with a dot
//! in it that a plain byte ends, and handing it to the judge exactly as
//! the byte path's `judge_in_chunk` does (same token, same terminator,
//! same `prev`). Everything else — escapes, non-ASCII bytes, `//`, a
//! token the window cuts — is left to the byte path, which takes over at
//! the start of the token in question, where its state is known.
//!
//! Must not: judge anything itself, or pass a byte the byte path would
//! have read differently. `properties.rs` and the `taint_scan` fuzz target
//! compare the scanner with and without this path on every input.

use super::classify::{classify, WIDTH};
use super::judge::known_suffix;
use super::{Named, Scanner};

/// Speed only, never results: when this path passed fewer than `SHORT`
/// bytes before a stop (binary, non-ASCII text, dense escapes), the next
/// `PAUSE` bytes are left to the byte path rather than classified again.
const SHORT: usize = 32;
const PAUSE: usize = 256;

/// Bits below `n` (all of them for 64).
#[inline]
fn below(n: u32) -> u64 {
    1u64.checked_shl(n).map_or(u64::MAX, |b| b - 1)
}

impl Scanner {
    /// Walks windows from `i` (the scanner idle there: no escape, sequence
    /// or token open, and not right after `//`). Returns where the byte
    /// path goes on, and the first place worth trying this path again.
    ///
    /// A window needs 65 bytes (the 65th tells whether a last `/` starts
    /// `//`), so the last 64 bytes of a chunk, and any chunk of 64 bytes or
    /// fewer, always take the byte path. A window's byte 0 may start a
    /// token: the first window starts where the scanner is idle (as the
    /// byte path's token would), every later one right after a non-host
    /// byte. `%`, `\` and `&` stop the window even where the byte path
    /// would read them as punctuation: conservative, never wrong.
    pub(super) fn fast(
        &mut self,
        chunk: &[u8],
        mut i: usize,
        found: &mut impl FnMut(Named),
    ) -> (usize, usize) {
        debug_assert!(!self.busy() && !self.tok.active && !self.prev.slashes());
        let from = i;
        if !self.fast_path {
            return (i, usize::MAX);
        }
        if self.prev.last() == b'/' && chunk.get(i) == Some(&b'/') {
            // `//` across the window's start: URL context, the byte path's.
            return (i, i + 1);
        }
        while let Some(w) = chunk.get(i..i + WIDTH + 1) {
            // Always 65 bytes (the slice above): the conversion cannot fail.
            let Ok(w) = <&[u8; WIDTH + 1]>::try_from(w) else {
                break;
            };
            let m = classify(w);
            let limit = m.stop.trailing_zeros();
            let nonhost = !m.host;
            // `cut` is one past the last non-host byte before the first
            // stop: tokens that end before it are whole and plain ASCII;
            // the one from `cut` on reaches a stop byte or the window's end.
            let ends = nonhost & below(limit);
            let cut = 64 - ends.leading_zeros();
            let mut dots = m.dot & below(cut);
            while dots != 0 {
                // The token around the dot at `d`: from one past the last
                // non-host byte below it to the first one above it. A
                // non-host byte lies at `cut - 1 > d`, so `e < cut <= 64`.
                let d = dots.trailing_zeros();
                let s = 64 - (nonhost & below(d)).leading_zeros();
                let e = d + (nonhost >> d).trailing_zeros();
                let (s, e) = (s as usize, e as usize);
                let before = if s > 0 { w[s - 1] } else { self.prev.last() };
                if matches!(w[e - 1], b'.' | b'-' | b'_') {
                    // `plausible_bare` trims trailing `.-_` first, which
                    // moves the last label: the long way.
                    self.judge_ascii(&w[s..e], before, w[e], found);
                } else {
                    // The last label starts after the last dot below `e`.
                    let last = 64 - (m.dot & below(e as u32)).leading_zeros() as usize;
                    if known_suffix(&w[last..e]) {
                        self.judge_known(&w[s..e], before, w[e], found);
                    }
                }
                if self.cap.is_some() {
                    // A path to read after `w[e]` (a `/`): the byte path's.
                    let end = i + e + 1;
                    self.prev.extend(&chunk[i..end]);
                    return (end, end + 1);
                }
                dots &= !below(e as u32);
            }
            self.prev.extend(&chunk[i..i + cut as usize]);
            i += cut as usize;
            if limit < 64 {
                // The byte path reads the stop byte before this path is
                // tried again; after a short stretch (binary, non-ASCII
                // text, dense escapes) it keeps the bytes for a while.
                let stop = i - cut as usize + limit as usize;
                let pause = if i - from < SHORT { PAUSE } else { 1 };
                return (i, stop + pause);
            }
            if cut == 0 {
                // A run of 64 host bytes: the byte path measures it.
                return (i, i + PAUSE);
            }
            // The next window starts at the token the window cut.
        }
        (i, usize::MAX)
    }
}
