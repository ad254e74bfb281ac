//! How often reads fetched each interval from the space lately, roughly: the count
//! that decides when an interval is worth rewriting contiguous for the reads (see
//! [`SortedStore::wanted`](super::store::SortedStore::wanted)). Rewriting one costs
//! its bytes, the garbage collection they later cause and the committer's time; what
//! it saves is a `pread` per extent past the first on every later read. So only an
//! interval the reads keep coming back to is rewritten, not every one a scan passes
//! twice.
//!
//! A count-min sketch: two rows of byte counters, each key counted in one counter per
//! row (by two halves of one hash) and its count taken as the smaller. Collisions only
//! raise a count, so an interval may be rewritten a little early, never late. Once a
//! row's width in misses has been counted, all counters are halved, so the counts are
//! of recent misses (TinyLFU's reset).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// Counts per counter of a row between two halvings: one, so that what other keys
/// add to a key's counters stays about one, well under the counts that matter.
const AGE_EVERY: usize = 1;

pub(crate) struct MissCounts {
    rows: [Box<[AtomicU8]>; 2],
    counted: AtomicUsize,
}

impl MissCounts {
    /// A sketch with `width` counters per row (rounded up to a power of two, at least
    /// 1,024).
    pub(crate) fn new(width: usize) -> Self {
        let width = width.max(1024).next_power_of_two();
        let row = || (0..width).map(|_| AtomicU8::new(0)).collect();
        MissCounts {
            rows: [row(), row()],
            counted: AtomicUsize::new(0),
        }
    }

    /// Counts a read's miss of the interval keyed `key`; returns its count with this
    /// one (at most 255).
    pub(crate) fn count(&self, key: &[u8]) -> u8 {
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::default().hash_one(key);
        let mask = self.rows[0].len() - 1;
        let at = [h as usize & mask, (h >> 32) as usize & mask];
        let mut least = u8::MAX;
        for (row, i) in self.rows.iter().zip(at) {
            let was = row[i]
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_add(1))
                .unwrap_or(u8::MAX);
            least = least.min(was.saturating_add(1));
        }
        if self.counted.fetch_add(1, Ordering::Relaxed) + 1 >= AGE_EVERY * self.rows[0].len() {
            // Racing readers may lose a count or two here: a rewrite comes a little later.
            self.counted.store(0, Ordering::Relaxed);
            for c in self.rows.iter().flat_map(|r| r.iter()) {
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
