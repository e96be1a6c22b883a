//! What the archive readers (`tar`, `zip`) share with the content they
//! feed: the [`Step`] a reader gives up with, and the [`Member`] stream
//! each member's data is pushed into (`archive`'s `Content`, which sniffs
//! and scans it).
//!
//! Must not: know an archive format or a kind of content, or import
//! `archive`, `tar` or `zip` (they import this).

use super::{Flow, Sink, Skipped, Stop};

/// The stream a member's data is pushed into, as it streams.
pub(super) trait Member: Sized {
    /// A member of an archive, `depth` archives deep: a stream of its own.
    fn member(sink: &mut Sink, depth: u8) -> Self;

    /// Scans the next bytes of the member's data.
    fn push(&mut self, input: &[u8], sink: &mut Sink) -> Flow;

    /// The member's data ended: flush what was held.
    fn finish(&mut self, sink: &mut Sink) -> Flow;
}

/// Why an archive reader gave up on its input.
pub(super) enum Step {
    Stop,
    /// The rest (`held`, then the input from `from`) is scanned raw, and
    /// `why`, if any, is noted.
    Raw {
        why: Option<Skipped>,
        held: Vec<u8>,
        from: usize,
    },
}

impl From<Stop> for Step {
    fn from(_: Stop) -> Step {
        Step::Stop
    }
}
