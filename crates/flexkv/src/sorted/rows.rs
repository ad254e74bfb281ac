//! The record cache: single records that point reads found in intervals the interval
//! cache would not keep, for a keyspace that does not fit in the cache.
//!
//! Why it exists: once a keyspace outgrows its budget, the interval cache can hold only
//! a few percent of the intervals, and a skewed point-read load (YCSB's scrambled
//! Zipfian) has its hot keys scattered one or two per interval, so a cached interval
//! spends most of its bytes on pairs nobody asked for. A record alone takes about a
//! tenth of an interval's bytes: the same memory holds about ten times as many hot
//! keys. At 10M UDB pairs the interval cache answered about a third of the lookups of
//! ycsb-c and ycsb-f.
//!
//! The cache takes a share of the keyspace's budget only while the keyspace does not
//! fit (`Builder::record_cache_share`, applied by `SortedStore::fit_cache`, growing to
//! the whole share as the keyspace grows to twice the room); it is empty otherwise. Replacement is quick_cache's S3-FIFO, which keeps a key read once
//! from pushing out one read often; and once the cache is full, a record goes in only
//! on its key's second miss lately (TinyLFU's doorkeeper), since under uniform reads of
//! a keyspace many times the cache each insertion only paid for an eviction (10M UDB
//! `readrandom` ran 0.90× without it, 1.00× with it).
//!
//! Why a lock-free hit is right, as for the interval cache: an entry equals the record
//! the space holds for its key. The committer forgets a key's entry in the write
//! section that changes its record ([`RecordCache::forget`]), before the frozen memtable
//! holding the change leaves the memtable list, and readers look in the memtables
//! first. Entries are only added by a point read under the keyspace's read lock, with
//! the record it read under that lock, so no entry can outlive a write section that
//! changed its record.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::doorkeeper::Doorkeeper;
use super::history::Version;

/// Bytes an entry takes beyond its key and value, for the budget: the key's box and
/// the version (88), the cache's slot links and state, its hash-table entry and its
/// share of the ghost list (about 30), and the allocator's rounding of the key and the
/// value (about 10).
const PER_RECORD: usize = 128;

/// Bytes an entry is expected to take, to size the hash tables: a 16-byte key and a
/// 100-byte value.
const EXPECTED_RECORD: usize = PER_RECORD + 116;

#[derive(Clone)]
struct Footprint;

impl Weighter<Box<[u8]>, Version> for Footprint {
    fn weight(&self, key: &Box<[u8]>, v: &Version) -> u64 {
        (PER_RECORD + key.len() + v.value.footprint()) as u64
    }
}

/// The records point reads fetched from the space, by key. See the [module
/// documentation](self).
pub(crate) struct RecordCache {
    records: Cache<Box<[u8]>, Version, Footprint>,
    /// Bytes the entries may take now (0: none are added).
    capacity: AtomicU64,
    /// Set by the first entry added: until then the committer need not forget keys.
    populated: AtomicBool,
    /// Once the cache is full, a record goes in on its key's second miss within a
    /// window of about as many misses as the cache can hold records: a read of a key
    /// nobody reads again (every read, under uniform access to a keyspace many times the
    /// cache) costs an insertion and an eviction and keeps nothing useful.
    ///
    /// Made at the first put: a keyspace that fits never needs it (it takes a byte
    /// per record the cache could hold).
    doorkeeper: OnceLock<Doorkeeper>,
    /// The records the cache could hold at most, the doorkeeper's window.
    most_records: usize,
    /// Whether the entries took most of the capacity when last looked at (every
    /// [`FULL_CHECK`] puts: the cache's weight is a sum over its shards).
    full: AtomicBool,
    puts: AtomicU64,
}

/// Puts between two looks at whether the cache is full.
const FULL_CHECK: u64 = 256;

impl RecordCache {
    /// An empty cache that may later hold up to `most` bytes (what quick_cache sizes its
    /// shards and its list of evicted keys for); it takes nothing until
    /// [`RecordCache::set_capacity`].
    pub(crate) fn new(most: usize) -> Self {
        let records = (most / EXPECTED_RECORD).max(64);
        RecordCache {
            records: Cache::with_weighter(records, 0, Footprint),
            capacity: AtomicU64::new(0),
            populated: AtomicBool::new(false),
            doorkeeper: OnceLock::new(),
            most_records: records,
            full: AtomicBool::new(false),
            puts: AtomicU64::new(0),
        }
    }

    /// The cached record of `key`, if any.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Version> {
        if !self.populated.load(Ordering::Relaxed) {
            return None;
        }
        self.records.get(key)
    }

    /// Asks the processor for what a [`RecordCache::put`] of `key` will look at first
    /// (its doorkeeper's word), if the cache takes records: a point read does this
    /// before its descent, whose waits then overlap this one.
    pub(crate) fn prefetch_put(&self, key: &[u8]) {
        if self.capacity.load(Ordering::Relaxed) != 0 {
            if let Some(d) = self.doorkeeper.get() {
                d.prefetch(key);
            }
        }
    }

    /// Caches `v` as the record of `key`, which the caller read from the space under
    /// the keyspace's read lock and still holds it: while the cache has room, and once
    /// it is full, if this is the key's second miss lately ([`Doorkeeper`]).
    pub(crate) fn put(&self, key: &[u8], v: &Version) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        if capacity == 0 {
            return;
        }
        if self
            .puts
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(FULL_CHECK)
        {
            // Full once less than a fiftieth is left.
            let full = self.records.weight() >= capacity - capacity / 50;
            self.full.store(full, Ordering::Relaxed);
        }
        // The miss is remembered even while there is room, so that a key read again
        // once the cache is full is known.
        let again = self
            .doorkeeper
            .get_or_init(|| Doorkeeper::new(self.most_records))
            .missed_before(key);
        if !again && self.full.load(Ordering::Relaxed) {
            return;
        }
        // Before the entry: the committer's write section, which begins after this
        // reader's lock is released, sees it set.
        self.populated.store(true, Ordering::Release);
        self.records.insert(key.into(), v.clone());
    }

    /// Drops the entry of `key`, whose record the caller (the committer, in a write
    /// section) is changing.
    pub(crate) fn forget(&self, key: &[u8]) {
        if self.populated.load(Ordering::Acquire) {
            self.records.remove(key);
        }
    }

    /// Lets the entries take `bytes` from now on, evicting what no longer fits (all of
    /// them at 0).
    pub(crate) fn set_capacity(&self, bytes: u64) {
        if self.capacity.swap(bytes, Ordering::Relaxed) == bytes {
            return;
        }
        // At 0 the entries go but quick_cache keeps its last capacity: scaled to 0, its
        // list of recently evicted keys (which lets a key read again soon back in as
        // hot) would stay empty once the cache got room again.
        if bytes == 0 {
            self.records.clear();
        } else {
            self.records.set_capacity(bytes);
        }
    }

    /// Bytes the entries may take now.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Bytes the entries take.
    pub(crate) fn used(&self) -> u64 {
        self.records.weight()
    }

    /// Every entry (for the store's check).
    pub(crate) fn entries(&self) -> Vec<(Box<[u8]>, Version)> {
        self.records.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::Value;

    fn version(seq: u64, v: &[u8]) -> Version {
        Version {
            seq,
            value: Value::Inline(v.into()),
            prior: None,
        }
    }

    /// Two misses of `key`, the second of which puts it in.
    fn missed_twice(c: &RecordCache, key: &[u8], v: &Version) {
        c.put(key, v);
        c.put(key, v);
    }

    #[test]
    fn holds_nothing_until_given_room_and_everything_it_is_told_to_forget_goes() {
        let c = RecordCache::new(1 << 20);
        missed_twice(&c, b"a", &version(1, b"one"));
        assert_eq!(c.get(b"a"), None, "no capacity yet: nothing is kept");
        c.set_capacity(1 << 20);
        c.put(b"a", &version(1, b"one"));
        assert_eq!(
            c.get(b"a"),
            Some(version(1, b"one")),
            "room: a first miss goes in"
        );
        missed_twice(&c, b"b", &version(2, b"two"));
        assert_eq!(c.get(b"a"), Some(version(1, b"one")));
        c.forget(b"a");
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.get(b"b"), Some(version(2, b"two")));
        assert!(c.used() > 0);
        c.set_capacity(0);
        assert_eq!(c.get(b"b"), None, "no room: every entry evicted");
        assert_eq!(c.used(), 0);
        missed_twice(&c, b"c", &version(3, b"three"));
        assert_eq!(c.get(b"c"), None, "no room: nothing added");
        c.set_capacity(1 << 20);
        missed_twice(&c, b"c", &version(3, b"three"));
        assert_eq!(c.get(b"c"), Some(version(3, b"three")), "room again");
    }

    #[test]
    fn once_full_it_takes_a_key_on_its_second_miss() {
        let c = RecordCache::new(64 << 10);
        c.set_capacity(64 << 10);
        for i in 0..10_000u32 {
            c.put(&i.to_be_bytes(), &version(u64::from(i), &[7; 100]));
        }
        let entries = c.entries().len();
        c.put(b"late", &version(1, b"once"));
        assert_eq!(
            c.get(b"late"),
            None,
            "a full cache only remembers a first miss"
        );
        c.put(b"late", &version(1, b"once"));
        assert_eq!(c.get(b"late"), Some(version(1, b"once")));
        assert!(
            entries > 64 && c.used() <= 64 << 10,
            "{entries} entries, {} bytes",
            c.used()
        );
    }

    #[test]
    fn stays_within_its_budget() {
        let c = RecordCache::new(64 << 10);
        c.set_capacity(64 << 10);
        for i in 0..10_000u32 {
            missed_twice(&c, &i.to_be_bytes(), &version(u64::from(i), &[7; 100]));
        }
        assert!(c.used() <= 64 << 10, "{} bytes", c.used());
        assert!(c.entries().len() > 64, "{} entries", c.entries().len());
    }
}
