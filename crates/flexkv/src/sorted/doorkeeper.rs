//! TinyLFU's doorkeeper: what was missed lately, so that a full cache takes a key on
//! its second miss within a window of misses, not its first. The interval cache
//! remembers interval keys this way, the record cache record keys.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The keys reads missed lately. A bit set with two bits per key, eight bits per key of
/// the window, cleared once a window's worth of new keys went in. It may say "seen" of
/// a key it was never told about (about one in twenty at a full window), which only
/// admits that key early.
///
/// A key's two bits lie in one 64-bit word (a blocked Bloom filter): a miss of the
/// caches costs one memory access here, not two, and none is written once both bits
/// are set. The words of a large cache's doorkeeper (a megabyte for the record cache
/// of a 256 MiB budget) are rarely in the processor's caches, so each access is a
/// wait; at 10M pairs every read that missed both caches made four such accesses in
/// the two doorkeepers (docs/benchmarks.md, forty-fourth session).
pub(crate) struct Doorkeeper {
    bits: Box<[AtomicU64]>,
    added: AtomicUsize,
    window: usize,
}

/// A key's hash, for the tables that remember misses (this one and
/// [`MissCounts`](super::misses::MissCounts)): the high half picks the word or block,
/// the low bits the places in it ([`two_places`]).
pub(super) fn hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::default().hash_one(key)
}

/// Two different places of 64 for a key with hash `h`: the low six bits, and 1 to 63
/// places on from it by the next bits.
pub(super) fn two_places(h: u64) -> [usize; 2] {
    let first = (h % 64) as usize;
    [first, (first + 1 + ((h >> 6) % 63) as usize) % 64]
}

/// The two bits of a key with hash `h` in its word.
fn bits_of(h: u64) -> u64 {
    two_places(h).iter().fold(0, |bits, &p| bits | 1 << p)
}

impl Doorkeeper {
    /// A doorkeeper that remembers about `window` keys.
    pub(crate) fn new(window: usize) -> Self {
        let words = (window * 8).div_ceil(64).max(1).next_power_of_two();
        Doorkeeper {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            added: AtomicUsize::new(0),
            window: window.max(1),
        }
    }

    /// The word `key`'s bits lie in.
    fn word(&self, key: &[u8]) -> (&AtomicU64, u64) {
        let h = hash(key);
        (&self.bits[(h >> 32) as usize & (self.bits.len() - 1)], h)
    }

    /// Asks the processor for `key`'s word ahead of a [`Doorkeeper::missed_before`],
    /// so that the wait for it overlaps the read's other waits.
    pub(crate) fn prefetch(&self, key: &[u8]) {
        crate::prefetch::prefetch(std::slice::from_ref(self.word(key).0));
    }

    /// Records a miss of `key`; returns whether one was recorded since the last
    /// clearing.
    pub(crate) fn missed_before(&self, key: &[u8]) -> bool {
        let (word, h) = self.word(key);
        let bits = bits_of(h);
        let seen = word.load(Ordering::Relaxed) & bits == bits
            || word.fetch_or(bits, Ordering::Relaxed) & bits == bits;
        if !seen && self.added.fetch_add(1, Ordering::Relaxed) + 1 >= self.window {
            // Racing readers may lose a few marks here: they only delay an admission.
            self.bits.iter().for_each(|w| w.store(0, Ordering::Relaxed));
            self.added.store(0, Ordering::Relaxed);
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_seen_on_its_second_miss_until_a_window_of_new_keys_clears_it() {
        let d = Doorkeeper::new(1000);
        assert!(!d.missed_before(b"a"));
        assert!(d.missed_before(b"a"));
        // Fewer than a window of other keys: still remembered.
        for i in 0..500u32 {
            d.missed_before(&i.to_be_bytes());
        }
        assert!(d.missed_before(b"a"));
        // A window of new keys clears everything.
        for i in 1000..2000u32 {
            d.missed_before(&i.to_be_bytes());
        }
        assert!(!d.missed_before(b"a"), "forgotten after a window");
        let false_positives = (5000..6000u32)
            .filter(|i| d.missed_before(&i.to_be_bytes()))
            .count();
        assert!(
            false_positives < 150,
            "{false_positives} of 1000 new keys seen"
        );
    }

    #[test]
    fn a_key_sets_two_different_bits() {
        for h in (0..100_000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
            assert_eq!(bits_of(h).count_ones(), 2, "hash {h:#x}");
        }
    }
}
