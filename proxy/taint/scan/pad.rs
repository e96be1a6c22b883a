//! Runs of padding: more than [`PAD_MAX`] bytes of `-`, `_` or `.` in a
//! row belong to no name (a label holds at most 63 bytes), so such a run
//! ends the token it is in, as a space would. Without this, a name padded
//! by 1,100 hyphens on either side made a token longer than `MAX_TOKEN`,
//! which is dropped whole before its padding could be trimmed.
//!
//! Owns: finding those runs in plain bytes, across chunk edges, at the cost
//! of one byte looked at in 64 (a run of 64 covers one such byte).
//! Must not: change anything else of what the scanner sees. Escaped padding
//! (`&#45;` over and over) is decoded later and is not found here.

use super::{Named, Scanner};

/// Padding bytes a name's token may keep in a row.
pub(super) const PAD_MAX: usize = 63;
/// A run longer than [`PAD_MAX`] covers one of every this many positions.
const STRIDE: usize = PAD_MAX + 1;

fn is_pad(b: u8) -> bool {
    matches!(b, b'-' | b'_' | b'.')
}

impl Scanner {
    /// Scans plain bytes (after the charset stage), ending tokens at long
    /// runs of padding.
    pub(super) fn feed_bytes(&mut self, chunk: &[u8], found: &mut impl FnMut(Named)) {
        if chunk.is_empty() {
            return;
        }
        let carried = std::mem::take(&mut self.pad);
        let lead = chunk.iter().take_while(|&&b| is_pad(b)).count();
        let mut fed = 0;
        if carried > PAD_MAX {
            // Inside a long run already: the rest of it is skipped.
            fed = lead;
        } else if carried > 0 && carried + lead > PAD_MAX {
            let keep = PAD_MAX - carried;
            self.feed_run(&chunk[..keep], found);
            self.feed_run(b" ", found);
            fed = lead;
        }
        if fed == chunk.len() {
            self.pad = if carried > PAD_MAX || fed > 0 {
                PAD_MAX + 1
            } else {
                0
            };
            return;
        }
        let mut p = fed + STRIDE - 1;
        while p < chunk.len() {
            if !is_pad(chunk[p]) {
                p += STRIDE;
                continue;
            }
            let mut s = p;
            while s > fed && is_pad(chunk[s - 1]) {
                s -= 1;
            }
            let mut e = p + 1;
            while e < chunk.len() && is_pad(chunk[e]) {
                e += 1;
            }
            if e - s > PAD_MAX {
                self.feed_run(&chunk[fed..s + PAD_MAX], found);
                self.feed_run(b" ", found);
                fed = e;
                if e == chunk.len() {
                    self.pad = PAD_MAX + 1;
                    return;
                }
            }
            p = e + STRIDE - 1;
        }
        self.feed_run(&chunk[fed..], found);
        // A run at the end may go on in the next chunk.
        let rest = &chunk[fed..];
        let tail = rest.iter().rev().take_while(|&&b| is_pad(b)).count();
        self.pad = if tail == rest.len() && fed == 0 {
            carried + tail
        } else {
            tail
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::scan_all;
    use super::*;

    fn chunked(text: &[u8], n: usize) -> Vec<String> {
        let mut s = Scanner::new();
        let mut out = Vec::new();
        for c in text.chunks(n) {
            s.feed(c, &mut |h| out.push(h.host));
        }
        s.finish(&mut |h| out.push(h.host));
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn a_name_padded_by_a_long_run_is_found_in_any_chunking() {
        let pad = |b: u8, n: usize| vec![b; n];
        let name = b"x.example.com".to_vec();
        let cases: Vec<Vec<u8>> = vec![
            [name.clone(), pad(b'-', 1100)].concat(),
            [pad(b'-', 1100), name.clone()].concat(),
            [pad(b'_', 2000), b" ".to_vec(), name.clone(), pad(b'.', 70)].concat(),
            [
                b"see ".to_vec(),
                name.clone(),
                pad(b'-', 64),
                b" and more".to_vec(),
            ]
            .concat(),
            [pad(b'.', 63), name.clone(), pad(b'-', 63)].concat(),
        ];
        for text in &cases {
            for n in [1, 2, 7, 63, 64, 65, 100, 4096] {
                let got = chunked(text, n);
                assert_eq!(
                    got,
                    vec!["x.example.com"],
                    "{} bytes, chunks of {n}",
                    text.len()
                );
            }
        }
        // Short runs change nothing: the same names as before.
        let text = b"a--b.example.com and c__d.example.org ...";
        assert_eq!(chunked(text, 3), scan_all(text));
    }
}
