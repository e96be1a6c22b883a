//! Trigger search for the byte path: where the next byte that can matter
//! (`.`, `/`, `%`, `\\`, `&`, a non-ASCII dot) lies in a chunk, found
//! from block masks. Must not read tokens or judge anything.

use super::chars;

/// The positions of the next triggers in a chunk, 64 bytes at a time:
/// one pass of byte compares marks every `.`, `/`, `%`, `\\`, `&` and
/// 0xE3/0xEF lead byte of a block in a mask, and each trigger after that
/// costs a bit scan. Random and binary bytes hold a trigger every few
/// dozen bytes; a search call per trigger (memchr's set-up each time)
/// was most of their cost.
pub(super) struct Triggers {
    /// Where the block `mask` covers starts.
    base: usize,
    /// Triggers in `chunk[base..base + 64]` not yet passed.
    mask: u64,
    /// Whether `mask` was computed.
    ready: bool,
}

impl Triggers {
    pub(super) fn new() -> Self {
        Triggers {
            base: 0,
            mask: 0,
            ready: false,
        }
    }

    /// The first trigger at or after `i`: `.`, `/`, `%`, `\\`, `&`, or a
    /// non-ASCII dot (a 0xE3/0xEF lead byte counts when it starts a dot
    /// or a sequence cut by the chunk end).
    #[inline]
    pub(super) fn find(&mut self, chunk: &[u8], mut i: usize) -> Option<usize> {
        loop {
            if !self.ready || i >= self.base + 64 || i < self.base {
                if i >= chunk.len() {
                    return None;
                }
                self.base = i;
                self.mask = block(&chunk[i..chunk.len().min(i + 64)]);
                self.ready = true;
            } else {
                self.mask &= !below((i - self.base) as u32);
            }
            while self.mask != 0 {
                let p = self.base + self.mask.trailing_zeros() as usize;
                if chunk[p] < 0x80 || chars::dot_at(&chunk[p..]) {
                    return Some(p);
                }
                self.mask &= self.mask - 1;
            }
            i = self.base + 64;
            if i >= chunk.len() {
                return None;
            }
        }
    }
}

/// Bits below `n` (all of them for 64).
#[inline]
fn below(n: u32) -> u64 {
    1u64.checked_shl(n).map_or(u64::MAX, |b| b - 1)
}

/// The trigger bytes of up to 64 bytes, as a mask.
#[inline]
fn block(b: &[u8]) -> u64 {
    let mut mask = 0u64;
    let mut k = 0;
    #[cfg(target_arch = "x86_64")]
    while let Some(lane) = b.get(k..k + 16) {
        if let Ok(lane) = <&[u8; 16]>::try_from(lane) {
            mask |= u64::from(sse2::triggers(lane)) << k;
        }
        k += 16;
    }
    for (j, &c) in b.iter().enumerate().skip(k) {
        if is_trigger(c) {
            mask |= 1 << j;
        }
    }
    mask
}

fn is_trigger(c: u8) -> bool {
    matches!(c, b'.' | b'/' | b'%' | b'\\' | b'&' | 0xE3 | 0xEF)
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use safe_arch::{bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, m128i};
    use safe_arch::{move_mask_i8_m128i, set_splat_i8_m128i};

    fn eq(v: m128i, b: u8) -> m128i {
        cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b as i8))
    }

    /// Trigger bits of 16 bytes.
    #[inline]
    pub(super) fn triggers(lane: &[u8; 16]) -> u16 {
        let v = load_unaligned_m128i(lane);
        let ascii = bitor_m128i(
            bitor_m128i(eq(v, b'.'), eq(v, b'/')),
            bitor_m128i(bitor_m128i(eq(v, b'%'), eq(v, b'\\')), eq(v, b'&')),
        );
        let wide = bitor_m128i(eq(v, 0xE3), eq(v, 0xEF));
        move_mask_i8_m128i(bitor_m128i(ascii, wide)) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first trigger the old way: every position checked in turn.
    fn naive(chunk: &[u8], i: usize) -> Option<usize> {
        (i..chunk.len()).find(|&p| {
            let c = chunk[p];
            matches!(c, b'.' | b'/' | b'%' | b'\\' | b'&') || chars::dot_at(&chunk[p..])
        })
    }

    #[test]
    fn finds_what_a_byte_by_byte_search_finds() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet = b"ab.9/%\\&\xe3\x80\x82\xef\xbc\x8e\xbd\xa1 Z";
        for round in 0..400 {
            let len = (round * 7) % 300;
            let chunk: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if round % 3 == 0 {
                        (x >> 24) as u8
                    } else {
                        alphabet[(x % alphabet.len() as u64) as usize]
                    }
                })
                .collect();
            let mut t = Triggers::new();
            // Forward jumps of every size, as the scanner makes them.
            let mut i = 0;
            while i <= chunk.len() {
                assert_eq!(t.find(&chunk, i), naive(&chunk, i), "{chunk:?} at {i}");
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                i += 1 + (x % 70) as usize;
            }
        }
    }
}
