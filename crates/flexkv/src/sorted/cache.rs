//! The interval cache (FlexDB §5.2): decoded intervals kept in memory under a byte
//! budget, replaced by CLOCK, and written through by the committer (which puts every
//! interval it changes back in its new form), so a cached interval always equals the
//! bytes in the FlexSpace.
//!
//! Entries are keyed by the interval's index key. The committer, which alone changes
//! intervals, replaces or removes the entries of the intervals it changes, splits or
//! merges while it holds the keyspace's write lock; readers fill misses while holding
//! the read lock, so what they insert is current.

use std::collections::HashMap;

use foldhash::fast::RandomState;
use std::sync::Arc;

use super::interval::Loaded;

struct Slot {
    key: Box<[u8]>,
    interval: Arc<Loaded>,
    referenced: bool,
}

/// A CLOCK cache of intervals with a byte budget.
pub(crate) struct IntervalCache {
    capacity: usize,
    used: usize,
    /// Hashed with foldhash (seeded per map, so keys cannot be chosen to collide):
    /// SipHash was a tenth of a cached point read.
    map: HashMap<Box<[u8]>, usize, RandomState>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
}

impl IntervalCache {
    /// An empty cache holding at most `capacity` bytes (0 caches nothing).
    pub(crate) fn new(capacity: usize) -> Self {
        IntervalCache {
            capacity,
            used: 0,
            map: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
        }
    }

    /// The cached interval keyed `key`, marked recently used.
    pub(crate) fn get(&mut self, key: &[u8]) -> Option<Arc<Loaded>> {
        let &slot = self.map.get(key)?;
        let s = self.slots[slot]
            .as_mut()
            .unwrap_or_else(|| unreachable!("the map points at live slots"));
        s.referenced = true;
        Some(Arc::clone(&s.interval))
    }

    /// Caches `interval` under `key`, replacing what was there and evicting by CLOCK
    /// until the budget holds. An interval larger than the whole budget is not kept.
    pub(crate) fn put(&mut self, key: &[u8], interval: Arc<Loaded>) {
        self.remove(key);
        let size = interval.footprint();
        if size > self.capacity {
            return;
        }
        while self.used + size > self.capacity {
            self.evict_one();
        }
        let slot = Slot {
            key: key.into(),
            interval,
            referenced: false,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id] = Some(slot);
                id
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.map.insert(key.into(), id);
        self.used += size;
    }

    /// Drops the entry keyed `key`, if there is one.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        if let Some(id) = self.map.remove(key) {
            self.drop_slot(id);
        }
    }

    /// Bytes held.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Intervals held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn drop_slot(&mut self, id: usize) {
        if let Some(s) = self.slots[id].take() {
            self.used -= s.interval.footprint();
            self.free.push(id);
        }
    }

    /// Advances the hand: a referenced entry gets a second chance, the first one that
    /// is not goes.
    fn evict_one(&mut self) {
        debug_assert!(!self.map.is_empty(), "evicting from an empty cache");
        loop {
            self.hand = (self.hand + 1) % self.slots.len();
            let Some(s) = self.slots[self.hand].as_mut() else {
                continue;
            };
            if s.referenced {
                s.referenced = false;
                continue;
            }
            let key = s.key.clone();
            self.map.remove(&key);
            self.drop_slot(self.hand);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sorted::{Record, RecordValue};

    fn interval(n: usize) -> Arc<Loaded> {
        let mut buf = Vec::new();
        for i in 0..n {
            Record {
                seq: 1,
                key: format!("k{i:04}").as_bytes(),
                value: RecordValue::Inline(&[0; 50]),
                prior: None,
            }
            .encode(&mut buf);
        }
        Arc::new(Loaded::parse(buf).unwrap())
    }

    #[test]
    fn the_budget_holds_and_clock_spares_what_was_used() {
        let one = interval(4).footprint();
        let mut c = IntervalCache::new(3 * one);
        for k in [b"a", b"b", b"c"] {
            c.put(k, interval(4));
        }
        assert_eq!((c.len(), c.used()), (3, 3 * one));
        assert!(c.get(b"a").is_some()); // a gets a second chance
        c.put(b"d", interval(4));
        assert_eq!(c.len(), 3);
        assert!(c.used() <= 3 * one);
        assert!(c.get(b"a").is_some(), "the referenced entry survived");
        assert!(c.get(b"b").is_none(), "the first unreferenced entry went");
        c.put(b"a", interval(2)); // replacing keeps one entry per key
        assert_eq!(c.len(), 3);
        c.remove(b"a");
        assert!(c.get(b"a").is_none());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_zero_budget_or_a_huge_interval_caches_nothing() {
        let mut c = IntervalCache::new(0);
        c.put(b"a", interval(1));
        assert!(c.get(b"a").is_none());
        let mut c = IntervalCache::new(interval(2).footprint());
        c.put(b"big", interval(40));
        assert_eq!(c.len(), 0);
    }
}
