//! The unescaping front end: `%XX`, backslash escapes (`\/`, `\.`, `\-`,
//! `\xHH`, `\uXXXX`, `\u{X…}`, `\UXXXXXXXX`) and HTML character
//! references (`&#46;`, `&#x2e;`, `&period;`), decoded on the fly, split-safe
//! across chunks. Decoded text is never decoded again (`&amp;#46;` stays
//! `&#46;`, as a browser shows it). What is not a complete escape is passed
//! on as the bytes it was, so its letters still form tokens.
//!
//! Pure state machine: no I/O, no allocation.

use super::entities;
use super::Named;
use super::Scanner;

/// Longest entity name read (the longest HTML one has 31 letters).
pub(super) const MAX_ENTITY: usize = 32;

const REPLACEMENT: char = '\u{fffd}';

/// The braces of `\u{…}` (named: brace literals confuse line-counting
/// tools).
const OPEN: u8 = 0x7b;
const CLOSE: u8 = 0x7d;

/// Bytes that may start an escape.
static ESCAPE_START: [bool; 256] = {
    let mut t = [false; 256];
    t[b'%' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'&' as usize] = true;
    t
};

/// The escape being read. `hi` fields hold a UTF-16 high surrogate from
/// `\uD8xx` that waits for its low half (0: none).
#[derive(Clone, Copy, Debug, Default)]
pub(super) enum Escape {
    #[default]
    Plain,
    /// After `%`; `first` is the first hex digit as read (0: none yet).
    Percent { first: u8 },
    /// After one or more `\` (a run of them reads as one).
    Backslash { hi: u16 },
    /// After `\x`; `first` as for `Percent`.
    Hex { first: u8 },
    /// After `\u` (4 digits), `\U` (8) or `\u{` (1 to 6, then `}`).
    Unicode {
        n: u8,
        val: u32,
        upper: bool,
        brace: bool,
        hi: u16,
    },
    /// A high surrogate was decoded; its pair must follow as `\u…`.
    Surrogate { hi: u16 },
    /// After `&`.
    Amp,
    /// After `&#` (`x`: the `x`/`X` of `&#x`, 0 for decimal).
    Numeric { x: u8, n: u8, val: u32 },
    /// After `&` and `len` letters or digits, kept in `Scanner::entity`.
    Named { len: u8 },
}

/// Can `next` go on with an escape that `start` began? If not, `start` is
/// plain punctuation (it is passed on as it is).
pub(super) fn continues(start: u8, next: u8) -> bool {
    match start {
        b'%' => next.is_ascii_hexdigit(),
        b'\\' => matches!(next, b'\\' | b'/' | b'.' | b'-' | b'x' | b'u' | b'U'),
        b'&' => next.is_ascii_alphanumeric() || next == b'#',
        _ => false,
    }
}

fn hex(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

/// The character a numeric reference names, as browsers read it.
fn reference(val: u32) -> char {
    match val {
        0 => REPLACEMENT,
        v => char::from_u32(v).unwrap_or(REPLACEMENT),
    }
}

impl Scanner {
    /// One byte through the unescaping front end. Plain ASCII outside an
    /// escape or a UTF-8 sequence (most bytes stepped) is handled inline.
    #[inline(always)]
    pub(super) fn step(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        if matches!(self.escape, Escape::Plain) && !ESCAPE_START[b as usize] {
            self.emit(b, found);
        } else {
            self.escaped(b, found);
        }
    }

    /// A decoded byte, with the common ASCII cases inline.
    #[inline(always)]
    fn emit(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        if b < 0x80 && self.utf8.idle() && self.ascii(b, found) {
            return;
        }
        self.byte(b, found);
    }

    /// A byte that starts an escape or goes on with one: the common cases
    /// (an escape starts; JSON's `\/`) inline, the rest out of line.
    #[inline(always)]
    fn escaped(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        match (self.escape, b) {
            (Escape::Plain, b'%') => self.escape = Escape::Percent { first: 0 },
            (Escape::Plain, b'\\') => self.escape = Escape::Backslash { hi: 0 },
            (Escape::Plain, b'&') => self.escape = Escape::Amp,
            (Escape::Backslash { hi: 0 }, b'/') => {
                self.escape = Escape::Plain;
                self.emit(b'/', found);
            }
            _ => self.escaped_rare(b, found),
        }
    }

    #[inline(never)]
    fn escaped_rare(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        match self.escape {
            Escape::Plain => match b {
                b'%' => self.escape = Escape::Percent { first: 0 },
                b'\\' => self.escape = Escape::Backslash { hi: 0 },
                b'&' => self.escape = Escape::Amp,
                _ => self.emit(b, found),
            },
            Escape::Percent { first } | Escape::Hex { first } => self.two_hex(first, b, found),
            Escape::Backslash { hi } => self.backslash(hi, b, found),
            Escape::Unicode { .. } => self.unicode(b, found),
            Escape::Surrogate { hi } => {
                if b == b'\\' {
                    self.escape = Escape::Backslash { hi };
                } else {
                    self.escape = Escape::Plain;
                    self.emit_char(REPLACEMENT, found);
                    self.escaped(b, found);
                }
            }
            Escape::Amp => match b {
                b'#' => self.escape = Escape::Numeric { x: 0, n: 0, val: 0 },
                _ if b.is_ascii_alphanumeric() => {
                    self.entity[0] = b;
                    self.escape = Escape::Named { len: 1 };
                }
                _ => {
                    self.escape = Escape::Plain;
                    self.byte(b'&', found);
                    self.escaped(b, found);
                }
            },
            Escape::Numeric { x, n, val } => self.numeric(x, n, val, b, found),
            Escape::Named { len } => {
                let len = usize::from(len);
                if b.is_ascii_alphanumeric() && len < MAX_ENTITY {
                    self.entity[len] = b;
                    self.escape = Escape::Named { len: len as u8 + 1 };
                } else {
                    self.named(len, Some(b), found);
                }
            }
        }
    }

    /// `%XX` and `\xHH`: two hex digits make one byte.
    fn two_hex(&mut self, first: u8, b: u8, found: &mut impl FnMut(Named)) {
        let percent = matches!(self.escape, Escape::Percent { .. });
        match (hex(first), hex(b)) {
            (Some(h), Some(l)) if first != 0 => {
                self.escape = Escape::Plain;
                self.emit((h << 4 | l) as u8, found);
            }
            (_, Some(_)) if first == 0 => {
                self.escape = if percent {
                    Escape::Percent { first: b }
                } else {
                    Escape::Hex { first: b }
                };
            }
            _ => {
                self.fail_two_hex(percent, first, found);
                self.escaped(b, found);
            }
        }
    }

    /// Passes on an unfinished `%X` or `\xH` as the bytes it was.
    fn fail_two_hex(&mut self, percent: bool, first: u8, found: &mut impl FnMut(Named)) {
        self.escape = Escape::Plain;
        if percent {
            self.byte(b'%', found);
        } else {
            self.byte(b'\\', found);
            self.byte(b'x', found);
        }
        if first != 0 {
            self.byte(first, found);
        }
    }

    #[inline]
    fn backslash(&mut self, hi: u16, b: u8, found: &mut impl FnMut(Named)) {
        let unicode = |upper| Escape::Unicode {
            n: 0,
            val: 0,
            upper,
            brace: false,
            hi,
        };
        match b {
            b'\\' => {}
            b'u' => self.escape = unicode(false),
            b'U' => self.escape = unicode(true),
            _ => {
                self.escape = Escape::Plain;
                if hi != 0 {
                    self.emit_char(REPLACEMENT, found);
                }
                match b {
                    b'x' => self.escape = Escape::Hex { first: 0 },
                    b'/' | b'.' | b'-' => self.emit(b, found),
                    _ => {
                        self.byte(b'\\', found);
                        self.escaped(b, found);
                    }
                }
            }
        }
    }

    fn unicode(&mut self, b: u8, found: &mut impl FnMut(Named)) {
        let Escape::Unicode {
            n,
            val,
            upper,
            brace,
            hi,
        } = self.escape
        else {
            return;
        };
        let max = match (upper, brace) {
            (true, _) => 8,
            (false, true) => 6,
            (false, false) => 4,
        };
        match hex(b) {
            _ if b == OPEN && n == 0 && !upper && !brace => {
                self.escape = Escape::Unicode {
                    n,
                    val,
                    upper,
                    brace: true,
                    hi,
                };
            }
            _ if b == CLOSE && brace && n > 0 => self.code_point(val, hi, found),
            Some(h) if n < max => {
                let val = val << 4 | h;
                if n + 1 == max && !brace {
                    self.code_point(val, hi, found);
                } else {
                    self.escape = Escape::Unicode {
                        n: n + 1,
                        val,
                        upper,
                        brace,
                        hi,
                    };
                }
            }
            _ => {
                self.fail_unicode(found);
                self.escaped(b, found);
            }
        }
    }

    /// Passes on an unfinished `\u…` as the bytes it was.
    fn fail_unicode(&mut self, found: &mut impl FnMut(Named)) {
        let Escape::Unicode {
            n,
            val,
            upper,
            brace,
            hi,
        } = self.escape
        else {
            return;
        };
        self.escape = Escape::Plain;
        if hi != 0 {
            self.emit_char(REPLACEMENT, found);
        }
        self.byte(b'\\', found);
        self.byte(if upper { b'U' } else { b'u' }, found);
        if brace {
            self.byte(OPEN, found);
        }
        for k in (0..n).rev() {
            let digit = (val >> (4 * u32::from(k))) & 0xf;
            self.byte(b"0123456789abcdef"[digit as usize], found);
        }
    }

    /// A decoded `\u` code point, pairing UTF-16 surrogates.
    fn code_point(&mut self, val: u32, hi: u16, found: &mut impl FnMut(Named)) {
        self.escape = Escape::Plain;
        if hi != 0 {
            if (0xDC00..=0xDFFF).contains(&val) {
                let c = 0x10000 + ((u32::from(hi) - 0xD800) << 10) + (val - 0xDC00);
                self.emit_char(char::from_u32(c).unwrap_or(REPLACEMENT), found);
                return;
            }
            self.emit_char(REPLACEMENT, found);
        }
        if (0xD800..=0xDBFF).contains(&val) {
            self.escape = Escape::Surrogate { hi: val as u16 };
            return;
        }
        self.emit_char(char::from_u32(val).unwrap_or(REPLACEMENT), found);
    }

    /// `&#NNN;` and `&#xHH;` (the `;` may be missing, as browsers allow).
    fn numeric(&mut self, x: u8, n: u8, val: u32, b: u8, found: &mut impl FnMut(Named)) {
        let base = if x == 0 { 10 } else { 16 };
        match (b as char).to_digit(base) {
            None if n == 0 && x == 0 && (b == b'x' || b == b'X') => {
                self.escape = Escape::Numeric { x: b, n, val };
            }
            Some(d) => {
                // Long references saturate past the last code point.
                let val = (val * base + d).min(0x11_0000);
                self.escape = Escape::Numeric {
                    x,
                    n: n.saturating_add(1),
                    val,
                };
            }
            None => {
                self.end_numeric(x, n, val, found);
                if n == 0 || b != b';' {
                    self.escaped(b, found);
                }
            }
        }
    }

    /// Emits a numeric reference, or the bytes of `&#`/`&#x` with no
    /// digits after them.
    fn end_numeric(&mut self, x: u8, n: u8, val: u32, found: &mut impl FnMut(Named)) {
        self.escape = Escape::Plain;
        if n > 0 {
            self.emit_char(reference(val), found);
            return;
        }
        self.byte(b'&', found);
        self.byte(b'#', found);
        if x != 0 {
            self.byte(x, found);
        }
    }

    /// A named reference ended by `term` (None: the stream ended). As in
    /// browsers: the full name with `;`, else the longest legacy name it
    /// starts with (`&nbspx` is U+00A0 and `x`), else the bytes as they were.
    fn named(&mut self, len: usize, term: Option<u8>, found: &mut impl FnMut(Named)) {
        self.escape = Escape::Plain;
        let name = self.entity;
        let name = &name[..len];
        if term == Some(b';') {
            if let Some(c) = entities::lookup(name) {
                self.emit_char(c, found);
                return;
            }
        }
        let legacy = (2..=len.min(entities::LEGACY_MAX))
            .rev()
            .find_map(|k| Some((k, entities::legacy(&name[..k])?)));
        let rest = match legacy {
            Some((k, c)) => {
                self.emit_char(c, found);
                &name[k..]
            }
            None => {
                self.byte(b'&', found);
                name
            }
        };
        for &x in rest {
            self.byte(x, found);
        }
        if let Some(t) = term {
            self.escaped(t, found);
        }
    }

    /// Ends the stream inside an escape: what can be decoded is, the rest
    /// is passed on as it was.
    pub(super) fn finish_escape(&mut self, found: &mut impl FnMut(Named)) {
        match self.escape {
            Escape::Plain => {}
            Escape::Percent { first } => self.fail_two_hex(true, first, found),
            Escape::Hex { first } => self.fail_two_hex(false, first, found),
            Escape::Backslash { hi } | Escape::Surrogate { hi } => {
                let backslash = matches!(self.escape, Escape::Backslash { .. });
                self.escape = Escape::Plain;
                if hi != 0 {
                    self.emit_char(REPLACEMENT, found);
                }
                if backslash {
                    self.byte(b'\\', found);
                }
            }
            Escape::Unicode { .. } => self.fail_unicode(found),
            Escape::Amp => {
                self.escape = Escape::Plain;
                self.byte(b'&', found);
            }
            Escape::Numeric { x, n, val } => self.end_numeric(x, n, val, found),
            Escape::Named { len } => self.named(usize::from(len), None, found),
        }
    }

    /// A decoded character, as UTF-8 bytes through the decoder.
    fn emit_char(&mut self, c: char, found: &mut impl FnMut(Named)) {
        let mut buf = [0u8; 4];
        for &x in c.encode_utf8(&mut buf).as_bytes() {
            self.byte(x, found);
        }
    }
}
