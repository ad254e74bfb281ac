//! The interval cache (FlexDB §5.2): decoded intervals kept in memory under a byte
//! budget, replaced by CLOCK, and written through by the committer (which puts an
//! interval it changes back in its new form if [`IntervalCache::wants`] it, and
//! otherwise leaves no entry for it), so a cached interval always equals the bytes in
//! the FlexSpace.
//!
//! Entries are keyed by the interval's index key and also record where the interval
//! ends (the next interval's key), so a point read can find the interval holding a key
//! from the cache alone, without the keyspace's lock ([`IntervalCache::covering`]): it
//! takes the entry with the greatest key at or below the one sought and uses it only if
//! the key is below the entry's end. That is what lets reads go on while the committer
//! holds the lock to edit the space and the index. When the lock is free, a point read
//! takes it shared instead, finds its interval in the sparse index, and there the
//! interval's [`Slot`], which holds the cached interval if there is one: fewer cache
//! misses than the skip list's floor search (see [`IntervalCache`]). While the lock is
//! held, a read asks a view's copy of the index and its slots first (`view.rs`), and
//! the floor search finds what was cached after the view was made.
//!
//! Why a lock-free read is right: the committer changes an interval only by replacing
//! its entry (in place, split, merged), and it publishes every change before the frozen
//! memtable that caused it leaves the memtable list. A reader looks in the memtables
//! first, so a key whose record is being changed is found there; for every other key,
//! the old entry and the new one hold the same record. What readers must never find is
//! an entry claiming a range it does not hold, so:
//! - an entry's end may be *below* the true end (a reader then falls back to the locked
//!   path), never above: when an interval splits, its entry is replaced by the narrower
//!   one, and when intervals merge, the absorbed interval's entry goes;
//! - entries are added and removed only under the ring's mutex, by the committer (under
//!   the keyspace's write lock) or by a reader filling a miss (under its read lock, so
//!   what it inserts is current).
//!   [`SortedStore::check`](super::SortedStore::check) verifies every entry against the
//!   index and the space.

use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use super::doorkeeper::Doorkeeper;
use super::index::SparseIndex;
use super::interval::Loaded;
use crate::flextree::Hint;
use crate::space::{Shortcut, Spot};

/// Bytes of bookkeeping per entry beyond its interval and keys, for the budget: the
/// skip-list node and the ring slot. (The index's [`Slot`]s are the index's memory,
/// one per interval, cached or not.)
const PER_ENTRY: usize = 128;

/// One interval's cached form, where the sparse index keeps it: beside the interval's
/// key in its leaf, so a point read that found its interval in the index reaches the
/// cached bytes with one more load, not a hash lookup (whose control bytes and bucket
/// were two more cache misses, a fifth of a cached point read's time at 1M pairs).
///
/// Only the [`IntervalCache`] fills and empties slots, under its ring's mutex, so a
/// slot holds exactly what the cache's entry of that key holds. Readers use slots
/// under the keyspace's read lock, which keeps the index (and so the slot's place)
/// still; the lock inside the slot is for the cache, which may replace or evict an
/// entry while other readers hold the keyspace's lock shared too.
///
/// A slot also keeps the interval's [`Shortcut`] in the space once a read found it: its
/// [`Spot`] if the interval lies in one piece, else a [`Hint`] to the FlexTree's leaf
/// where its extents start. A later read of it from the space then skips the FlexTree's
/// descent, which was a quarter of a point read's time at 10M pairs (docs/design.md,
/// "Spots" and "Hints"). Reads leave shortcuts under the keyspace's read lock: the
/// space does not change meanwhile, so every read then finds the same one. The
/// committer forgets an interval's shortcut before it changes the interval's records
/// ([`SparseIndex::find_to_edit`]); a hint also lapses by itself once its leaf changes.
#[derive(Debug, Default)]
pub(crate) struct Slot(RwLock<Held>);

#[derive(Debug)]
struct Held {
    loaded: Option<Arc<Loaded>>,
    /// The shortcut in three words ([`Held::shortcut`]): as an `Option<Shortcut>` it
    /// would take 32 bytes, not 16, in every interval's slot. [`NONE`] in `a`: none. A
    /// spot: its address, its opening count, 0. A hint: its leaf's stamp, its leaf,
    /// and [`HINT`] with the entry (the bits above [`WITHIN_BITS`]) and how far into it
    /// the interval starts (the bits below).
    a: u64,
    b: u32,
    c: u32,
}

/// [`Held::a`] of a slot with no shortcut.
const NONE: u64 = u64::MAX;
/// [`Held::c`]'s mark of a hint.
const HINT: u32 = 1 << 31;
/// Bits of [`Held::c`] for how far into its entry a hinted interval starts; a hint that
/// does not fit (an entry past 2^11 in its leaf, or a start 1 MiB into an extent) is
/// not kept.
const WITHIN_BITS: u32 = 20;

impl Default for Held {
    fn default() -> Self {
        Held {
            loaded: None,
            a: NONE,
            b: 0,
            c: 0,
        }
    }
}

impl Held {
    fn shortcut(&self) -> Option<Shortcut> {
        if self.a == NONE {
            return None;
        }
        Some(if self.c & HINT == 0 {
            Shortcut::Spot(Spot {
                addr: self.a,
                opened: self.b,
            })
        } else {
            Shortcut::Hint(Hint {
                leaf: self.b,
                stamp: self.a,
                pos: (self.c & !HINT) >> WITHIN_BITS,
                within: u64::from(self.c & ((1 << WITHIN_BITS) - 1)),
            })
        })
    }

    fn set_shortcut(&mut self, shortcut: Option<Shortcut>) {
        (self.a, self.b, self.c) = match shortcut {
            Some(Shortcut::Spot(s)) => (s.addr, s.opened, 0),
            Some(Shortcut::Hint(h))
                if h.stamp != NONE
                    && h.pos < 1 << (31 - WITHIN_BITS)
                    && h.within < 1 << WITHIN_BITS =>
            {
                (
                    h.stamp,
                    h.leaf,
                    HINT | h.pos << WITHIN_BITS | h.within as u32,
                )
            }
            _ => (NONE, 0, 0),
        };
    }
}

impl Slot {
    /// A view's copy of this slot
    /// ([`SparseIndex::find_copy`](super::index::SparseIndex::find_copy)): the same
    /// interval, if one is held, and the same shortcut. The copy shares the interval
    /// and keeps it in memory until the committer replaces or drops it (where the
    /// keyspace fits the cache; `Views::replace`) or the view goes, even if the cache
    /// evicts it meanwhile.
    pub(crate) fn view_copy(&self) -> Slot {
        let held = self.0.read();
        let mut copy = Held {
            loaded: held.loaded.clone(),
            ..Held::default()
        };
        copy.set_shortcut(held.shortcut());
        Slot(RwLock::new(copy))
    }

    /// Holds `l` (or nothing) from now on; returns what it held, for the caller to drop
    /// after the slot's lock is let go. For a view's copy of a slot (`view.rs`).
    pub(crate) fn swap(&self, l: Option<Arc<Loaded>>) -> Option<Arc<Loaded>> {
        std::mem::replace(&mut self.0.write().loaded, l)
    }

    /// What `read` makes of the interval held here, if any (marked recently used),
    /// without taking a reference to it: a point read that copies its record out needs
    /// none, and a reference count is an atomic write to a line the read would
    /// otherwise only load. If none is held, the shortcut kept here, if any.
    pub(crate) fn read_or_shortcut<R>(
        &self,
        read: impl FnOnce(&Loaded) -> R,
    ) -> std::result::Result<R, Option<Shortcut>> {
        let held = self.0.read();
        match held.loaded.as_deref() {
            Some(l) => {
                l.referenced.set();
                Ok(read(l))
            }
            None => Err(held.shortcut()),
        }
    }

    /// The interval held here, if any, marked recently used.
    pub(crate) fn get(&self) -> Option<Arc<Loaded>> {
        let held = self.0.read();
        let l = held.loaded.as_ref()?;
        l.referenced.set();
        Some(Arc::clone(l))
    }

    /// Asks the processor for the struct of the interval held here, if any and if the
    /// slot's lock is free, without taking it: a scan's walk calls this a few slots
    /// ahead of the one it takes, so the misses on the structs it comes to overlap.
    pub(crate) fn prefetch(&self) {
        if let Some(held) = self.0.try_read() {
            if let Some(l) = &held.loaded {
                super::interval::prefetch_struct(Arc::as_ptr(l));
            }
        }
    }

    /// The interval held here, if any, not marked used.
    pub(crate) fn peek(&self) -> Option<Arc<Loaded>> {
        self.0.read().loaded.clone()
    }

    /// The shortcut kept here, if any.
    pub(crate) fn shortcut(&self) -> Option<Shortcut> {
        self.0.read().shortcut()
    }

    /// Keeps `shortcut` (a read's, under the keyspace's read lock) from now on.
    pub(crate) fn set_shortcut(&self, shortcut: Option<Shortcut>) {
        self.0.write().set_shortcut(shortcut);
    }

    /// Forgets the shortcut: the interval's records are about to change.
    pub(crate) fn forget_shortcut(&mut self) {
        self.0.get_mut().set_shortcut(None);
    }

    /// Whether this slot holds `l` itself.
    fn holds(&self, l: &Arc<Loaded>) -> bool {
        self.0
            .read()
            .loaded
            .as_ref()
            .is_some_and(|h| Arc::ptr_eq(h, l))
    }

    /// Holds `l` from now on; returns what it held, for the caller to drop after the
    /// slot's lock is let go.
    fn set(&self, l: Arc<Loaded>) -> Option<Arc<Loaded>> {
        self.0.write().loaded.replace(l)
    }

    /// Empties the slot if it holds `l`; returns what it held then.
    fn clear_if(&self, l: &Arc<Loaded>) -> Option<Arc<Loaded>> {
        let mut held = self.0.write();
        if held.loaded.as_ref().is_some_and(|h| Arc::ptr_eq(h, l)) {
            held.loaded.take()
        } else {
            None
        }
    }
}

/// Interval keys up to this long are held in the skip list's nodes: a lookup compares
/// keys at every level, and a key behind a pointer costs a cache miss per comparison.
const INLINE_KEY: usize = 24;

type MapKey = SmallVec<[u8; INLINE_KEY]>;

/// One cached interval. Its keys are held inline (when short) like the map's, so that
/// checking where an entry ends costs no cache miss beyond the entry.
#[derive(Debug)]
pub(crate) struct Entry {
    key: MapKey,
    /// The next interval's key (`None`: the last interval), or a key below it.
    end: Option<MapKey>,
    interval: Arc<Loaded>,
    slot: usize,
}

impl Entry {
    fn footprint(&self) -> usize {
        // The key is held twice: the skip list's and the entry's.
        PER_ENTRY
            + 2 * self.key.len()
            + self.end.as_ref().map_or(0, |e| e.len())
            + self.interval.footprint()
    }

    /// Whether `key`, which is at or above this entry's key, lies below its end.
    fn ends_after(&self, key: &[u8]) -> bool {
        debug_assert!(*self.key <= *key);
        self.end.as_deref().is_none_or(|e| key < e)
    }

    /// The interval's key and end, and the interval.
    pub(crate) fn parts(&self) -> (&[u8], Option<&[u8]>, &Arc<Loaded>) {
        (&self.key, self.end.as_deref(), &self.interval)
    }
}

/// The CLOCK ring and the byte count; every change to the map happens under it.
#[derive(Default)]
struct Ring {
    used: usize,
    slots: Vec<Option<Arc<Entry>>>,
    free: Vec<usize>,
    hand: usize,
}

/// A CLOCK cache of intervals with a byte budget, readable without a lock.
///
/// The entries are held twice, in the same state (both change together under the
/// ring's mutex): in a skip list, ordered, for the lock-free floor search of
/// [`covering`](Self::covering) and for [`walk`](Self::walk); and in the sparse
/// index's [`Slot`]s, for a reader that has found its interval in the index. A point
/// read that can take the keyspace's read lock does that: a skip-list search of tens
/// of thousands of entries misses the processor cache at nearly every level, and was
/// two thirds of a cached point read's time. Every method that changes entries takes
/// the index (as the keyspace's lock holder has it), and an entry is kept only for a
/// key the index has.
pub(crate) struct IntervalCache {
    /// What the entries may take now: the budget less what the keyspace's indexes
    /// take ([`IntervalCache::set_capacity`]).
    capacity: AtomicUsize,
    map: SkipMap<MapKey, Arc<Entry>>,
    ring: Mutex<Ring>,
    doorkeeper: Doorkeeper,
    /// Repeated misses (point reads and scans) on a keyspace that does not fit, for
    /// [`IntervalCache::admits`]'s one in [`ADMIT_ONE_IN`].
    repeats: AtomicUsize,
}

/// On a keyspace that does not fit in the cache, one in this many misses (point reads
/// and scans) that the doorkeeper would admit is cached. 3M UDB pairs (1.9 times a
/// 256 MiB cache), ycsb-c: 254K ops/s taking every one, 290K one in 8, 303K one in 64
/// (medians of three runs; of two for one in 8).
const ADMIT_ONE_IN: usize = 64;

/// Cache bytes per interval a read's miss is remembered for: about two cache
/// entries' worth (an interval of 16 pairs of 100 bytes takes about 2 KiB).
const BYTES_PER_REMEMBERED: usize = 1 << 10;
/// The fewest misses remembered, for small caches.
const MIN_REMEMBERED: usize = 256;

impl IntervalCache {
    /// An empty cache holding at most `capacity` bytes (0 caches nothing).
    pub(crate) fn new(capacity: usize) -> Self {
        IntervalCache {
            capacity: AtomicUsize::new(capacity),
            map: SkipMap::new(),
            ring: Mutex::new(Ring::default()),
            doorkeeper: Doorkeeper::new((capacity / BYTES_PER_REMEMBERED).max(MIN_REMEMBERED)),
            repeats: AtomicUsize::new(0),
        }
    }

    /// The cached interval keyed `key`, marked recently used. A reader that has its
    /// interval's place in the index asks its [`Slot`] instead, with no second descent.
    pub(crate) fn get(&self, index: &SparseIndex, key: &[u8]) -> Option<Arc<Loaded>> {
        index.slot_of(key)?.get()
    }

    /// The cached interval that holds `key`, if the cache knows it (marked recently
    /// used). Needs no lock: see the [module documentation](self).
    pub(crate) fn covering(&self, key: &[u8]) -> Option<Arc<Loaded>> {
        self.holding(key).map(|e| use_entry(e.value()))
    }

    /// The map entry whose interval holds `key`, if it is cached and its end says so.
    fn holding(
        &self,
        key: &[u8],
    ) -> Option<crossbeam_skiplist::map::Entry<'_, MapKey, Arc<Entry>>> {
        self.map
            .upper_bound(Bound::Included(key))
            .filter(|e| e.value().ends_after(key))
    }

    /// The cached intervals from the one holding `from` on, in key order (`forward`) or
    /// in reverse, for as long as they follow one another with no interval missing
    /// between them: `take` gets each (marked recently used) and says whether to go on.
    /// Returns whether the walk ended at the keyspace's first or last interval rather
    /// than at a gap, at an interval not cached, or because `take` stopped it.
    ///
    /// Needs no lock, even while the committer edits: entries are adjacent when one's
    /// end is the next one's key, so the intervals walked cover their range once, each
    /// holding its records as they are or as they were before a change whose versions
    /// the memtables still hold (the [module documentation](self)), whichever of its
    /// forms the walk met. The caller checks with the store's epoch that no write
    /// section began or ended meanwhile (the memtable being committed leaves the list
    /// only after the commit's last section). A conservative end (below the true one)
    /// never equals a cached key (every entry's key starts an interval), so it shows as
    /// a gap.
    pub(crate) fn walk(
        &self,
        from: Bound<&[u8]>,
        forward: bool,
        mut take: impl FnMut(Arc<Loaded>) -> bool,
    ) -> bool {
        let first = match (from, forward) {
            // The first interval's key is the empty key.
            (Bound::Unbounded, true) => self.map.front().filter(|e| e.key().is_empty()),
            (Bound::Unbounded, false) => self.map.back().filter(|e| e.value().end.is_none()),
            (Bound::Included(k) | Bound::Excluded(k), _) => self.holding(k),
        };
        let Some(mut at) = first else {
            return false;
        };
        loop {
            let entry = at.value();
            if !take(use_entry(entry)) {
                return false;
            }
            let next = if forward {
                let Some(end) = entry.end.as_deref() else {
                    return true;
                };
                at.next().filter(|n| n.key().as_slice() == end)
            } else {
                if entry.key.is_empty() {
                    return true;
                }
                at.prev()
                    .filter(|p| p.value().end.as_deref() == Some(&*entry.key))
            };
            match next {
                Some(n) => at = n,
                None => return false,
            }
        }
    }

    /// Caches `interval` under `key`, ending at `end` (the next interval's key),
    /// replacing what was there and evicting by CLOCK until the budget holds. The form
    /// put in becomes live and every form that leaves is retired
    /// ([`Live`](super::interval::Live)). An
    /// interval larger than the whole budget is not kept, nor one whose key `index`
    /// does not have (the committer caches the pieces of a split after the index has
    /// their keys).
    pub(crate) fn put(
        &self,
        index: &SparseIndex,
        key: &[u8],
        end: Option<&[u8]>,
        interval: Arc<Loaded>,
    ) {
        let Some(slot) = index.slot_of(key) else {
            debug_assert!(false, "caching {key:?}, which the index does not have");
            return;
        };
        let mut ring = self.ring.lock();
        let mut entry = Entry {
            key: MapKey::from_slice(key),
            end: end.map(MapKey::from_slice),
            interval,
            slot: 0,
        };
        let size = entry.footprint();
        let capacity = self.capacity();
        if size > capacity {
            self.remove_locked(&mut ring, index, key);
            return;
        }
        let old = self.map.get(key).map(|e| Arc::clone(e.value()));
        if let Some(old) = &old {
            ring.used -= old.footprint();
            old.interval.live.retire();
            self.unlink(key, &old.interval);
        }
        while ring.used + size > capacity {
            self.evict_one(&mut ring, index, Some(key));
        }
        entry.slot = match &old {
            Some(old) => old.slot,
            None => ring.free.pop().unwrap_or_else(|| {
                ring.slots.push(None);
                ring.slots.len() - 1
            }),
        };
        let entry = Arc::new(entry);
        ring.slots[entry.slot] = Some(Arc::clone(&entry));
        ring.used += size;
        entry.interval.live.enter();
        // Each replaces an entry of the same key in one step.
        let replaced = slot.set(Arc::clone(&entry.interval));
        self.map.insert(MapKey::from_slice(key), entry);
        drop(ring);
        drop(replaced);
    }

    /// The cached interval keyed `key`, for the committer: not marked used, since the
    /// cache keeps what readers use ([`IntervalCache::wants`]).
    fn peek(&self, index: &SparseIndex, key: &[u8]) -> Option<Arc<Loaded>> {
        index.slot_of(key)?.peek()
    }

    /// Whether a reader used the cached interval keyed `key` since it went in or the
    /// clock's hand last passed it (the committer's own lookups do not count).
    pub(crate) fn read_lately(&self, index: &SparseIndex, key: &[u8]) -> bool {
        self.peek(index, key).is_some_and(|l| l.referenced.is_set())
    }

    /// Whether the committer, having changed the interval keyed `key` (now taking
    /// `footprint` bytes; `slot` is its slot in the index), should cache its new form
    /// (else it drops the entry, if any).
    ///
    /// Where the whole keyspace fits in the cache (`fits`, see
    /// [`IntervalCache::would_hold`]): yes if the cache holds the interval or has room
    /// for it without evicting anything, so readers find a warm cache after a load
    /// (but of the pieces a load in key order splits off, the committer keeps only
    /// the last unless [`IntervalCache::read_lately`]; see `split` in `commit.rs`).
    /// Where it does not: only if the cache holds the interval and a reader used it
    /// since it went in or was last passed by the clock's hand. A commit touches
    /// intervals all over a keyspace larger than the cache; caching each one would
    /// evict the intervals readers use for ones nobody may read again soon, and even
    /// keeping the ones it put in while there was room gives the committer entries to
    /// rewrite at every commit that no reader chose: at 10M pairs that made the load a
    /// sixth slower and its RSS 300 MiB larger.
    pub(crate) fn wants(
        &self,
        slot: Option<&Slot>,
        key: &[u8],
        footprint: usize,
        fits: bool,
    ) -> bool {
        match slot.and_then(Slot::peek) {
            Some(l) => fits || l.referenced.is_set(),
            None => fits && self.has_room(key, footprint),
        }
    }

    /// Whether a keyspace of `bytes` of records in `intervals` intervals of at most
    /// `pairs` records each would fit in the cache whole (reckoning every interval
    /// full, and keys of 16 bytes).
    pub(crate) fn would_hold(&self, bytes: u64, intervals: usize, pairs: usize) -> bool {
        Self::would_hold_in(self.capacity(), bytes, intervals, pairs)
    }

    /// [`IntervalCache::would_hold`] for a cache of `capacity` bytes.
    pub(crate) fn would_hold_in(
        capacity: usize,
        bytes: u64,
        intervals: usize,
        pairs: usize,
    ) -> bool {
        Self::need(bytes, intervals, pairs) <= capacity as u64
    }

    /// The bytes a cache would need to hold a keyspace of `bytes` of records in
    /// `intervals` intervals of at most `pairs` records each whole, reckoned as
    /// [`IntervalCache::would_hold`] does.
    pub(crate) fn need(bytes: u64, intervals: usize, pairs: usize) -> u64 {
        let per_interval = PER_ENTRY + 3 * 16 + super::interval::overhead(pairs);
        bytes.saturating_add((intervals as u64).saturating_mul(per_interval as u64))
    }

    /// Whether an entry keyed `key` for an interval of `footprint` bytes fits beside
    /// what the cache holds, without evicting anything (its end key is counted as long
    /// as its key).
    fn has_room(&self, key: &[u8], footprint: usize) -> bool {
        self.ring.lock().used + PER_ENTRY + 3 * key.len() + footprint <= self.capacity()
    }

    /// Whether a read (a point read or a scan) that missed the interval keyed `key`
    /// (taking `footprint` bytes) should cache it: yes while the cache has room for it,
    /// and once full, if a read missed it before, lately ([`Doorkeeper`]). On a
    /// keyspace larger than the cache, an interval read once in a long while would
    /// otherwise evict one read often, and cost an insertion and an eviction besides.
    ///
    /// Where the keyspace does not fit in the cache (`fits`, see
    /// [`IntervalCache::would_hold`]), only one in [`ADMIT_ONE_IN`] of those repeated
    /// misses is taken: each admission there is a whole read, an insertion and an
    /// eviction, and most admitted intervals were evicted before a reader came back.
    /// An interval missed `k` times gets in with probability about `1 - (1 - 1/64)^k`,
    /// so the ones missed often still get in soon. Where it fits, every repeated miss
    /// is taken, since the cache can end up holding everything.
    pub(crate) fn admits(&self, key: &[u8], footprint: usize, fits: bool) -> bool {
        let room = self.has_room(key, footprint);
        // The miss is remembered even when there is room, so that an interval read
        // again after the cache filled is known.
        let again = self.doorkeeper.missed_before(key);
        room || (again
            && (fits
                || self
                    .repeats
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(ADMIT_ONE_IN)))
    }

    /// Asks the processor for what [`IntervalCache::admits`] will look at for `key`
    /// that is likely not in its caches (the doorkeeper's word).
    pub(crate) fn prefetch_admits(&self, key: &[u8]) {
        self.doorkeeper.prefetch(key);
    }

    /// Drops the entry keyed `key`, if there is one. The index may have dropped the
    /// key already (two intervals merged), and its slot with it.
    pub(crate) fn remove(&self, index: &SparseIndex, key: &[u8]) {
        let mut ring = self.ring.lock();
        self.remove_locked(&mut ring, index, key);
    }

    fn remove_locked(&self, ring: &mut Ring, index: &SparseIndex, key: &[u8]) {
        if let Some(e) = self.map.remove(key) {
            let entry = e.value();
            // An absorbed key (two intervals merged) has no slot left: `slot_of` finds
            // only the key itself. Where the key is there, its slot holds this entry's
            // interval; emptying it only then is a cheap guard, not a case that occurs.
            if let Some(slot) = index.slot_of(key) {
                drop(slot.clear_if(&entry.interval));
            }
            ring.used -= entry.footprint();
            ring.slots[entry.slot] = None;
            ring.free.push(entry.slot);
            entry.interval.live.retire();
            self.unlink(key, &entry.interval);
        }
    }

    /// Clears the link to `gone` (the interval keyed `key`, leaving the cache) from
    /// the cached interval before it, if that one links to it (see [`Next`]). Links
    /// are the only weak references to an interval, so one nothing links to costs no
    /// search: a commit that changes intervals no scan has passed pays nothing here.
    ///
    /// [`Next`]: super::interval::Next
    fn unlink(&self, key: &[u8], gone: &Arc<Loaded>) {
        if Arc::weak_count(gone) == 0 {
            return;
        }
        if let Some(prev) = self.map.upper_bound(Bound::Excluded(key)) {
            prev.value().interval.next.clear_if(gone);
        }
    }

    /// Bytes the entries may take now.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Lets the entries take `capacity` bytes from now on, evicting by CLOCK until they
    /// fit. The store calls this as its indexes grow and shrink, so that the cache and
    /// the indexes share one budget.
    pub(crate) fn set_capacity(&self, index: &SparseIndex, capacity: usize) {
        let mut ring = self.ring.lock();
        self.capacity.store(capacity, Ordering::Relaxed);
        while ring.used > capacity {
            self.evict_one(&mut ring, index, None);
        }
    }

    /// Bytes held.
    pub(crate) fn used(&self) -> usize {
        self.ring.lock().used
    }

    /// Every entry, in key order, once the skip list and the index's slots are found
    /// to hold the same intervals; otherwise what differs.
    pub(crate) fn entries(&self, index: &SparseIndex) -> Result<Vec<Arc<Entry>>, String> {
        let _ring = self.ring.lock();
        let entries: Vec<_> = self.map.iter().map(|e| Arc::clone(e.value())).collect();
        let filled = index.slots().iter().filter(|s| s.peek().is_some()).count();
        if entries.len() != filled {
            return Err(format!(
                "the cache's skip list holds {} intervals, the index's slots {filled}",
                entries.len()
            ));
        }
        for e in &entries {
            if !index.slot_of(&e.key).is_some_and(|s| s.holds(&e.interval)) {
                return Err(format!(
                    "the index's slot does not hold the cache's entry of {:?}",
                    e.key
                ));
            }
        }
        Ok(entries)
    }

    /// Intervals held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Advances the hand: a referenced entry gets a second chance, the first one that
    /// is not goes. The entry keyed `keep` (being replaced) is not counted: its bytes
    /// were taken off already.
    fn evict_one(&self, ring: &mut Ring, index: &SparseIndex, keep: Option<&[u8]>) {
        debug_assert!(ring.used > 0, "evicting from an empty cache");
        loop {
            ring.hand = (ring.hand + 1) % ring.slots.len();
            let Some(s) = ring.slots[ring.hand].as_ref() else {
                continue;
            };
            if keep == Some(&*s.key) {
                continue;
            }
            if s.interval.referenced.take() {
                continue;
            }
            let key = s.key.clone();
            self.remove_locked(ring, index, &key);
            return;
        }
    }
}

fn use_entry(entry: &Entry) -> Arc<Loaded> {
    entry.interval.referenced.set();
    Arc::clone(&entry.interval)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sorted::{Record, RecordValue};

    /// A slot gives back the shortcut it was given, in 16 bytes; a hint too far into
    /// its leaf or its extent to pack is not kept.
    #[test]
    fn a_slot_keeps_spots_and_hints_that_fit() {
        assert_eq!(std::mem::size_of::<Held>(), 24);
        let mut slot = Slot::default();
        let spot = Shortcut::Spot(Spot {
            addr: (1 << 40) + 7,
            opened: u32::MAX,
        });
        let hint = |pos: u32, within: u64| {
            Shortcut::Hint(Hint {
                leaf: u32::MAX - 1,
                stamp: u64::MAX - 1,
                pos,
                within,
            })
        };
        let fits = [spot, hint(0, 0), hint(2047, (1 << 20) - 1), hint(168, 4096)];
        for s in fits {
            slot.set_shortcut(Some(s));
            assert_eq!(slot.shortcut(), Some(s));
            assert_eq!(slot.read_or_shortcut(|_| ()), Err(Some(s)));
        }
        for s in [hint(2048, 0), hint(0, 1 << 20)] {
            slot.set_shortcut(Some(s));
            assert_eq!(slot.shortcut(), None, "{s:?}");
        }
        slot.set_shortcut(Some(spot));
        slot.forget_shortcut();
        assert_eq!(slot.shortcut(), None);
    }

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

    /// What one entry keyed `key` with no end costs.
    fn cost(key: &[u8], n: usize) -> usize {
        PER_ENTRY + 2 * key.len() + interval(n).footprint()
    }

    /// Keys the tests' index has, besides the first interval's (empty) key.
    const KEYS: [&[u8]; 9] = [b"a", b"b", b"big", b"c", b"d", b"e", b"f", b"hot", b"m"];

    /// A cache with an index of its own, of intervals keyed [`KEYS`], for the methods
    /// that take the index.
    struct Cached {
        cache: IntervalCache,
        index: SparseIndex,
    }

    impl std::ops::Deref for Cached {
        type Target = IntervalCache;
        fn deref(&self) -> &IntervalCache {
            &self.cache
        }
    }

    impl Cached {
        fn new(capacity: usize) -> Self {
            let mut index = SparseIndex::new();
            let mut prev: &[u8] = b"";
            for k in KEYS {
                index.split(prev, 0, k).unwrap();
                prev = k;
            }
            Cached {
                cache: IntervalCache::new(capacity),
                index,
            }
        }
        fn put(&self, key: &[u8], end: Option<&[u8]>, l: Arc<Loaded>) {
            self.cache.put(&self.index, key, end, l);
        }
        fn get(&self, key: &[u8]) -> Option<Arc<Loaded>> {
            self.cache.get(&self.index, key)
        }
        fn remove(&self, key: &[u8]) {
            self.cache.remove(&self.index, key);
        }
        fn set_capacity(&self, capacity: usize) {
            self.cache.set_capacity(&self.index, capacity);
        }
    }

    #[test]
    fn slots_hold_what_the_entries_hold_through_splits_and_merges() {
        let mut c = Cached::new(1 << 20);
        c.put(b"a", Some(b"b"), interval(2));
        c.put(b"b", Some(b"big"), interval(3));
        assert_eq!(c.entries(&c.index).unwrap().len(), 2);
        // A read finds the interval through the slot at its place in the index.
        let at = c.index.locate(b"b0");
        assert_eq!(c.index.slot_at(at).read_or_shortcut(|l| l.len()), Ok(3));
        // Splitting `a` adds an empty slot beside it; its pieces are cached after.
        c.index.split(b"a", 0, b"a5").unwrap();
        assert!(c.index.slot_of(b"a5").unwrap().peek().is_none());
        c.put(b"a5", Some(b"b"), interval(1));
        c.put(b"a", Some(b"a5"), interval(1));
        assert_eq!(c.entries(&c.index).unwrap().len(), 3);
        // `a` absorbs `a5`: the absorbed slot goes with its key, and removing the
        // absorbed entry leaves `a`'s slot (the floor of `a5` now) alone.
        c.index.merge_next(b"a").unwrap();
        assert!(c.entries(&c.index).is_err(), "a5's entry has no slot now");
        c.remove(b"a5");
        assert_eq!(c.get(b"a").map(|l| l.len()), Some(1));
        assert_eq!(c.entries(&c.index).unwrap().len(), 2);
        // Removing and evicting empty the slots.
        c.remove(b"a");
        assert!(c.index.slot_of(b"a").unwrap().peek().is_none());
        c.set_capacity(0);
        assert!(c.index.slots().iter().all(|s| s.peek().is_none()));
        assert!(c.entries(&c.index).unwrap().is_empty());
    }

    #[test]
    fn an_interval_leaving_the_cache_is_unlinked_from_the_one_before_and_retired() {
        let one = cost(b"b", 4);
        let c = Cached::new(3 * one);
        for k in [b"a", b"b", b"c"] {
            c.put(k, None, interval(4));
        }
        let (a, b) = (c.get(b"a").unwrap(), c.get(b"b").unwrap());
        assert!(a.live.is_live() && b.live.is_live(), "what goes in is live");
        a.next.set(2, &b);
        b.next.set(2, &c.get(b"c").unwrap());
        // Replaced: the link to the old form goes (the new one is not linked yet), and
        // the old form is retired.
        c.put(b"b", None, interval(4));
        assert!(a.next.get(2, true).is_none());
        assert!(!b.live.is_live());
        let b = c.get(b"b").unwrap();
        a.next.set(2, &b);
        assert!(
            a.next.get(4, true).is_some(),
            "live to live holds past its epoch"
        );
        // Removed.
        c.remove(b"b");
        assert!(a.next.get(2, true).is_none());
        assert!(!b.live.is_live());
        // A retired form put back is cached but never live again.
        c.put(b"b", None, Arc::clone(&b));
        assert!(c.get(b"b").is_some() && !b.live.is_live());
        let b = {
            c.put(b"b", None, interval(4));
            c.get(b"b").unwrap()
        };
        a.next.set(2, &b);
        // Evicted: `a` and `c` were used since they went in, `b` was not. This test
        // still holds `b`, so only the cache's unlinking ends the link.
        assert!(c.get(b"a").is_some() && c.get(b"c").is_some());
        b.referenced.take();
        c.put(b"d", None, interval(4));
        assert!(c.get(b"b").is_none(), "b was the one evicted");
        assert!(!b.live.is_live(), "and retired");
        let a = c.get(b"a").unwrap();
        assert!(a.next.get(2, true).is_none(), "and a no longer links to it");
    }

    #[test]
    fn the_budget_holds_and_clock_spares_what_was_used() {
        let one = cost(b"a", 4);
        let c = Cached::new(3 * one);
        for k in [b"a", b"b", b"c"] {
            c.put(k, None, interval(4));
        }
        assert_eq!((c.len(), c.used()), (3, 3 * one));
        assert!(c.get(b"a").is_some()); // a gets a second chance
        c.put(b"d", None, interval(4));
        assert_eq!(c.len(), 3);
        assert!(c.used() <= 3 * one);
        assert!(c.get(b"a").is_some(), "the referenced entry survived");
        assert!(c.get(b"b").is_none(), "the first unreferenced entry went");
        c.put(b"a", None, interval(2)); // replacing keeps one entry per key
        assert_eq!(c.len(), 3);
        assert_eq!(c.used(), 2 * one + cost(b"a", 2));
        c.remove(b"a");
        assert!(c.get(b"a").is_none());
        assert_eq!((c.len(), c.used()), (2, 2 * one));
    }

    #[test]
    fn a_smaller_capacity_evicts_until_the_entries_fit() {
        let one = cost(b"b", 4);
        let c = Cached::new(4 * one);
        // The first interval's key is the empty key; it must be evictable too.
        for k in [&b""[..], b"b", b"c", b"d"] {
            c.put(k, None, interval(4));
        }
        assert_eq!(c.len(), 4);
        assert!(c.get(b"c").is_some());
        c.set_capacity(one + 16);
        assert_eq!((c.capacity(), c.len()), (one + 16, 1));
        assert!(
            c.get(b"c").is_some(),
            "the referenced entry was the one kept"
        );
        c.put(b"e", None, interval(4));
        assert_eq!(c.len(), 1, "puts keep to the new capacity");
        c.set_capacity(0);
        assert_eq!((c.len(), c.used()), (0, 0));
        c.put(b"", None, interval(1));
        assert_eq!(c.len(), 0, "nothing fits in nothing");
        c.set_capacity(4 * one);
        c.put(b"", None, interval(4));
        c.put(b"b", None, interval(4));
        assert_eq!(c.len(), 2, "room again");
    }

    #[test]
    fn replacing_an_entry_in_a_full_cache_evicts_others_not_itself() {
        let one = cost(b"a", 4);
        let c = Cached::new(2 * one);
        c.put(b"a", None, interval(4));
        c.put(b"b", None, interval(4));
        c.put(b"a", None, interval(5));
        assert!(c.get(b"a").is_some_and(|l| l.len() == 5));
        assert!(c.get(b"b").is_none(), "b made room for the bigger a");
        assert_eq!(c.used(), cost(b"a", 5));
    }

    #[test]
    fn a_full_cache_admits_a_point_read_on_its_second_miss() {
        let one = cost(b"a", 4);
        let c = Cached::new(2 * one + 16);
        let size = interval(4).footprint();
        let fits = true;
        assert!(
            c.admits(b"a", size, fits),
            "room: admitted on the first miss"
        );
        c.put(b"a", None, interval(4));
        c.put(b"b", None, interval(4));
        assert!(!c.admits(b"x", size, fits), "full: not on the first miss");
        assert!(c.admits(b"x", size, fits), "but on the second");
        assert!(!c.admits(b"y", size, fits));
        // A window's worth of new keys, and an eighth more for those the doorkeeper
        // takes for seen (its false positives are not counted toward the window).
        for i in 0..MIN_REMEMBERED + MIN_REMEMBERED / 8 {
            c.admits(format!("z{i}").as_bytes(), size, fits);
        }
        assert!(
            !c.admits(b"y", size, fits),
            "forgotten after a window of other misses"
        );
        assert!(c.admits(b"y", size, fits));
    }

    #[test]
    fn on_a_keyspace_that_does_not_fit_one_repeated_miss_in_64_is_admitted() {
        let one = cost(b"a", 4);
        let c = Cached::new(2 * one + 16);
        let size = interval(4).footprint();
        assert!(
            c.admits(b"a", size, false),
            "room: admitted on the first miss"
        );
        c.put(b"a", None, interval(4));
        c.put(b"b", None, interval(4));
        // Keys missed twice each: how many second misses (repeats) are admitted.
        let repeats_admitted = |prefix: &str, keys: usize, fits: bool| {
            (0..keys)
                .filter(|j| {
                    let key = format!("{prefix}{j}");
                    c.admits(key.as_bytes(), size, fits);
                    c.admits(key.as_bytes(), size, fits)
                })
                .count()
        };
        // About one repeat in 64 (the doorkeeper's false positives add a few).
        let admitted = repeats_admitted("k", 320, false);
        assert!(
            (3..=12).contains(&admitted),
            "{admitted} of 320 repeated misses admitted"
        );
        // Where the keyspace fits, every repeat is.
        assert_eq!(repeats_admitted("f", 100, true), 100);
        // A key missed over and over gets in within a few hundred misses.
        assert!((0..640).any(|_| c.admits(b"hot", size, false)));
    }

    #[test]
    fn a_zero_budget_or_a_huge_interval_caches_nothing() {
        let c = Cached::new(0);
        c.put(b"a", None, interval(1));
        assert!(c.get(b"a").is_none());
        let c = Cached::new(cost(b"big", 2));
        c.put(b"big", None, interval(40));
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn covering_uses_an_entry_only_below_its_end() {
        let c = Cached::new(1 << 20);
        c.put(b"", Some(b"f"), interval(1));
        c.put(b"m", None, interval(2));
        assert_eq!(c.covering(b"").map(|l| l.len()), Some(1));
        assert_eq!(c.covering(b"egg").map(|l| l.len()), Some(1));
        assert!(c.covering(b"f").is_none(), "f..m is not cached");
        assert!(c.covering(b"kiwi").is_none());
        assert_eq!(c.covering(b"m").map(|l| l.len()), Some(2));
        assert_eq!(c.covering(b"zebra").map(|l| l.len()), Some(2));
        c.remove(b"");
        assert!(c.covering(b"egg").is_none());
    }
}
