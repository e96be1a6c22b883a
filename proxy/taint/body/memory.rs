//! Decoder memory: what the zstd and brotli windows of every response in
//! flight may hold, per task and for the whole process (SPEC §9: decoder
//! memory is bounded per response, per task and in total).
//!
//! Owns: the [`Pool`]s (a cap and what is held from it) and the [`Held`]
//! share of one decoder, given back when the decoder is dropped.
//! Must not: allocate, decode, or decide what happens when a pool is dry
//! (the body scanner fails closed: the response is cut).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Window memory all responses of one task may hold at once.
pub(crate) const TASK_CAP: u64 = 64 << 20;
/// Window memory all responses of the process may hold at once.
pub(crate) const TOTAL_CAP: u64 = 256 << 20;

/// A cap on memory, and how much of it is held.
#[derive(Debug)]
pub(crate) struct Pool {
    cap: u64,
    used: AtomicU64,
}

impl Pool {
    pub(crate) fn new(cap: u64) -> Arc<Pool> {
        Arc::new(Pool {
            cap,
            used: AtomicU64::new(0),
        })
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.cap)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The pools a response's decoders draw from: its task's and the
/// process's.
#[derive(Clone, Debug)]
pub(crate) struct Memory {
    pub(crate) task: Arc<Pool>,
    pub(crate) total: Arc<Pool>,
}

/// What one decoder holds of [`Memory`]; given back on drop.
#[derive(Debug, Default)]
pub(super) struct Held {
    from: Option<Memory>,
    held: u64,
}

/// Memory is held in steps of this much (fewer atomic updates).
const STEP: u64 = 256 << 10;

impl Held {
    pub(super) fn new(from: Option<Memory>) -> Held {
        Held { from, held: 0 }
    }

    /// The decoder now uses `now` bytes: takes what it grew by from both
    /// pools. `false` when either is dry (nothing more is then held).
    pub(super) fn grow_to(&mut self, now: u64) -> bool {
        let Some(m) = &self.from else {
            return true;
        };
        if now <= self.held {
            return true;
        }
        let want = now.div_ceil(STEP) * STEP - self.held;
        if !m.task.take(want) {
            return false;
        }
        if !m.total.take(want) {
            m.task.give(want);
            return false;
        }
        self.held += want;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(m) = &self.from {
            m.task.give(self.held);
            m.total.give(self.held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_memory_is_capped_and_given_back() {
        let m = Memory {
            task: Pool::new(1 << 20),
            total: Pool::new(2 << 20),
        };
        let mut a = Held::new(Some(m.clone()));
        assert!(a.grow_to(700 << 10));
        assert_eq!(m.task.used(), 768 << 10, "in steps");
        let mut b = Held::new(Some(m.clone()));
        assert!(!b.grow_to(512 << 10), "the task's pool is dry");
        assert_eq!(m.total.used(), 768 << 10, "a refused take holds nothing");
        drop(a);
        assert_eq!((m.task.used(), m.total.used()), (0, 0));
        assert!(b.grow_to(1 << 20));
        let other = Memory {
            task: Pool::new(4 << 20),
            total: m.total.clone(),
        };
        let mut c = Held::new(Some(other.clone()));
        assert!(!c.grow_to(2 << 20), "the process's pool is dry");
        assert_eq!(other.task.used(), 0, "the task's share is given back");
        assert!(Held::new(None).grow_to(u64::MAX), "no pools, no cap");
    }
}
