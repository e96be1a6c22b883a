//! Characters: decoding UTF-8, and what each character is to a reader of
//! a host name — part of it, a dot, invisible, or the end of it — and
//! which script it belongs to (a change of script marks where glued words
//! meet: `请访问paste.example.com`).
//!
//! A byte that is not UTF-8 ends a token, as punctuation does: it is a
//! quote or a space of a legacy charset (windows-1252 `\x93`, `\xa0`), a
//! byte of GBK or Shift_JIS text, or binary. So ASCII names glued to such
//! text are found; a Latin-1 page's `b\xfccher.de` reads as `cher.de`.
//! Pure: no I/O, no allocation.

pub(super) use super::unicode::{Kind, LATIN, NEUTRAL};
use super::unicode::{CJK, KINDS, SCRIPTS};

/// What `c` (not ASCII) is to a host name.
pub(super) fn kind(c: char) -> Kind {
    let cp = c as u32;
    // Han and Hangul syllables, most of CJK text, are letters.
    if (0x4E00..=0x9FFF).contains(&cp) || (0xAC00..=0xD7A3).contains(&cp) {
        return Kind::Host;
    }
    let i = KINDS.partition_point(|&(start, _)| start <= cp);
    // KINDS starts at U+0080 and `c` is not ASCII, so i ≥ 1.
    KINDS
        .get(i.wrapping_sub(1))
        .map_or(Kind::Break, |&(_, k)| k)
}

/// The script class of a host character (not ASCII): equal classes do not
/// split a word. Listed ranges group scripts that mix in one word; any
/// other character is classed by its 256-code-point block.
pub(super) fn script(c: char) -> u32 {
    let cp = c as u32;
    if (0x4E00..=0x9FFF).contains(&cp) || (0xAC00..=0xD7A3).contains(&cp) {
        return CJK;
    }
    let i = SCRIPTS.partition_point(|&(start, _, _)| start <= cp);
    match SCRIPTS.get(i.wrapping_sub(1)) {
        Some(&(_, end, class)) if cp <= end => class,
        _ => 0x100 + (cp >> 8),
    }
}

/// Does this text start with a non-ASCII dot (U+3002, U+FF0E, U+FF61,
/// U+FE52), or with the start of one cut short by the end of the text?
pub(super) fn dot_at(text: &[u8]) -> bool {
    matches!(
        text,
        [0xE3, 0x80, 0x82, ..]
            | [0xEF, 0xBC, 0x8E, ..]
            | [0xEF, 0xBD, 0xA1, ..]
            | [0xEF, 0xB9, 0x92, ..]
            | [0xE3]
            | [0xE3, 0x80]
            | [0xEF]
            | [0xEF, 0xBC | 0xBD | 0xB9]
    )
}

/// Does the last character of `text` surely end a token? `text` starts
/// where the decoder is idle and ends with a byte ≥ 0x80; `next` is the
/// byte after it, if any yet (a sequence cut by the end, or by an escape
/// that may decode to its next byte, stays open). True for punctuation,
/// symbols and bytes that are not UTF-8: the fast path may then start a
/// token right after `text` without stepping through it.
pub(super) fn ends_token(text: &[u8], next: Option<u8>) -> bool {
    let n = text.len();
    let mut lead = n.saturating_sub(1);
    while lead > 0 && n - lead < 4 && (0x80..=0xBF).contains(&text[lead]) {
        lead -= 1;
    }
    match first_char(&text[lead..]) {
        // The character ends `text`; else bytes after it are strays.
        Ok((c, len)) => lead + len < n || kind(c) == Kind::Break,
        Err(Some(_)) => true,
        Err(None) => !next.is_none_or(escape_start),
    }
}

/// Does the text at the start of `bytes` surely end a token (the fast
/// path's end of a token)? Then: how many bytes it takes. None for host
/// characters, invisible ones, and sequences cut by the end of `bytes` or
/// by an escape (which may decode to their next byte).
#[inline]
pub(super) fn breaks_at(bytes: &[u8]) -> Option<usize> {
    match first_char(bytes) {
        Ok((c, len)) => (kind(c) == Kind::Break).then_some(len),
        Err(Some(n)) if !bytes.get(n).is_some_and(|&b| escape_start(b)) => Some(n),
        Err(_) => None,
    }
}

/// May this byte start an escape (`%XX`, `\\xHH`, `&#…;`), which decodes to
/// a byte or character of its own?
fn escape_start(b: u8) -> bool {
    matches!(b, b'%' | b'\\' | b'&')
}

/// The first character of `bytes` (not empty) and its length, if it is
/// complete UTF-8; else `Err(Some(n))` when its first `n` bytes are not
/// UTF-8 whatever follows, `Err(None)` when it is cut short. The same
/// rules as [`Utf8::push`].
#[inline]
pub(super) fn first_char(bytes: &[u8]) -> Result<(char, usize), Option<usize>> {
    let b0 = bytes[0];
    let (need, lo, hi) = match b0 {
        0x00..=0x7F => return Ok((char::from(b0), 1)),
        0xC2..=0xDF => (2, 0x80, 0xBF),
        0xE0 => (3, 0xA0, 0xBF),
        0xED => (3, 0x80, 0x9F),
        0xE1..=0xEF => (3, 0x80, 0xBF),
        0xF0 => (4, 0x90, 0xBF),
        0xF4 => (4, 0x80, 0x8F),
        0xF1..=0xF3 => (4, 0x80, 0xBF),
        _ => return Err(Some(1)),
    };
    let mut cp = u32::from(b0) & (0x7F >> need);
    for k in 1..need {
        let Some(&b) = bytes.get(k) else {
            return Err(None);
        };
        let (l, h) = if k == 1 { (lo, hi) } else { (0x80, 0xBF) };
        if b < l || b > h {
            return Err(Some(k));
        }
        cp = cp << 6 | u32::from(b & 0x3F);
    }
    char::from_u32(cp).map(|c| (c, need)).ok_or(Some(need))
}

/// The character a complete UTF-8 sequence at the start of `bytes`
/// encodes, and its length (None if it is not one: the byte is then read
/// on its own).
#[inline]
pub(super) fn decode(bytes: &[u8]) -> Option<(char, usize)> {
    first_char(bytes).ok().filter(|&(c, _)| !c.is_ascii())
}

/// A UTF-8 sequence being read: its bytes so far and its length.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Utf8 {
    held: [u8; 3],
    have: u8,
    need: u8,
}

/// What a byte completes.
pub(super) enum Decoded {
    /// A sequence is open.
    Pending,
    Char(char),
    /// Not UTF-8: the bytes held (or the byte pushed, when none was held)
    /// end the token.
    NotUtf8,
    /// As `NotUtf8` for the bytes held, and the byte pushed must be read
    /// again (it may start something).
    Again,
}

impl Utf8 {
    pub(super) fn idle(&self) -> bool {
        self.need == 0
    }

    /// Reads a byte ≥ 0x80, or any byte while a sequence is open.
    pub(super) fn push(&mut self, b: u8) -> Decoded {
        if self.need == 0 {
            let need = match b {
                0xC2..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF4 => 4,
                _ => return Decoded::NotUtf8,
            };
            *self = Utf8 {
                held: [b, 0, 0],
                have: 1,
                need,
            };
            return Decoded::Pending;
        }
        let ok = match (self.have, self.held[0]) {
            (1, 0xE0) => (0xA0..=0xBF).contains(&b),
            (1, 0xED) => (0x80..=0x9F).contains(&b),
            (1, 0xF0) => (0x90..=0xBF).contains(&b),
            (1, 0xF4) => (0x80..=0x8F).contains(&b),
            _ => (0x80..=0xBF).contains(&b),
        };
        if !ok {
            *self = Utf8::default();
            return Decoded::Again;
        }
        if self.have + 1 < self.need {
            self.held[usize::from(self.have)] = b;
            self.have += 1;
            return Decoded::Pending;
        }
        let lead = u32::from(self.held[0]);
        let tail = |k: usize| u32::from(self.held[k] & 0x3f);
        let last = u32::from(b & 0x3f);
        let cp = match self.need {
            2 => (lead & 0x1f) << 6 | last,
            3 => (lead & 0x0f) << 12 | tail(1) << 6 | last,
            _ => (lead & 0x07) << 18 | tail(1) << 12 | tail(2) << 6 | last,
        };
        *self = Utf8::default();
        // The ranges checked above leave only scalar values.
        Decoded::Char(char::from_u32(cp).unwrap_or('\u{fffd}'))
    }

    /// Ends a sequence the stream cut short: true if one was open.
    pub(super) fn take(&mut self) -> bool {
        std::mem::take(self).need != 0
    }
}

/// Tracks where the script changes between letters of a token: a piece
/// boundary. A dot between two scripts is a label boundary instead
/// (`中国.cn` is one name), and marks and joiners do not count.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Scripts {
    /// Script class of the last letter or digit (0: none yet).
    last: u32,
    /// A dot came after that letter.
    dot_since: bool,
}

impl Scripts {
    /// A letter or digit of `class`: true when it starts a new piece.
    pub(super) fn letter(&mut self, class: u32) -> bool {
        if class == NEUTRAL {
            return false;
        }
        let boundary = self.last != 0 && self.last != class && !self.dot_since;
        self.last = class;
        self.dot_since = false;
        boundary
    }

    pub(super) fn dot(&mut self) {
        self.dot_since = true;
    }

    /// A run of ASCII host bytes: true when its first letter (which is
    /// then its first byte) starts a new piece.
    pub(super) fn ascii(&mut self, run: &[u8]) -> bool {
        let Some(j) = run.iter().position(|&b| b != b'.') else {
            self.dot_since |= !run.is_empty();
            return false;
        };
        if j > 0 {
            self.dot_since = true;
        }
        let boundary = self.letter(LATIN);
        if run.last() == Some(&b'.') {
            self.dot_since = true;
        }
        boundary
    }

    /// The state after reading `text` (UTF-8 host characters and dots).
    pub(super) fn after(text: &[u8]) -> Scripts {
        let mut s = Scripts::default();
        s.read(text, |_| {});
        s
    }

    /// Reads `text`, calling `boundary` with the offset of each piece
    /// boundary in it.
    pub(super) fn read(&mut self, text: &[u8], mut boundary: impl FnMut(usize)) {
        let mut i = 0;
        while i < text.len() {
            let b = text[i];
            if b < 0x80 {
                if b == b'.' {
                    self.dot();
                } else if self.letter(LATIN) {
                    boundary(i);
                }
                i += 1;
                continue;
            }
            let len = match b {
                0xF0.. => 4,
                0xE0.. => 3,
                _ => 2,
            };
            let c = std::str::from_utf8(&text[i..(i + len).min(text.len())])
                .ok()
                .and_then(|s| s.chars().next());
            if let Some(c) = c {
                if self.letter(script(c)) {
                    boundary(i);
                }
            }
            i += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `first_char` must say, from the standard library's decoder.
    fn std_first_char(bytes: &[u8]) -> Result<(char, usize), Option<usize>> {
        let valid = match std::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) if e.valid_up_to() > 0 => {
                std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap()
            }
            Err(e) => return Err(e.error_len()),
        };
        let c = valid.chars().next().unwrap();
        Ok((c, c.len_utf8()))
    }

    /// Every lead byte with continuations at the edges of every range
    /// the decoder checks: both decoders read UTF-8 exactly as std does.
    #[test]
    fn decoders_read_utf8_as_std_does() {
        const NEXT: [u8; 9] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF];
        let mut inputs = Vec::new();
        for b0 in 0..=255u8 {
            inputs.push(vec![b0]);
            for b1 in NEXT.into_iter().chain([0xC0, 0xFF]) {
                inputs.push(vec![b0, b1]);
                for b2 in NEXT {
                    inputs.push(vec![b0, b1, b2]);
                    for b3 in NEXT {
                        inputs.push(vec![b0, b1, b2, b3]);
                    }
                }
            }
        }
        for bytes in &inputs {
            let want = std_first_char(bytes);
            assert_eq!(first_char(bytes), want, "{bytes:02x?}");
            assert_eq!(decode(bytes), want.ok().filter(|(c, _)| !c.is_ascii()));
            if bytes[0] >= 0x80 {
                assert_eq!(pushed(bytes), want, "push, {bytes:02x?}");
            }
        }
    }

    /// What `Utf8::push` makes of `bytes`, byte by byte, in `first_char`'s
    /// terms; a sequence still open at the end is `take`n.
    fn pushed(bytes: &[u8]) -> Result<(char, usize), Option<usize>> {
        let mut u = Utf8::default();
        for (k, &b) in bytes.iter().enumerate() {
            match u.push(b) {
                Decoded::Pending => assert!(!u.idle()),
                Decoded::Char(c) => return Ok((c, k + 1)),
                Decoded::NotUtf8 => return Err(Some(1)),
                Decoded::Again => return Err(Some(k)),
            }
        }
        assert!(u.take(), "an open sequence is taken");
        assert!(!u.take() && u.idle(), "and then nothing is open");
        Err(None)
    }

    #[test]
    fn what_ends_a_token() {
        // A closing quote ends it, a letter does not.
        assert!(ends_token("a”".as_bytes(), None));
        assert!(!ends_token("aé".as_bytes(), Some(b'x')));
        // A letter followed by a stray continuation byte: strays end it.
        assert!(ends_token(&[0xC3, 0xA9, 0x80], None));
        // Not UTF-8 whatever follows.
        assert!(ends_token(&[b'a', 0xFF], None));
        // Cut short: open until the next byte says otherwise; an escape
        // may still complete it.
        assert!(!ends_token(&[0xE3, 0x80], None));
        assert!(!ends_token(&[0xE3, 0x80], Some(b'%')));
        assert!(ends_token(&[0xE3, 0x80], Some(b'a')));

        assert_eq!(breaks_at("”x".as_bytes()), Some(3));
        assert_eq!(breaks_at("éx".as_bytes()), None);
        assert_eq!(breaks_at(&[0xFF, b'a']), Some(1));
        for e in [b'%', b'\\', b'&'] {
            assert_eq!(breaks_at(&[0xFF, e]), None, "{}", e as char);
        }
        assert_eq!(breaks_at(&[0xE3, 0x80]), None);
    }

    #[test]
    fn script_classes() {
        // Han and Hangul are one class, across their 256-point blocks.
        let cjk = script('\u{4E00}');
        for c in ['\u{56FD}', '\u{9FFF}', '\u{AC00}', '\u{D7A3}'] {
            assert_eq!(script(c), cjk, "{c}");
        }
        assert_eq!(kind('\u{56FD}'), Kind::Host);
        assert_eq!(kind('\u{D7A3}'), Kind::Host);
        // An unlisted script (Armenian, between Cyrillic and Arabic) is
        // classed by its block, apart from its listed neighbours.
        assert_eq!(script('\u{531}'), 0x100 + 5);
        assert_eq!(script('\u{531}'), script('\u{561}'));
        assert_ne!(script('\u{531}'), script('\u{434}'));
    }
}
