//! Trigger search for the byte path: where the next byte that can matter
//! (`.`, `/`, `%`, `\\`, `&`, a non-ASCII dot) lies in a chunk, with
//! memchr. Must not read tokens or judge anything.

use super::chars;

/// The next position of one of a set of bytes, searched once and reused
/// until the scan passes it.
#[derive(Clone, Copy)]
pub(super) enum Next {
    Unknown,
    At(usize),
    Never,
}

impl Next {
    fn from(&mut self, from: usize, find: impl Fn(usize) -> Option<usize>) -> Option<usize> {
        match *self {
            Next::At(p) if p >= from => Some(p),
            Next::Never => None,
            _ => {
                let r = find(from);
                *self = r.map_or(Next::Never, Next::At);
                r
            }
        }
    }
}

/// The positions of the next triggers in a chunk: `.`, `/`, `%` (searched
/// each time, as they are frequent), and the rarer `\`, `&` and non-ASCII
/// dots (each searched once and reused until passed).
pub(super) struct Triggers {
    /// The next rare trigger (`usize::MAX`: none).
    rare: usize,
    backslash: Next,
    amp: Next,
    wide: Next,
}

impl Triggers {
    pub(super) fn new(chunk: &[u8]) -> Self {
        let mut t = Triggers {
            rare: usize::MAX,
            backslash: Next::Unknown,
            amp: Next::Unknown,
            wide: Next::Unknown,
        };
        t.rare = t.next_rare(chunk, 0);
        t
    }

    /// The first trigger at or after `i`.
    #[inline]
    pub(super) fn find(&mut self, chunk: &[u8], i: usize) -> Option<usize> {
        let common = memchr::memchr3(b'.', b'/', b'%', &chunk[i..]).map(|x| x + i);
        if self.rare < i {
            self.rare = self.next_rare(chunk, i);
        }
        match common {
            Some(c) if c < self.rare => Some(c),
            _ if self.rare == usize::MAX => None,
            _ => Some(self.rare),
        }
    }

    /// The next `\`, `&`, or non-ASCII dot (a 0xE3/0xEF lead byte counts
    /// when it starts a dot or a sequence cut by the chunk end).
    fn next_rare(&mut self, chunk: &[u8], i: usize) -> usize {
        let find1 = |b: u8| move |f: usize| memchr::memchr(b, &chunk[f..]).map(|x| x + f);
        let backslash = self.backslash.from(i, find1(b'\\'));
        let amp = self.amp.from(i, find1(b'&'));
        let escape = backslash
            .unwrap_or(usize::MAX)
            .min(amp.unwrap_or(usize::MAX));
        let mut from = i;
        loop {
            let wide = self.wide.from(from, |f| {
                memchr::memchr2(0xE3, 0xEF, &chunk[f..]).map(|x| x + f)
            });
            match wide {
                Some(w) if w < escape && chars::dot_at(&chunk[w..]) => return w,
                Some(w) if w < escape => from = w + 1,
                _ => return escape,
            }
        }
    }
}
