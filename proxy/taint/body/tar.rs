//! tar (ustar, GNU and pax), read block by block as it streams: each
//! member's data is a stream of its own, sniffed and scanned.
//!
//! Decided: header blocks (names, modes, sizes, link names) and the data
//! of pax and GNU long-name records are not scanned. They hold paths, not
//! text a person reads as a reference, and every `lib.rs`, `setup.py` or
//! `README.md` in a package would taint a "host" (a crate alone could
//! fill `max_hosts`). A member's data is scanned whatever its type flag
//! says, except for links, devices, directories, FIFOs and those records.
//! The first all-zero block ends the archive: what follows is scanned raw.
//! A header whose checksum fails ends the reading: it and the rest are
//! scanned raw (fail closed). A pax `size` record overriding the header's
//! is not read (the next header then fails its checksum: raw).
//!
//! Must not: buffer more than one header block.

use super::member::{Member, Step};
use super::{Flow, Sink, Skipped};

const BLOCK: usize = 512;

/// A tar being read; each scanned member's data goes into an `M`.
pub(super) struct Tar<M> {
    /// Archives around the tar; its members are one deeper.
    depth: u8,
    block: [u8; BLOCK],
    filled: usize,
    /// Member data left to read.
    data: u64,
    /// Padding left after it (to the next block).
    pad: u64,
    /// The member's stream, when its data is scanned.
    member: Option<M>,
}

/// What a header block says.
#[derive(Debug, PartialEq, Eq)]
enum Header {
    End,
    Bad(&'static str),
    Entry { size: u64, scanned: bool },
}

impl<M: Member> Tar<M> {
    pub(super) fn new(depth: u8) -> Tar<M> {
        Tar {
            depth,
            block: [0; BLOCK],
            filled: 0,
            data: 0,
            pad: 0,
            member: None,
        }
    }

    pub(super) fn push(&mut self, input: &[u8], sink: &mut Sink) -> Result<(), Step> {
        let mut i = 0;
        while i < input.len() {
            let rest = &input[i..];
            if self.data > 0 {
                let take = self.data.min(rest.len() as u64) as usize;
                if let Some(m) = self.member.as_mut() {
                    m.push(&rest[..take], sink)?;
                }
                self.data -= take as u64;
                i += take;
                if self.data == 0 {
                    self.finish(sink)?;
                }
            } else if self.pad > 0 {
                let take = self.pad.min(rest.len() as u64) as usize;
                self.pad -= take as u64;
                i += take;
            } else {
                let take = (BLOCK - self.filled).min(rest.len());
                self.block[self.filled..self.filled + take].copy_from_slice(&rest[..take]);
                self.filled += take;
                i += take;
                if self.filled == BLOCK {
                    self.filled = 0;
                    self.header(sink, i)?;
                }
            }
        }
        Ok(())
    }

    /// A complete header block; `i` is where the input goes on.
    fn header(&mut self, sink: &mut Sink, i: usize) -> Result<(), Step> {
        match parse(&self.block) {
            Header::End => Err(Step::Raw {
                why: None,
                held: Vec::new(),
                from: i,
            }),
            Header::Bad(reason) => Err(Step::Raw {
                why: Some(Skipped::Archive {
                    kind: "tar",
                    reason: reason.into(),
                }),
                held: self.block.to_vec(),
                from: i,
            }),
            Header::Entry { size, scanned } => {
                self.data = size;
                self.pad = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
                if scanned {
                    self.member = Some(M::member(sink, self.depth + 1));
                }
                if size == 0 {
                    self.finish(sink)?;
                }
                Ok(())
            }
        }
    }

    /// Ends the open member, if any.
    pub(super) fn finish(&mut self, sink: &mut Sink) -> Flow {
        match self.member.take() {
            Some(mut m) => m.finish(sink),
            None => Ok(()),
        }
    }

    /// A header block cut short by the end of the body: never read as a
    /// header, so scanned raw.
    pub(super) fn held(&mut self) -> Vec<u8> {
        if self.data == 0 && self.pad == 0 && self.filled > 0 {
            let held = self.block[..self.filled].to_vec();
            self.filled = 0;
            held
        } else {
            Vec::new()
        }
    }
}

/// Reads a header block.
fn parse(b: &[u8; BLOCK]) -> Header {
    if b.iter().all(|&x| x == 0) {
        return Header::End;
    }
    let Some(want) = number(&b[148..156]) else {
        return Header::Bad("a header checksum is not a number");
    };
    // The checksum field counts as spaces; old tars summed signed bytes.
    let field = 148..156;
    let (mut unsigned, mut signed) = (0u64, 0i64);
    for (i, &x) in b.iter().enumerate() {
        let x = if field.contains(&i) { b' ' } else { x };
        unsigned += u64::from(x);
        signed += i64::from(x as i8);
    }
    if want != unsigned && i64::try_from(want).ok() != Some(signed) {
        return Header::Bad("a header checksum does not match");
    }
    let Some(size) = number(&b[124..136]) else {
        return Header::Bad("a member size is not a number");
    };
    // Links, devices, directories, FIFOs; GNU long names and dump dirs,
    // pax records, volume labels.
    let scanned = !matches!(
        b[156],
        b'1'..=b'6' | b'L' | b'K' | b'D' | b'x' | b'g' | b'X' | b'V'
    );
    Header::Entry { size, scanned }
}

/// A numeric header field: octal digits (leading spaces, ended by a space
/// or NUL), or GNU base-256 when the top bit of its first byte is set.
fn number(f: &[u8]) -> Option<u64> {
    if f[0] & 0x80 != 0 {
        // A negative base-256 number (0xff) is no size.
        if f[0] == 0xff {
            return None;
        }
        let mut v = u64::from(f[0] & 0x7f);
        for &x in &f[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(x))?;
        }
        return Some(v);
    }
    let digits = f.iter().skip_while(|&&x| x == b' ');
    let mut v = 0u64;
    for &x in digits {
        match x {
            b'0'..=b'7' => v = v.checked_mul(8)?.checked_add(u64::from(x - b'0'))?,
            b' ' | 0 => break,
            _ => return None,
        }
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        let cases: [(&str, &[u8], Option<u64>); 6] = [
            ("octal with NUL", b"0000644\0", Some(0o644)),
            ("leading spaces", b"   644 \0", Some(0o644)),
            ("empty", b"\0\0\0\0\0\0\0\0", Some(0)),
            ("not octal", b"00009\0\0\0", None),
            ("base-256", b"\x80\0\0\0\0\0\0\x01\0\0\0\0", Some(1 << 32)),
            ("negative base-256", b"\xff\xff\xff\xff", None),
        ];
        for (what, field, want) in cases {
            assert_eq!(number(field), want, "case {what}");
        }
    }

    #[test]
    fn zero_block_ends_the_archive() {
        assert_eq!(parse(&[0; BLOCK]), Header::End);
    }

    #[test]
    fn bad_checksum_is_refused() {
        let mut b = [0u8; BLOCK];
        b[..4].copy_from_slice(b"name");
        b[148..156].copy_from_slice(b"0000001\0");
        assert_eq!(parse(&b), Header::Bad("a header checksum does not match"));
    }
}
