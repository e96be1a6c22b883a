//! Scanning what the upstream of an upgraded connection (after a 101)
//! sends: WebSocket messages read frame by frame, anything else as one raw
//! stream, for the host names a response body would taint.
//!
//! Owns: the upstream→client direction's parsing ([`UpgradeScanner`]):
//! RFC 6455 frames (`frame`), messages reassembled from fragments with
//! control frames between them, permessage-deflate (`deflate`), and the
//! bounds on all of it. Must not: do I/O, decide, buffer a message, or
//! let a byte it could not read pass as scanned — every such case is an
//! [`Unscannable`] error, and the relay closes (the caller writes none of
//! the chunk that held it).
//!
//! Decided and documented (SECURITY.md, the WebSocket rows):
//! - A WebSocket message, text or binary, is scanned as one stream, like a
//!   response body (`BodyScanner`: archives, binary content, a UTF-16 BOM),
//!   after permessage-deflate is undone: a name split across fragments or
//!   reads is found. Each message is a stream of its own: a name split
//!   across two messages is not one name. Control frames (a close reason,
//!   ping and pong payloads: at most 125 bytes) are scanned each on its
//!   own when they end.
//! - Bounds: `max_scan_bytes` per message, for the payload as sent and for
//!   what it decodes to (archives inside included). Past it the message
//!   cannot be scanned through: [`Unscannable::TooLarge`]. Per message, not
//!   per connection, so a socket that lives for hours is not cut after
//!   64 MiB in all; a message may not be larger than a body sluice would
//!   scan whole. Inflate memory: one miniz_oxide state per connection (a
//!   32 KiB window, which reads any `server_max_window_bits`).
//! - The inflater keeps its context from message to message even under
//!   `server_no_context_takeover` (`deflate::agreed` says why: resetting
//!   would read a server's reference back as zeros, not as a client that
//!   kept its context reads it); only a final block starts it afresh.
//! - Fails closed on: a reserved opcode; RSV bits no extension agreed
//!   (RSV1 only on the first frame of a data message, under
//!   permessage-deflate; RSV2/RSV3 never); a fragmented or long control
//!   frame; a continuation with no message, or a new message inside one;
//!   a 64-bit length with its top bit set; a compressed message that does
//!   not inflate (a reference past what the inflater holds included); an
//!   extension other than permessage-deflate, or a parameter of it that
//!   is unknown, repeated or out of range. A server frame that is masked
//!   (servers must not mask) is unmasked and scanned, not refused.
//! - Other upgrades (an unknown `Upgrade` token; `forward` does not pass an
//!   h2c upgrade on): the upstream's bytes are one raw stream, scanned like
//!   a body without Content-Encoding, up to `max_scan_bytes` per connection,
//!   then [`Unscannable::TooLarge`]. A protocol that frames or compresses its
//!   payload can hide a name from this; SECURITY.md says so.

mod deflate;
mod frame;
#[cfg(test)]
mod tests;

use super::body::{BodyScanner, Fed, OwnerHosts};
use super::scan::{Named, Scanner};
use deflate::Inflater;
use frame::{FrameReader, Frames, Head};

/// Why an upgraded connection's upstream bytes cannot be scanned: the
/// relay closes rather than pass them unscanned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unscannable {
    #[error("a WebSocket frame with the reserved opcode {0:#x}")]
    Opcode(u8),
    #[error("a WebSocket frame (opcode {opcode:#x}) with RSV bits {bits:#05b} that no extension agreed to")]
    Rsv { bits: u8, opcode: u8 },
    #[error("a fragmented WebSocket control frame")]
    ControlFragmented,
    #[error("a WebSocket control frame of {0} bytes (at most 125)")]
    ControlTooLong(u64),
    #[error("a WebSocket continuation frame with no message to continue")]
    Continuation,
    #[error("a new WebSocket message inside a fragmented one")]
    Interleaved,
    #[error("a WebSocket frame length of {0} (the top bit must be 0)")]
    Length(u64),
    #[error(
        "more than max_scan_bytes ({limit}) in one WebSocket message or upgraded stream \
         (raise [task.taint] max_scan_bytes to relay larger ones)"
    )]
    TooLarge { limit: u64 },
    #[error("a compressed WebSocket message that does not inflate: {0}")]
    Inflate(String),
    #[error("a WebSocket extension sluice cannot read: {0}")]
    Extension(String),
}

/// Scans the upstream→client bytes of one upgraded connection.
pub(crate) struct UpgradeScanner {
    kind: Kind,
}

enum Kind {
    WebSocket(Box<WebSocket>),
    /// An upgrade sluice does not parse: one raw stream, and its limit.
    Raw(Box<BodyScanner>, u64),
}

/// A WebSocket's frames and messages.
struct WebSocket {
    reader: FrameReader,
    messages: Messages,
}

impl UpgradeScanner {
    /// For a WebSocket whose 101 carried these `Sec-WebSocket-Extensions`
    /// values. `limit` is `max_scan_bytes` (per message).
    pub(crate) fn websocket(
        extensions: &[&[u8]],
        limit: u64,
        owners: OwnerHosts,
    ) -> Result<UpgradeScanner, Unscannable> {
        let inflater = deflate::agreed(extensions)?.then(Inflater::new);
        let messages = Messages {
            inflater,
            limit,
            owners,
            frame: Frame::Between,
            message: None,
            found: Vec::new(),
            pending: Vec::new(),
        };
        let ws = WebSocket {
            reader: FrameReader::default(),
            messages,
        };
        Ok(UpgradeScanner {
            kind: Kind::WebSocket(Box::new(ws)),
        })
    }

    /// For any other upgraded protocol. `limit` is `max_scan_bytes` (per
    /// connection).
    pub(crate) fn raw(limit: u64, owners: OwnerHosts) -> UpgradeScanner {
        UpgradeScanner {
            kind: Kind::Raw(
                Box::new(BodyScanner::reading_owners(&[], None, limit, owners)),
                limit,
            ),
        }
    }

    /// Scans a chunk as read from upstream, before the client gets it:
    /// the names it completed, and those in progress at its end (held
    /// until the next chunk). An error means the chunk must not be
    /// relayed.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Fed, Unscannable> {
        match &mut self.kind {
            Kind::WebSocket(ws) => {
                ws.reader.push(chunk, &mut ws.messages)?;
                let m = &mut ws.messages;
                Ok(Fed {
                    names: std::mem::take(&mut m.found),
                    pending: m.pending.clone(),
                    cut: None,
                })
            }
            Kind::Raw(body, limit) => {
                let fed = body.feed(chunk);
                if body.stopped() || fed.cut.is_some() {
                    return Err(Unscannable::TooLarge { limit: *limit });
                }
                Ok(fed)
            }
        }
    }

    /// The connection ended: the names of a message (or stream) cut off
    /// in the middle.
    pub(crate) fn finish(&mut self) -> Vec<Named> {
        match &mut self.kind {
            Kind::WebSocket(ws) => {
                let m = &mut ws.messages;
                m.pending.clear();
                let mut names = std::mem::take(&mut m.found);
                if let Some(mut message) = m.message.take() {
                    names.extend(message.body.finish().0);
                }
                names
            }
            Kind::Raw(body, _) => body.finish().0,
        }
    }
}

/// The frame being read.
enum Frame {
    Between,
    /// A frame of the data message in progress; `fin` ends the message.
    Data {
        fin: bool,
    },
    /// A control frame's payload (at most 125 bytes), scanned at its end.
    Control(Vec<u8>),
}

/// A data message being read.
struct Message {
    compressed: bool,
    body: BodyScanner,
    /// Payload bytes as sent so far.
    sent: u64,
}

/// Reassembles messages from frames and scans them.
struct Messages {
    inflater: Option<Inflater>,
    limit: u64,
    owners: OwnerHosts,
    frame: Frame,
    message: Option<Message>,
    /// Names completed since the last chunk was handed back.
    found: Vec<Named>,
    /// Names in progress in the current message, as of its last bytes.
    pending: Vec<Named>,
}

impl Messages {
    /// Starts a data message (`head` is a text or binary frame).
    fn begin(&mut self, head: &Head) {
        let compressed = head.rsv == frame::RSV1;
        if compressed {
            if let Some(i) = self.inflater.as_mut() {
                i.begin();
            }
        }
        let body = BodyScanner::reading_owners(&[], None, self.limit, self.owners.clone());
        self.message = Some(Message {
            compressed,
            body,
            sent: 0,
        });
    }

    /// Scans a piece of the current message's payload (inflated first
    /// when the message is compressed).
    fn scan(&mut self, bytes: &[u8], last: bool) -> Result<(), Unscannable> {
        let Messages {
            inflater,
            limit,
            message,
            found,
            pending,
            ..
        } = self;
        let Some(m) = message.as_mut() else {
            return Ok(());
        };
        let body = &mut m.body;
        let mut feed = |text: &[u8]| {
            let fed = body.feed(text);
            found.extend(fed.names);
            *pending = fed.pending;
            if body.stopped() {
                return Err(Unscannable::TooLarge { limit: *limit });
            }
            Ok(())
        };
        match inflater.as_mut().filter(|_| m.compressed) {
            Some(i) => {
                i.push(bytes, &mut feed)?;
                if last {
                    i.end(&mut feed)?;
                }
                Ok(())
            }
            None => feed(bytes),
        }
    }

    /// The current message ended: its last names are final.
    fn end_message(&mut self) -> Result<(), Unscannable> {
        self.scan(&[], true)?;
        if let Some(mut m) = self.message.take() {
            self.found.extend(m.body.finish().0);
        }
        self.pending.clear();
        Ok(())
    }

    /// A control frame's payload, scanned on its own.
    fn scan_control(&mut self, payload: &[u8]) {
        if payload.is_empty() {
            return;
        }
        let mut scanner = Scanner::new().with_owner_hosts(self.owners.clone());
        let found = &mut self.found;
        scanner.feed(payload, &mut |n| found.push(n));
        scanner.finish(&mut |n| found.push(n));
    }
}

impl Frames for Messages {
    fn head(&mut self, head: &Head) -> Result<(), Unscannable> {
        let op = head.opcode;
        if !matches!(
            op,
            frame::CONTINUATION
                | frame::TEXT
                | frame::BINARY
                | frame::CLOSE
                | frame::PING
                | frame::PONG
        ) {
            return Err(Unscannable::Opcode(op));
        }
        let data_start = matches!(op, frame::TEXT | frame::BINARY);
        let compressed_ok = head.rsv == frame::RSV1 && data_start && self.inflater.is_some();
        if head.rsv != 0 && !compressed_ok {
            return Err(Unscannable::Rsv {
                bits: head.rsv,
                opcode: op,
            });
        }
        if op & 0x8 != 0 {
            if !head.fin {
                return Err(Unscannable::ControlFragmented);
            }
            if head.len > 125 {
                return Err(Unscannable::ControlTooLong(head.len));
            }
            self.frame = Frame::Control(Vec::with_capacity(head.len as usize));
            return Ok(());
        }
        match (data_start, self.message.is_some()) {
            (false, false) => return Err(Unscannable::Continuation),
            (true, true) => return Err(Unscannable::Interleaved),
            (true, false) => self.begin(head),
            (false, true) => {}
        }
        let limit = self.limit;
        if let Some(m) = self.message.as_mut() {
            m.sent = m.sent.saturating_add(head.len);
            if m.sent > limit {
                return Err(Unscannable::TooLarge { limit });
            }
        }
        self.frame = Frame::Data { fin: head.fin };
        Ok(())
    }

    fn payload(&mut self, bytes: &[u8]) -> Result<(), Unscannable> {
        match &mut self.frame {
            Frame::Control(buf) => {
                buf.extend_from_slice(bytes);
                Ok(())
            }
            Frame::Data { .. } => self.scan(bytes, false),
            Frame::Between => Ok(()),
        }
    }

    fn end(&mut self) -> Result<(), Unscannable> {
        match std::mem::replace(&mut self.frame, Frame::Between) {
            Frame::Control(payload) => {
                self.scan_control(&payload);
                Ok(())
            }
            Frame::Data { fin: true } => self.end_message(),
            Frame::Data { fin: false } | Frame::Between => Ok(()),
        }
    }
}
