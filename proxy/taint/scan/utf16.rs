//! The charset front end: UTF-16 bodies are transcoded to UTF-8 for the
//! scanner, split-safe (a code unit or a surrogate pair may straddle
//! chunks). A body is UTF-16 when it starts with a UTF-16 BOM, or when the
//! caller says so from the Content-Type charset; a BOM (UTF-8's too) wins
//! over the caller's label, as in browsers. Transcoding goes through a
//! small stack buffer: nothing is held but an odd byte and a surrogate.

use super::Named;
use super::{Scanner, MAX_TOKEN};

const REPLACEMENT: char = '\u{fffd}';

/// The charset a body is declared in (from its Content-Type), for
/// [`Scanner::with_charset`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Charset {
    /// UTF-8 or any ASCII-compatible charset; UTF-16 only with a BOM.
    #[default]
    Auto,
    /// `charset=utf-16le` (and `utf-16`, which is little-endian without a
    /// BOM in practice).
    Utf16Le,
    /// `charset=utf-16be`.
    Utf16Be,
    /// `charset=utf-32` (little-endian unless a big-endian BOM starts it,
    /// as Python reads it) and `utf-32le`.
    Utf32Le,
    /// `charset=utf-32be`.
    Utf32Be,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Front {
    /// Stream start: up to three bytes held until they show whether a BOM
    /// is there.
    Sniff {
        label: Charset,
        held: [u8; 3],
        n: u8,
    },
    /// Bytes go on as they are.
    Bytes,
    /// UTF-16 code units to UTF-8. `odd`: the first byte of a unit cut by
    /// a chunk end; `hi`: a high surrogate waiting for its pair (0: none).
    Utf16 { be: bool, odd: Option<u8>, hi: u16 },
    /// UTF-32 code units to UTF-8: `held` bytes of a unit cut by a chunk
    /// end; `started` once the first unit (a BOM may flip `be`) is read.
    Utf32 {
        be: bool,
        held: [u8; 4],
        n: u8,
        started: bool,
    },
}

impl Front {
    pub(super) fn new(label: Charset) -> Front {
        Front::Sniff {
            label,
            held: [0; 3],
            n: 0,
        }
    }
}

fn by_label(label: Charset) -> Front {
    let utf16 = |be| Front::Utf16 {
        be,
        odd: None,
        hi: 0,
    };
    let utf32 = |be| Front::Utf32 {
        be,
        held: [0; 4],
        n: 0,
        started: false,
    };
    match label {
        Charset::Auto => Front::Bytes,
        Charset::Utf16Le => utf16(false),
        Charset::Utf16Be => utf16(true),
        Charset::Utf32Le => utf32(false),
        Charset::Utf32Be => utf32(true),
    }
}

/// What the first bytes say: the charset and how many bytes of BOM to
/// drop, or None while they could still be a BOM.
fn sniff(label: Charset, held: &[u8]) -> Option<(Front, usize)> {
    let utf16 = |be| Front::Utf16 {
        be,
        odd: None,
        hi: 0,
    };
    if matches!(label, Charset::Utf32Le | Charset::Utf32Be) {
        // A UTF-32 label: the BOM is read as a character (invisible).
        return Some((by_label(label), 0));
    }
    match held {
        [0xFF, 0xFE, ..] => Some((utf16(false), 2)),
        [0xFE, 0xFF, ..] => Some((utf16(true), 2)),
        [0xEF, 0xBB, 0xBF] => Some((Front::Bytes, 3)),
        [] | [0xFF] | [0xFE] | [0xEF] | [0xEF, 0xBB] => None,
        _ => Some((by_label(label), 0)),
    }
}

/// One UTF-16 code unit, given a pending high surrogate (0: none): the
/// characters it completes.
fn unit(hi: &mut u16, u: u16) -> [Option<char>; 2] {
    let pending = std::mem::take(hi);
    let lone = (pending != 0).then_some(REPLACEMENT);
    match u {
        0xD800..=0xDBFF => {
            *hi = u;
            [lone, None]
        }
        0xDC00..=0xDFFF if pending != 0 => {
            let c = 0x10000 + ((u32::from(pending) - 0xD800) << 10) + (u32::from(u) - 0xDC00);
            [char::from_u32(c), None]
        }
        0xDC00..=0xDFFF => [Some(REPLACEMENT), None],
        _ => [lone, char::from_u32(u32::from(u))],
    }
}

impl Scanner {
    /// A chunk while sniffing, or of a UTF-16 body.
    pub(super) fn feed_front(&mut self, chunk: &[u8], found: &mut impl FnMut(Named)) {
        match self.front {
            Front::Bytes => self.feed_bytes(chunk, found),
            Front::Utf16 { .. } => self.feed_utf16(chunk, found),
            Front::Utf32 { .. } => self.feed_utf32(chunk, found),
            Front::Sniff { label, mut held, n } => {
                let mut n = usize::from(n);
                for (used, &b) in chunk.iter().enumerate() {
                    held[n] = b;
                    n += 1;
                    if let Some((front, bom)) = sniff(label, &held[..n]) {
                        self.front = front;
                        self.feed(&held[bom..n], found);
                        self.feed(&chunk[used + 1..], found);
                        return;
                    }
                }
                self.front = Front::Sniff {
                    label,
                    held,
                    n: n as u8,
                };
            }
        }
    }

    /// Transcodes UTF-16 to UTF-8 in stack-sized blocks.
    fn feed_utf16(&mut self, chunk: &[u8], found: &mut impl FnMut(Named)) {
        let Front::Utf16 {
            be,
            mut odd,
            mut hi,
        } = self.front
        else {
            return;
        };
        let mut out = [0u8; MAX_TOKEN];
        let mut len = 0;
        for &b in chunk {
            let Some(first) = odd.take() else {
                odd = Some(b);
                continue;
            };
            let u = if be {
                u16::from_be_bytes([first, b])
            } else {
                u16::from_le_bytes([first, b])
            };
            for c in unit(&mut hi, u).into_iter().flatten() {
                len += c.encode_utf8(&mut out[len..]).len();
            }
            if len + 8 > out.len() {
                self.feed_bytes(&out[..len], found);
                len = 0;
            }
        }
        self.front = Front::Utf16 { be, odd, hi };
        self.feed_bytes(&out[..len], found);
    }

    /// Transcodes UTF-32 to UTF-8 in stack-sized blocks.
    fn feed_utf32(&mut self, chunk: &[u8], found: &mut impl FnMut(Named)) {
        let Front::Utf32 {
            mut be,
            mut held,
            mut n,
            mut started,
        } = self.front
        else {
            return;
        };
        let mut out = [0u8; MAX_TOKEN];
        let mut len = 0;
        for &b in chunk {
            held[usize::from(n)] = b;
            n += 1;
            if n < 4 {
                continue;
            }
            n = 0;
            if !started && held == [0x00, 0x00, 0xFE, 0xFF] {
                be = true;
            }
            started = true;
            let u = if be {
                u32::from_be_bytes(held)
            } else {
                u32::from_le_bytes(held)
            };
            let c = char::from_u32(u).unwrap_or(REPLACEMENT);
            len += c.encode_utf8(&mut out[len..]).len();
            if len + 8 > out.len() {
                self.feed_bytes(&out[..len], found);
                len = 0;
            }
        }
        self.front = Front::Utf32 {
            be,
            held,
            n,
            started,
        };
        self.feed_bytes(&out[..len], found);
    }

    /// Ends the stream: bytes held while sniffing are read by the label; a
    /// dangling odd byte or high surrogate ends the text.
    pub(super) fn finish_front(&mut self, found: &mut impl FnMut(Named)) {
        match self.front {
            Front::Sniff { label, held, n } => {
                self.front = by_label(label);
                self.feed(&held[..usize::from(n)], found);
                if let Front::Utf16 { be, .. } = self.front {
                    // Flush what the held bytes left open.
                    self.front = Front::Utf16 {
                        be,
                        odd: None,
                        hi: 0,
                    };
                }
            }
            Front::Utf16 { be, .. } => {
                self.front = Front::Utf16 {
                    be,
                    odd: None,
                    hi: 0,
                }
            }
            Front::Utf32 { be, started, .. } => {
                self.front = Front::Utf32 {
                    be,
                    held: [0; 4],
                    n: 0,
                    started,
                }
            }
            Front::Bytes => {}
        }
    }
}
