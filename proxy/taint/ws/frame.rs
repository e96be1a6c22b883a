//! RFC 6455 frame headers, read as they stream: FIN, the RSV bits, the
//! opcode, 7/16/64-bit payload lengths and a masking key when there is
//! one; the payload is handed on unmasked, in pieces, as it arrives.
//!
//! Owns: the byte layout of one frame. Must not: judge what a frame means
//! for its message (that is `super::Messages`), buffer a payload, or
//! accept a length it cannot represent.

use super::Unscannable;

/// Opcodes (RFC 6455 §5.2).
pub(super) const CONTINUATION: u8 = 0x0;
pub(super) const TEXT: u8 = 0x1;
pub(super) const BINARY: u8 = 0x2;
pub(super) const CLOSE: u8 = 0x8;
pub(super) const PING: u8 = 0x9;
pub(super) const PONG: u8 = 0xA;

/// The RSV1 bit in [`Head::rsv`] (permessage-deflate's "compressed").
pub(super) const RSV1: u8 = 0b100;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) fin: bool,
    /// RSV1, RSV2, RSV3 as the three low bits (RSV1 highest).
    pub(super) rsv: u8,
    pub(super) opcode: u8,
    /// Payload length as sent.
    pub(super) len: u64,
    pub(super) masked: bool,
}

/// What a frame reader hands on, in order: a header, its payload in
/// pieces (unmasked), the end of the frame.
pub(super) trait Frames {
    fn head(&mut self, head: &Head) -> Result<(), Unscannable>;
    fn payload(&mut self, bytes: &[u8]) -> Result<(), Unscannable>;
    fn end(&mut self) -> Result<(), Unscannable>;
}

/// Longest header: 2 bytes, an 8-byte length, a 4-byte mask.
const MAX_HEAD: usize = 14;

/// Bytes unmasked at a time (on the stack).
const UNMASK_BUF: usize = 4096;

/// Where the reader is in the stream.
#[derive(Debug)]
enum State {
    /// Reading a header: `have` of its bytes so far.
    Head { buf: [u8; MAX_HEAD], have: usize },
    /// Inside a payload: `left` bytes to go, unmasked with `mask` from
    /// position `pos` (mod 4).
    Payload {
        left: u64,
        mask: Option<[u8; 4]>,
        pos: usize,
    },
}

/// Reads frames from the bytes of one direction of a connection.
#[derive(Debug)]
pub(super) struct FrameReader {
    state: State,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader {
            state: State::Head {
                buf: [0; MAX_HEAD],
                have: 0,
            },
        }
    }
}

impl FrameReader {
    /// Reads `input`, handing headers, payload and frame ends to `to`.
    pub(super) fn push(
        &mut self,
        mut input: &[u8],
        to: &mut impl Frames,
    ) -> Result<(), Unscannable> {
        while !input.is_empty() {
            match &mut self.state {
                State::Head { buf, have } => {
                    let want = head_len(&buf[..*have]);
                    let take = (want - *have).min(input.len());
                    buf[*have..*have + take].copy_from_slice(&input[..take]);
                    *have += take;
                    input = &input[take..];
                    // The first two bytes may say the header is longer.
                    if *have == want && head_len(&buf[..*have]) == want {
                        let (head, mask) = parse_head(&buf[..*have])?;
                        to.head(&head)?;
                        self.state = State::Payload {
                            left: head.len,
                            mask,
                            pos: 0,
                        };
                        self.end_if_done(to)?;
                    }
                }
                State::Payload { left, mask, pos } => {
                    let take = (*left).min(input.len() as u64) as usize;
                    let (now, rest) = input.split_at(take);
                    match mask {
                        None => to.payload(now)?,
                        Some(key) => unmask_to(now, key, pos, to)?,
                    }
                    *left -= take as u64;
                    input = rest;
                    self.end_if_done(to)?;
                }
            }
        }
        Ok(())
    }

    /// A payload with nothing left to read ends its frame.
    fn end_if_done(&mut self, to: &mut impl Frames) -> Result<(), Unscannable> {
        if let State::Payload { left: 0, .. } = self.state {
            self.state = State::Head {
                buf: [0; MAX_HEAD],
                have: 0,
            };
            to.end()?;
        }
        Ok(())
    }

    /// Is the reader between frames?
    #[cfg(test)]
    pub(super) fn between_frames(&self) -> bool {
        matches!(self.state, State::Head { have: 0, .. })
    }
}

/// How long the header that starts with `start` is (2 until the second
/// byte is known).
fn head_len(start: &[u8]) -> usize {
    let Some(&b1) = start.get(1) else {
        return 2;
    };
    let len = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & 0x80 != 0 { 4 } else { 0 };
    2 + len + mask
}

/// A whole header, and its masking key if it has one.
fn parse_head(b: &[u8]) -> Result<(Head, Option<[u8; 4]>), Unscannable> {
    let (b0, b1) = (b[0], b[1]);
    let (len, at) = match b1 & 0x7f {
        126 => (u64::from(u16::from_be_bytes([b[2], b[3]])), 4),
        127 => {
            let mut n = [0u8; 8];
            n.copy_from_slice(&b[2..10]);
            let len = u64::from_be_bytes(n);
            // RFC 6455 §5.2: the most significant bit must be 0.
            if len >> 63 != 0 {
                return Err(Unscannable::Length(len));
            }
            (len, 10)
        }
        n => (u64::from(n), 2),
    };
    let masked = b1 & 0x80 != 0;
    let mask = masked.then(|| [b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let head = Head {
        fin: b0 & 0x80 != 0,
        rsv: (b0 >> 4) & 0b111,
        opcode: b0 & 0x0f,
        len,
        masked,
    };
    Ok((head, mask))
}

/// Unmasks `bytes` (a stretch of payload starting at `pos`) into a small
/// buffer, piece by piece, and hands each piece on.
fn unmask_to(
    bytes: &[u8],
    key: &[u8; 4],
    pos: &mut usize,
    to: &mut impl Frames,
) -> Result<(), Unscannable> {
    let mut buf = [0u8; UNMASK_BUF];
    for piece in bytes.chunks(UNMASK_BUF) {
        for (i, (o, b)) in buf.iter_mut().zip(piece).enumerate() {
            *o = b ^ key[(*pos + i) % 4];
        }
        *pos = (*pos + piece.len()) % 4;
        to.payload(&buf[..piece.len()])?;
    }
    Ok(())
}

/// A frame as a server would send it (for tests): `mask` masks it.
#[cfg(test)]
pub(super) fn encode(
    fin: bool,
    rsv: u8,
    opcode: u8,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> Vec<u8> {
    let mut out = vec![(u8::from(fin) << 7) | (rsv << 4) | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(m | n as u8),
        n if n <= 0xffff => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        None => out.extend_from_slice(payload),
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what a reader hands on.
    #[derive(Default)]
    struct Record {
        heads: Vec<Head>,
        payload: Vec<u8>,
        ends: usize,
    }

    impl Frames for Record {
        fn head(&mut self, head: &Head) -> Result<(), Unscannable> {
            self.heads.push(*head);
            Ok(())
        }
        fn payload(&mut self, bytes: &[u8]) -> Result<(), Unscannable> {
            self.payload.extend_from_slice(bytes);
            Ok(())
        }
        fn end(&mut self) -> Result<(), Unscannable> {
            self.ends += 1;
            Ok(())
        }
    }

    /// Reads `bytes` fed `step` bytes at a time.
    fn read(bytes: &[u8], step: usize) -> Result<Record, Unscannable> {
        let mut r = FrameReader::default();
        let mut rec = Record::default();
        for piece in bytes.chunks(step) {
            r.push(piece, &mut rec)?;
        }
        assert!(r.between_frames());
        Ok(rec)
    }

    #[test]
    fn lengths_of_7_16_and_64_bits_in_any_chunking() {
        for len in [0usize, 1, 125, 126, 127, 65535, 65536, 70_000] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let bytes = encode(true, 0, BINARY, &payload, None);
            for step in [1, 3, 13, 4096, bytes.len()] {
                let rec = read(&bytes, step).unwrap();
                assert_eq!(rec.heads.len(), 1, "len {len} step {step}");
                assert_eq!(rec.heads[0].len, len as u64);
                assert_eq!(rec.payload, payload, "len {len} step {step}");
                assert_eq!(rec.ends, 1);
            }
        }
    }

    #[test]
    fn a_masked_frame_is_unmasked_across_chunks() {
        let payload: Vec<u8> = (0..10_000).map(|i| (i % 97) as u8).collect();
        let bytes = encode(true, 0, TEXT, &payload, Some([1, 2, 3, 4]));
        for step in [1, 5, 4097, bytes.len()] {
            let rec = read(&bytes, step).unwrap();
            assert!(rec.heads[0].masked);
            assert_eq!(rec.payload, payload, "step {step}");
        }
    }

    #[test]
    fn a_64_bit_length_with_its_top_bit_set_is_refused() {
        let mut bytes = vec![0x82, 127];
        bytes.extend_from_slice(&(1u64 << 63).to_be_bytes());
        assert!(matches!(read(&bytes, 1), Err(Unscannable::Length(_))));
    }

    #[test]
    fn header_bits_are_read() {
        let bytes = encode(false, 0b101, 0xB, b"x", None);
        let rec = read(&bytes, 1).unwrap();
        let h = rec.heads[0];
        assert_eq!((h.fin, h.rsv, h.opcode, h.len), (false, 0b101, 0xB, 1));
    }
}
