//! The memtable: a concurrent ordered multi-version map of recent writes.
//!
//! Entries are ordered by keyspace, then key ascending, then sequence *descending*, so
//! the first entry at or after `(keyspace, key, s)` is the newest version of `key` that a
//! reader at sequence `s` may see. Writers insert concurrently (a lock-free skip list);
//! readers never block writers. A version is never changed once inserted; a later batch
//! adds a newer version, so snapshot reads are exact.
//!
//! Iteration seeks from the last key returned ([`Memtable::next_run_at`], one O(log n)
//! search for the next several keys), so an iterator holds no borrow or lock between
//! calls and sees inserts made after it started only if their sequence is at or below
//! its own (never, for a sequence already visible): what one seek found stays the
//! answer until the iterator passes it.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

mod arena;
mod index;
mod list;

pub(crate) use arena::ChunkPool;
use list::{Entry, Kind, List, NewEntry, Newest};

use crate::vlog::Pointer;

/// A keyspace's number, as the manifest assigns it. `u32::MAX` is reserved.
pub(crate) type KeyspaceId = u32;

/// The hash of `(ks, key)` the memtables' hash indexes use: computed once per read for
/// every memtable.
pub(crate) fn key_hash(ks: KeyspaceId, key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x6a09_e667_f3bc_c908).hash_one((ks, key))
}

/// What one version of a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// A value small enough to live in the WAL and the memtable.
    Inline(Box<[u8]>),
    /// A value stored once in the value log.
    Separated(Pointer),
    /// A delete.
    Tombstone,
}

impl Value {
    /// Bytes of the value itself (a pointer's size if separated).
    pub(crate) fn footprint(&self) -> usize {
        match self {
            Value::Inline(v) => v.len(),
            Value::Separated(_) => std::mem::size_of::<Pointer>(),
            Value::Tombstone => 0,
        }
    }
}

/// One key's versions, newest first. Most keys have one: it is held inline.
pub(crate) type Versions = SmallVec<[(u64, Value); 1]>;

/// One operation of a batch, as [`Memtable::insert_batch`] takes it.
pub(crate) type BatchEntry = (KeyspaceId, Vec<u8>, Value);

/// The value an entry holds, copied out of the memtable.
fn value_of(e: &Entry<'_>) -> Value {
    match e.kind() {
        Kind::Inline => Value::Inline(e.value().into()),
        Kind::Separated => Value::Separated(
            Pointer::decode(e.value())
                .unwrap_or_else(|| unreachable!("a separated entry holds a whole pointer")),
        ),
        Kind::Tombstone => Value::Tombstone,
        Kind::Head => unreachable!("the head is never returned"),
    }
}

/// Versions an iterator's search walks past one by one before it searches past the
/// rest of them instead.
const WALK_PAST: usize = 8;

/// The separated values a batch replaces itself (a key written twice in one batch:
/// the later operation wins), with their keys' lengths. Only batches of more than one
/// operation with a separated value can have any.
pub(crate) fn replaced_in_batch<'a>(
    ops: impl IntoIterator<Item = (KeyspaceId, &'a [u8], Option<Pointer>)>,
) -> Vec<(Pointer, usize)> {
    // Sized for the whole batch and hashed with foldhash: with SipHash and growth by
    // doubling this was 1.8% of a 4 KiB separated load's writer.
    let ops = ops.into_iter();
    let mut last: std::collections::HashMap<(KeyspaceId, &[u8]), Option<Pointer>, _> =
        std::collections::HashMap::with_capacity_and_hasher(
            ops.size_hint().0,
            foldhash::fast::RandomState::default(),
        );
    let mut out = Vec::new();
    for (ks, key, p) in ops {
        if let Some(Some(old)) = last.insert((ks, key), p) {
            out.push((old, key.len()));
        }
    }
    out
}

/// The value's place in the value log, if it is separated.
pub(crate) fn separated(v: &Value) -> Option<Pointer> {
    match v {
        Value::Separated(p) => Some(*p),
        _ => None,
    }
}

/// The concurrent multi-version map.
#[derive(Debug)]
pub(crate) struct Memtable {
    list: List,
    /// Bytes of the entries' nodes (what the arena handed out for them).
    bytes: AtomicUsize,
    separated: std::sync::atomic::AtomicBool,
    /// Ordered searches iterators have made here that found an entry
    /// ([`Memtable::next_run_at`], [`Memtable::prev_at`]): what the memtable has cost
    /// scans, which the committer weighs against what committing it would cost.
    searches: AtomicU64,
    /// When the memtable was made, and how long after that the last batch went in, in
    /// nanoseconds (0: none has).
    made: Instant,
    last_write: AtomicU64,
}

impl Default for Memtable {
    fn default() -> Self {
        Memtable::with_size(0)
    }
}

impl Memtable {
    /// A memtable expected to hold about `bytes` (it may hold more, with a hash index
    /// that overflows and then sends reads to the skip list), with memory of its own.
    pub(crate) fn with_size(bytes: usize) -> Memtable {
        Memtable::new(bytes, None)
    }

    /// [`Memtable::with_size`], taking memory from `pool` and giving it back there when
    /// dropped (up to `bytes` in the pool).
    pub(crate) fn with_pool(bytes: usize, pool: &Arc<ChunkPool>) -> Memtable {
        Memtable::new(bytes, Some(Arc::clone(pool)))
    }

    fn new(bytes: usize, pool: Option<Arc<ChunkPool>>) -> Memtable {
        Memtable {
            list: List::new(pool, bytes),
            bytes: AtomicUsize::new(0),
            separated: Default::default(),
            searches: AtomicU64::new(0),
            made: Instant::now(),
            last_write: AtomicU64::new(0),
        }
    }

    /// Adds the version `seq` of `key` (one operation; see [`Memtable::insert_batch`]).
    #[cfg(test)]
    pub(crate) fn insert(&self, ks: KeyspaceId, key: &[u8], seq: u64, value: Value) {
        self.insert_batch(seq, &mut vec![(ks, key.to_vec(), value)]);
    }

    /// Adds a batch's operations, all at sequence `seq`, and empties `ops`. A key the
    /// batch writes twice keeps its later value (see [`replaced_in_batch`] for the
    /// value-log accounting of the first). The operations are inserted in key order,
    /// each searched for from where the last one went in.
    pub(crate) fn insert_batch(&self, seq: u64, ops: &mut Vec<BatchEntry>) {
        if ops.len() > 1 {
            // Stable: of a key written twice, the later operation stays last.
            ops.sort_by(|a, b| (a.0, &a.1[..]).cmp(&(b.0, &b.1[..])));
        }
        let mut pointers: Vec<Vec<u8>> = Vec::new();
        for (_, _, v) in ops.iter() {
            if let Value::Separated(p) = v {
                let mut b = Vec::with_capacity(Pointer::ENCODED_LEN);
                p.encode(&mut b);
                pointers.push(b);
            }
        }
        let mut pointers = pointers.iter();
        let mut entries: Vec<NewEntry<'_>> = Vec::with_capacity(ops.len());
        for (i, (ks, key, v)) in ops.iter().enumerate() {
            let (kind, value): (Kind, &[u8]) = match v {
                Value::Inline(b) => (Kind::Inline, b),
                Value::Separated(_) => (
                    Kind::Separated,
                    pointers
                        .next()
                        .unwrap_or_else(|| unreachable!("one per pointer")),
                ),
                Value::Tombstone => (Kind::Tombstone, &[]),
            };
            let repeated = ops.get(i + 1).is_some_and(|n| n.0 == *ks && n.1 == *key);
            if repeated {
                continue;
            }
            entries.push(NewEntry {
                ks: *ks,
                hash: key_hash(*ks, key),
                key,
                prefix: list::prefix_of(key),
                seq,
                kind,
                value,
            });
        }
        if entries.iter().any(|e| e.kind == Kind::Separated) {
            self.separated.store(true, AtomicOrdering::Relaxed);
        }
        let bytes = self.list.insert_sorted(&entries);
        drop(entries);
        self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed);
        let now = u64::try_from(self.made.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_write.fetch_max(now, AtomicOrdering::Relaxed);
        ops.clear();
    }

    /// When the memtable was made.
    pub(crate) fn made(&self) -> Instant {
        self.made
    }

    /// How long ago the last batch went in (since the memtable was made, if none has).
    /// The committer, busy with a commit while the writes stopped, knows from this
    /// that they stopped, and when.
    pub(crate) fn unwritten_for(&self) -> Duration {
        let last = Duration::from_nanos(self.last_write.load(AtomicOrdering::Relaxed));
        self.made.elapsed().saturating_sub(last)
    }

    /// Whether any entry's value is in the value log.
    pub(crate) fn has_separated(&self) -> bool {
        self.separated.load(AtomicOrdering::Relaxed)
    }

    /// The memory the entries use, in bytes (the hash index not included: it is
    /// allocated whole up front, see [`Memtable::index_bytes`]).
    pub(crate) fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Whether the memtable should take no more writes: its entries take `budget`
    /// bytes, or its hash index is as full as it should get (many small entries).
    pub(crate) fn full(&self, budget: usize) -> bool {
        self.approximate_bytes() >= budget || self.list.index_full()
    }

    /// How near [`Memtable::full`] it is, from 0 (empty) to 1 (full): the larger of its
    /// share of `budget` and of its hash index's room.
    pub(crate) fn fill(&self, budget: usize) -> f64 {
        let bytes = self.approximate_bytes() as f64 / budget.max(1) as f64;
        bytes.max(self.list.index_fill()).min(1.0)
    }

    /// Bytes of the hash index.
    pub(crate) fn index_bytes(&self) -> usize {
        self.list.index_bytes()
    }

    /// The number of versions held.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// How many ordered searches iterators have made here that found an entry.
    pub(crate) fn searches(&self) -> u64 {
        self.searches.load(AtomicOrdering::Relaxed)
    }

    /// Counts a search that `found` an entry (of any keyspace). One that found none
    /// is not counted: an empty memtable answers every search so, at no cost to the
    /// scan, and those searches must not count against it once writes fill it.
    fn count_search(&self, found: bool) {
        if found {
            self.searches.fetch_add(1, AtomicOrdering::Relaxed);
        }
    }

    /// Every separated value's `(keyspace, key, pointer)`, all versions, for `check`.
    pub(crate) fn separated(&self) -> Vec<(KeyspaceId, Box<[u8]>, Pointer)> {
        let mut out = Vec::new();
        let mut e = self.list.first();
        while let Some(x) = e {
            if let Value::Separated(p) = value_of(&x) {
                out.push((x.ks(), x.key().into(), p));
            }
            e = x.next();
        }
        out
    }

    /// Whether the memtable holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.first().is_none()
    }

    /// The keyspaces that have entries here.
    pub(crate) fn keyspaces(&self) -> Vec<KeyspaceId> {
        let mut out = Vec::new();
        let mut e = self.list.first();
        while let Some(entry) = e {
            let ks = entry.ks();
            out.push(ks);
            if ks == KeyspaceId::MAX {
                break;
            }
            e = self.list.seek(ks + 1, &[], u64::MAX, true);
        }
        out
    }

    /// Every key of keyspace `ks` in order, with its versions newest first: what the
    /// committer applies.
    pub(crate) fn grouped(
        &self,
        ks: KeyspaceId,
    ) -> impl Iterator<Item = (Box<[u8]>, Versions)> + '_ {
        let mut e = self.list.seek(ks, &[], u64::MAX, true);
        std::iter::from_fn(move || {
            let first = e.filter(|x| x.ks() == ks)?;
            let key = first.key();
            let mut versions = Versions::new();
            versions.push((first.seq(), value_of(&first)));
            e = first.next();
            while let Some(x) = e.filter(|x| x.ks() == ks && crate::keyorder::eq(x.key(), key)) {
                // Equal versions (a repeat inserted on its own): the first is the later.
                if versions.last().is_some_and(|(s, _)| *s != x.seq()) {
                    versions.push((x.seq(), value_of(&x)));
                }
                e = x.next();
            }
            Some((key.into(), versions))
        })
    }

    /// The newest version of `key` with a sequence at or below `at`.
    pub(crate) fn get(&self, ks: KeyspaceId, key: &[u8], at: u64) -> Option<(u64, Value)> {
        self.get_hashed(ks, key, key_hash(ks, key), at)
    }

    /// [`Memtable::get`] with the key's filter hash (from [`key_hash`]) computed by the
    /// caller, once for every memtable it asks.
    pub(crate) fn get_hashed(
        &self,
        ks: KeyspaceId,
        key: &[u8],
        hash: u64,
        at: u64,
    ) -> Option<(u64, Value)> {
        // An empty memtable (the active one, most of the time after a commit) answers
        // without the index's line, a cache miss in a table of megabytes. `bytes`
        // grows before `insert_batch` returns, so before the sequence that makes the
        // entry visible is published: a reader that may see the entry sees it nonzero.
        if self.bytes.load(AtomicOrdering::Relaxed) == 0 {
            return None;
        }
        match self.list.newest(ks, key, hash) {
            Newest::Absent => None,
            // Every version at or below `at` is in (`at` is visible, and a batch is
            // inserted before its sequence becomes visible), so the newest one of all
            // is the newest at or below `at` when it is not above it.
            Newest::Found(e) if e.seq() <= at => Some((e.seq(), value_of(&e))),
            // A snapshot older than the key's newest version, or an index that
            // overflowed: the skip list has every version.
            Newest::Found(_) | Newest::Unknown => {
                let e = self.list.seek(ks, key, at, true)?;
                (e.ks() == ks && e.key() == key).then(|| (e.seq(), value_of(&e)))
            }
        }
    }

    /// Appends to `out`, in key order, the keys after `from` (within `ks`) that have a
    /// version at or below `at`, each with the newest such version, until `out` holds
    /// `limit` entries; returns whether the memtable may hold more past them. One
    /// search, then a walk along the list: an iterator asks for its next several
    /// entries at once instead of searching from the top for each one. Tombstones
    /// are returned: a caller merging with older data needs them to hide it.
    pub(crate) fn next_run_at(
        &self,
        ks: KeyspaceId,
        from: Bound<&[u8]>,
        at: u64,
        limit: usize,
        out: &mut VecDeque<(Box<[u8]>, Value)>,
    ) -> bool {
        let mut e = match from {
            Bound::Included(k) => self.list.seek(ks, k, u64::MAX, true),
            Bound::Excluded(k) => self.list.seek(ks, k, 0, false),
            Bound::Unbounded => self.list.seek(ks, &[], u64::MAX, true),
        };
        self.count_search(e.is_some());
        let mut passed = 0;
        while let Some(entry) = e {
            if entry.ks() != ks {
                return false;
            }
            let key = entry.key();
            // Versions of a key come newest first: the first at or below `at` is the
            // one, and the rest of the key's versions are passed.
            let taken = out.back().is_some_and(|(last, _)| **last == *key);
            if entry.seq() <= at && !taken {
                if out.len() == limit {
                    return true;
                }
                out.push_back((key.into(), value_of(&entry)));
                passed = 0;
                e = entry.next();
            } else if passed < WALK_PAST {
                passed += 1;
                e = entry.next();
            } else {
                // A hot key's many versions: a search jumps past them (to the first
                // version we may see, or past the key), as walking would take one step
                // per version.
                passed = 0;
                e = if taken {
                    self.list.seek(ks, key, 0, false)
                } else {
                    self.list.seek(ks, key, at, true)
                };
            }
        }
        false
    }

    /// The last key before `to` (in key order, within `ks`) that has a version at or
    /// below `at`, with that version; tombstones included, as for [`Memtable::next_run_at`].
    pub(crate) fn prev_at(
        &self,
        ks: KeyspaceId,
        to: Bound<&[u8]>,
        at: u64,
    ) -> Option<(Box<[u8]>, u64, Value)> {
        debug_assert!(ks < KeyspaceId::MAX);
        let mut e = match to {
            Bound::Included(k) => self.list.seek_back(ks, k, 0, true),
            Bound::Excluded(k) => self.list.seek_back(ks, k, u64::MAX, false),
            Bound::Unbounded => self.list.seek_back(ks + 1, &[], u64::MAX, false),
        };
        self.count_search(e.is_some());
        loop {
            let entry = e?;
            if entry.ks() != ks {
                return None;
            }
            // `entry` is the oldest version of its key; look for the newest one we may see.
            let key = entry.key();
            if let Some((seq, v)) = self.get(ks, key, at) {
                return Some((key.into(), seq, v));
            }
            e = self.list.seek_back(ks, key, u64::MAX, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(v: &[u8]) -> Value {
        Value::Inline(v.into())
    }

    /// The time since the last write counts from the memtable's making until a batch
    /// goes in, and from that batch on.
    #[test]
    fn the_time_since_the_last_write_restarts_with_each_batch() {
        let m = Memtable::default();
        std::thread::sleep(Duration::from_millis(30));
        assert!(m.unwritten_for() >= Duration::from_millis(30));
        m.insert(0, b"k", 1, inline(b"v"));
        let after = m.unwritten_for();
        assert!(after < Duration::from_millis(30), "{after:?}");
        std::thread::sleep(Duration::from_millis(30));
        assert!(m.unwritten_for() >= after + Duration::from_millis(30));
    }

    #[test]
    fn reads_at_a_sequence_see_the_newest_version_at_or_below_it() {
        let m = Memtable::default();
        m.insert(0, b"k", 5, inline(b"five"));
        m.insert(0, b"k", 9, Value::Tombstone);
        m.insert(0, b"k", 12, inline(b"twelve"));
        m.insert(1, b"k", 7, inline(b"other keyspace"));
        assert_eq!(m.get(0, b"k", 4), None);
        assert_eq!(m.get(0, b"k", 5), Some((5, inline(b"five"))));
        assert_eq!(m.get(0, b"k", 8), Some((5, inline(b"five"))));
        assert_eq!(m.get(0, b"k", 9), Some((9, Value::Tombstone)));
        assert_eq!(m.get(0, b"k", u64::MAX), Some((12, inline(b"twelve"))));
        assert_eq!(m.get(1, b"k", 6), None);
        assert_eq!(m.get(0, b"j", 100), None);
        assert_eq!(m.len(), 4);
        // Each entry's node holds a header (32 bytes), a pointer or more, its key and
        // its value.
        assert!(
            m.approximate_bytes() >= 4 * 40 + 4 + 4 + 6 + 12 + 14,
            "{}",
            m.approximate_bytes()
        );
        assert_eq!(m.keyspaces(), vec![0, 1]);
        let g: Vec<_> = m.grouped(0).collect();
        assert_eq!(g.len(), 1);
        assert_eq!(&*g[0].0, b"k");
        let seqs: Vec<u64> = g[0].1.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![12, 9, 5], "newest first");
        assert_eq!(g[0].1[0].1, inline(b"twelve"));
        assert_eq!(g[0].1[1].1, Value::Tombstone);
        assert_eq!(m.grouped(1).count(), 1);
        assert_eq!(m.grouped(2).count(), 0);
    }

    #[test]
    fn stepping_both_ways_skips_versions_too_new() {
        let m = Memtable::default();
        m.insert(0, b"a", 3, inline(b"a3"));
        m.insert(0, b"b", 8, inline(b"b8")); // too new for a reader at 5
        m.insert(0, b"c", 2, inline(b"c2"));
        m.insert(0, b"c", 4, Value::Tombstone);
        m.insert(0, b"c", 6, inline(b"c6"));
        m.insert(1, b"a", 1, inline(b"x"));
        let fwd = |ks, from: Bound<&[u8]>, limit| {
            let mut out = VecDeque::new();
            let more = m.next_run_at(ks, from, 5, limit, &mut out);
            let got: Vec<_> = out.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
            (got, more)
        };
        let (a3, c4) = (
            (b"a".to_vec(), inline(b"a3")),
            (b"c".to_vec(), Value::Tombstone),
        );
        assert_eq!(
            fwd(0, Bound::Unbounded, 9),
            (vec![a3.clone(), c4.clone()], false)
        );
        assert_eq!(fwd(0, Bound::Unbounded, 1), (vec![a3], true), "c is left");
        assert_eq!(fwd(0, Bound::Excluded(b"a"), 9), (vec![c4.clone()], false));
        assert_eq!(fwd(0, Bound::Included(b"c"), 1), (vec![c4], false));
        assert_eq!(fwd(0, Bound::Excluded(b"c"), 9), (vec![], false));
        assert_eq!(
            fwd(1, Bound::Unbounded, 9),
            (vec![(b"a".to_vec(), inline(b"x"))], false)
        );
        let back = |to: Bound<&[u8]>| m.prev_at(0, to, 5).map(|(k, s, _)| (k.to_vec(), s));
        assert_eq!(back(Bound::Unbounded), Some((b"c".to_vec(), 4)));
        assert_eq!(back(Bound::Excluded(b"c")), Some((b"a".to_vec(), 3)));
        assert_eq!(back(Bound::Included(b"b")), Some((b"a".to_vec(), 3)));
        assert_eq!(back(Bound::Excluded(b"a")), None);
        assert_eq!(
            m.prev_at(1, Bound::Unbounded, 5)
                .map(|(k, _, _)| k.to_vec()),
            Some(b"a".to_vec())
        );
        // Hot keys: more versions than a search walks past, too new and too old.
        let m = Memtable::default();
        for seq in 10..40 {
            m.insert(0, b"hot", seq, inline(b"new"));
        }
        m.insert(0, b"hot", 4, inline(b"hot4"));
        for seq in 1..=30 {
            m.insert(0, b"old", seq, inline(format!("old{seq}").as_bytes()));
        }
        m.insert(0, b"z", 2, inline(b"z2"));
        let mut out = VecDeque::new();
        assert!(!m.next_run_at(0, Bound::Unbounded, 5, 9, &mut out));
        let got: Vec<_> = out.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
        let want = [
            (b"hot".to_vec(), inline(b"hot4")),
            (b"old".to_vec(), inline(b"old5")),
            (b"z".to_vec(), inline(b"z2")),
        ];
        assert_eq!(got, want);
    }

    /// Ordered searches are counted once they find an entry: those of an empty
    /// memtable, and those past its last entry, are not.
    #[test]
    fn searches_that_find_an_entry_are_counted() {
        let m = Memtable::default();
        let mut out = VecDeque::new();
        assert!(!m.next_run_at(0, Bound::Unbounded, 5, 4, &mut out));
        assert_eq!(m.prev_at(0, Bound::Unbounded, 5), None);
        assert_eq!(m.searches(), 0);
        m.insert(0, b"k", 1, inline(b"v"));
        assert!(!m.next_run_at(0, Bound::Unbounded, 5, 4, &mut out));
        assert!(m.prev_at(0, Bound::Unbounded, 5).is_some());
        assert_eq!(m.searches(), 2);
        assert!(!m.next_run_at(0, Bound::Excluded(b"k"), 5, 4, &mut out));
        assert_eq!(m.searches(), 2);
    }

    /// A batch's operations go in sorted, a key it writes twice keeps its later
    /// value (and only that one is there), and pointers and tombstones come back as
    /// they went in.
    #[test]
    fn a_batch_goes_in_whole_with_its_repeats_resolved() {
        let m = Memtable::with_size(1 << 20);
        let p = |n: u32| Pointer {
            segment: n,
            offset: u64::from(n) << 40,
            len: 4096 + n,
            check: 0xDEAD_0000 | n,
        };
        let mut batch = vec![
            (0, b"b".to_vec(), Value::Separated(p(1))),
            (0, b"a".to_vec(), inline(b"a1")),
            (1, b"a".to_vec(), Value::Tombstone),
            (0, b"b".to_vec(), Value::Separated(p(2))),
            (0, b"a".to_vec(), inline(b"a2")),
        ];
        m.insert_batch(7, &mut batch);
        assert!(batch.is_empty());
        assert_eq!(m.len(), 3, "one version per key the batch wrote");
        assert_eq!(m.get(0, b"a", 7), Some((7, inline(b"a2"))));
        assert_eq!(m.get(0, b"b", 7), Some((7, Value::Separated(p(2)))));
        assert_eq!(m.get(1, b"a", 9), Some((7, Value::Tombstone)));
        assert_eq!(m.get(0, b"b", 6), None);
        assert!(m.has_separated());
        assert_eq!(
            m.separated(),
            vec![(0, b"b".to_vec().into_boxed_slice(), p(2))]
        );
        let keys: Vec<_> = m.grouped(0).map(|(k, v)| (k.to_vec(), v.len())).collect();
        assert_eq!(keys, vec![(b"a".to_vec(), 1), (b"b".to_vec(), 1)]);
    }

    /// More keys than the hash index has slots: the memtable counts as full once the
    /// index is, and every read still finds what the skip list holds (through the
    /// list, for keys the index could not take).
    #[test]
    fn reads_stay_right_after_the_hash_index_overflows() {
        let m = Memtable::with_size(0);
        let key = |i: u32| format!("key{i:05}").into_bytes();
        for i in 0..720 {
            m.insert(0, &key(i), 1, inline(b"old"));
        }
        assert!(
            m.full(usize::MAX),
            "720 keys fill seven tenths of 1,024 slots"
        );
        for i in 0..1500 {
            m.insert(0, &key(i), 2 + u64::from(i % 2), inline(&key(i)));
        }
        for i in 0..1500 {
            let want = Some((2 + u64::from(i % 2), inline(&key(i))));
            assert_eq!(m.get(0, &key(i), u64::MAX), want, "key {i}");
            let old = (i < 720).then(|| (1, inline(b"old")));
            assert_eq!(m.get(0, &key(i), 1), old, "key {i} at 1");
        }
        assert_eq!(m.get(0, b"key99999", u64::MAX), None);
        assert_eq!(m.get(1, &key(7), u64::MAX), None);
    }

    #[test]
    fn a_key_written_twice_in_one_batch_keeps_the_later_value() {
        let m = Memtable::default();
        m.insert(0, b"k", 3, inline(b"first"));
        m.insert(0, b"k", 3, inline(b"second"));
        assert_eq!(m.get(0, b"k", 3), Some((3, inline(b"second"))));
    }
}
