//! A lock-free hash index over a memtable's keys: for each key, the node of its newest
//! version, so a point read finds a key the memtable holds with two cache misses (the
//! slot, the node) instead of a skip-list search of tens of them, and learns that a key
//! is absent from one line of slots, as the Bloom filter it replaced did.
//!
//! The table is open addressing with linear probing over 64-bit words; 0 is an empty
//! slot. A word is a node's address (below 2^48) with 16 bits of the key's hash on top,
//! so a probe passes other keys without touching their nodes. The table never grows:
//! it is sized from the memtable's budget, and the memtable counts as full once the
//! table holds [`LOAD`] of its slots (see [`HashIndex::full`]). What the words point at
//! is the skip list's business (`list.rs`); here they are only numbers.
//!
//! Invariants: a slot, once it names a key, only ever names that key (a newer version
//! replaces an older one with a compare-and-swap, never the reverse); every key in the
//! table has its newest inserted version there. A key the table could not take (no
//! free slot within [`MAX_PROBES`], or an address above 2^48) sets `overflow`, and
//! from then on an absent key is "unknown", not "absent".

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The share of slots the table fills before the memtable counts as full: at seven
/// tenths, a probe for an absent key reads about three slots, all in one or two lines.
const LOAD: (usize, usize) = (7, 10);

/// Probes before giving up on a slot for a key (the table then overflows).
const MAX_PROBES: usize = 512;

/// Bits of a word that hold the address.
const ADDRESS_BITS: u32 = 48;

/// What the index knows of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lookup {
    /// The word of the key's newest version.
    Found(u64),
    /// The memtable does not hold the key.
    Absent,
    /// The table overflowed: the skip list must be searched.
    Unknown,
}

/// The hash index.
pub(super) struct HashIndex {
    slots: Box<[AtomicU64]>,
    mask: usize,
    len: AtomicUsize,
    overflow: AtomicBool,
}

/// The address part of a word.
pub(super) fn address(word: u64) -> usize {
    (word & ((1 << ADDRESS_BITS) - 1)) as usize
}

fn tag(hash: u64) -> u64 {
    hash >> ADDRESS_BITS
}

impl HashIndex {
    /// An index of one slot per 64 bytes of `budget` (a power of two, at least 1,024).
    pub(super) fn for_budget(budget: usize) -> HashIndex {
        let n = (budget / 64).next_power_of_two().max(1 << 10);
        HashIndex {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n - 1,
            len: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
        }
    }

    /// Bytes of memory held.
    pub(super) fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<AtomicU64>()
    }

    /// Whether the table holds [`LOAD`] of its slots (or overflowed): the memtable
    /// should take no more keys.
    pub(super) fn full(&self) -> bool {
        self.len.load(Ordering::Relaxed) * LOAD.1 >= self.slots.len() * LOAD.0
            || self.overflow.load(Ordering::Relaxed)
    }

    /// How near [`HashIndex::full`] the table is: 0 empty, 1 full (or overflowed).
    pub(super) fn fill(&self) -> f64 {
        if self.overflow.load(Ordering::Relaxed) {
            return 1.0;
        }
        let used = (self.len.load(Ordering::Relaxed) * LOAD.1) as f64;
        (used / (self.slots.len() * LOAD.0) as f64).min(1.0)
    }

    /// Asks the processor for the line of the first slot of the key hashed `hash`, so
    /// that an [`insert`](Self::insert) of it a little later does not wait for it.
    pub(super) fn prefetch(&self, hash: u64) {
        crate::prefetch::prefetch(std::slice::from_ref(&self.slots[hash as usize & self.mask]));
    }

    /// Records the node at `addr` as the newest version of the key hashed `hash`,
    /// unless the slot of that key names a newer version. `same_key(w)` says whether
    /// word `w` names a node of this key; `newer(w)` whether that node's version is
    /// newer than this one.
    pub(super) fn insert(
        &self,
        hash: u64,
        addr: usize,
        same_key: impl Fn(u64) -> bool,
        newer: impl Fn(u64) -> bool,
    ) {
        if (addr as u64) >> ADDRESS_BITS != 0 {
            self.overflow.store(true, Ordering::Relaxed);
            return;
        }
        let word = (tag(hash) << ADDRESS_BITS) | addr as u64;
        let mut i = hash as usize & self.mask;
        for _ in 0..MAX_PROBES {
            let mut cur = self.slots[i].load(Ordering::Acquire);
            if cur == 0 {
                match self.slots[i].compare_exchange(0, word, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.len.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    // Another key (or this one) took the slot: look at what it holds.
                    Err(now) => cur = now,
                }
            }
            if tag(cur) == tag(hash) && same_key(cur) {
                // This key's slot: replace an older version, never a newer one.
                loop {
                    if newer(cur) {
                        return;
                    }
                    match self.slots[i].compare_exchange(
                        cur,
                        word,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return,
                        Err(now) => cur = now,
                    }
                }
            }
            i = (i + 1) & self.mask;
        }
        self.overflow.store(true, Ordering::Relaxed);
    }

    /// What the index knows of the key hashed `hash`; `same_key(w)` says whether word
    /// `w` names a node of that key.
    pub(super) fn find(&self, hash: u64, same_key: impl Fn(u64) -> bool) -> Lookup {
        let mut i = hash as usize & self.mask;
        for _ in 0..MAX_PROBES {
            let cur = self.slots[i].load(Ordering::Acquire);
            if cur == 0 {
                break;
            }
            if tag(cur) == tag(hash) && same_key(cur) {
                return Lookup::Found(cur);
            }
            i = (i + 1) & self.mask;
        }
        if self.overflow.load(Ordering::Acquire) {
            Lookup::Unknown
        } else {
            Lookup::Absent
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Words stand for "key k, version v" as `k << 20 | v << 3` (aligned, nonzero).
    fn addr(k: u64, v: u64) -> usize {
        ((k << 20) | (v << 3) | 4) as usize
    }
    fn key_of(w: u64) -> u64 {
        address(w) as u64 >> 20
    }
    fn version_of(w: u64) -> u64 {
        (address(w) as u64 >> 3) & 0x1ffff
    }

    #[test]
    fn the_newest_version_of_every_key_is_found_and_others_are_absent() {
        let ix = HashIndex::for_budget(0);
        // Hashes that collide in their slots (and in their tags) more often than real
        // ones: the keys must still be told apart by their nodes.
        let hash = |k: u64| (k % 97).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut newest = HashMap::new();
        for round in [3u64, 1, 7, 2, 9] {
            for k in 1..=600u64 {
                let v = round + k % 3;
                ix.insert(
                    hash(k),
                    addr(k, v),
                    |w| key_of(w) == k,
                    |w| version_of(w) > v,
                );
                let e = newest.entry(k).or_insert(v);
                *e = (*e).max(v);
            }
        }
        assert!(!ix.full(), "600 keys in 1,024 slots");
        for k in 1..=600u64 {
            let got = ix.find(hash(k), |w| key_of(w) == k);
            assert_eq!(
                got,
                Lookup::Found(addr(k, newest[&k]) as u64 | (hash(k) >> 48 << 48))
            );
        }
        assert_eq!(ix.find(hash(601), |w| key_of(w) == 601), Lookup::Absent);
        for k in 601..=720u64 {
            ix.insert(
                hash(k),
                addr(k, 1),
                |w| key_of(w) == k,
                |w| version_of(w) > 1,
            );
        }
        assert!(ix.full(), "720 keys: past seven tenths");
    }

    #[test]
    fn a_key_that_finds_no_slot_makes_absent_keys_unknown() {
        let ix = HashIndex::for_budget(0);
        for k in 1..=1024u64 {
            ix.insert(k, addr(k, 1), |w| key_of(w) == k, |_| false);
        }
        // Every slot taken: a probe for an absent key gives up after MAX_PROBES, and
        // the table has not overflowed yet.
        assert_eq!(ix.find(5000, |_| false), Lookup::Absent);
        ix.insert(5000, addr(5000, 1), |_| false, |_| false);
        assert!(ix.full());
        assert_eq!(ix.find(6000, |_| false), Lookup::Unknown);
        assert!(matches!(ix.find(7, |w| key_of(w) == 7), Lookup::Found(_)));
    }

    #[test]
    fn concurrent_inserts_keep_the_newest_version() {
        let ix = std::sync::Arc::new(HashIndex::for_budget(1 << 20));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let ix = std::sync::Arc::clone(&ix);
                std::thread::spawn(move || {
                    for v in (t..400).step_by(4) {
                        for k in 1..=500u64 {
                            let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                            ix.insert(h, addr(k, v), |w| key_of(w) == k, |w| version_of(w) > v);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for k in 1..=500u64 {
            let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            match ix.find(h, |w| key_of(w) == k) {
                Lookup::Found(w) => assert_eq!(version_of(w), 399, "key {k}"),
                other => panic!("key {k}: {other:?}"),
            }
        }
    }
}
