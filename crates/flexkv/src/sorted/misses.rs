//! How often reads fetched each interval from the space lately, roughly: the count
//! that decides when an interval is worth rewriting contiguous for the reads (see
//! [`SortedStore::wanted`](super::store::SortedStore::wanted)). Rewriting one costs
//! its bytes, the garbage collection they later cause and the committer's time; what
//! it saves is a `pread` per extent past the first on every later read. So only an
//! interval the reads keep coming back to is rewritten, not every one a scan passes
//! twice.
//!
//! A count-min sketch: two byte counters per key, its count taken as the smaller.
//! Collisions only raise a count, so an interval may be rewritten a little early,
//! never late. Once as many misses as there are counters in a row (half the
//! counters) have been counted, all counters are halved, so the counts are of recent
//! misses (TinyLFU's reset).
//!
//! A key's two counters lie in one 64-byte block chosen by its hash, at two different
//! places in it, instead of one in each of two rows: a count is then one memory access,
//! not two. Only reads that missed the caches count, and the sketch (half a megabyte
//! for a 256 MiB budget) is rarely in the processor's caches when they do.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use super::doorkeeper::{hash, two_places};

/// Counts per counter of a row between two halvings: one, so that what other keys
/// add to a key's counters stays about one, well under the counts that matter.
const AGE_EVERY: usize = 1;

/// Counters per block: a cache line's worth, and the places [`two_places`] picks from.
const BLOCK: usize = 64;

/// A key's block of counters, on a cache line of its own.
#[repr(align(64))]
struct Block([AtomicU8; BLOCK]);

pub(crate) struct MissCounts {
    blocks: Box<[Block]>,
    counted: AtomicUsize,
}

impl MissCounts {
    /// A sketch with `width` counters per row, two rows' worth in all (rounded up to a
    /// power of two, at least 1,024 per row).
    pub(crate) fn new(width: usize) -> Self {
        let width = width.max(1024).next_power_of_two();
        MissCounts {
            blocks: (0..2 * width / BLOCK)
                .map(|_| Block(std::array::from_fn(|_| AtomicU8::new(0))))
                .collect(),
            counted: AtomicUsize::new(0),
        }
    }

    /// `key`'s block, and its hash.
    fn block(&self, key: &[u8]) -> (&Block, u64) {
        let h = hash(key);
        (
            &self.blocks[(h >> 32) as usize & (self.blocks.len() - 1)],
            h,
        )
    }

    /// Asks the processor for `key`'s block ahead of a [`MissCounts::count`].
    pub(crate) fn prefetch(&self, key: &[u8]) {
        crate::prefetch::prefetch(std::slice::from_ref(self.block(key).0));
    }

    /// Counts a read's miss of the interval keyed `key`; returns its count with this
    /// one (at most 255).
    pub(crate) fn count(&self, key: &[u8]) -> u8 {
        let (block, h) = self.block(key);
        let mut least = u8::MAX;
        for i in two_places(h) {
            let was = block.0[i]
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_add(1))
                .unwrap_or(u8::MAX);
            least = least.min(was.saturating_add(1));
        }
        let row = self.blocks.len() * BLOCK / 2;
        if self.counted.fetch_add(1, Ordering::Relaxed) + 1 >= AGE_EVERY * row {
            // Racing readers may lose a count or two here: a rewrite comes a little later.
            self.counted.store(0, Ordering::Relaxed);
            for c in self.blocks.iter().flat_map(|b| b.0.iter()) {
                c.store(c.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
            }
        }
        least
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_per_key_and_halve_with_age() {
        let m = MissCounts::new(1024);
        for i in 1..=10u8 {
            assert_eq!(m.count(b"hot"), i);
        }
        // Keys counted once each mostly read one: a key's count is raised only where
        // others share its counter in both rows.
        let ones = (0..500)
            .filter(|i| m.count(format!("k{i}").as_bytes()) == 1)
            .count();
        assert!(ones >= 420, "{ones} of 500 keys counted once read 1");
        assert!(m.count(b"hot") >= 11);
        // A row's width in counts halves every counter: the count that reaches it is
        // the last before, and the next one is half of it, plus one.
        // 511 counted so far.
        for i in 0..1024 - 511 - 1 {
            m.count(format!("x{i}").as_bytes());
        }
        let before = m.count(b"hot");
        assert!(before >= 12);
        assert_eq!(m.count(b"hot"), before / 2 + 1);
    }

    #[test]
    fn a_count_stops_at_255() {
        let m = MissCounts::new(1);
        for _ in 0..300 {
            m.count(b"k");
        }
        assert_eq!(m.count(b"k"), u8::MAX);
    }
}
