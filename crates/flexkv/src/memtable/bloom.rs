//! A concurrent blocked Bloom filter over a memtable's keys.
//!
//! A point read consults every memtable before the sorted store, and right after a
//! load most keys are in none of them: the skip-list search that finds nothing was
//! half of such a read's time. A read first asks the filter, which answers "absent"
//! for all but about 1% of missing keys with one cache line.
//!
//! All the bits of a key lie in one 64-byte line (a *blocked* filter), chosen by the
//! hash's low bits; the line's bits come from successive 9-bit slices of the rest.
//! Writers set bits with relaxed atomic ORs before they insert the entry: a reader that
//! may see the entry (its sequence is visible, which is published with release/acquire
//! after the insert) sees the bits too. There are no false negatives.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::fast::FixedState;

use super::KeyspaceId;

/// Bits set (and tested) per key.
const PROBES: u32 = 6;
/// 64-bit words per line (one 64-byte cache line).
const WORDS: usize = 8;

/// The hash a filter uses for `(ks, key)`: computed once per read for every memtable.
pub(crate) fn hash(ks: KeyspaceId, key: &[u8]) -> u64 {
    FixedState::with_seed(0x6a09_e667_f3bc_c908).hash_one((ks, key))
}

#[derive(Debug)]
pub(crate) struct Bloom {
    words: Box<[AtomicU64]>,
    lines: u64,
}

impl Bloom {
    /// A filter of about `bits` bits (at least one line).
    pub(crate) fn new(bits: usize) -> Bloom {
        let lines = bits.div_ceil(WORDS * 64).max(1);
        Bloom {
            words: (0..lines * WORDS).map(|_| AtomicU64::new(0)).collect(),
            lines: lines as u64,
        }
    }

    /// The word index and bit of each probe of `h`.
    fn probes(&self, h: u64) -> impl Iterator<Item = (usize, u64)> {
        let line = (h % self.lines) as usize * WORDS;
        // The line index used the low bits; the bit positions use the high ones.
        let mut rest = h.rotate_left(32) ^ (h >> 17);
        (0..PROBES).map(move |_| {
            let bit = (rest & 511) as usize;
            rest >>= 9;
            (line + bit / 64, 1u64 << (bit % 64))
        })
    }

    pub(crate) fn insert(&self, h: u64) {
        for (w, bit) in self.probes(h) {
            // Skip the write (and the cache line's ownership) when the bit is set.
            if self.words[w].load(Ordering::Relaxed) & bit == 0 {
                self.words[w].fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// False only if `h` was never inserted.
    pub(crate) fn may_contain(&self, h: u64) -> bool {
        self.probes(h)
            .all(|(w, bit)| self.words[w].load(Ordering::Relaxed) & bit != 0)
    }

    /// Bytes of memory held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_keys_are_always_found_and_most_others_are_not() {
        let n = 20_000u32;
        // 10 bits per key.
        let b = Bloom::new(n as usize * 10);
        for i in 0..n {
            b.insert(hash(1, format!("key{i:08}").as_bytes()));
        }
        for i in 0..n {
            assert!(b.may_contain(hash(1, format!("key{i:08}").as_bytes())));
        }
        let false_positives = (n..2 * n)
            .filter(|i| b.may_contain(hash(1, format!("key{i:08}").as_bytes())))
            .count();
        // A blocked filter at 10 bits per key and 6 probes: about 1%; allow 2.5%.
        assert!(
            false_positives < n as usize / 40,
            "{false_positives} false positives"
        );
        // The keyspace is part of the key.
        let other = (0..n)
            .filter(|i| b.may_contain(hash(2, format!("key{i:08}").as_bytes())))
            .count();
        assert!(other < n as usize / 40, "{other} hits in another keyspace");
        assert_eq!(b.memory_bytes(), (n as usize * 10).div_ceil(512) * 64);
    }

    #[test]
    fn a_tiny_filter_still_answers_correctly() {
        let b = Bloom::new(0);
        assert!(!b.may_contain(hash(0, b"x")));
        b.insert(hash(0, b"x"));
        assert!(b.may_contain(hash(0, b"x")));
    }
}
