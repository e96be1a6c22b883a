//! The block classifier: 64 bytes at a time, three bit masks.
//!
//! Owns: sorting each byte of a 64-byte window (plus one byte after it)
//! into host bytes (ASCII letters, digits, `-`, `.`, `_`), dots, and
//! stops — bytes the fast path must not pass: the escape starts `%`, `\`
//! and `&`, any byte ≥ 0x80, and a `/` followed by `/` (URL context).
//! On x86-64 it compares 16 bytes at once with SSE2 (the baseline of the
//! architecture) through `safe_arch`; elsewhere a scalar loop gives the
//! same masks. `tests` pins the two to each other on every byte value.
//!
//! Must not: decide what a token is — the scanner (`mod.rs`) walks the
//! masks and judges tokens with the same functions its byte path uses.

/// Bytes in a window.
pub(super) const WIDTH: usize = 64;

/// The masks of one window: bit `j` stands for byte `j`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Masks {
    /// ASCII letters, digits, `-`, `.` and `_`.
    pub(crate) host: u64,
    /// `.`
    pub(crate) dot: u64,
    /// `%`, `\`, `&`, bytes ≥ 0x80, and a `/` whose next byte is `/`.
    pub(crate) stop: u64,
}

/// Classifies `w[..64]`; `w[64]` only tells whether a `/` in the last
/// place starts `//`.
#[inline]
pub(super) fn classify(w: &[u8; WIDTH + 1]) -> Masks {
    let (host, dot, mut stop, slash) = lanes(w);
    let slash_next = (slash >> 1) | (u64::from(w[WIDTH] == b'/') << 63);
    stop |= slash & slash_next;
    Masks { host, dot, stop }
}

/// Host, dot, stop (without `//`) and slash masks.
#[cfg(target_arch = "x86_64")]
#[inline]
fn lanes(w: &[u8; WIDTH + 1]) -> (u64, u64, u64, u64) {
    let mut m = [0u64; 4];
    for (k, part) in w[..WIDTH].chunks_exact(16).enumerate() {
        let Ok(part) = <&[u8; 16]>::try_from(part) else {
            continue;
        };
        let l = sse2::lane(part);
        for (acc, bits) in m.iter_mut().zip(l) {
            *acc |= u64::from(bits) << (16 * k);
        }
    }
    (m[0], m[1], m[2], m[3])
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn lanes(w: &[u8; WIDTH + 1]) -> (u64, u64, u64, u64) {
    scalar(w)
}

/// The same masks a byte at a time (the reference, and other
/// architectures).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn scalar(w: &[u8; WIDTH + 1]) -> (u64, u64, u64, u64) {
    let (mut host, mut dot, mut stop, mut slash) = (0u64, 0u64, 0u64, 0u64);
    for (j, &b) in w[..WIDTH].iter().enumerate() {
        let bit = 1u64 << j;
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_') {
            host |= bit;
        }
        if b == b'.' {
            dot |= bit;
        }
        if b >= 0x80 || matches!(b, b'%' | b'\\' | b'&') {
            stop |= bit;
        }
        if b == b'/' {
            slash |= bit;
        }
    }
    (host, dot, stop, slash)
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, cmp_gt_mask_i8_m128i, cmp_lt_mask_i8_m128i,
        load_unaligned_m128i, m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };

    fn splat(b: u8) -> m128i {
        set_splat_i8_m128i(b as i8)
    }

    fn eq(v: m128i, b: u8) -> m128i {
        cmp_eq_mask_i8_m128i(v, splat(b))
    }

    /// `lo <= v <= hi` for ASCII `0 < lo`, `hi < 0x7f` (so `lo - 1` and
    /// `hi + 1` stay ASCII); bytes ≥ 0x80 are negative as `i8`, so they
    /// are never in range.
    fn within(v: m128i, lo: u8, hi: u8) -> m128i {
        safe_arch::bitand_m128i(
            cmp_gt_mask_i8_m128i(v, splat(lo - 1)),
            cmp_lt_mask_i8_m128i(v, splat(hi + 1)),
        )
    }

    fn bits(m: m128i) -> u16 {
        move_mask_i8_m128i(m) as u16
    }

    /// Host, dot, stop and slash bits of 16 bytes.
    #[inline]
    pub(super) fn lane(part: &[u8; 16]) -> [u16; 4] {
        let v = load_unaligned_m128i(part);
        // Folds `A-Z` onto `a-z`; it also moves `@`, `[` … onto `` ` ``,
        // `{` …, which stay outside `a-z`.
        let lower = bitor_m128i(v, splat(0x20));
        let dot = eq(v, b'.');
        let host = bitor_m128i(
            bitor_m128i(within(lower, b'a', b'z'), within(v, b'0', b'9')),
            bitor_m128i(bitor_m128i(dot, eq(v, b'-')), eq(v, b'_')),
        );
        let escape = bitor_m128i(bitor_m128i(eq(v, b'%'), eq(v, b'\\')), eq(v, b'&'));
        // The sign bit of each byte is the ≥ 0x80 test.
        let stop = bits(escape) | bits(v);
        [bits(host), bits(dot), stop, bits(eq(v, b'/'))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value in every lane position, and `//` at each place,
    /// gives the scalar masks.
    #[test]
    fn vector_masks_equal_the_scalar_ones() {
        let mut w = [b' '; WIDTH + 1];
        for b in 0..=255u8 {
            for j in 0..WIDTH {
                w[j] = b;
                assert_eq!(lanes(&w), scalar(&w), "byte {b:#x} at {j}");
                w[j] = b' ';
            }
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            for b in w.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = b"ab.9-_/%\\&\xe3\x80 Z:"[(x % 15) as usize];
            }
            assert_eq!(lanes(&w), scalar(&w));
        }
    }

    #[test]
    fn slashes_stop_only_as_a_pair() {
        let mut w = [b'a'; WIDTH + 1];
        w[3] = b'/';
        assert_eq!(classify(&w).stop, 0);
        w[4] = b'/';
        assert_eq!(classify(&w).stop, 1 << 3);
        let mut w = [b'a'; WIDTH + 1];
        w[63] = b'/';
        assert_eq!(classify(&w).stop, 0);
        w[64] = b'/';
        assert_eq!(classify(&w).stop, 1 << 63);
        let mut w = [b'a'; WIDTH + 1];
        w[10] = b'.';
        w[20] = 0xC3;
        w[30] = b'&';
        let m = classify(&w);
        assert_eq!(m.dot, 1 << 10);
        assert_eq!(m.stop, 1 << 20 | 1 << 30);
        assert_eq!(m.host, !(1u64 << 20 | 1 << 30));
    }
}
