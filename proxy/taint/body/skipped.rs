//! Why a body was not scanned exactly as its encoding describes, and
//! which of those reasons cut the response (fail closed).
//!
//! Must not: decide anything beyond that sentence and that flag.

use super::{MAX_ARCHIVE_DEPTH, MAX_CODINGS};

/// Why the body was not scanned exactly as its encoding describes: it was
/// cut at the limit, or part of it was scanned as raw bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Skipped {
    /// `max_scan_bytes` bytes of the body (as sent) were scanned; the rest
    /// was not.
    #[error(
        "stopped after max_scan_bytes ({0}) bytes of the body; the rest was relayed unscanned \
         (raise [task.taint] max_scan_bytes to scan further)"
    )]
    Limit(u64),
    /// Fewer than `max_scan_bytes` bytes decoded to more than
    /// [`super::DECODED_PER_WIRE`] times that: a decompression bomb. Fails closed.
    #[error(
        "the body decoded to more than {0} bytes from less than max_scan_bytes on the wire \
         (a decompression bomb); sluice cut it"
    )]
    Expanded(u64),
    /// The decoders' memory pools (per task, in total) are dry. Fails
    /// closed.
    #[error(
        "a {coding} layer needs more window memory than its task or sluice may hold now; \
         sluice cut the response"
    )]
    NoMemory { coding: &'static str },
    /// A Content-Encoding sluice does not decode.
    #[error(
        "Content-Encoding {0:?} is not one sluice decodes (gzip, x-gzip, deflate, br, zstd, \
         identity); the body was scanned as raw bytes from that layer on"
    )]
    UnknownCoding(String),
    /// More layers than [`MAX_CODINGS`].
    #[error(
        "Content-Encoding lists {0} codings, more than the {MAX_CODINGS} sluice undoes; \
         what the outer {MAX_CODINGS} decode to was scanned as it is"
    )]
    TooManyCodings(usize),
    /// A zstd frame or brotli stream needs a window beyond the budget
    /// (`allowed`, in bytes). Fails closed: a client would read it.
    #[error(
        "a {coding} layer needs a window larger than the {} MiB sluice allows it; \
         sluice cut the response",
        .allowed >> 20
    )]
    WindowTooLarge { coding: &'static str, allowed: u64 },
    /// A layer (or a gzip archive) did not decode.
    #[error(
        "the {coding} data could not be decoded ({reason}); \
         it was scanned as raw bytes from there on"
    )]
    Undecodable {
        coding: &'static str,
        reason: String,
    },
    /// A tar or zip archive could not be read further.
    #[error("the {kind} archive could not be read ({reason}); the rest was scanned as raw bytes")]
    Archive { kind: &'static str, reason: String },
    /// A charset the scanner cannot read (a stateful or non-ASCII one such
    /// as ISO-2022-JP, UTF-7 or EBCDIC, or a label nobody defines): a
    /// client decoding it could read a name sluice cannot. Fails closed.
    #[error(
        "the body's charset {0:?} is not one sluice reads (UTF-8 and the other ASCII-compatible \
         charsets, UTF-16, UTF-32); sluice cut the response"
    )]
    UnreadableCharset(String),
    /// Archives nested deeper than [`MAX_ARCHIVE_DEPTH`].
    #[error(
        "archives are nested more than {MAX_ARCHIVE_DEPTH} deep; the innermost was scanned \
         as raw bytes"
    )]
    TooDeep,
}

impl Skipped {
    /// Must the response be cut rather than relayed (a client would read
    /// what sluice could not)?
    pub(crate) fn fails_closed(&self) -> bool {
        matches!(
            self,
            Skipped::Expanded(_)
                | Skipped::NoMemory { .. }
                | Skipped::WindowTooLarge { .. }
                | Skipped::UnreadableCharset(_)
        )
    }
}
