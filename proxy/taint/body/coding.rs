//! The codings sluice undoes and how one decoding step fails: what the
//! layer (`codec`) and its decoders (`flate`, `windowed`) share.
//!
//! Must not: decode, hold state, or import the layer or the decoders
//! (they import this).

use super::{Skipped, Stop};

/// Output buffer of one decoding step (on the stack: an idle response
/// holds none).
pub(super) const OUT_BUF: usize = 8 * 1024;

/// The codings sluice undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Coding {
    Gzip,
    Deflate,
    /// `deflate` read as raw deflate whatever its first bytes say: the
    /// second reading of a body whose start is also a zlib header (curl
    /// and urllib3 retry as raw when zlib fails).
    DeflateRaw,
    /// Extra readings of text (never from a Content-Encoding header):
    /// quoted-printable undone, and HTML's rendered text.
    QuotedPrintable,
    HtmlText,
    /// Inside bodies only (archives): `.xz`, a zip entry's LZMA, bzip2.
    Xz,
    ZipLzma,
    Bzip2,
    Brotli,
    Zstd,
}

impl Coding {
    pub(super) fn parse(name: &[u8]) -> Option<Coding> {
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is("gzip") || is("x-gzip") {
            Some(Coding::Gzip)
        } else if is("deflate") {
            Some(Coding::Deflate)
        } else if is("br") {
            Some(Coding::Brotli)
        } else if is("zstd") {
            Some(Coding::Zstd)
        } else {
            None
        }
    }

    /// Whether its decoder holds a large window (from the shared budget).
    pub(super) fn windowed(self) -> bool {
        matches!(self, Coding::Brotli | Coding::Zstd)
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate | Coding::DeflateRaw => "deflate",
            Coding::QuotedPrintable => "quoted-printable",
            Coding::HtmlText => "html text",
            Coding::Xz => "xz",
            Coding::ZipLzma => "lzma",
            Coding::Bzip2 => "bzip2",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }
}

/// Why a decoding step did not complete.
pub(super) enum Fail {
    Stop,
    /// The data is not (or no longer) this coding. `at`: the offset in the
    /// current input from which the rest is raw, when everything before it
    /// decoded; `None` when the layer's kept tail and the whole input are.
    Bad {
        why: Skipped,
        at: Option<usize>,
    },
}

impl From<Stop> for Fail {
    fn from(_: Stop) -> Fail {
        Fail::Stop
    }
}

pub(super) fn bad(coding: Coding, reason: impl Into<String>) -> Fail {
    Fail::Bad {
        why: Skipped::Undecodable {
            coding: coding.name(),
            reason: reason.into(),
        },
        at: None,
    }
}

/// Bytes after the end of a stream that has no next member.
pub(super) fn trailing(coding: Coding, at: usize) -> Fail {
    Fail::Bad {
        why: Skipped::Undecodable {
            coding: coding.name(),
            reason: "bytes follow the end of its stream".into(),
        },
        at: Some(at),
    }
}

/// A window beyond the layer's budget.
pub(super) fn too_large(coding: Coding, window_log: u32) -> Fail {
    Fail::Bad {
        why: Skipped::WindowTooLarge {
            coding: coding.name(),
            allowed: 1 << window_log,
        },
        at: None,
    }
}
