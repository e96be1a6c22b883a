//! permessage-deflate (RFC 7692) for the server's messages: what the
//! 101's `Sec-WebSocket-Extensions` agreed, and inflating each compressed
//! message with the `00 00 ff ff` tail put back.
//!
//! Owns: reading the agreed extensions and the inflater of one connection.
//! Must not: accept an extension or parameter it does not know (the
//! payload could then be something it cannot read), or keep more than one
//! inflater's state (miniz_oxide: a 32 KiB window and its tables).

use flate2::{Decompress, FlushDecompress, Status};

use super::Unscannable;

/// The tail a sender strips from each compressed message (RFC 7692 §7.2.1)
/// and the receiver appends before inflating it.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Inflated bytes handed on at a time (on the stack).
const OUT_BUF: usize = 8 * 1024;

/// Whether a 101 agreed to permessage-deflate (`Sec-WebSocket-Extensions`
/// values, one per header line). Any other extension, a second
/// permessage-deflate, or a parameter it does not define (or defines
/// twice, or with a bad value) cannot be followed.
///
/// `server_no_context_takeover` is checked but changes nothing here: the
/// inflater keeps its context whatever was agreed. A message that honours
/// the agreement refers to nothing before it and inflates the same either
/// way; one that does not is read as a client that kept its context reads
/// it (a client that resets fails on it). Resetting would be the gap:
/// miniz_oxide reads a reference past its history as zero bytes instead
/// of failing, so sluice would scan zeros where such a client reads a
/// name. `server_max_window_bits` (8–15) needs nothing either: the window
/// is always 32 KiB, which reads any of them.
pub(super) fn agreed(values: &[&[u8]]) -> Result<bool, Unscannable> {
    let mut found = false;
    for element in values.iter().flat_map(|v| v.split(|&b| b == b',')) {
        let mut parts = element.split(|&b| b == b';').map(<[u8]>::trim_ascii);
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            continue;
        }
        if !name.eq_ignore_ascii_case(b"permessage-deflate") {
            return Err(Unscannable::Extension(lossy(name)));
        }
        if found {
            return Err(Unscannable::Extension("permessage-deflate twice".into()));
        }
        check_params(parts)?;
        found = true;
    }
    Ok(found)
}

/// permessage-deflate's parameters, as a server's response may carry them.
fn check_params<'a>(parts: impl Iterator<Item = &'a [u8]>) -> Result<(), Unscannable> {
    let mut seen: Vec<&[u8]> = Vec::new();
    for part in parts {
        let (key, value) = match part.iter().position(|&b| b == b'=') {
            Some(i) => (
                part[..i].trim_ascii(),
                Some(unquote(part[i + 1..].trim_ascii())),
            ),
            None => (part, None),
        };
        let bad = || Unscannable::Extension(format!("permessage-deflate; {}", lossy(part)));
        if seen.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            return Err(bad());
        }
        seen.push(key);
        let ok = match (key.to_ascii_lowercase().as_slice(), value) {
            (b"server_no_context_takeover" | b"client_no_context_takeover", None) => true,
            (b"server_max_window_bits" | b"client_max_window_bits", Some(v)) => bits(v),
            // The client's own direction: a server may echo it bare.
            (b"client_max_window_bits", None) => true,
            _ => false,
        };
        if !ok {
            return Err(bad());
        }
    }
    Ok(())
}

/// A window size parameter: 8 to 15, plain digits, no leading zero.
fn bits(v: &[u8]) -> bool {
    matches!(v, [b'8' | b'9'] | [b'1', b'0'..=b'5'])
}

fn unquote(v: &[u8]) -> &[u8] {
    v.strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
        .unwrap_or(v)
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The inflater of one connection's server messages, its context kept
/// from one message to the next (see [`agreed`]).
pub(super) struct Inflater {
    d: Decompress,
    /// The deflate stream ended (a final block): what follows in the
    /// message cannot be read, and the next message starts a new stream.
    ended: bool,
}

impl Inflater {
    pub(super) fn new() -> Inflater {
        Inflater {
            d: Decompress::new(false),
            ended: false,
        }
    }

    /// A compressed message begins. After a final block the stream is
    /// over and the next one starts afresh (zlib clients reset there too,
    /// and fail on a reference back past it; miniz_oxide reads it as zero
    /// bytes: SECURITY.md).
    pub(super) fn begin(&mut self) {
        if self.ended {
            self.d.reset(false);
            self.ended = false;
        }
    }

    /// Inflates a piece of the message, handing what comes out to `out`.
    pub(super) fn push(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), Unscannable>,
    ) -> Result<(), Unscannable> {
        if input.is_empty() {
            return Ok(());
        }
        if self.ended {
            return Err(Unscannable::Inflate(
                "bytes after the final deflate block of a message".into(),
            ));
        }
        self.inflate(input, out)
    }

    /// The message ended: its tail is put back and inflated, so that
    /// everything the server flushed comes out.
    pub(super) fn end(
        &mut self,
        out: &mut dyn FnMut(&[u8]) -> Result<(), Unscannable>,
    ) -> Result<(), Unscannable> {
        if self.ended {
            return Ok(());
        }
        self.inflate(&TAIL, out)
    }

    fn inflate(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), Unscannable>,
    ) -> Result<(), Unscannable> {
        let mut buf = [0u8; OUT_BUF];
        let mut used = 0;
        loop {
            let (in0, out0) = (self.d.total_in(), self.d.total_out());
            let status = self
                .d
                .decompress(&input[used..], &mut buf, FlushDecompress::None)
                .map_err(|e| Unscannable::Inflate(e.to_string()))?;
            let took = (self.d.total_in() - in0) as usize;
            let made = (self.d.total_out() - out0) as usize;
            used += took;
            if made > 0 {
                out(&buf[..made])?;
            }
            if status == Status::StreamEnd {
                self.ended = true;
                if used < input.len() {
                    return Err(Unscannable::Inflate(
                        "bytes after the final deflate block of a message".into(),
                    ));
                }
                return Ok(());
            }
            // A full buffer may leave more output waiting.
            if made == buf.len() {
                continue;
            }
            if used == input.len() {
                return Ok(());
            }
            // Input left that the inflater would not take: never skipped.
            if took == 0 && made == 0 {
                return Err(Unscannable::Inflate(
                    "the inflater stopped taking input".into(),
                ));
            }
        }
    }
}
