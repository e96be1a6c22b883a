//! memo: the tokens a connection's earlier responses already judged, so a
//! page fetched again (a registry index, a search result) costs a hash
//! and a compare per name instead of a normalisation, a public-suffix
//! walk, allocations and a lookup in the task's taint set.
//!
//! Owns: a bounded set of judged-token keys (the same key a scanner's
//! per-stream `seen` set uses: the token and the context bytes its
//! judgement depends on), stored in one arena, and the conditions under
//! which it stays true: the config generation, the taint set's epoch and
//! the host that served the responses it learned from.
//!
//! Must not: judge anything, or be believed past those conditions — the
//! connection that keeps a memo (`exchange::ConnCtx`) starts a fresh one
//! when any of them changed, and learns a response's tokens only after
//! every name the response gave was recorded.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

/// Distinct tokens a memo holds at most, and bytes of them.
const MAX_ENTRIES: usize = 16_384;
const MAX_BYTES: usize = 512 * 1024;

/// One per-stream set of judged keys, as a scanner hands it over.
pub(crate) type Seen = HashSet<Vec<u8>, foldhash::fast::RandomState>;

/// What a memo's knowledge holds under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemoKey {
    /// The config generation its names were recorded under.
    pub(crate) generation: u64,
    /// The taint set's epoch (a removal bumps it).
    pub(crate) epoch: u64,
    /// The host that served the responses (own-site names are judged
    /// against it).
    pub(crate) served_by: Arc<str>,
}

/// Judged-token keys of one connection's earlier responses.
pub(crate) struct Memo {
    pub(crate) key: MemoKey,
    /// Keyed hash of a token key → where it starts in `arena`.
    index: HashMap<u64, u32, foldhash::fast::FixedState>,
    /// Each key as a two-byte length and its bytes.
    arena: Vec<u8>,
    /// Randomly seeded per memo: a response cannot aim two tokens at one
    /// hash (and a hash match is checked against the bytes anyway).
    hasher: foldhash::fast::RandomState,
}

impl Memo {
    pub(crate) fn new(key: MemoKey) -> Memo {
        Memo {
            key,
            index: HashMap::default(),
            arena: Vec::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Was this token key judged (and its names recorded) before?
    #[inline]
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        if self.index.is_empty() {
            return false;
        }
        let h = self.hasher.hash_one(key);
        self.index.get(&h).is_some_and(|&at| self.at(at) == key)
    }

    fn at(&self, at: u32) -> &[u8] {
        let at = at as usize;
        let len = usize::from(u16::from_le_bytes([self.arena[at], self.arena[at + 1]]));
        &self.arena[at + 2..at + 2 + len]
    }

    /// Learns judged keys, up to the bounds (the rest are judged again
    /// next time: slower, never wrong). A key whose hash another key
    /// already holds is not learned.
    pub(crate) fn learn(&mut self, sets: Vec<Seen>) {
        for key in sets.iter().flatten() {
            let Ok(len) = u16::try_from(key.len()) else {
                continue;
            };
            if self.index.len() >= MAX_ENTRIES || self.arena.len() + key.len() + 2 > MAX_BYTES {
                return;
            }
            let h = self.hasher.hash_one(key.as_slice());
            if let std::collections::hash_map::Entry::Vacant(v) = self.index.entry(h) {
                v.insert(self.arena.len() as u32);
                self.arena.extend_from_slice(&len.to_le_bytes());
                self.arena.extend_from_slice(key);
            }
        }
    }

    /// Keys held.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("key", &self.key)
            .field("tokens", &self.index.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> MemoKey {
        MemoKey {
            generation: 1,
            epoch: 0,
            served_by: "a.example".into(),
        }
    }

    fn seen(keys: &[&[u8]]) -> Seen {
        keys.iter().map(|k| k.to_vec()).collect()
    }

    #[test]
    fn holds_what_it_learned_and_nothing_else() {
        let mut m = Memo::new(key());
        assert!(!m.contains(b"docs.example.org\x00 <"));
        m.learn(vec![seen(&[b"docs.example.org\x00 <", b"a.b\x01/ "])]);
        assert!(m.contains(b"docs.example.org\x00 <"));
        assert!(m.contains(b"a.b\x01/ "));
        // Another context byte is another key.
        assert!(!m.contains(b"docs.example.org\x01 <"));
        assert!(!m.contains(b"docs.example.or"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn stops_learning_at_its_bounds() {
        let mut m = Memo::new(key());
        let many: Seen = (0..MAX_ENTRIES + 10)
            .map(|i| format!("h{i}.example.com").into_bytes())
            .collect();
        m.learn(vec![many]);
        assert_eq!(m.len(), MAX_ENTRIES);
        let mut m = Memo::new(key());
        let long: Seen = (0..2000)
            .map(|i| vec![b'a' + (i % 26) as u8; 300 + i])
            .collect();
        m.learn(vec![long]);
        assert!(m.arena.len() <= MAX_BYTES);
        assert!(m.len() < 2000);
    }
}
