//! One sorted keyspace on disk (FlexDB §5): its records, always in key order, in a
//! FlexSpace of its own; the volatile sparse index over its intervals; the interval
//! cache; and the reads. The committer's side is in `commit.rs`.
//!
//! Locking (§5.3): the space and the index sit under one reader-writer lock. A point
//! read whose key falls in a cached interval takes no lock at all (the cache is a
//! concurrent map; `cache.rs` says why that is safe), nor does a scan over cached
//! neighbouring intervals ([`Epoch::unmoved`]); other reads take the lock shared for
//! one call and never across calls; the committer takes it exclusively in slices.
//! Every write section makes [`SortedStore::epoch`] odd while it runs and even after,
//! so a reader holding records from an earlier epoch knows to seek again by key.
//!
//! Invariants: intervals partition the space at record boundaries; each interval's
//! records are in key order, at or above its index key and below the next one's; the
//! extent holding an interval's first byte is tagged [`HEAD`], and every tagged extent
//! starts a record (checked by [`SortedStore::check`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};

use super::cache::{IntervalCache, Slot};
use super::commit::LockHolds;
use super::history::Version;
use super::index::{Interval, Position, SparseIndex};
use super::interval::{Loaded, ReadAt, ReadBufs};
use super::misses::MissCounts;
use super::record::{peek_key, Record};
use super::rows::RecordCache;
use super::view::{View, Views};
use crate::io::Vfs;
use crate::memtable::KeyspaceId;
use crate::space::{Cursor, FlexSpace, RangeRead, Shortcut, SpaceOptions};
use crate::vlog::Pointer;
use crate::{Error, Result};

/// Whether interval `iv` in `extents` extents of `space` lies in more of them than a
/// rewrite would leave it in ([`FlexSpace::contiguous_extents`]): at least three for
/// any interval within one maximal extent. An interval a rewrite cannot bring under
/// that would otherwise be rewritten at every read that asked.
pub(crate) fn scattered(space: &FlexSpace, iv: &Interval, extents: usize) -> bool {
    extents > space.contiguous_extents(iv.size)
}

/// Whether the `len` bytes of `intervals` whole intervals at `off` lie in more pieces of
/// the data file than one write of them would leave, beyond a quarter of their count:
/// what the idle sweep rewrites ([`SortedStore::sweep_steps`]). One walk of their
/// extents.
pub(crate) fn pieces_scattered(space: &FlexSpace, off: u64, len: u64, intervals: usize) -> bool {
    space.pieces_in(off, len) > space.contiguous_extents(len) + intervals / 4
}

/// Whether an interval of `records` records in `extents` extents is spread over more
/// extents than half its records (FlexDB §5.2): rewrite it whole on its next update.
pub(crate) fn fragmented(extents: usize, records: usize) -> bool {
    extents > records.div_ceil(2).max(1)
}

/// How much of its share the record cache takes where a keyspace needs `need` bytes of
/// interval cache and `left` are there: none while it fits, all of it once it needs
/// twice the room, and in between in proportion to the shortfall. A keyspace just past
/// the cache's size is nearly all in the interval cache, which serves scans as well as
/// point reads; taking the whole share at once halved that cache the moment the
/// keyspace grew past it. At 1M UDB pairs that happened in the middle of YCSB E (after
/// A–D's inserts): half the cached intervals went, and E's scans ran at 0.42 of the
/// speed they have with the share taken this way (docs/benchmarks.md, sixty-eighth
/// session).
pub(crate) fn record_ramp(need: u64, left: usize) -> f64 {
    let left = left.max(1) as f64;
    (need as f64 / left - 1.0).clamp(0.0, 1.0)
}

/// The extent tag that marks an interval's first record.
pub(crate) const HEAD: u8 = 1;

/// Options of a sorted keyspace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StoreOptions {
    /// The budget in bytes of the interval cache and the in-memory indexes (the sparse
    /// index and the FlexTree) together: the cache gets what the indexes leave
    /// ([`SortedStore::fit_cache`]).
    pub(crate) cache_bytes: usize,
    /// Of what the indexes leave of `cache_bytes`, the share the record cache gets
    /// while the keyspace does not fit in the interval cache (0 to 1).
    pub(crate) record_share: f64,
    /// Recovery reads the first key of an interval head at most every this many bytes
    /// (0: every head), merging the intervals in between (split again as they are
    /// written).
    pub(crate) recovery_step: u64,
    /// Entries per sparse-index node.
    pub(crate) index_fanout: usize,
    /// Pairs past which an interval splits.
    pub(crate) split_pairs: usize,
    /// The FlexSpace's options.
    pub(crate) space: SpaceOptions,
}

/// The committer's sweep of a keyspace's scattered intervals while writes have stopped
/// ([`SortedStore::sweep_steps`]).
#[derive(Debug)]
pub(crate) struct Sweep {
    /// The index key the pass under way goes on from (`None`: no pass under way).
    pub(crate) at: Option<Vec<u8>>,
    /// Keys that commits changed since the pass under way began, or since the last one
    /// ended: another pass is due once this one ends ([`SortedStore::sweep_due`]).
    pub(crate) changed: u64,
    /// Bytes the pass under way rewrote since it last synced the space.
    pub(crate) unsynced: u64,
    /// The index key from which the intervals the pass rewrote since it last synced
    /// lie (empty: the keyspace's start).
    pub(crate) synced_at: Vec<u8>,
    /// Bytes a pass rewrites between two syncs of the space (a field so that tests
    /// can make a pass sync often).
    pub(crate) sync_every: u64,
    /// Since the keyspace was opened and until a pass begins: whether it lies
    /// scattered (`None` until the first commit beside a trickle asks). If it does, a
    /// commit makes a pass due even beside a trickle of writes
    /// ([`SortedStore::sweep_due`]), which alone would take a long time to change as
    /// many keys as the keyspace has intervals.
    pub(crate) scattered: Option<bool>,
}

impl Default for Sweep {
    fn default() -> Sweep {
        Sweep {
            at: None,
            changed: 0,
            unsynced: 0,
            synced_at: Vec::new(),
            sync_every: super::commit::SWEEP_SYNC,
            scattered: Some(false),
        }
    }
}

impl Sweep {
    /// Whether a pass is under way or due.
    pub(crate) fn due(&self) -> bool {
        self.at.is_some() || self.changed > 0
    }
}

/// Counters of one sorted keyspace.
#[derive(Debug, Default)]
pub(crate) struct StoreCounters {
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) record_hits: AtomicU64,
    pub(crate) pairs_committed: AtomicU64,
    pub(crate) history_written: AtomicU64,
    pub(crate) defrags: AtomicU64,
    pub(crate) read_defrags: AtomicU64,
    pub(crate) swept_bytes: AtomicU64,
    pub(crate) spot_reads: AtomicU64,
    pub(crate) hint_reads: AtomicU64,
    /// Point reads answered from a view while the committer held the lock.
    pub(crate) view_reads: AtomicU64,
    /// Views made for those reads.
    pub(crate) views_made: AtomicU64,
    pub(crate) splits: AtomicU64,
    pub(crate) merges: AtomicU64,
}

/// Records a scan's later calls read ahead from the space (two intervals of 16+100
/// pairs at 10M), the intervals in a row through one walk of the tree. More reads past
/// a short scan's end (`ahead` doubles every call): on uniform 50-pair scans at 10M,
/// 32 and 256 ran slower than reading one interval a call; 16 ran 1.2 times as fast in
/// one driver pair and 0.9 in another, and `compare`'s seekrandom 1.08 (median of
/// three pairs; docs/benchmarks.md, thirty-eighth session).
const SPACE_AHEAD: usize = 16;
/// How many slots ahead of the interval it takes a scan's walk asks for the cached
/// interval's struct ([`SparseIndex::walk_intervals`]).
const SLOTS_AHEAD: usize = 3;
/// Walks of the cache a scan makes beside the committer before it waits for the lock,
/// each after the last was overtaken by a write section's start or end (a walk takes
/// a few microseconds, a section about 200).
const WALKS: usize = 4;

/// At most this many intervals wait to be rewritten for the reads
/// ([`SortedStore::wanted`]); misses past it are not remembered.
pub(crate) const REWRITES_WANTED: usize = 1024;
/// The refused misses of a scattered interval, within about a window of
/// [`MissCounts`], after which it is rewritten for the reads: the eighth, so that only
/// intervals the reads keep coming back to are rewritten (a 10M UDB run of ycsb-a, -c
/// and -e rewrote 12K of 900K). With the second, nearly every interval a phase of
/// ycsb-c or ycsb-e read was rewritten during it (545K at 10M, 1 GB), and throughput
/// gained in some alternating pairs and lost in others (docs/benchmarks.md,
/// twenty-third session): a gain from more rewrites is not shown yet.
const REWRITE_AFTER: u8 = 8;
/// Cache bytes per counter of [`MissCounts`]' rows (256 Ki counters for 256 MiB: a
/// window of that many misses).
const CACHE_BYTES_PER_MISS_COUNT: usize = 1 << 10;

/// The interval cache keeps at least this share (1 / this) of the budget however large
/// the indexes grow: past that, the store takes more memory than the budget.
const CACHE_FLOOR: usize = 8;

/// What the lock guards.
pub(crate) struct State {
    pub(crate) space: FlexSpace,
    pub(crate) index: SparseIndex,
    /// Tombstones kept because a snapshot may read past them: key → sequence.
    pub(crate) lingering: BTreeMap<Box<[u8]>, u64>,
    /// The committer's buffer for the interval it is rebuilding, kept from interval to
    /// interval: the interval it caches is a copy of exactly the bytes it holds.
    pub(crate) rebuild: Vec<u8>,
}

/// One sorted keyspace. See the [module documentation](self).
pub(crate) struct SortedStore {
    pub(crate) ks: KeyspaceId,
    pub(crate) dir: PathBuf,
    pub(crate) state: RwLock<State>,
    pub(crate) cache: IntervalCache,
    /// Records point reads fetched from the space, while the keyspace does not fit in
    /// the budget (see `rows.rs`).
    pub(crate) rows: RecordCache,
    /// The budget of the caches and the indexes together ([`StoreOptions::cache_bytes`]).
    budget: usize,
    /// [`StoreOptions::record_share`].
    record_share: f64,
    /// Counts the committer's write sections; shared with iterators, which check it
    /// at every step without looking the store up.
    pub(crate) epoch: Arc<Epoch>,
    /// Set when a commit failed halfway: the index may no longer match the space.
    pub(crate) broken: AtomicBool,
    pub(crate) counters: StoreCounters,
    /// An interval splits past this many pairs (at least 2).
    pub(crate) split_pairs: usize,
    /// The committer's buffer for a slice's encoded records, kept from slice to slice:
    /// a fresh one each time came from fresh pages, which the kernel zeroes first.
    pub(crate) records: Mutex<Vec<u8>>,
    /// The committer's buffers for a slice's intervals read from the space, kept from
    /// slice to slice for the same reason.
    pub(crate) reads: Mutex<ReadBufs>,
    /// Keys of intervals that reads keep fetching from the space (the cache refused
    /// them [`REWRITE_AFTER`] times lately, by `misses`) in scattered extents: the
    /// committer rewrites them contiguous while it has nothing to commit, so each later
    /// read is one `pread` where it was one per extent. At most [`REWRITES_WANTED`].
    pub(crate) wanted: Mutex<BTreeSet<Box<[u8]>>>,
    /// Scattered intervals' refused misses, counted for `wanted`.
    misses: MissCounts,
    /// Intervals the committer rewrote for the reads since the space was last synced.
    pub(crate) rewrites_unsynced: AtomicU64,
    /// Where the committer's idle sweep of scattered intervals stands
    /// ([`SortedStore::sweep_steps`]).
    pub(crate) sweep: Mutex<Sweep>,
    /// What point reads read while the committer holds the lock (see `view.rs`).
    pub(crate) views: Views,
}

impl std::fmt::Debug for SortedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedStore")
            .field("ks", &self.ks)
            .field("dir", &self.dir)
            .finish()
    }
}

/// The store's change counter, a sequence lock over what readers see without the lock:
/// odd while a write section of the committer (or GC's write-back) is editing the
/// space, the index and the cache, even between sections. Records read at an even
/// epoch that is still the epoch afterwards are one consistent state.
///
/// The counter has a cache line of its own: iterators load it at every step, and each
/// one holds an `Arc` of it, whose counts every iterator made or dropped on another
/// thread would otherwise write in the same line.
#[derive(Debug, Default)]
pub(crate) struct Epoch(CachePadded<AtomicU64>);

impl Epoch {
    /// The epoch now.
    pub(crate) fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Starts a write section, which ends when the returned guard drops. The caller
    /// holds the store's write lock.
    pub(crate) fn section(&self) -> Section<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        // The section's edits may not be seen before the odd epoch is.
        std::sync::atomic::fence(Ordering::Release);
        Section(self)
    }

    /// Runs `read` (which reads without the lock) and returns what it found with the
    /// epoch it was found at, or `None` if a write section was running or began
    /// meanwhile (or `read` found nothing): [`Epoch::unmoved`] at an even epoch.
    pub(crate) fn stable<R>(&self, read: impl FnOnce() -> Option<R>) -> Option<(u64, R)> {
        // A section that starts or ends after the first look moves the epoch, which
        // `unmoved` sees.
        let (e, r) = self.unmoved(|| self.now().is_multiple_of(2).then(read).flatten())?;
        Some((e, r?))
    }

    /// Runs `read` (which reads without the lock) and returns what it found with the
    /// epoch it was found at, or `None` if the epoch moved meanwhile: unlike
    /// [`Epoch::stable`], during a write section too, and then what it found holds
    /// only until the section ends. For reads that are right at any moment of a
    /// section, such as a walk of the cache's adjacent entries
    /// ([`IntervalCache::walk`]).
    pub(crate) fn unmoved<R>(&self, read: impl FnOnce() -> R) -> Option<(u64, R)> {
        let e = self.now();
        let r = read();
        // Pairs with the fence in `section`: if `read` saw any of a section's edits,
        // the load below sees the epoch that section moved.
        std::sync::atomic::fence(Ordering::Acquire);
        (self.0.load(Ordering::Relaxed) == e).then_some((e, r))
    }
}

/// A write section in progress (see [`Epoch::section`]).
#[must_use]
pub(crate) struct Section<'a>(&'a Epoch);

impl Drop for Section<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_add(1, Ordering::Release);
    }
}

/// One step of an iterator over the store: records in iteration order and the epoch
/// they were read at.
pub(crate) type Scan = (u64, Vec<Run>);

/// Records `range` of one cached interval, as a scan found them: each is decoded only
/// when an iterator comes to it, so a short scan pays for the records it returns and
/// not for the rest of the interval. A scan visits `range` forward or backward.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) interval: Arc<Loaded>,
    pub(crate) range: std::ops::Range<usize>,
}

/// A key and the pointer to its separated value.
pub(crate) type Separated = (Box<[u8]>, crate::vlog::Pointer);

/// A relocation for [`SortedStore::relocate`]: key, sequence, old and new pointer.
pub(crate) type Move = (Box<[u8]>, u64, Pointer, Pointer);

impl SortedStore {
    /// Opens the keyspace in `dir` (created if missing) and rebuilds its sparse index
    /// from the interval heads' tags (FlexDB §5.4), reading one key per head, or per
    /// `recovery_step` bytes.
    pub(crate) fn open(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        ks: KeyspaceId,
        opts: StoreOptions,
    ) -> Result<SortedStore> {
        let space = FlexSpace::open(vfs, dir, opts.space)?;
        let index = rebuild_index(&space, dir, opts.recovery_step, opts.index_fanout)?;
        let store = SortedStore {
            ks,
            dir: dir.to_path_buf(),
            state: RwLock::new(State {
                space,
                index,
                lingering: BTreeMap::new(),
                rebuild: Vec::new(),
            }),
            cache: IntervalCache::new(opts.cache_bytes),
            rows: RecordCache::new((opts.cache_bytes as f64 * opts.record_share) as usize),
            budget: opts.cache_bytes,
            record_share: opts.record_share,
            epoch: Arc::default(),
            broken: AtomicBool::new(false),
            counters: StoreCounters::default(),
            split_pairs: opts.split_pairs.max(2),
            records: Mutex::new(Vec::new()),
            reads: Mutex::default(),
            wanted: Mutex::default(),
            misses: MissCounts::new(opts.cache_bytes / CACHE_BYTES_PER_MISS_COUNT),
            rewrites_unsynced: AtomicU64::new(0),
            // Not at open: a process that opens a database only to read it (the
            // command line's `get`, `scan`, `dump`) should not write. The first
            // commit marks a pass due; beside a trickle, if the keyspace lies
            // scattered, which the committer judges then.
            sweep: Mutex::new(Sweep {
                scattered: None,
                ..Sweep::default()
            }),
            views: Views::default(),
        };
        {
            let st = store.state.read();
            store.fit_cache(&st);
            store.refresh_spots(&st, None, None);
        }
        Ok(store)
    }

    /// Leaves in the slot of every interval from the one holding `from` (the first if
    /// `None`) to the last below `until` (all if `None`) its shortcut now (its spot, or
    /// for one in pieces a hint): one walk of the index and the tree's extents
    /// together, 34 ms for all of 10M pairs (docs/design.md, "Spots").
    pub(crate) fn refresh_spots(&self, st: &State, from: Option<&[u8]>, until: Option<&[u8]>) {
        let mut cursor = st.space.cursor();
        st.index
            .walk_intervals(from, true, 0, |key, offset, size, slot| {
                if until.is_some_and(|u| key >= u) {
                    return false;
                }
                slot.set_shortcut(cursor.shortcut_at(offset, size));
                true
            });
    }

    /// Gives the caches what the budget leaves beside the sparse index and the FlexTree
    /// (at least 1/[`CACHE_FLOOR`] of it), evicting what no longer fits: all of it to
    /// the interval cache where the whole keyspace would fit in that, and otherwise
    /// up to [`StoreOptions::record_share`] of it to the record cache (`rows.rs` says
    /// why), the whole share once the keyspace needs twice the room ([`record_ramp`]). Like
    /// WiredTiger's cache, and unlike RocksDB's block cache (whose index and filter
    /// blocks live outside it by default), the budget bounds the memory reads use: at
    /// 10M UDB pairs the indexes take about half of 256 MiB. The committer calls this
    /// after each commit and after rewriting intervals for the reads; the walk of both
    /// indexes' nodes it takes was 0.26 ms (median) and 3 ms (most) over the 79 commits
    /// of a 10M UDB YCSB run.
    pub(crate) fn fit_cache(&self, st: &State) {
        let indexes = st.index.memory_bytes() as u64 + st.space.tree_memory_bytes();
        let left = (self.budget as u64).saturating_sub(indexes);
        let left = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .max(self.budget / CACHE_FLOOR);
        let need = IntervalCache::need(st.space.len(), st.index.len(), self.split_pairs);
        let rows = (left as f64 * self.record_share * record_ramp(need, left)) as usize;
        // Shrinking one before growing the other keeps the two within the budget.
        if rows > 0 {
            self.cache.set_capacity(&st.index, left - rows);
            self.rows.set_capacity(rows as u64);
        } else {
            self.rows.set_capacity(0);
            self.cache.set_capacity(&st.index, left);
        }
    }

    fn usable(&self) -> Result<()> {
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// The newest committed version of `key`, tombstones included. A key whose interval
    /// is cached is read without the lock (see the cache's documentation), so it does
    /// not wait for the committer.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Version>> {
        self.usable()?;
        // A read the record cache misses may put what it finds there.
        self.rows.prefetch_put(key);
        // The record cache needs no lock (see `rows.rs`).
        if let Some(v) = self.rows.get(key) {
            self.counters.record_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(v));
        }
        // With the lock free, the index finds the interval and, beside it, the cached
        // form if any.
        if let Some(st) = self.state.try_read() {
            return self.get_holding(&st, key);
        }
        // While the committer holds it: the published view's copy of the index finds
        // the interval, and its slot the cached form as it was when the view was made,
        // with fewer misses than the cache's own floor search. Where the keyspace is
        // larger than the cache, the view's space reads the rest: the cache seldom
        // holds an interval the view's slot did not (3% of such reads in a 10M
        // `readrandom` beside a commit, docs/benchmarks.md, fifty-second session), and
        // its floor search, a skip list that misses the processor's caches at nearly
        // every level, took a tenth of the reader's time. Where the keyspace fits, that
        // search comes first (it finds what the commit cached since the view), and the
        // view's space reads what it misses: a read that waited for the lock instead
        // waited out a write section of about a millisecond at 1M pairs, and right
        // after a load those waits took most of the reader's time (docs/benchmarks.md,
        // sixty-ninth session). Only with no view published yet does a read wait.
        if let Some(view) = self.views.get() {
            let at = view.index.locate(key);
            match (view.index.slot_at(at)).read_or_shortcut(|l| find_version(l, key)) {
                Ok(found) => {
                    self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(found);
                }
                Err(shortcut) => {
                    if self.would_fit(view.space.len(), view.index.len()) {
                        if let Some(l) = self.cache.covering(key) {
                            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                            return Ok(find_version(&l, key));
                        }
                    }
                    if let Some(found) = read_in_view(&view, at, shortcut, key) {
                        self.counters.view_reads.fetch_add(1, Ordering::Relaxed);
                        if let Some(v) = &found {
                            self.cache_from_view(key, v, &view);
                        }
                        return Ok(found);
                    }
                }
            }
        }
        if let Some(l) = self.cache.covering(key) {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(find_version(&l, key));
        }
        self.get_holding(&self.state.read(), key)
    }

    /// Puts `v`, the version of `key` a read found in `view`, in the record cache, and
    /// takes it back out if a change began since the view was made: that change may
    /// have forgotten the key before the put (`view.rs`).
    fn cache_from_view(&self, key: &[u8], v: &Version, view: &View) {
        self.rows.put(key, v);
        if !self.views.unchanged_since(view) {
            self.rows.forget(key);
        }
    }

    /// [`SortedStore::get`] under the lock.
    fn get_holding(&self, st: &State, key: &[u8]) -> Result<Option<Version>> {
        let at = st.index.locate(key);
        let slot = st.index.slot_at(at);
        let shortcut = match slot.read_or_shortcut(|l| find_version(l, key)) {
            Ok(found) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(found);
            }
            Err(shortcut) => shortcut,
        };
        // What the read waits for next, asked for at once: the space's first steps by
        // the shortcut, and (where the keyspace does not fit, so the cache is full)
        // the tables that count the miss, rarely in the processor's caches. The last
        // are hashed from the interval's key, whose bytes a hit never reads.
        if let Some(s) = shortcut {
            st.space.prefetch_shortcut(s);
        }
        let fits = self.fits(st);
        if !fits {
            let iv_key = st.index.key_of(at);
            self.cache.prefetch_admits(iv_key);
            self.misses.prefetch(iv_key);
        }
        // Just missed: straight to the space, not through `load`'s second cache lookup
        // or a second descent of the index.
        self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        let iv = st.index.interval_of(at);
        // The footprint is not known before the read: the interval's size and the
        // overhead of a full one stand in. An estimate below it would let the cache
        // take a read's interval as "room" and then evict for it.
        let size = usize::try_from(iv.size)
            .unwrap_or(usize::MAX)
            .saturating_add(super::interval::overhead(self.split_pairs));
        if !self.cache.admits(&iv.key, size, fits) {
            let (found, extents) = self.find_in_space(&st.space, &iv, key, slot, shortcut)?;
            self.want_rewrite(&st.space, &iv, extents);
            if let Some(v) = &found {
                self.rows.put(key, v);
            }
            return Ok(found);
        }
        let (l, _) = self.read_interval_at(&st.space, &iv, Some(slot), None)?;
        let l = Arc::new(l.with_heads());
        self.cache_put(st, &iv.key, Arc::clone(&l));
        Ok(find_version(&l, key))
    }

    /// The version of `key` in interval `iv`, read from the space only as far as the
    /// first record at or past `key`: an interval is spread over several extents, a
    /// read each, and a point read the cache will not keep needs only the ones up to
    /// its record (half of them on average). A record may span two extents; one that
    /// does not decode yet waits for the next. Whatever does not check out (a record
    /// that never decodes, keys out of order) is left to [`SortedStore::read_interval`],
    /// which reads the whole interval and says what is wrong with it. The read goes by
    /// the interval's `shortcut` if it has one that still holds, and otherwise leaves
    /// the one it finds in `slot`. Returns the version and how many extents hold the
    /// interval.
    fn find_in_space(
        &self,
        space: &FlexSpace,
        iv: &Interval,
        key: &[u8],
        slot: &Slot,
        shortcut: Option<Shortcut>,
    ) -> Result<(Option<Version>, usize)> {
        let size =
            usize::try_from(iv.size).map_err(|_| self.corrupt(iv.offset, "huge interval"))?;
        let (outcome, extents) = with_scratch(size, |buf| {
            let mut seek = Seek::new(key, &iv.key);
            let read = self.read_by(space, iv.offset, shortcut, slot, buf, |read| {
                seek.more(read)
            })?;
            Ok::<_, Error>((seek.outcome(size), read.extents))
        })?;
        match outcome {
            Some(v) => Ok((v, extents)),
            None => {
                let l = self.read_interval(space, iv)?;
                Ok((find_version(&l, key), extents))
            }
        }
    }

    /// Remembers interval `iv`, which a read just fetched from `extents` extents of the
    /// space and the cache refused, for the committer to rewrite contiguous
    /// ([`SortedStore::wanted`]) if it is [`scattered`] and this is at least its
    /// [`REWRITE_AFTER`]th such miss lately.
    fn want_rewrite(&self, space: &FlexSpace, iv: &Interval, extents: usize) {
        if !scattered(space, iv, extents) || self.misses.count(&iv.key) < REWRITE_AFTER {
            return;
        }
        let mut wanted = self.wanted.lock();
        if wanted.len() < REWRITES_WANTED && !wanted.contains(iv.key.as_slice()) {
            wanted.insert(iv.key.as_slice().into());
        }
    }

    /// The records after `from` (forward) or before it (backward), as runs in that
    /// order (none empty): the rest of the first interval that has any, and whole
    /// intervals after it until there are at least `min` records, so an iterator reads
    /// an interval or more per call. Where the intervals are cached and the committer
    /// holds the lock, no lock is taken ([`IntervalCache::walk`] and [`Epoch::unmoved`]),
    /// and since following one cached interval to the next costs little, that walk goes
    /// on to `ahead` records if `min` is fewer; otherwise the read lock, for this call
    /// only.
    ///
    /// `hint` is an interval the caller read at the epoch given with it, likely the
    /// one holding `from` (the last of the caller's previous scan): if it is, and the
    /// epoch has not moved, it is taken as it is, without a lookup in the cache; and
    /// a forward scan from within it (at that epoch, or while it is still its
    /// interval's cache entry) goes on by its links, with no lock and no descent of
    /// the index ([`SortedStore::follow_links`]).
    pub(crate) fn scan(
        &self,
        from: Bound<&[u8]>,
        forward: bool,
        min: usize,
        ahead: usize,
        hint: Option<(u64, &Arc<Loaded>)>,
    ) -> Result<Scan> {
        self.usable()?;
        let min = min.max(1);
        if let Some(scan) = hint
            .filter(|_| forward)
            .and_then(|hint| self.follow_links(from, min, ahead, hint))
        {
            return Ok(scan);
        }
        if let Some(st) = self.state.try_read() {
            return self.scan_holding(&st, from, forward, min, ahead, hint);
        }
        // The committer holds the lock: the cache alone, during a write section too.
        // Each entry holds its interval's records as they are, or as they were before
        // a change whose versions the memtables still hold, and never claims a range
        // beyond them (`cache.rs`); the walk takes an entry only where the one before
        // ends, so what it reads covers its range once, each key right whichever form
        // it came from. The frozen memtable leaves the list only after the commit's
        // last section, so records read during a section hold until it ends; their odd
        // epoch tells the iterator so. A walk that a section's start or end overtook
        // goes again; one that finds the interval it starts in missing waits for the
        // lock. (Until the seventieth session a walk that met a section waited for the
        // lock: 481 ms of 1M YCSB E in the sixty-ninth session's count,
        // docs/benchmarks.md.)
        let walk = || {
            let min = min.max(ahead);
            let (mut out, mut found) = (Vec::new(), 0);
            let mut bound = from;
            let end = self.cache.walk(from, forward, |loaded| {
                found += push_run(&mut out, loaded, &mut bound, forward);
                found < min
            });
            // Nothing found proves the store has nothing more only at its end.
            (found > 0 || end).then_some(out)
        };
        for _ in 0..WALKS {
            match self.epoch.unmoved(walk) {
                Some((epoch, Some(out))) => {
                    self.counters
                        .cache_hits
                        .fetch_add(out.len() as u64, Ordering::Relaxed);
                    return Ok((epoch, out));
                }
                Some((_, None)) => break,
                None => {}
            }
        }
        self.scan_holding(&self.state.read(), from, forward, min, ahead, hint)
    }

    /// [`SortedStore::scan`] forward from the caller's `hint` by the intervals' links
    /// alone: no lock, no descent of the index, no slot. Where `from` lies within the
    /// hint (between its first and last keys) and the hint holds its interval's records
    /// now (the epoch is still the hint's, or the hint is [`Live`]), the records past
    /// `from` are the rest of the hint and then the intervals after it, to which the
    /// links that hold lead ([`Next`]). `None` where that does not hold, where a link
    /// is missing before `min` records, or where a write section began meanwhile: the
    /// caller then takes the index's way.
    ///
    /// [`Live`]: super::interval::Live
    /// [`Next`]: super::interval::Next
    fn follow_links(
        &self,
        from: Bound<&[u8]>,
        min: usize,
        ahead: usize,
        (hint_epoch, hint): (u64, &Arc<Loaded>),
    ) -> Option<Scan> {
        let (Bound::Included(k) | Bound::Excluded(k)) = from else {
            return None;
        };
        let last = hint.len().checked_sub(1)?;
        if hint.key(0) > k || hint.key(last) < k {
            return None;
        }
        let want = min.max(ahead);
        let (epoch, out) = self.epoch.stable(|| {
            // Within the window the epoch is the one `stable` checks again after.
            let epoch = self.epoch.now();
            // The hint holds its records now if nothing was written since it was read,
            // or if it is its interval's cache entry still.
            if hint_epoch != epoch && !hint.live.is_live() {
                return None;
            }
            let (mut out, mut bound) = (Vec::new(), from);
            let mut found = push_run(&mut out, Arc::clone(hint), &mut bound, true);
            let mut at = Arc::clone(hint);
            while found < want {
                let Some(next) = at.next_at(epoch) else {
                    break;
                };
                next.referenced.set();
                next.next.prefetch();
                found += push_run(&mut out, Arc::clone(&next), &mut bound, true);
                at = next;
            }
            (found >= min).then_some(out)
        })?;
        self.counters
            .cache_hits
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Some((epoch, out))
    }

    /// [`SortedStore::scan`] under the lock: intervals from the index, each from the
    /// cache or else (until there are `min` records) from the space; cached ones go on
    /// to `ahead` records, as on the lock-free path, and ones from the space to
    /// [`SPACE_AHEAD`] for a caller that has read before (it gave a `hint`):
    /// intervals read in a row take one walk of the tree ([`Cursor`]), where a call
    /// each searched it each time. (A first call reads no more than it must: a scan of
    /// one record would pay for a second interval.)
    fn scan_holding(
        &self,
        st: &State,
        from: Bound<&[u8]>,
        forward: bool,
        min: usize,
        ahead: usize,
        hint: Option<(u64, &Arc<Loaded>)>,
    ) -> Result<Scan> {
        let epoch = self.epoch.now();
        let from_space = match hint {
            Some(_) => min.max(ahead.min(SPACE_AHEAD)),
            None => min,
        };
        let start = match from {
            Bound::Unbounded => None,
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
        };
        // The hint holds `from` if its first record lies between the index key of the
        // interval holding `from` and `from`: index keys part the keyspace, and the
        // only one in the hint's part is its own.
        let mut hint = hint
            .filter(|(e, l)| *e == epoch && !l.is_empty())
            .and_then(|(_, l)| Some((start?, l)))
            .filter(|(from, l)| l.key(0) <= *from);
        let (mut out, mut found, mut bound) = (Vec::<Run>::new(), 0, from);
        let (mut hits, mut failed) = (0, None);
        // Whether the last interval visited is the last one in `out` and came from the
        // cache, a link or the hint (not a read of the space): a forward scan then
        // follows its link to the next (`interval::Next`), or makes one.
        let mut linkable = false;
        // Intervals read from the space in a row are read with one walk of the tree.
        let mut cursor: Option<Cursor<'_>> = None;
        st.index
            .walk_intervals(start, forward, SLOTS_AHEAD, |key, offset, size, slot| {
                let prev = out.last().filter(|_| linkable).map(|r| &r.interval);
                let linked = match hint.take() {
                    Some((_, l)) if key <= l.key(0) => Some(Arc::clone(l)),
                    _ => prev.and_then(|p| p.next_at(epoch)),
                };
                linkable = false;
                let cached = match linked {
                    Some(l) => {
                        l.referenced.set();
                        Some(l)
                    }
                    None => slot.get().inspect(|l| {
                        if let Some(p) = prev {
                            p.next.set(epoch, l);
                        }
                    }),
                };
                let loaded = match cached {
                    Some(l) => {
                        if let Some(c) = cursor.as_mut() {
                            c.pass(offset, size);
                        }
                        hits += 1;
                        linkable = forward;
                        if forward {
                            l.next.prefetch();
                        }
                        l
                    }
                    None if found < from_space => {
                        let iv = Interval {
                            key: key.to_vec(),
                            offset,
                            size,
                        };
                        match self.load_admitted(st, &iv, slot, &mut cursor) {
                            Ok(l) => l,
                            Err(e) => {
                                failed = Some(e);
                                return false;
                            }
                        }
                    }
                    None => return false,
                };
                found += push_run(&mut out, loaded, &mut bound, forward);
                found < min.max(ahead)
            });
        self.counters.cache_hits.fetch_add(hits, Ordering::Relaxed);
        match failed {
            Some(e) => Err(e),
            None => Ok((epoch, out)),
        }
    }

    /// The interval `iv`, from the cache or else the space (not cached then).
    pub(crate) fn load(&self, st: &State, iv: &Interval) -> Result<Arc<Loaded>> {
        if let Some(l) = self.cache.get(&st.index, &iv.key) {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(l);
        }
        self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(self.read_interval(&st.space, iv)?))
    }

    /// Interval `iv`, which the cache just missed, read from the space and cached if
    /// the cache admits it ([`IntervalCache::admits`]), as a point read's would be.
    fn load_admitted<'a>(
        &self,
        st: &'a State,
        iv: &Interval,
        slot: &Slot,
        cursor: &mut Option<Cursor<'a>>,
    ) -> Result<Arc<Loaded>> {
        self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        let fits = self.fits(st);
        if !fits {
            // The doorkeeper's word and the interval's miss counts, which the admission
            // and `want_rewrite` below look at, are rarely in the processor's caches on
            // a keyspace larger than the cache: asked for now, their misses overlap the
            // read's, as a point read's do.
            self.cache.prefetch_admits(&iv.key);
            self.misses.prefetch(&iv.key);
        }
        let (l, extents) = self.read_interval_at(&st.space, iv, Some(slot), Some(cursor))?;
        if self.cache.admits(&iv.key, l.footprint(), fits) {
            let l = Arc::new(l.with_heads());
            self.cache_put(st, &iv.key, Arc::clone(&l));
            Ok(l)
        } else {
            self.want_rewrite(&st.space, iv, extents);
            Ok(Arc::new(l))
        }
    }

    /// Whether the whole keyspace would fit in the cache
    /// ([`IntervalCache::would_hold`]).
    pub(crate) fn fits(&self, st: &State) -> bool {
        self.would_fit(st.space.len(), st.index.len())
    }

    /// Whether a keyspace of `bytes` in `intervals` intervals would fit in the cache.
    fn would_fit(&self, bytes: u64, intervals: usize) -> bool {
        self.cache.would_hold(bytes, intervals, self.split_pairs)
    }

    /// Caches `l` as the interval keyed `key`, ending where the index says it ends.
    pub(crate) fn cache_put(&self, st: &State, key: &[u8], l: Arc<Loaded>) {
        let end = st.index.next(key).map(|n| n.key);
        self.cache.put(&st.index, key, end.as_deref(), l);
    }

    /// Reads and verifies interval `iv` from the space.
    pub(crate) fn read_interval(&self, space: &FlexSpace, iv: &Interval) -> Result<Loaded> {
        self.read_interval_at(space, iv, None, None).map(|(l, _)| l)
    }

    /// Reads the interval at `offset` into `buf` by `shortcut` if it still holds, as
    /// [`FlexSpace::read_while`] does, counting the reads that went by one, and leaves
    /// the interval's shortcut now in `slot` if it differs.
    fn read_by(
        &self,
        space: &FlexSpace,
        offset: u64,
        shortcut: Option<Shortcut>,
        slot: &Slot,
        buf: &mut [u8],
        more: impl FnMut(&[u8]) -> bool,
    ) -> Result<RangeRead> {
        let read = space.read_while(offset, buf, shortcut, more)?;
        match shortcut.filter(|_| read.used) {
            Some(Shortcut::Spot(_)) => self.counters.spot_reads.fetch_add(1, Ordering::Relaxed),
            Some(Shortcut::Hint(_)) => self.counters.hint_reads.fetch_add(1, Ordering::Relaxed),
            None => 0,
        };
        if read.shortcut != shortcut {
            slot.set_shortcut(read.shortcut);
        }
        Ok(read)
    }

    /// [`SortedStore::read_interval`], and how many extents hold the interval. With
    /// the interval's `slot`, the read goes by the slot's shortcut if it has one that
    /// still holds (with a `cursor`, only a spot: a cursor's walk needs no hint), and
    /// leaves the shortcut it finds there. With a `cursor` (made at its first use), a
    /// read of the interval that follows the last one read through it goes on with its
    /// walk of the tree.
    pub(crate) fn read_interval_at<'a>(
        &self,
        space: &'a FlexSpace,
        iv: &Interval,
        slot: Option<&Slot>,
        cursor: Option<&mut Option<Cursor<'a>>>,
    ) -> Result<(Loaded, usize)> {
        let mut buf = vec![0; self.size_of(iv)?];
        let extents = self.read_bytes_at(space, iv, slot, cursor, &mut buf)?;
        let mut l = Loaded::parse(buf).map_err(|e| self.unparsed(iv, e))?;
        if !l.is_empty() {
            self.first_key_fits(iv, l.key(0))?;
        }
        l.fragmented = fragmented(extents, l.len());
        Ok((l, extents))
    }

    /// [`SortedStore::read_interval_at`] by the slot's shortcut, into the committer's
    /// `bufs` rather than a form of its own ([`Read`](super::interval::Read)). Returns
    /// where it lies in `bufs`, and whether it is fragmented.
    pub(crate) fn read_to_edit(
        &self,
        space: &FlexSpace,
        iv: &Interval,
        slot: &Slot,
        bufs: &mut ReadBufs,
    ) -> Result<(ReadAt, bool)> {
        let size = self.size_of(iv)?;
        let extents = self.read_bytes_at(space, iv, Some(slot), None, bufs.room(size))?;
        let at = bufs.parse(size).map_err(|e| self.unparsed(iv, e))?;
        let read = bufs.get(&at);
        if !read.is_empty() {
            self.first_key_fits(iv, read.key(0))?;
        }
        let fragmented = fragmented(extents, read.len());
        Ok((at, fragmented))
    }

    fn size_of(&self, iv: &Interval) -> Result<usize> {
        usize::try_from(iv.size).map_err(|_| self.corrupt(iv.offset, "huge interval"))
    }

    /// The error for interval `iv`, whose bytes do not parse (`at` within it: `why`).
    fn unparsed(&self, iv: &Interval, (at, why): (usize, String)) -> Error {
        self.corrupt(
            iv.offset + at as u64,
            &format!("interval {:?}: {why}", iv.key),
        )
    }

    /// An error if `first`, interval `iv`'s first key, is below its index key.
    fn first_key_fits(&self, iv: &Interval, first: &[u8]) -> Result<()> {
        if first < iv.key.as_slice() {
            return Err(self.corrupt(iv.offset, "an interval's first key is below its index key"));
        }
        Ok(())
    }

    /// Reads interval `iv` into `buf` (its size) as [`SortedStore::read_interval_at`]
    /// says; returns how many extents hold it.
    fn read_bytes_at<'a>(
        &self,
        space: &'a FlexSpace,
        iv: &Interval,
        slot: Option<&Slot>,
        cursor: Option<&mut Option<Cursor<'a>>>,
        buf: &mut [u8],
    ) -> Result<usize> {
        // Records carry their own checksums, which the parse verifies.
        let shortcut = slot.and_then(Slot::shortcut);
        Ok(match (slot, cursor) {
            (slot, Some(c)) => {
                let spot = match shortcut {
                    Some(Shortcut::Spot(spot)) => Some(spot),
                    _ => None,
                };
                let at_spot = match spot {
                    Some(spot) => space.read_spot_while(spot, buf, |_| true)?,
                    None => None,
                };
                if at_spot.is_some() {
                    // A spot reads the interval with no walk at all; the cursor passes it.
                    self.counters.spot_reads.fetch_add(1, Ordering::Relaxed);
                    if let Some(c) = c {
                        c.pass(iv.offset, iv.size);
                    }
                    1
                } else {
                    // Intervals read in a row go on with the cursor's walk.
                    let (extents, now) = (c.get_or_insert_with(|| space.cursor()))
                        .read_self_checked(iv.offset, buf, shortcut)?;
                    if let Some(slot) = slot.filter(|_| now != shortcut) {
                        slot.set_shortcut(now);
                    }
                    extents
                }
            }
            (Some(slot), None) => {
                self.read_by(space, iv.offset, shortcut, slot, buf, |_| true)?
                    .extents
            }
            (None, None) => space.read_self_checked(iv.offset, buf)?.0,
        })
    }

    pub(crate) fn corrupt(&self, offset: u64, why: &str) -> Error {
        Error::corruption(
            &self.dir,
            offset,
            format!("sorted keyspace (logical offset in its FlexSpace): {why}"),
        )
    }

    /// Makes everything committed (and rewritten for the reads or by the sweep) so far
    /// durable.
    /// The write lock's holds go to `holds`.
    pub(crate) fn sync(&self, holds: &LockHolds) -> Result<()> {
        self.rewrites_unsynced.store(0, Ordering::Relaxed);
        self.sweep.lock().unsynced = 0;
        // The files' syncs (the data file's, the log's, a checkpoint's: tens of
        // milliseconds after a commit at 10M pairs) run under the upgradable lock,
        // which readers pass; it keeps every other writer out, so the space does not
        // change between the steps.
        sync_space(self.state.upgradable_read(), holds).map(drop)
    }

    /// Intervals, index bytes, cache bytes and the space's counters.
    pub(crate) fn shape(&self) -> (u64, u64, u64, crate::space::SpaceStats) {
        let st = self.state.read();
        (
            st.index.len() as u64,
            st.index.memory_bytes() as u64,
            self.cache.used() as u64,
            st.space.stats(),
        )
    }

    /// Reads and verifies every interval and the invariants in the module
    /// documentation; returns the records seen and every separated value's pointer.
    pub(crate) fn check(&self) -> Result<(u64, Vec<Separated>)> {
        let st = self.state.read();
        let fail = |why: String| self.corrupt(0, &why);
        st.index.check().map_err(fail)?;
        st.space.check().map_err(fail)?;
        if st.index.total() != st.space.len() {
            return Err(fail(format!(
                "the index covers {} bytes, the space holds {}",
                st.index.total(),
                st.space.len()
            )));
        }
        let mut records = 0;
        let mut separated = Vec::new();
        let mut last: Option<Box<[u8]>> = None;
        let mut starts = std::collections::BTreeSet::new();
        let intervals = st.index.intervals();
        for (n, iv) in intervals.iter().enumerate() {
            let l = self.read_interval(&st.space, iv)?;
            if iv.size > 0 && st.space.tag(iv.offset) != Some(HEAD) {
                return Err(self.corrupt(iv.offset, "an interval head is not tagged"));
            }
            // An index key may lie below its interval's first record (a separator, or
            // that record deleted), but never at or below the previous one's last.
            let next = intervals.get(n + 1).map(|i| i.key.as_slice());
            if !l.is_empty() && next.is_some_and(|k| l.key(l.len() - 1) >= k) {
                return Err(self.corrupt(iv.offset, "a record is not below the next index key"));
            }
            for i in 0..l.len() {
                starts.insert(iv.offset + l.span(i).0 as u64);
                let r = l.record(i);
                if last.as_deref().is_some_and(|k| k >= r.key) {
                    return Err(self.corrupt(iv.offset, "keys out of order across intervals"));
                }
                last = Some(r.key.into());
                if let super::RecordValue::Separated(p) = r.value {
                    separated.push((Box::from(r.key), p));
                }
                records += 1;
            }
        }
        // Every cached interval is what the space holds, under an index key, ending
        // at or below where the index says it ends.
        for entry in self.cache.entries(&st.index).map_err(fail)? {
            let (key, end, l) = entry.parts();
            let iv = st.index.find(key);
            if iv.key != key {
                return Err(fail(format!(
                    "the cache holds {key:?}, not an interval's key"
                )));
            }
            let next = st.index.next(key).map(|n| n.key);
            // No end means "to the end of the keyspace", so it is too far unless this
            // is the last interval.
            let too_far = next.as_deref().is_some_and(|n| end.is_none_or(|e| e > n));
            if too_far {
                return Err(fail(format!(
                    "the cache has interval {key:?} ending at {end:?}, the index at {next:?}"
                )));
            }
            if l.bytes() != self.read_interval(&st.space, &iv)?.bytes() {
                return Err(fail(format!(
                    "cached interval {key:?} differs from the space"
                )));
            }
        }
        // Every interval's shortcut that still holds reads what the space holds for it.
        let mut shortcuts = Vec::new();
        st.index
            .walk_intervals(None, true, 0, |key, offset, size, slot| {
                shortcuts.extend(slot.shortcut().map(|s| (key, offset, size, s)));
                true
            });
        for (key, offset, size, shortcut) in shortcuts {
            let mut at_spot = vec![0; usize::try_from(size).unwrap_or(usize::MAX)];
            if !st
                .space
                .read_while(offset, &mut at_spot, Some(shortcut), |_| true)?
                .used
            {
                continue;
            }
            let iv = Interval {
                key: key.to_vec(),
                offset,
                size,
            };
            if at_spot != self.read_interval(&st.space, &iv)?.bytes() {
                return Err(self.corrupt(
                    offset,
                    &format!("interval {key:?} differs at its shortcut {shortcut:?}"),
                ));
            }
        }
        // Every cached record is the one the space holds for its key.
        for (key, v) in self.rows.entries() {
            let iv = st.index.find(&key);
            if find_version(&self.read_interval(&st.space, &iv)?, &key).as_ref() != Some(&v) {
                return Err(fail(format!(
                    "the record cache's version of {key:?} differs from the space"
                )));
            }
        }
        // Every tag marks a record's start. (Not only heads: an index rebuilt with a
        // recovery step leaves the heads it skipped inside larger intervals.)
        let mut at = 0;
        while let Some((o, _)) = st.space.next_tagged(at) {
            if !starts.contains(&o) {
                return Err(self.corrupt(o, "a tagged extent does not start a record"));
            }
            at = o + 1;
        }
        Ok((records, separated))
    }

    /// Bytes of value-log records this keyspace's records point to, per segment (the
    /// recount after a crash left the manifest's counts unknown).
    pub(crate) fn separated_bytes(&self) -> Result<BTreeMap<u32, u64>> {
        let st = self.state.read();
        let mut counts = BTreeMap::new();
        for iv in st.index.intervals() {
            let l = self.read_interval(&st.space, &iv)?;
            for i in 0..l.len() {
                let r = l.record(i);
                if let super::RecordValue::Separated(p) = r.value {
                    *counts.entry(p.segment).or_insert(0) += p.record_len(r.key.len());
                }
            }
        }
        Ok(counts)
    }

    /// GC's write-back: for each `(key, seq, old, new)`, points the record of `key` at
    /// `new` if it is still version `seq` with its value at `old` (compare and swap: a
    /// write, delete or commit that came in between wins). Returns which were swapped.
    /// The record keeps its length (a pointer is fixed-size), so it is overwritten in
    /// place; takes the write lock in slices like a commit.
    pub(crate) fn relocate(
        &self,
        moves: &[Move],
        holds: &super::commit::LockHolds,
    ) -> Result<Vec<bool>> {
        self.usable()?;
        self.views.begin_change();
        let mut done = Vec::with_capacity(moves.len());
        let moved = moves.chunks(super::commit::SLICE).try_for_each(|slice| {
            done.extend(self.locked(holds, |st| {
                (slice.iter())
                    .map(|(key, seq, old, new)| self.relocate_one(st, key, *seq, old, new))
                    .collect::<Result<Vec<bool>>>()
            })?);
            Ok(())
        });
        // A view made before or during this has the old pointers, whose values go
        // once this returns (`view.rs`).
        self.views.retire();
        moved.map(|()| done)
    }

    fn relocate_one(
        &self,
        st: &mut State,
        key: &[u8],
        seq: u64,
        old: &Pointer,
        new: &Pointer,
    ) -> Result<bool> {
        let (iv, _) = st.index.find_to_edit(key);
        let loaded = self.load(st, &iv)?;
        let Some(i) = loaded.find(key) else {
            return Ok(false);
        };
        let r = loaded.record(i);
        if r.seq != seq || r.value != super::RecordValue::Separated(*old) {
            return Ok(false);
        }
        let mut rec = Vec::new();
        super::Record {
            value: super::RecordValue::Separated(*new),
            ..r
        }
        .encode(&mut rec);
        let (s, e) = loaded.span(i);
        if rec.len() != e - s {
            return Err(self.corrupt(iv.offset + s as u64, "a relocated record changed length"));
        }
        let at = iv.offset + s as u64;
        // An overwrite replaces the extent, and its tag with it: keep the head tag.
        let tag = st.space.tag(at);
        st.space.write(at, &rec)?;
        if let Some(t) = tag.filter(|&t| t != 0) {
            st.space.set_tag(at, t)?;
        }
        let mut bytes = loaded.bytes().to_vec();
        bytes[s..e].copy_from_slice(&rec);
        let starts = (0..loaded.len()).map(|j| loaded.span(j).0 as u32).collect();
        let mut fresh = Loaded::from_parts(bytes, starts);
        fresh.fragmented = loaded.fragmented;
        if self.cache.get(&st.index, &iv.key).is_some() {
            self.cache_put(st, &iv.key, Arc::new(fresh));
        }
        self.rows.forget(key);
        Ok(true)
    }

    /// [`SortedStore::close`] for a store that readers still hold: the space is
    /// synced, checkpointed and closed in place, under the write lock.
    pub(crate) fn close_shared(&self) -> Result<()> {
        self.usable()?;
        self.state.write().space.close_in_place()
    }

    /// Syncs and closes the space (checkpointing it, so the next open replays nothing).
    pub(crate) fn close(self) -> Result<()> {
        // A store an error or a panic left half edited checkpoints nothing: what the
        // next open recovers is what was durable.
        self.usable()?;
        self.state.into_inner().space.close()
    }
}

thread_local! {
    /// The bytes a point read reads an interval into, kept for the thread's next one.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on `size` bytes of this thread's scratch buffer, whose contents are
/// whatever an earlier read left there (every caller overwrites what it reads). A
/// point read's interval was a fresh zeroed allocation each time, one of the read's
/// allocations that together took about 3% of a 10M readrandom's time
/// (docs/benchmarks.md, forty-fourth session). A buffer already in use (no caller nests, but a nested call
/// must not fail) is replaced by a fresh one, and so is one past [`SCRATCH_MOST`],
/// which the thread would otherwise keep.
fn with_scratch<T>(size: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) if size <= SCRATCH_MOST => {
            if buf.len() < size {
                buf.resize(size, 0);
            }
            f(&mut buf[..size])
        }
        _ => f(&mut vec![0; size]),
    })
}

/// The largest read a thread's scratch buffer grows to: four times the size past
/// which an interval splits, so every interval short of a huge record fits.
const SCRATCH_MOST: usize = 4 * super::commit::SPLIT_BYTES;

/// A search for one key in an interval's bytes as a read fills them in, from the
/// start ([`Seek::more`] at every step): it stops at the first record at or past the
/// key. A record may span two steps; one that does not decode yet waits for the next.
struct Seek<'a> {
    key: &'a [u8],
    /// The interval's index key: its first record's key is at or above it.
    floor: &'a [u8],
    /// Where the next record starts.
    at: usize,
    /// Where the last record's key lies in the bytes.
    last_key: Option<std::ops::Range<usize>>,
    found: Option<Option<Version>>,
    sound: bool,
}

impl<'a> Seek<'a> {
    fn new(key: &'a [u8], floor: &'a [u8]) -> Seek<'a> {
        Seek {
            key,
            floor,
            at: 0,
            last_key: None,
            found: None,
            sound: true,
        }
    }

    /// Decodes the records `read` (the interval's bytes so far) holds past the last
    /// step's; returns whether the read should go on.
    fn more(&mut self, read: &[u8]) -> bool {
        while self.at < read.len() {
            let Ok((r, n)) = Record::decode(&read[self.at..]) else {
                // Not whole yet (or damaged: then it never decodes).
                return true;
            };
            let floor = self.last_key.clone().map_or(self.floor, |k| &read[k]);
            // The first key may equal the interval's; later ones must rise.
            if r.key < floor || (self.last_key.is_some() && r.key == floor) {
                self.sound = false;
                return false;
            }
            if r.key >= self.key {
                self.found = Some((r.key == self.key).then(|| Version::from_record(&r)));
                return false;
            }
            let key_at = r.key.as_ptr() as usize - read.as_ptr() as usize;
            self.last_key = Some(key_at..key_at + r.key.len());
            self.at += n;
        }
        true
    }

    /// The key's version (`Some(None)`: it has none) in an interval of `size` bytes,
    /// or `None` if the bytes did not check out (a record that never decoded, keys out
    /// of order): a whole read of the interval says what is wrong.
    fn outcome(self, size: usize) -> Option<Option<Version>> {
        match self.found {
            Some(v) if self.sound => Some(v),
            // Every record decoded and all are below the key.
            None if self.sound && self.at == size => Some(None),
            _ => None,
        }
    }
}

/// Syncs the space from the upgradable lock `st` (see [`SortedStore::sync`]): the first
/// step (writing out the buffered data) and the last (bookkeeping) under the write
/// lock, the files' writes and syncs between them, and the punching of the segments
/// it freed after them, under the upgradable lock, which readers pass.
pub(crate) fn sync_space<'a>(
    st: RwLockUpgradableReadGuard<'a, State>,
    holds: &LockHolds,
) -> Result<RwLockUpgradableReadGuard<'a, State>> {
    let mut st = RwLockUpgradableReadGuard::upgrade(st);
    holds.timed(|| st.space.sync_begin())?;
    let st = RwLockWriteGuard::downgrade_to_upgradable(st);
    let synced = st.space.sync_data();
    let mut st = RwLockUpgradableReadGuard::upgrade(st);
    holds.timed(|| st.space.sync_finish(synced))?;
    let st = RwLockWriteGuard::downgrade_to_upgradable(st);
    st.space.punch_freed()?;
    Ok(st)
}

/// The version of `key` in `view`, read from its space: `at` is the place of the
/// interval holding `key` in the view's index, and `shortcut` its slot's. `None` if the
/// interval does not read sound there, leaving the read to the lock, which also reports
/// whatever is wrong.
fn read_in_view(
    view: &View,
    at: Position,
    shortcut: Option<Shortcut>,
    key: &[u8],
) -> Option<Option<Version>> {
    let iv = view.index.interval_of(at);
    let size = usize::try_from(iv.size).ok()?;
    with_scratch(size, |buf| {
        let mut seek = Seek::new(key, &iv.key);
        view.space
            .read_while(iv.offset, buf, shortcut, |read| seek.more(read))
            .ok()?;
        seek.outcome(size)
    })
}

/// The version of `key` in `loaded`, if it has one.
fn find_version(loaded: &Loaded, key: &[u8]) -> Option<Version> {
    loaded
        .find(key)
        .map(|i| Version::from_record(&loaded.record(i)))
}

/// Adds to `out` the records of `loaded` past `bound` in the direction, if any, and
/// returns how many; every later interval of the scan is taken whole.
fn push_run(
    out: &mut Vec<Run>,
    loaded: Arc<Loaded>,
    bound: &mut Bound<&[u8]>,
    forward: bool,
) -> usize {
    let range = run_range(&loaded, *bound, forward);
    *bound = Bound::Unbounded;
    let n = range.len();
    if n > 0 {
        out.push(Run {
            interval: loaded,
            range,
        });
    }
    n
}

/// The records of `loaded` past `from` in the direction.
fn run_range(loaded: &Loaded, from: Bound<&[u8]>, forward: bool) -> std::ops::Range<usize> {
    match from {
        Bound::Unbounded => 0..loaded.len(),
        Bound::Included(k) | Bound::Excluded(k) => {
            let at = loaded.seek(k);
            // Past `k` itself, if it is there: looked at only where the bound needs it.
            let past = || at + usize::from(at < loaded.len() && loaded.key(at) == k);
            match (forward, matches!(from, Bound::Included(_))) {
                (true, true) => at..loaded.len(),
                (true, false) => past()..loaded.len(),
                (false, true) => 0..past(),
                (false, false) => 0..at,
            }
        }
    }
}

/// Builds the sparse index from the tagged interval heads, reading the key at each one
/// at least `step` bytes after the previous one read, into nodes of `fanout` entries.
fn rebuild_index(space: &FlexSpace, dir: &Path, step: u64, fanout: usize) -> Result<SparseIndex> {
    let mut index = SparseIndex::with_fanout(fanout);
    let total = space.len();
    let grow = i64::try_from(total).map_err(|_| Error::corruption(dir, 0, "space too large"))?;
    index.resize(&[], grow)?;
    let (mut last_key, mut last_off): (Vec<u8>, u64) = (Vec::new(), 0);
    let mut from = 1;
    while let Some((off, tag)) = space.next_tagged(from) {
        from = off + step.max(1);
        if tag != HEAD {
            continue;
        }
        let key = read_key(space, dir, off)?;
        if key <= last_key {
            return Err(Error::corruption(
                dir,
                off,
                "interval heads' keys are not in increasing order",
            ));
        }
        index.split(&last_key, off - last_off, &key)?;
        (last_key, last_off) = (key, off);
    }
    Ok(index)
}

/// The key of the record at `off`.
fn read_key(space: &FlexSpace, dir: &Path, off: u64) -> Result<Vec<u8>> {
    let left = space.len() - off;
    let mut want = 64u64.min(left);
    loop {
        let mut buf = vec![0; want as usize];
        space.read(off, &mut buf)?;
        match peek_key(&buf) {
            Ok(k) => return Ok(k.to_vec()),
            Err(need) if (need as u64) > want && want < left => want = (need as u64).min(left),
            Err(_) => {
                return Err(Error::corruption(
                    dir,
                    off,
                    "an interval head is not a record",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::{with_scratch, SCRATCH, SCRATCH_MOST};
    use crate::{Db, Durability, WriteBatch};

    /// The scratch buffer is the size asked for, is the thread's own (a nested call
    /// gets another), and is not kept past [`SCRATCH_MOST`].
    #[test]
    fn scratch_is_sized_per_call_separate_when_nested_and_not_kept_when_huge() {
        let kept = || SCRATCH.with(|c| c.borrow().len());
        // Another test may have run on this thread before (`--test-threads=1`).
        let before = kept().max(100);
        let outer = with_scratch(100, |a| {
            assert_eq!(a.len(), 100);
            a.fill(7);
            let inner = with_scratch(50, |b| {
                assert_eq!(b.len(), 50);
                assert!(b.iter().all(|&x| x == 0), "a nested call's buffer is fresh");
                b.as_ptr()
            });
            assert_ne!(inner, a.as_ptr());
            a.as_ptr()
        });
        assert_eq!(
            with_scratch(10, |b| b.as_ptr()),
            outer,
            "the buffer is reused"
        );
        assert_eq!(kept(), before);
        with_scratch(SCRATCH_MOST + 1, |b| assert_eq!(b.len(), SCRATCH_MOST + 1));
        assert_eq!(kept(), before, "a huge read's buffer is not kept");
        with_scratch(SCRATCH_MOST, |b| assert_eq!(b.len(), SCRATCH_MOST));
        assert_eq!(kept(), SCRATCH_MOST);
    }

    /// A database of 20,000 pairs of 100-byte values (about 2.5 MB) committed, far past
    /// its 64 KiB budget: the record cache is on.
    fn past_the_cache() -> (tempfile::TempDir, Db, crate::Keyspace) {
        hundred_byte_values(64 << 10, 20_000)
    }

    /// A database with a cache of `cache_bytes` whose default keyspace holds `n` pairs
    /// of 100-byte values, committed. The idle sweep is off: the tests offer, hold
    /// and retire views and the lock by hand, and a pass after the commit would retire
    /// the view a test offered (a read then went to the lock, once in a run of
    /// `./test.sh`).
    fn hundred_byte_values(cache_bytes: usize, n: u32) -> (tempfile::TempDir, Db, crate::Keyspace) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::builder(dir.path())
            .cache_bytes(cache_bytes)
            .idle_sweep(false)
            .open()
            .unwrap();
        let ks = db.default_keyspace();
        let mut b = WriteBatch::new();
        b.durability(Durability::Buffered);
        for i in 0..n {
            b.put(&ks, &key(i), &[b'a'; 100]).unwrap();
        }
        db.write(b).unwrap();
        db.flush().unwrap();
        (dir, db, ks)
    }

    /// A version read from a view goes into the record cache, unless a commit began
    /// after the view was made: that commit may have forgotten the key already, and
    /// the version would then be older than the store's for good.
    #[test]
    fn a_read_from_a_view_caches_its_record_only_if_nothing_changed_since() {
        let (_dir, db, ks) = past_the_cache();
        let store = db.store_of(&ks);
        assert!(store.rows.capacity() > 0, "the record cache is off");
        let view = |store: &super::SortedStore| {
            assert!(store.views.get().is_none());
            assert!(store.views.offer(&store.state.read()));
            store.views.get().unwrap()
        };
        let in_view = |v: &super::View, k: &[u8]| {
            let at = v.index.locate(k);
            super::read_in_view(v, at, v.index.slot_at(at).shortcut(), k).unwrap()
        };
        // Nothing changes: the record stays cached.
        let v = view(&store);
        let found = in_view(&v, &key(7));
        store.cache_from_view(&key(7), found.as_ref().unwrap(), &v);
        assert!(
            store.rows.get(&key(7)).is_some(),
            "a read from a view cached nothing"
        );
        store.views.retire();
        // A commit of the key between the read and the put: the put is taken back.
        let v = view(&store);
        let found = in_view(&v, &key(8));
        db.put(&key(8), &[b'b'; 100]).unwrap();
        db.flush().unwrap();
        store.cache_from_view(&key(8), found.as_ref().unwrap(), &v);
        assert!(
            store.rows.get(&key(8)).is_none(),
            "an old version stayed cached"
        );
        assert_eq!(db.get(&key(8)).unwrap(), Some(vec![b'b'; 100]));
    }

    /// While the committer holds the write lock, a point read of a keyspace that fits
    /// the cache, whose interval neither the view's slot nor the cache holds, reads the
    /// view's space and does not wait for the lock: the committer's write sections in
    /// a 1M-pair keyspace last about a millisecond, and right after a load reads that
    /// waited them out spent most of their time asleep (docs/benchmarks.md,
    /// sixty-ninth session). One whose interval was cached after the view was made
    /// finds it by the cache's floor search.
    #[test]
    fn a_read_beside_the_committer_of_a_keyspace_that_fits_does_not_wait_for_the_lock() {
        let (_dir, db, ks) = hundred_byte_values(64 << 20, 5_000);
        let store = db.store_of(&ks);
        let (missing, cached) = (key(1_234), key(4_321));
        {
            let st = store.state.read();
            assert!(store.fits(&st), "the keyspace is past the cache");
            assert_ne!(st.index.find(&missing).key, st.index.find(&cached).key);
            for k in [&missing, &cached] {
                store.cache.remove(&st.index, &st.index.find(k).key);
                assert!(store.cache.covering(k).is_none(), "still cached");
            }
        }
        // A read asks for a view (none yet); the committer offers one, then caches one
        // of the two intervals.
        assert!(store.views.get().is_none());
        assert!(store.views.offer(&store.state.read()));
        {
            let st = store.state.read();
            let iv = st.index.find(&cached);
            let l = Arc::new(store.read_interval(&st.space, &iv).unwrap());
            store.cache_put(&st, &iv.key, l);
        }
        let released = std::sync::atomic::AtomicBool::new(false);
        let held = std::sync::Barrier::new(2);
        let want = crate::memtable::Value::Inline(vec![b'a'; 100].into());
        std::thread::scope(|s| {
            s.spawn(|| {
                let _w = store.state.write();
                held.wait();
                std::thread::sleep(std::time::Duration::from_millis(300));
                released.store(true, Ordering::SeqCst);
            });
            held.wait();
            // The counters themselves: `Db::stats` takes the read lock.
            let c = &store.counters;
            let counts = || {
                (
                    c.view_reads.load(Ordering::Relaxed),
                    c.cache_hits.load(Ordering::Relaxed),
                )
            };
            let (views, hits) = counts();
            assert_eq!(store.get(&missing).unwrap().unwrap().value, want);
            assert_eq!(
                counts(),
                (views + 1, hits),
                "the read did not go to the view"
            );
            assert_eq!(store.get(&cached).unwrap().unwrap().value, want);
            assert_eq!(counts(), (views + 1, hits + 1), "the cache's search missed");
            assert!(
                !released.load(Ordering::SeqCst),
                "the reads waited for the write lock"
            );
        });
        store.views.retire();
    }

    /// While a write section runs, a scan over cached intervals walks the cache and
    /// does not wait for the lock, and neither does an iterator; the records come with
    /// the section's odd epoch, which has moved on once the section ends, so an
    /// iterator holds them no longer. A scan from an interval the cache does not hold
    /// waits for the lock.
    #[test]
    fn a_scan_over_cached_intervals_does_not_wait_for_a_write_section() {
        use std::ops::Bound;
        let (_dir, db) = committed(0..5_000);
        let ks = db.default_keyspace();
        let store = db.store_of(&ks);
        let (from, gap) = (key(1_234), key(3_456));
        {
            let st = store.state.read();
            let mut iv = st.index.find(&from);
            while *iv.key <= *gap {
                let l = Arc::new(store.read_interval(&st.space, &iv).unwrap());
                store.cache_put(&st, &iv.key, l);
                iv = st.index.next(&iv.key).unwrap();
            }
            store.cache.remove(&st.index, &st.index.find(&gap).key);
        }
        assert!(store.cache.covering(&gap).is_none(), "still cached");
        let keys = |runs: &[super::Run]| -> Vec<Vec<u8>> {
            runs.iter()
                .flat_map(|r| r.range.clone().map(|i| r.interval.key(i).to_vec()))
                .collect()
        };
        let want: Vec<Vec<u8>> = (1_234..1_284).map(key).collect();
        let released = std::sync::atomic::AtomicBool::new(false);
        let held = std::sync::Barrier::new(2);
        let epoch = std::thread::scope(|s| {
            s.spawn(|| {
                let _w = store.state.write();
                let _section = store.epoch.section();
                held.wait();
                std::thread::sleep(std::time::Duration::from_millis(300));
                released.store(true, Ordering::SeqCst);
            });
            held.wait();
            let (epoch, runs) = store
                .scan(Bound::Included(&from), true, 50, 50, None)
                .unwrap();
            assert_eq!(epoch % 2, 1, "not the section's epoch");
            assert_eq!(keys(&runs)[..50], want[..]);
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = db
                .range(from.clone()..)
                .expecting(50)
                .take(50)
                .collect::<crate::Result<_>>()
                .unwrap();
            let got: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| k.clone()).collect();
            assert_eq!(got, want);
            assert_eq!(pairs[10].1, 1_244u32.to_le_bytes());
            assert!(
                !released.load(Ordering::SeqCst),
                "the scans waited for the write lock"
            );
            let (_, runs) = store.scan(Bound::Included(&gap), true, 5, 5, None).unwrap();
            assert!(
                released.load(Ordering::SeqCst),
                "a scan from an interval not cached did not wait for the lock"
            );
            assert_eq!(
                keys(&runs)[..5],
                (3_456..3_461).map(key).collect::<Vec<_>>()[..]
            );
            epoch
        });
        assert_ne!(store.epoch.now(), epoch, "the records outlive the section");
    }

    /// While the committer holds the write lock, a point read of a keyspace larger
    /// than the cache whose interval the view's slot does not hold reads the view's
    /// space, not the cache's floor search: here the interval was cached after the
    /// view was made, so that search would have found it (and did, before).
    #[test]
    fn a_read_beside_the_committer_of_a_keyspace_past_the_cache_reads_the_view() {
        let (_dir, db, ks) = past_the_cache();
        let store = db.store_of(&ks);
        let k = key(12_345);
        // A read asks for a view (none yet); the committer offers one.
        assert!(store.views.get().is_none());
        assert!(store.views.offer(&store.state.read()));
        {
            let st = store.state.read();
            let iv = st.index.find(&k);
            assert!(st.index.slot_of(&iv.key).unwrap().get().is_none());
            let l = Arc::new(store.read_interval(&st.space, &iv).unwrap());
            store.cache_put(&st, &iv.key, l);
            assert!(store.cache.covering(&k).is_some(), "cached after the view");
        }
        let before = db.stats();
        let held = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _w = store.state.write();
                held.wait();
                // The read below runs meanwhile (one that went to the lock would wait
                // this out, then count no view read).
                std::thread::sleep(std::time::Duration::from_millis(200));
            });
            held.wait();
            let v = store.get(&k).unwrap().unwrap();
            assert_eq!(
                v.value,
                crate::memtable::Value::Inline(vec![b'a'; 100].into())
            );
        });
        let after = db.stats();
        assert_eq!(after.view_reads, before.view_reads + 1, "{after:?}");
        assert_eq!(after.cache_hits, before.cache_hits, "{after:?}");
        store.views.retire();
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    /// A database in a fresh directory whose default keyspace holds [`key`]`(i)` →
    /// `i` for each `i` of `ids`, committed to the sorted store.
    fn committed(ids: impl Iterator<Item = u32>) -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let ks = db.default_keyspace();
        let mut b = WriteBatch::new();
        for i in ids {
            b.put(&ks, &key(i), &i.to_le_bytes()).unwrap();
        }
        db.write(b).unwrap();
        db.flush().unwrap();
        (dir, db)
    }

    /// A forward scan goes on from the interval it read last (its hint) by the links
    /// alone where its start lies in that interval and the hint and the intervals
    /// after it are unchanged (a commit elsewhere leaves them so), and finds what the
    /// index's way finds; outside the hint, or once a commit changed the hint, it does
    /// not take the links.
    #[test]
    fn a_scan_follows_the_links_from_its_hint_only_while_they_hold_past_other_commits() {
        use std::ops::Bound;
        let (_dir, db) = committed((0..2_000).map(|i| 2 * i));
        let store = db.store_of(&db.default_keyspace());
        let keys = |runs: &[super::Run]| -> Vec<Vec<u8>> {
            runs.iter()
                .flat_map(|r| r.range.clone().map(|i| r.interval.key(i).to_vec()))
                .collect()
        };
        // The first walk caches the intervals, the second links each to the next.
        for _ in 0..2 {
            store
                .scan(Bound::Unbounded, true, 4_000, 4_000, None)
                .unwrap();
        }
        let (e, first) = store
            .scan(Bound::Included(&key(1_000)), true, 1, 1, None)
            .unwrap();
        let hint = Arc::clone(&first[0].interval);
        let last = hint.key(hint.len() - 1).to_vec();
        // Past the hint's last record, and from within it.
        for from in [Bound::Excluded(&last[..]), Bound::Included(&key(1_000)[..])] {
            let (_, plain) = store.scan(from, true, 100, 100, None).unwrap();
            let (le, linked) = store
                .follow_links(from, 100, 100, (e, &hint))
                .expect("the links hold");
            assert_eq!(le, e);
            assert_eq!(keys(&linked), keys(&plain));
            assert!(keys(&linked).len() >= 100);
            assert!(linked
                .iter()
                .zip(&plain)
                .all(|(a, b)| Arc::ptr_eq(&a.interval, &b.interval)));
        }
        // From the hint's first key on, the rest of it follows; past its last record
        // or before its first, its links say nothing.
        let first_key = hint.key(0).to_vec();
        let past = [&last[..], b"\x00"].concat();
        let below = key(0);
        let from_links = |from| store.follow_links(from, 1, 1, (e, &hint));
        assert!(from_links(Bound::Excluded(&first_key[..])).is_some());
        assert!(from_links(Bound::Included(&past[..])).is_none());
        assert!(from_links(Bound::Included(&below[..])).is_none());
        assert!(from_links(Bound::Unbounded).is_none());
        // A link missing before `min` records: the index's way.
        assert!(store
            .follow_links(Bound::Excluded(&last[..]), 4_000, 4_000, (e, &hint))
            .is_none());
        // A commit far from the hint (into the first interval) moves the epoch on but
        // changes neither the hint nor the intervals after it: they are still the
        // cache's entries, so their links hold and lead where the index's way leads.
        let past_hint = Bound::Excluded(&last[..]);
        db.put(&key(1), b"far").unwrap();
        db.flush().unwrap();
        let now = store.epoch.now();
        assert_ne!(now, e);
        let (le, linked) = store
            .follow_links(past_hint, 100, 100, (e, &hint))
            .expect("links between live forms outlive the epoch");
        let (pe, plain) = store.scan(past_hint, true, 100, 100, None).unwrap();
        assert_eq!((le, pe), (now, now));
        assert_eq!(keys(&linked), keys(&plain));
        // A commit into the interval after the hint retires that form: the link to it
        // is not taken, and what the walk returns (if anything) has the new key.
        let after = Arc::clone(&plain[1].interval);
        let (a, b) = (after.key(0), after.key(1));
        let between = [a, b"\x00"].concat();
        assert!(a < &between[..] && &between[..] < b);
        db.put(&between, b"between").unwrap();
        db.flush().unwrap();
        assert!(!after.live.is_live());
        let (_, plain) = store.scan(past_hint, true, 100, 100, None).unwrap();
        assert!(keys(&plain).contains(&between));
        if let Some((_, linked)) = store.follow_links(past_hint, 100, 100, (e, &hint)) {
            assert_eq!(keys(&linked), keys(&plain));
        }
        // A commit into the hint's own interval, between its first two records,
        // retires the hint: nothing is taken from it, and a scan with the stale hint
        // finds the key.
        let inside = [hint.key(0), b"\x00"].concat();
        assert!(hint.len() >= 2 && &inside[..] < hint.key(1));
        db.put(&inside, b"inside").unwrap();
        db.flush().unwrap();
        assert!(!hint.live.is_live());
        let within = Bound::Excluded(&first_key[..]);
        assert!(store.follow_links(within, 1, 1, (e, &hint)).is_none());
        let (_, got) = store.scan(within, true, 1, 1, Some((e, &hint))).unwrap();
        assert_eq!(keys(&got)[0], inside);
    }

    /// A point read that meets a write section finds its interval through the view's
    /// copy of the index, cached as it was when the view was made: without the lock,
    /// even once the cache has let the interval go (so the cache's own floor search
    /// misses it), and in a keyspace that fits the cache, where a view's space is not
    /// read.
    #[test]
    fn a_read_beside_a_write_section_finds_the_interval_the_view_holds() {
        let (_dir, db) = committed(0..2_000);
        let store = db.store_of(&db.default_keyspace());
        // The committer caches what it writes; the read checks it is so.
        assert!(store.fits(&store.state.read()));
        assert_eq!(
            db.get(&key(500)).unwrap(),
            Some(500u32.to_le_bytes().to_vec())
        );
        assert!(store.views.get().is_none());
        assert!(store.views.offer(&store.state.read()));
        let write = store.state.write();
        let at = write.index.locate(&key(500));
        let iv = write.index.interval_of(at);
        assert!(write.index.slot_at(at).peek().is_some(), "not cached");
        store.cache.remove(&write.index, &iv.key);
        assert!(store.cache.covering(&key(500)).is_none());
        let hits = store.counters.cache_hits.load(Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                tx.send(store.get(&key(500)).unwrap()).unwrap();
            });
            let got = rx.recv_timeout(std::time::Duration::from_secs(10));
            drop(write);
            let got = got.expect("the read waited for the write section");
            match got.map(|v| v.value) {
                Some(crate::memtable::Value::Inline(v)) => assert_eq!(*v, 500u32.to_le_bytes()),
                other => panic!("read {other:?}"),
            }
        });
        assert_eq!(store.counters.cache_hits.load(Ordering::Relaxed), hits + 1);
        assert_eq!(store.counters.view_reads.load(Ordering::Relaxed), 0);
    }

    /// As the committer changes an interval, the view's copy follows the cache: the
    /// new form where the interval spans the same keys as in the view, an empty slot
    /// where it split. Either way the view's slot lets the old form go.
    #[test]
    fn a_views_slots_follow_the_intervals_the_committer_changes() {
        let (_dir, db) = committed((0..2_000).step_by(2));
        let ks = db.default_keyspace();
        let store = db.store_of(&ks);
        assert!(store.views.get().is_none());
        assert!(store.views.offer(&store.state.read()));
        let view = store.views.get().unwrap();
        let (at_a, at_b) = (view.index.locate(&key(100)), view.index.locate(&key(1000)));
        let old_a = view.index.slot_at(at_a).peek().expect("not cached");
        let old_b = view.index.slot_at(at_b).peek().expect("not cached");
        // One key of a's interval changes; b's takes 40 more keys and splits.
        let mut b = WriteBatch::new();
        b.put(&ks, &key(100), b"new").unwrap();
        for j in 0..40 {
            b.put(&ks, format!("key001000a{j:03}").as_bytes(), b"x")
                .unwrap();
        }
        db.write(b).unwrap();
        db.flush().unwrap();
        assert!(store.views.get().is_none(), "the commit retired the view");
        let now_a = view
            .index
            .slot_at(at_a)
            .peek()
            .expect("a's slot was emptied");
        assert!(!Arc::ptr_eq(&now_a, &old_a));
        match super::find_version(&now_a, &key(100)).map(|v| v.value) {
            Some(crate::memtable::Value::Inline(v)) => assert_eq!(&*v, b"new"),
            other => panic!("read {other:?}"),
        }
        assert!(
            view.index.slot_at(at_b).peek().is_none(),
            "a split interval's first piece went into the whole one's slot"
        );
        // (The cache's skip list may drop its own references to the old forms later,
        // so their counts say nothing here.)
        drop((old_a, old_b));
    }
}
