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

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use crossbeam_skiplist::SkipMap;
use smallvec::SmallVec;

mod bloom;

pub(crate) use bloom::hash as key_hash;
use bloom::Bloom;

use crate::vlog::Pointer;

/// A keyspace's number, as the manifest assigns it. `u32::MAX` is reserved.
pub(crate) type KeyspaceId = u32;

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

/// A version's place in the skip list. Keys up to [`INLINE_KEY`] bytes live in the
/// node itself: a search compares keys at every level, and a key behind a pointer
/// cost a second cache miss per comparison.
#[derive(Clone, Debug)]
struct MemKey {
    ks: KeyspaceId,
    seq: u64,
    key: SmallVec<[u8; INLINE_KEY]>,
}

/// Longest key kept inline in a memtable entry.
const INLINE_KEY: usize = 32;

impl MemKey {
    fn new(ks: KeyspaceId, key: &[u8], seq: u64) -> Self {
        MemKey {
            ks,
            key: SmallVec::from_slice(key),
            seq,
        }
    }
}

/// The order of the skip list, over keys held ([`MemKey`]) and borrowed for a search
/// ([`Probe`], which copies nothing): keyspace, key, then sequence descending.
trait Ordered {
    fn parts(&self) -> (KeyspaceId, &[u8], u64);
}

impl Ordered for MemKey {
    fn parts(&self) -> (KeyspaceId, &[u8], u64) {
        (self.ks, &self.key, self.seq)
    }
}

/// A search key borrowing the caller's bytes.
struct Probe<'a> {
    ks: KeyspaceId,
    key: &'a [u8],
    seq: u64,
}

impl Ordered for Probe<'_> {
    fn parts(&self) -> (KeyspaceId, &[u8], u64) {
        (self.ks, self.key, self.seq)
    }
}

fn order(a: &(impl Ordered + ?Sized), b: &(impl Ordered + ?Sized)) -> Ordering {
    let (aks, akey, aseq) = a.parts();
    let (bks, bkey, bseq) = b.parts();
    aks.cmp(&bks)
        .then_with(|| akey.cmp(bkey))
        .then_with(|| bseq.cmp(&aseq))
}

impl<'a> std::borrow::Borrow<dyn Ordered + 'a> for MemKey {
    fn borrow(&self) -> &(dyn Ordered + 'a) {
        self
    }
}

impl Ord for dyn Ordered + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        order(self, other)
    }
}

impl PartialOrd for dyn Ordered + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Ordered + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn Ordered + '_ {}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        order(self, other)
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for MemKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for MemKey {}

/// Versions an iterator's search walks past one by one before it searches past the
/// rest of them instead.
const WALK_PAST: usize = 8;

/// Per-entry bookkeeping the skip list adds, for the size estimate.
const ENTRY_OVERHEAD: usize = 64;

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
    map: SkipMap<MemKey, Value>,
    bytes: AtomicUsize,
    separated: std::sync::atomic::AtomicBool,
    bloom: Bloom,
}

/// Memtable bytes per filter bit: about 20 bits per entry of a 16-byte key and a
/// 100-byte value, 9 for an entry with no value.
const BYTES_PER_FILTER_BIT: usize = 8;

impl Default for Memtable {
    fn default() -> Self {
        Memtable::with_size(0)
    }
}

impl Memtable {
    /// A memtable expected to hold about `bytes` (it may hold more, with a filter that
    /// answers "maybe" more often).
    pub(crate) fn with_size(bytes: usize) -> Memtable {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            separated: Default::default(),
            bloom: Bloom::new(bytes / BYTES_PER_FILTER_BIT),
        }
    }

    /// Adds the version `seq` of `key`. A second insert of the same `(key, seq)` (a batch
    /// that writes a key twice) replaces the first: the later operation wins (see
    /// [`replaced_in_batch`] for the value-log accounting of the first).
    pub(crate) fn insert(&self, ks: KeyspaceId, key: &[u8], seq: u64, value: Value) {
        let size = key.len() + value.footprint() + ENTRY_OVERHEAD;
        if matches!(value, Value::Separated(_)) {
            self.separated.store(true, AtomicOrdering::Relaxed);
        }
        self.bloom.insert(key_hash(ks, key));
        self.map.insert(MemKey::new(ks, key, seq), value);
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
    }

    /// Whether any entry's value is in the value log.
    pub(crate) fn has_separated(&self) -> bool {
        self.separated.load(AtomicOrdering::Relaxed)
    }

    /// The approximate memory the entries use, in bytes (the filter not included:
    /// it is allocated whole up front, see [`Memtable::filter_bytes`]).
    pub(crate) fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Bytes of the key filter.
    pub(crate) fn filter_bytes(&self) -> usize {
        self.bloom.memory_bytes()
    }

    /// The number of versions held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every separated value's `(keyspace, key, pointer)`, all versions, for `check`.
    pub(crate) fn separated(&self) -> Vec<(KeyspaceId, Box<[u8]>, Pointer)> {
        self.map
            .iter()
            .filter_map(|e| match e.value() {
                Value::Separated(p) => Some((e.key().ks, e.key().key.as_slice().into(), *p)),
                _ => None,
            })
            .collect()
    }

    /// Whether the memtable holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The keyspaces that have entries here.
    pub(crate) fn keyspaces(&self) -> Vec<KeyspaceId> {
        let mut out = Vec::new();
        let mut e = self.map.front();
        while let Some(entry) = e {
            let ks = entry.key().ks;
            out.push(ks);
            if ks == KeyspaceId::MAX {
                break;
            }
            e = self
                .map
                .lower_bound(Bound::Included(&MemKey::new(ks + 1, &[], u64::MAX)));
        }
        out
    }

    /// Every key of keyspace `ks` in order, with its versions newest first: what the
    /// committer applies.
    pub(crate) fn grouped(
        &self,
        ks: KeyspaceId,
    ) -> impl Iterator<Item = (Box<[u8]>, Versions)> + '_ {
        let mut entries = self
            .map
            .range(MemKey::new(ks, &[], u64::MAX)..)
            .take_while(move |e| e.key().ks == ks)
            .peekable();
        std::iter::from_fn(move || {
            let first = entries.next()?;
            let key: Box<[u8]> = first.key().key.as_slice().into();
            let mut versions = Versions::new();
            versions.push((first.key().seq, first.value().clone()));
            while let Some(e) = entries.next_if(|e| *e.key().key == *key) {
                versions.push((e.key().seq, e.value().clone()));
            }
            Some((key, versions))
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
        // without the filter's line, a cache miss in a filter of a megabyte. `bytes`
        // grows before `insert` returns, so before the sequence that makes the entry
        // visible is published: a reader that may see the entry sees it nonzero.
        if self.bytes.load(AtomicOrdering::Relaxed) == 0 || !self.bloom.may_contain(hash) {
            return None;
        }
        let probe = Probe { ks, key, seq: at };
        let e = self
            .map
            .lower_bound(Bound::Included(&probe as &dyn Ordered))?;
        let k = e.key();
        (k.ks == ks && *k.key == *key).then(|| (k.seq, e.value().clone()))
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
        let probe = match from {
            Bound::Included(k) => Bound::Included(MemKey::new(ks, k, u64::MAX)),
            Bound::Excluded(k) => Bound::Excluded(MemKey::new(ks, k, 0)),
            Bound::Unbounded => Bound::Included(MemKey::new(ks, &[], u64::MAX)),
        };
        let mut e = self.map.lower_bound(probe.as_ref());
        let mut passed = 0;
        while let Some(entry) = e {
            let k = entry.key();
            if k.ks != ks {
                return false;
            }
            // Versions of a key come newest first: the first at or below `at` is the
            // one, and the rest of the key's versions are passed.
            let taken = out.back().is_some_and(|(last, _)| **last == *k.key);
            if k.seq <= at && !taken {
                if out.len() == limit {
                    return true;
                }
                out.push_back((k.key.as_slice().into(), entry.value().clone()));
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
                let jump = if taken {
                    Bound::Excluded(MemKey::new(ks, &k.key, 0))
                } else {
                    Bound::Included(MemKey::new(ks, &k.key, at))
                };
                e = self.map.lower_bound(jump.as_ref());
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
        let mut probe = match to {
            Bound::Included(k) => Bound::Included(MemKey::new(ks, k, 0)),
            Bound::Excluded(k) => Bound::Excluded(MemKey::new(ks, k, u64::MAX)),
            Bound::Unbounded => Bound::Excluded(MemKey::new(ks + 1, &[], u64::MAX)),
        };
        loop {
            let e = self.map.upper_bound(probe.as_ref())?;
            let k = e.key();
            if k.ks != ks {
                return None;
            }
            // `e` is the oldest version of its key; look for the newest one we may see.
            if let Some((seq, v)) = self.get(ks, &k.key, at) {
                return Some((k.key.as_slice().into(), seq, v));
            }
            probe = Bound::Excluded(MemKey::new(ks, &k.key, u64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(v: &[u8]) -> Value {
        Value::Inline(v.into())
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
        assert!(m.approximate_bytes() >= 4 * ENTRY_OVERHEAD);
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

    #[test]
    fn a_key_written_twice_in_one_batch_keeps_the_later_value() {
        let m = Memtable::default();
        m.insert(0, b"k", 3, inline(b"first"));
        m.insert(0, b"k", 3, inline(b"second"));
        assert_eq!(m.get(0, b"k", 3), Some((3, inline(b"second"))));
    }
}
