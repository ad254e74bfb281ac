//! The committer's work on one sorted keyspace (FlexDB §5.1–5.3): applying a frozen
//! memtable's versions in key order, in place, an interval at a time, in slices of at
//! most [`SLICE`] keys, each worked out under an upgradable read lock and applied in
//! short write sections (see [`SortedStore::commit`]); writing history for snapshots
//! (SkimpyFTL); splitting and merging intervals; keeping the head tags and the cache
//! in step (write-through for the intervals [`IntervalCache::wants`](super::cache::IntervalCache::wants)).
//!
//! A version is applied only if it is newer than the record it replaces, so replaying a
//! memtable that was partly committed before a crash changes nothing twice.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLockUpgradableReadGuard, RwLockWriteGuard};

use super::cache::Slot;
use super::history::{self, record_value};
use super::index::{separator, Found, Interval};
use super::interval::{verify_records, Laid, Loaded, Read, ReadBufs};
use super::record::{Record, RecordValue};
use super::store::{pieces_scattered, scattered, sync_space, SortedStore, State, HEAD};
use crate::db::pace::CommitPace;
use crate::keyorder;
use crate::memtable::{Value, Versions};
use crate::mvcc::Snapshots;
use crate::space::FlexSpace;
use crate::vlog::{Holder, ValueLog};
use crate::Result;

/// Keys worked out and applied per slice (the paper releases its lock every 1,000 pairs).
pub(crate) const SLICE: usize = 1000;

/// Intervals rewritten for the reads per write section ([`SortedStore::rewrite_wanted`]).
const REWRITE_SLICE: usize = 16;
/// Intervals rewritten for the reads that may wait for a sync of the space.
const REWRITE_SYNC: u64 = 1024;
/// Bytes of whole intervals one step of the idle sweep looks at (at least one interval)
/// and rewrites if they lie scattered ([`SortedStore::sweep_steps`]): about 45 intervals of
/// 16+100-byte pairs after a random load, rewritten in one write section.
const SWEEP_STEP: u64 = 64 << 10;
/// The idle sweep syncs the space once it has rewritten this many bytes since the last
/// sync, so that the segments it empties are freed (and hole-punched) as it goes.
pub(crate) const SWEEP_SYNC: u64 = 64 << 20;
/// A commit of at least 1 / this of the intervals' count in keys leaves every
/// interval's shortcut (spot or hint) in its slot afterwards
/// ([`SortedStore::refresh_spots`]).
const SPOTS_AFTER: usize = 8;
/// The longest the committer holds a keyspace's write lock before it lets waiting
/// readers in (it checks between intervals, so a hold can pass it by one interval).
const SECTION: Duration = Duration::from_micros(200);
/// Pieces a GC pass relocates between looks at the clock.
const GC_PIECES: usize = 64;
/// The most a keyspace's record buffer keeps between slices (about 1,000 pairs of
/// 16-byte keys and 1 KiB values; larger slices allocate afresh).
const RECORDS_KEPT: usize = 1 << 20;
/// The most a keyspace's buffer for a slice's intervals read from the space keeps
/// between slices (a slice of 1,000 keys in as many intervals of 4 KiB; a slice that
/// reads more allocates afresh).
const READS_KEPT: usize = 4 << 20;
/// An interval splits past this many bytes...
pub(crate) const SPLIT_BYTES: usize = 16 << 10;
/// ...or this many pairs (the default of `SortedStore::split_pairs`), and two
/// neighbours merge when together they are under both.
pub(crate) const SPLIT_PAIRS: usize = 16;

/// The versions of one key to commit, newest first (empty: only tidy the record up).
#[derive(Debug)]
pub(crate) struct Update {
    pub(crate) key: Box<[u8]>,
    pub(crate) versions: Versions,
}

/// What a commit needs from the database.
pub(crate) struct Context<'a> {
    pub(crate) vlog: &'a ValueLog,
    pub(crate) snapshots: &'a Snapshots,
    pub(crate) holds: &'a LockHolds,
    /// The commit's progress, which each slice adds its versions to once its edits
    /// are made (writers are paced by it: `db/pace.rs`).
    pub(crate) pace: &'a CommitPace,
}

/// How long the committer held keyspace write locks: a log2 histogram in microseconds.
#[derive(Debug, Default)]
pub(crate) struct LockHolds {
    inner: Mutex<Holds>,
}

#[derive(Debug, Default)]
struct Holds {
    buckets: [u64; 32],
    count: u64,
    max_micros: u64,
}

impl LockHolds {
    /// Runs `f`, a step taken under the write lock, and records how long it took.
    pub(crate) fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = f();
        self.record(t0.elapsed());
        r
    }

    pub(crate) fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let b = (64 - us.leading_zeros() as usize).min(31);
        let mut h = self.inner.lock();
        h.buckets[b] += 1;
        h.count += 1;
        h.max_micros = h.max_micros.max(us);
    }

    /// The longest hold, and the 99th percentile (rounded up to a power of two).
    pub(crate) fn max_and_p99(&self) -> (u64, u64) {
        let h = self.inner.lock();
        let want = h.count - h.count / 100;
        let mut seen = 0;
        for (b, &n) in h.buckets.iter().enumerate() {
            seen += n;
            if seen >= want && n > 0 {
                return (h.max_micros, (1u64 << b).min(h.max_micros.max(1)));
            }
        }
        (h.max_micros, h.max_micros)
    }
}

/// One interval a slice's updates fall in: the interval, the range of the slice in
/// it, its cached form if the cache holds it (not marked used: the cache keeps what
/// readers use), and its slot in the index.
type Group<'a> = (Interval, Range<usize>, Option<Arc<Loaded>>, &'a Slot);

/// The intervals the updates of `slice` (in key order) fall in ([`Group`]).
fn groups<'a>(st: &'a State, slice: &[Update]) -> Vec<Group<'a>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < slice.len() {
        let at = st.index.locate(&slice[i].key);
        let iv = st.index.interval_of(at);
        let slot = st.index.slot_at(at);
        let cached = slot.peek();
        let next = st.index.next_key_of(at);
        let n = match next.as_deref() {
            None => slice.len() - i,
            Some(k) => until(&slice[i..], k),
        };
        groups.push((iv, i..i + n, cached, slot));
        i += n;
    }
    groups
}

/// How many of `ups` (in key order, the first below `k`) are below `k`: a search that
/// doubles its step from the start, since most intervals get a key or two of a slice
/// (where a binary search over the rest of the slice took ten comparisons).
fn until(ups: &[Update], k: &[u8]) -> usize {
    let below = |i: usize| keyorder::lt(&ups[i].key, k);
    let mut hi = 1;
    while hi < ups.len() && below(hi) {
        hi *= 2;
    }
    // `ups[hi / 2]` is below `k`; `ups[hi]` (if any) is not.
    let from = hi / 2 + 1;
    from + ups[from..hi.min(ups.len())].partition_point(|u| keyorder::lt(&u.key, k))
}

/// A slice worked out, ready to apply ([`SortedStore::prepare`]).
struct Prepared<'a> {
    plans: Vec<Plan<'a>>,
    /// Keys to add to (with a sequence) or remove from the lingering tombstones.
    lingering: Vec<(Box<[u8]>, Option<u64>)>,
    /// The slice's new records, which the plans' outcomes point into.
    records: parking_lot::MutexGuard<'a, Vec<u8>>,
}

/// An interval a plan edits: its cached form, or as the committer read it into the
/// slice's buffers, and whether it is fragmented.
enum Old<'a> {
    Cached(Arc<Loaded>),
    Read(Read<'a>, bool),
}

impl Old<'_> {
    fn fragmented(&self) -> bool {
        match self {
            Old::Cached(l) => l.fragmented,
            Old::Read(_, fragmented) => *fragmented,
        }
    }

    /// Its records as bytes and spans.
    fn view(&self) -> Read<'_> {
        match self {
            Old::Cached(l) => l.view(),
            Old::Read(r, _) => *r,
        }
    }

    /// The record with key `key`: by fingerprint in a cached form, else by a binary
    /// search.
    fn find(&self, key: &[u8]) -> Option<usize> {
        match self {
            Old::Cached(l) => l.find(key),
            Old::Read(r, _) => r.find(key),
        }
    }
}

/// One interval's share of a slice, worked out under the shared lock.
struct Plan<'u> {
    /// The interval's key and size when it was loaded.
    key: Vec<u8>,
    size: u64,
    old: Old<'u>,
    ups: &'u [Update],
    /// What becomes of each update's record, in the order of `ups`.
    outcomes: Vec<Outcome>,
}

/// What becomes of one key's record.
enum Outcome {
    Keep,
    Remove,
    /// The new record, at this range of the slice's record buffer.
    Write(std::ops::Range<usize>),
}

/// Replaces `old_len` bytes of `space` at `at` with `new`: one overwrite if the sizes
/// match, else a collapse and an insert, as one change of the space
/// ([`FlexSpace::replace`]), so no sync (a GC pass's) falls between them.
fn edit(space: &mut FlexSpace, at: u64, old_len: u64, new: &[u8]) -> Result<()> {
    space.replace(at, old_len, new)
}

impl SortedStore {
    /// Applies `updates` (in key order) in slices of at most [`SLICE`] keys. Each slice is
    /// worked out under an upgradable read lock, which readers pass: its intervals are
    /// loaded (from the space, on a cache miss) and every key's versions resolved (history
    /// written). Only then is the lock upgraded to write, for the changes to the space,
    /// the index and the cache, so readers wait for the edits alone. No other writer can
    /// change the store between the two steps (an upgradable read excludes them). An
    /// error marks the store broken: the change may be half made.
    ///
    /// All of it on the committer's thread. Helper threads that read a slice's
    /// uncached intervals (half of them, or the next slice's during this one's apply)
    /// paid when each read was a `pread`; with the data file read through its mapping,
    /// on two cores beside a writer, the committer waited for them more than they saved
    /// (10M loads ran 1.1–1.2× faster without them: docs/benchmarks.md, fifty-fifth
    /// session).
    pub(crate) fn commit(&self, updates: impl Iterator<Item = Update>, cx: &Context) -> Result<()> {
        // Before any record changes (`view.rs`: what a read from a view may cache).
        self.views.begin_change();
        let mut updates = updates.fuse();
        let mut slice = Vec::with_capacity(SLICE);
        let mut keys = 0;
        loop {
            slice.clear();
            slice.extend(updates.by_ref().take(SLICE));
            if slice.is_empty() {
                break;
            }
            keys += slice.len();
            if let Err(e) = self.commit_slice(&slice, cx) {
                self.broken.store(true, Ordering::Release);
                self.views.retire();
                return Err(e);
            }
            let versions = slice.iter().map(|u| u.versions.len() as u64).sum();
            cx.pace.applied(versions, Instant::now());
        }
        // Before the memtable leaves the list (`view.rs` says why).
        self.views.retire();
        self.sweep.lock().changed += keys as u64;
        let st = self.state.read();
        self.fit_cache(&st);
        // Each interval changed lost its shortcut; past a few, one walk of the space
        // puts them back at once, where reads would each search the tree again first.
        if keys >= st.index.len() / SPOTS_AFTER {
            self.refresh_spots(&st, None, None);
        }
        Ok(())
    }

    /// Applies one slice.
    fn commit_slice(&self, slice: &[Update], cx: &Context) -> Result<()> {
        let st = self.state.upgradable_read();
        // Between two write sections: a view of now, if reads met the last one.
        if self.views.offer(&st) {
            self.counters.views_made.fetch_add(1, Ordering::Relaxed);
        }
        let mut reads = self.reads.lock();
        let Prepared {
            plans,
            lingering,
            records,
        } = self.prepare(&st, slice, &mut reads, cx)?;
        // What the slice will write at most: its new records, and the whole of every
        // interval it rewrites.
        let writes = plans
            .iter()
            .filter(|p| p.old.fragmented())
            .map(|p| p.old.view().size() as u64)
            .sum::<u64>()
            + records.len() as u64;
        let st = self.collect_garbage(st, writes, cx.holds)?;
        // The edits go in short write sections: between two, the lock is downgraded (still
        // excluding other writers) so readers waiting for it get in.
        let mut st = RwLockUpgradableReadGuard::upgrade(st);
        let mut t0 = Instant::now();
        let mut section = self.epoch.section();
        for (key, seq) in lingering {
            match seq {
                Some(seq) => st.lingering.insert(key, seq),
                None => st.lingering.remove(&key),
            };
        }
        for plan in plans {
            if t0.elapsed() >= SECTION {
                cx.holds.record(t0.elapsed());
                drop(section);
                let read = RwLockWriteGuard::downgrade_to_upgradable(st);
                st = RwLockUpgradableReadGuard::upgrade(read);
                t0 = Instant::now();
                section = self.epoch.section();
            }
            if let Err(e) = self.apply_plan(&mut st, plan, &records) {
                cx.holds.record(t0.elapsed());
                return Err(e);
            }
        }
        drop(section);
        drop(st);
        cx.holds.record(t0.elapsed());
        // A slice of large inline values grows the buffer far past a usual slice's
        // need; each keyspace keeps one, so it does not keep more than this.
        let mut records = records;
        records.clear();
        records.shrink_to(RECORDS_KEPT);
        Ok(())
    }

    /// Runs a GC pass of the space if one is due, or will be once the slice has written
    /// `writes` more bytes, so that its writes do not find one due and run it
    /// themselves. The space's own pass, inside a write, holds the write lock for all of
    /// it: a walk of every extent (0.2 s at 3M) and the data file's sync. Here the pass
    /// is worked out under the upgradable lock `st`, which readers pass; its pieces are
    /// relocated in write sections of about [`SECTION`] each; and it is synced as
    /// [`SortedStore::sync`] syncs ([`sync_space`]), which frees the victims. Nothing
    /// else changes the space meanwhile (an upgradable read excludes every other
    /// writer), and a relocation changes neither the index nor any record: the slice's
    /// plans still hold, and readers need no epoch section for it.
    fn collect_garbage<'a>(
        &'a self,
        st: RwLockUpgradableReadGuard<'a, State>,
        writes: u64,
        holds: &LockHolds,
    ) -> Result<RwLockUpgradableReadGuard<'a, State>> {
        if !st.space.gc_due(writes) {
            return Ok(st);
        }
        let Some(mut plan) = st.space.gc_plan()? else {
            return Ok(st);
        };
        let mut st = st;
        while !plan.is_applied() {
            let mut w = RwLockUpgradableReadGuard::upgrade(st);
            let t0 = Instant::now();
            let mut r = Ok(());
            while r.is_ok() && !plan.is_applied() && t0.elapsed() < SECTION {
                r = w.space.gc_apply(&mut plan, GC_PIECES);
            }
            holds.record(t0.elapsed());
            st = RwLockWriteGuard::downgrade_to_upgradable(w);
            r?;
        }
        let mut w = RwLockUpgradableReadGuard::upgrade(sync_space(st, holds)?);
        w.space.gc_finish(&plan);
        Ok(RwLockWriteGuard::downgrade_to_upgradable(w))
    }

    /// Works out slice `slice` under the upgradable lock `st`: the intervals it falls
    /// in, loaded, and what becomes of each key's record.
    fn prepare<'a>(
        &'a self,
        st: &State,
        slice: &'a [Update],
        reads: &'a mut ReadBufs,
        cx: &Context,
    ) -> Result<Prepared<'a>> {
        let groups = groups(st, slice);
        let olds = self.load_all(st, &groups, reads)?;
        let mut records = self.records.lock();
        records.clear();
        let mut plans = Vec::with_capacity(groups.len());
        let mut lingering = Vec::new();
        for ((iv, range, _, _), old) in groups.into_iter().zip(olds) {
            let ups = &slice[range];
            let outcomes = ups
                .iter()
                .map(|u| {
                    let current = old.find(&u.key).map(|j| old.view().record(j));
                    let mut linger = |seq: Option<u64>| {
                        if seq.is_some() || st.lingering.contains_key(&u.key) {
                            lingering.push((u.key.clone(), seq));
                        }
                    };
                    self.resolve(&mut linger, &u.key, current, &u.versions, &mut records, cx)
                })
                .collect::<Result<Vec<_>>>()?;
            plans.push(Plan {
                key: iv.key,
                size: iv.size,
                old,
                ups,
                outcomes,
            });
        }
        Ok(Prepared {
            plans,
            lingering,
            records,
        })
    }

    /// The intervals of `groups`, from the cache or else from the space into `reads`,
    /// by the shortcut in their slots (which the last large commit left there, or a
    /// read): the tree is not searched for where each one lies.
    fn load_all<'b>(
        &self,
        st: &State,
        groups: &[Group],
        reads: &'b mut ReadBufs,
    ) -> Result<Vec<Old<'b>>> {
        let c = &self.counters;
        reads.clear(READS_KEPT);
        let mut at = Vec::with_capacity(groups.len());
        for (iv, _, cached, slot) in groups {
            at.push(match cached {
                Some(_) => None,
                None => Some(self.read_to_edit(&st.space, iv, slot, reads)?),
            });
        }
        let misses = at.iter().filter(|a| a.is_some()).count();
        c.cache_hits
            .fetch_add((groups.len() - misses) as u64, Ordering::Relaxed);
        c.cache_misses.fetch_add(misses as u64, Ordering::Relaxed);
        let reads: &'b ReadBufs = reads;
        Ok(groups
            .iter()
            .zip(at)
            .map(|((_, _, cached, _), at)| match (cached, at) {
                (_, Some((at, fragmented))) => Old::Read(reads.get(&at), fragmented),
                (Some(l), None) => Old::Cached(Arc::clone(l)),
                (None, None) => unreachable!("an interval not cached is read"),
            })
            .collect())
    }

    /// Applies one interval's resolved updates. Its interval is found again: an earlier
    /// interval of the slice may have merged with it (then it is loaded afresh; the
    /// records of the keys being updated are the same, so their outcomes stand).
    fn apply_plan(&self, st: &mut State, plan: Plan<'_>, records: &[u8]) -> Result<()> {
        for u in plan.ups {
            self.rows.forget(&u.key);
        }
        let (iv, found) = st.index.find_to_edit(&plan.ups[0].key);
        let old = if iv.key == plan.key && iv.size == plan.size {
            plan.old
        } else {
            Old::Cached(self.load(st, &iv)?)
        };
        self.apply_interval(st, (&iv, &found), &old, plan.ups, plan.outcomes, records)
    }

    /// Runs `f` under the write lock and records how long it was held. An error marks
    /// the store broken: the change may be half made.
    pub(crate) fn locked<R>(
        &self,
        holds: &LockHolds,
        f: impl FnOnce(&mut State) -> Result<R>,
    ) -> Result<R> {
        self.write_section(self.state.write(), holds, f)
    }

    /// [`SortedStore::locked`] with the write lock `st` the caller already took (by
    /// upgrading the lock it worked out the change under).
    fn write_section<R>(
        &self,
        mut st: RwLockWriteGuard<'_, State>,
        holds: &LockHolds,
        f: impl FnOnce(&mut State) -> Result<R>,
    ) -> Result<R> {
        let t0 = Instant::now();
        let section = self.epoch.section();
        let r = f(&mut st);
        drop(section);
        drop(st);
        holds.record(t0.elapsed());
        if r.is_err() {
            self.broken.store(true, Ordering::Release);
        }
        r
    }

    /// Rewrites contiguous the intervals reads asked for ([`SortedStore::wanted`]), in key
    /// order, [`REWRITE_SLICE`] at a time, until `stop` says to (the rest are forgotten;
    /// reads that miss them again ask again). An interval is taken only if one still starts
    /// at the key asked for and it is still [`scattered`](super::store::scattered). The
    /// caller holds the database's commit lock, so nothing else changes the store
    /// meanwhile: a slice's intervals are read and checked under the upgradable lock, which
    /// readers pass, a GC pass their writes would make due is run there
    /// ([`SortedStore::collect_garbage`]: in short write sections, not inside a rewrite
    /// under the write lock for all of its walk), and they are written under the write
    /// lock. Their records do not change, so neither do the index and the cache. The space
    /// is synced once [`REWRITE_SYNC`] rewrites wait for it (see
    /// [`SortedStore::sync_rewrites`]), and the cache refitted to the smaller tree then,
    /// not after every call: a refit walks both indexes' nodes, and reads that keep
    /// asking bring a call as often as every 10 ms (those refits took a third of the
    /// committer's samples in 10M UDB YCSB E once the sweep had ended,
    /// docs/benchmarks.md, seventy-sixth session). Returns how many intervals were
    /// rewritten.
    pub(crate) fn rewrite_wanted(&self, holds: &LockHolds, stop: impl Fn() -> bool) -> Result<u64> {
        let keys: Vec<Box<[u8]>> = std::mem::take(&mut *self.wanted.lock())
            .into_iter()
            .collect();
        let mut done = 0;
        for slice in keys.chunks(REWRITE_SLICE) {
            if stop() {
                break;
            }
            let mut read: Vec<(u64, Loaded)> = Vec::with_capacity(slice.len());
            let st = self.state.upgradable_read();
            for key in slice {
                let iv = st.index.find(key);
                if *iv.key != **key {
                    continue;
                }
                // The read counts the extents from the same search of the tree.
                let (l, extents) = self.read_interval_at(&st.space, &iv, None, None)?;
                if scattered(&st.space, &iv, extents) {
                    read.push((iv.offset, l));
                }
            }
            if read.is_empty() {
                continue;
            }
            let writes = read.iter().map(|(_, l)| l.size() as u64).sum();
            let st = self.collect_garbage(st, writes, holds)?;
            self.write_section(RwLockUpgradableReadGuard::upgrade(st), holds, |st| {
                read.iter()
                    .try_for_each(|(off, l)| st.space.rewrite(*off, l.bytes(), HEAD))
            })?;
            let n = read.len() as u64;
            self.counters.read_defrags.fetch_add(n, Ordering::Relaxed);
            done += n;
        }
        if self.rewrites_unsynced.fetch_add(done, Ordering::Relaxed) + done >= REWRITE_SYNC {
            self.sync_rewrites(holds)?;
        }
        Ok(done)
    }

    /// Whether a pass of the sweep is under way or due. Once writes have stopped
    /// (`trickle` false), any commit since the last pass makes one due; beside a trickle
    /// of writes, only commits that changed at least as many keys as the keyspace has
    /// intervals, so that a load followed at once by a trickle (YCSB E after its load)
    /// is swept, but a steady trickle does not bring a pass after every commit; or any
    /// commit, if the keyspace has lain scattered since it was opened
    /// ([`Sweep::scattered`]), so that a database reopened under a steady trickle is
    /// swept once. The first such commit judges the whole keyspace as a step judges its
    /// bytes ([`pieces_scattered`]: one walk of the tree's extents, here rather than in
    /// `open`, which a process that only reads pays for too).
    pub(crate) fn sweep_due(&self, trickle: bool) -> bool {
        let (under_way, changed, scattered) = {
            let sweep = self.sweep.lock();
            (sweep.at.is_some(), sweep.changed, sweep.scattered)
        };
        if under_way || changed == 0 || !trickle {
            return under_way || changed > 0;
        }
        let judged = {
            let st = self.state.read();
            if changed >= st.index.len() as u64 {
                return true;
            }
            match scattered {
                Some(scattered) => return scattered,
                None => pieces_scattered(&st.space, 0, st.space.len(), st.index.len()),
            }
        };
        // After the state lock is let go: the two are never held together.
        self.sweep.lock().scattered = Some(judged);
        judged
    }

    /// Takes up to `steps` steps of the committer's sweep of scattered intervals, which
    /// it runs while writes have stopped and everything is committed, or trickle
    /// ([`SortedStore::sweep_due`]); returns whether more are due. A pass walks the
    /// keyspace in key order, [`SWEEP_STEP`] bytes of whole intervals at a time, and
    /// rewrites a step's bytes into new, contiguous extents ([`FlexSpace::read_to_move`],
    /// then [`FlexSpace::put_moved`]) where they lie in more pieces of the data file
    /// than a quarter of their intervals beyond what one write would leave
    /// ([`FlexSpace::contiguous_extents`]). A random load leaves every interval in about
    /// four extents, each in a place of its own; swept, each lies in one, beside its
    /// neighbours, so a point read makes one read of the file and a scan reads its
    /// intervals in file order (docs/benchmarks.md, seventy-second session). The bytes
    /// are read under the upgradable lock, which readers pass, and written under the
    /// write lock, like the rewrites for the reads; records do not change, so neither
    /// do the index and the cache. The space is synced every [`SWEEP_SYNC`] bytes and at
    /// the pass's end, which then gives every interval its new spot and the cache what
    /// the smaller FlexTree gave back. A commit during a pass marks another one due
    /// after it. A keyspace that fits its interval cache is not swept, nor one whose
    /// space has a size limit.
    pub(crate) fn sweep_steps(&self, holds: &LockHolds, steps: usize) -> Result<bool> {
        let (mut at, mut unsynced, mut synced_at, sync_every) = {
            let mut sweep = self.sweep.lock();
            let sync_every = sweep.sync_every;
            match sweep.at.take() {
                Some(at) => (
                    at,
                    sweep.unsynced,
                    std::mem::take(&mut sweep.synced_at),
                    sync_every,
                ),
                None if sweep.changed > 0 => {
                    sweep.changed = 0;
                    sweep.scattered = Some(false);
                    (Vec::new(), 0, Vec::new(), sync_every)
                }
                None => return Ok(false),
            }
        };
        let skip = {
            let st = self.state.read();
            self.fits(&st) || st.space.is_limited()
        };
        if skip {
            // Reads of a keyspace the interval cache holds whole come from the cache,
            // where the file's layout does not reach them: a sweep would only write
            // and take write sections (at 1M pairs it cost the read phases it ran in
            // 0.85 of their speed, docs/benchmarks.md, seventy-second session). A
            // space with a size limit may have no room for a step's copy, and a
            // background pass must not fail the keyspace for that (nor can it offer
            // readers a view there).
            if unsynced > 0 {
                self.sync(holds)?;
            }
            let mut sweep = self.sweep.lock();
            sweep.unsynced = 0;
            return Ok(sweep.due());
        }
        let mut ended = false;
        for _ in 0..steps {
            let st = self.state.upgradable_read();
            // The step: whole intervals from the one holding `at`, up to SWEEP_STEP bytes.
            let mut step: Option<(u64, u64, usize)> = None;
            let mut next = None;
            st.index
                .walk_intervals(Some(&at), true, 0, |key, offset, size, _| match &mut step {
                    Some((_, len, _)) if *len + size > SWEEP_STEP => {
                        next = Some(key.to_vec());
                        false
                    }
                    Some((_, len, n)) => {
                        *len += size;
                        *n += 1;
                        true
                    }
                    None => {
                        step = Some((offset, size, 1));
                        true
                    }
                });
            if let Some((off, len, n)) = step.filter(|s| s.1 > 0) {
                if pieces_scattered(&st.space, off, len, n) {
                    let moving = st.space.read_to_move(off, len)?;
                    // What the sweep moves must be what was written: the blocks it
                    // goes to get checksums of whatever it writes.
                    verify_records(moving.bytes())
                        .map_err(|(at, why)| self.corrupt(off + at as u64, &why))?;
                    // Reads that met the last write section read a view from here on.
                    if self.views.offer(&st) {
                        self.counters.views_made.fetch_add(1, Ordering::Relaxed);
                    }
                    let st = self.collect_garbage(st, len, holds)?;
                    self.write_section(RwLockUpgradableReadGuard::upgrade(st), holds, |st| {
                        st.space.put_moved(&moving)
                    })?;
                    self.counters.swept_bytes.fetch_add(len, Ordering::Relaxed);
                    unsynced += len;
                }
            }
            match next {
                Some(key) => at = key,
                None => {
                    ended = true;
                    break;
                }
            }
            if unsynced >= sync_every {
                // A view holds the segments the sweep empties: it goes first.
                self.views.retire();
                self.sync(holds)?;
                // The sync freed the segments the intervals rewritten since the last one
                // lay in, and with them those intervals' spots: they get their new ones.
                // Only they: a walk of the whole keyspace here took a quarter of the
                // committer's time during a 10M sweep (docs/benchmarks.md, seventy-fourth
                // session). Intervals that the space's GC moved elsewhere find theirs on
                // their next read, and the pass's end gives every interval its own.
                self.refresh_spots(&self.state.read(), Some(&synced_at), Some(&at));
                synced_at.clone_from(&at);
                unsynced = 0;
            }
        }
        if ended {
            self.views.retire();
            if unsynced > 0 {
                self.sync(holds)?;
                unsynced = 0;
            }
            let st = self.state.read();
            self.fit_cache(&st);
            self.refresh_spots(&st, None, None);
        }
        let mut sweep = self.sweep.lock();
        sweep.unsynced = unsynced;
        if !ended {
            sweep.at = Some(at);
            sweep.synced_at = synced_at;
        }
        Ok(sweep.due())
    }

    /// Syncs the space if intervals were rewritten for the reads since it last was
    /// (unsynced, a crash only leaves them where they were; but the segments they
    /// free are reused only once a sync has made that durable). The sync may move
    /// extents out of emptied segments, so the cache is refitted after it.
    pub(crate) fn sync_rewrites(&self, holds: &LockHolds) -> Result<()> {
        if self.rewrites_unsynced.load(Ordering::Relaxed) > 0 {
            self.sync(holds)?;
            self.fit_cache(&self.state.read());
        }
        Ok(())
    }

    /// Removes the tombstones kept for snapshots that no snapshot needs any more.
    pub(crate) fn sweep(&self, cx: &Context) -> Result<()> {
        let done: Vec<Box<[u8]>> = self
            .state
            .read()
            .lingering
            .iter()
            .filter(|&(_, &seq)| !cx.snapshots.any_in(0, seq))
            .map(|(k, _)| k.clone())
            .collect();
        self.commit(
            done.into_iter().map(|key| Update {
                key,
                versions: Versions::new(),
            }),
            cx,
        )
    }

    /// Applies the updates that fall in interval `iv`: in place, a run of adjacent
    /// changed records at a time, or, if the interval is fragmented, by rewriting it
    /// whole (FlexDB's defragmentation).
    fn apply_interval(
        &self,
        st: &mut State,
        (iv, found): (&Interval, &Found),
        old: &Old<'_>,
        ups: &[Update],
        outcomes: Vec<Outcome>,
        records: &[u8],
    ) -> Result<()> {
        let rewrite = old.fragmented();
        let old = old.view();
        // Room for every update as a new record of its newest version, so the interval
        // being rebuilt is not copied again as it grows.
        let added: usize = ups
            .iter()
            .map(|u| u.key.len() + u.versions.first().map_or(0, |(_, v)| v.footprint()) + 32)
            .sum();
        let mut bytes = std::mem::take(&mut st.rebuild);
        bytes.clear();
        bytes.reserve(old.size() + added);
        let mut starts: Vec<u32> = Vec::with_capacity(old.len() + ups.len());
        let keep = |bytes: &mut Vec<u8>, starts: &mut Vec<u32>, rec: &[u8]| {
            starts.push(bytes.len() as u32);
            bytes.extend_from_slice(rec);
        };
        // Changed records next to each other are one edit of the space: the run's old
        // bytes collapsed (or overwritten, if the sizes match) and its new records
        // inserted at once, not an edit per record. Everything before a run is applied
        // first, so it starts at `iv.offset` plus the new bytes before it. `run` is the
        // old bytes it replaces and where its new bytes start in `bytes`.
        let mut run: Option<(u64, usize)> = None;
        // Whether an edit began at the interval's start: only then may its first extent
        // have lost the head tag, or the old first record moved off it.
        let mut at_head = rewrite;
        let mut edit_run = |run: &mut Option<(u64, usize)>, bytes: &[u8]| -> Result<()> {
            match run.take() {
                Some((old_len, from)) if !rewrite => {
                    at_head |= from == 0;
                    edit(
                        &mut st.space,
                        iv.offset + from as u64,
                        old_len,
                        &bytes[from..],
                    )
                }
                _ => Ok(()),
            }
        };
        let mut oi = 0;
        let mut shrank = false;
        let appended = !old.is_empty()
            && ups
                .iter()
                .all(|u| keyorder::lt(old.key(old.len() - 1), &u.key));
        for (u, outcome) in ups.iter().zip(outcomes) {
            while oi < old.len() && keyorder::lt(old.key(oi), &u.key) {
                edit_run(&mut run, &bytes)?;
                let (s, e) = old.span(oi);
                keep(&mut bytes, &mut starts, &old.bytes()[s..e]);
                oi += 1;
            }
            let existing = (oi < old.len() && keyorder::eq(old.key(oi), &u.key)).then_some(oi);
            let old_len = existing.map(|i| {
                let (s, e) = old.span(i);
                (e - s) as u64
            });
            let from = bytes.len();
            match (old_len, outcome) {
                (Some(_), Outcome::Keep) => {
                    edit_run(&mut run, &bytes)?;
                    let (s, e) = old.span(oi);
                    keep(&mut bytes, &mut starts, &old.bytes()[s..e]);
                    oi += 1;
                }
                (Some(len), Outcome::Remove) => {
                    run.get_or_insert((0, from)).0 += len;
                    oi += 1;
                    shrank = true;
                }
                (Some(len), Outcome::Write(at)) => {
                    let rec = &records[at];
                    run.get_or_insert((0, from)).0 += len;
                    shrank |= (rec.len() as u64) < len;
                    keep(&mut bytes, &mut starts, rec);
                    oi += 1;
                }
                (None, Outcome::Write(at)) => {
                    let rec = &records[at];
                    run.get_or_insert((0, from));
                    keep(&mut bytes, &mut starts, rec);
                }
                (None, Outcome::Keep | Outcome::Remove) => {}
            }
        }
        edit_run(&mut run, &bytes)?;
        while oi < old.len() {
            let (s, e) = old.span(oi);
            keep(&mut bytes, &mut starts, &old.bytes()[s..e]);
            oi += 1;
        }
        if rewrite {
            // One change: a sync between a collapse and an insert (a GC pass makes one)
            // would keep the interval's unchanged records nowhere, not even in the WAL.
            st.space.replace(iv.offset, old.size() as u64, &bytes)?;
            self.counters.defrags.fetch_add(1, Ordering::Relaxed);
        }
        let delta = bytes.len() as i64 - old.size() as i64;
        if delta != 0 {
            st.index.resize_found(found, &iv.key, delta)?;
        }
        let new = Laid::new(&bytes, starts);
        if at_head && !rewrite && !old.is_empty() {
            // The old first record, if it is still here but no longer first, still
            // carries the head tag.
            if let Some(j) = new.find(old.key(0)).filter(|&j| j > 0) {
                let off = iv.offset + new.span(j).0 as u64;
                if st.space.tag(off) == Some(HEAD) {
                    st.space.set_tag(off, 0)?;
                }
            }
        }
        let settled = self.settle(st, (iv, found), new, at_head, shrank, appended);
        st.rebuild = bytes;
        settled
    }

    /// Works out the record for `key` given its committed version and the new versions
    /// (newest first), writing history for every version a live snapshot may still read.
    /// Whether `key`'s tombstone is kept for snapshots goes to `linger` (`Some(seq)`: kept
    /// as of `seq`; `None`: not kept), for the caller to record under the write lock.
    fn resolve(
        &self,
        linger: &mut impl FnMut(Option<u64>),
        key: &[u8],
        current: Option<Record<'_>>,
        versions: &[(u64, Value)],
        records: &mut Vec<u8>,
        cx: &Context,
    ) -> Result<Outcome> {
        let base = current.map(|c| c.seq);
        // Newest first: the versions not yet applied are a prefix.
        let (fresh, stale) =
            versions.split_at(versions.partition_point(|(s, _)| base.is_none_or(|b| *s > b)));
        // Versions already applied (a replay): the record holds their value already.
        for (_, v) in stale {
            self.hold(cx, key, record_value(v), Some(Holder::Memory), None);
        }
        if fresh.is_empty() {
            // Nothing new (a replay, or a sweep): drop a tombstone no snapshot needs.
            return Ok(match current {
                Some(c) if c.value == RecordValue::Tombstone && !cx.snapshots.any_in(0, c.seq) => {
                    linger(None);
                    Outcome::Remove
                }
                _ => Outcome::Keep,
            });
        }
        // Each version with who holds its value now: the record, or the memtable. All
        // are borrowed (the record from the interval): only the newest is copied into
        // its new record, and an older one into history if a snapshot needs it.
        let mut older = current.map(|c| (c, Holder::Store));
        for &(seq, ref value) in fresh.iter().rev() {
            let prior = match older.take() {
                // Nobody reads below `seq`: the whole chain can go.
                Some((o, h)) if !cx.snapshots.any_in(0, seq) => {
                    self.hold(cx, key, o.value, Some(h), None);
                    None
                }
                Some((o, h)) if cx.snapshots.any_in(o.seq, seq) => {
                    self.counters
                        .history_written
                        .fetch_add(1, Ordering::Relaxed);
                    self.hold(cx, key, o.value, Some(h), Some(Holder::Pinned(seq)));
                    Some(history::write(cx.vlog, self.ks, &o, seq)?)
                }
                Some((o, h)) => {
                    self.hold(cx, key, o.value, Some(h), None);
                    o.prior
                }
                None => None,
            };
            let version = Record {
                seq,
                key,
                value: record_value(value),
                prior,
            };
            older = Some((version, Holder::Memory));
        }
        let (newest, _) = older.unwrap_or_else(|| unreachable!("fresh is not empty"));
        // The newest version's value passes from the memtable to the record.
        self.hold(
            cx,
            key,
            newest.value,
            Some(Holder::Memory),
            Some(Holder::Store),
        );
        self.counters
            .pairs_committed
            .fetch_add(1, Ordering::Relaxed);
        if newest.value == RecordValue::Tombstone {
            if newest.prior.is_none() {
                linger(None);
                return Ok(Outcome::Remove);
            }
            linger(Some(newest.seq));
        } else {
            linger(None);
        }
        let start = records.len();
        newest.encode(records);
        Ok(Outcome::Write(start..records.len()))
    }

    /// Moves the separated value `v` of `key` (if it is one) between holders.
    fn hold(
        &self,
        cx: &Context,
        key: &[u8],
        v: RecordValue<'_>,
        from: Option<Holder>,
        to: Option<Holder>,
    ) {
        if let RecordValue::Separated(p) = v {
            cx.vlog.hold(&p, key.len(), from, to);
        }
    }

    /// After an interval changed: removes it if empty, tags its head (if an edit began
    /// there: `at_head`), splits it if too big, merges it with the next if both are
    /// small, and caches what results if
    /// [`IntervalCache::wants`](super::cache::IntervalCache::wants) it.
    fn settle(
        &self,
        st: &mut State,
        (iv, found): (&Interval, &Found),
        new: Laid<'_>,
        at_head: bool,
        shrank: bool,
        appended: bool,
    ) -> Result<()> {
        // The cache's entries change so that a reader without the lock never finds one
        // claiming keys it does not hold (see the cache's documentation): a merged
        // interval's entry is replaced before the absorbed one's goes.
        if new.is_empty() {
            self.keep_view(st, &iv.key, None);
            if iv.key.is_empty() {
                self.cache_put(st, &iv.key, Arc::new(new.into_loaded()));
            } else if let Some(next) = st.index.next(&iv.key) {
                // The empty interval takes over its neighbour (its key is below all of
                // the neighbour's), whose head tag stays where it is. The neighbour's
                // cached form is taken before the merge drops its slot.
                let absorbed = self.cache.get(&st.index, &next.key);
                st.index.merge_next(&iv.key)?;
                self.counters.merges.fetch_add(1, Ordering::Relaxed);
                match absorbed {
                    Some(l) => self.cache_put(st, &iv.key, l),
                    None => self.cache.remove(&st.index, &iv.key),
                }
                self.cache.remove(&st.index, &next.key);
            } else {
                // The previous interval's entry keeps its end: below the true one, so
                // it stays right.
                self.cache.remove(&st.index, &iv.key);
                let prev = st
                    .index
                    .prev(&iv.key)
                    .unwrap_or_else(|| unreachable!("only the first interval has none before"));
                st.index.merge_next(&prev.key)?;
                self.counters.merges.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(());
        }
        // An interval whose edits all began past its first record keeps its first
        // extent, and the tag on it: the look at the tree is spared (a descent of a
        // large tree for each interval a commit changes).
        if at_head && st.space.tag(iv.offset) != Some(HEAD) {
            st.space.set_tag(iv.offset, HEAD)?;
        }
        debug_assert_eq!(st.space.tag(iv.offset), Some(HEAD), "interval {:?}", iv.key);
        let cached = self.cache.wants(
            st.index.slot_found(found, &iv.key),
            &iv.key,
            new.footprint(),
            self.fits(st),
        );
        if new.len() > self.split_pairs || (new.size() > SPLIT_BYTES && new.len() > 1) {
            return self.split(st, iv, new, appended, cached);
        }
        if shrank && new.len() < self.split_pairs {
            if let Some(next) = st.index.next(&iv.key) {
                if new.size() + next.size as usize <= SPLIT_BYTES {
                    let other = self.load(st, &next)?;
                    if new.len() + other.len() <= self.split_pairs {
                        st.index.merge_next(&iv.key)?;
                        self.counters.merges.fetch_add(1, Ordering::Relaxed);
                        st.space.set_tag(next.offset, 0)?;
                        let merged = || new.into_loaded().concat(&other);
                        self.recache(st, &iv.key, merged, cached);
                        self.keep_view(st, &next.key, None);
                        self.cache.remove(&st.index, &next.key);
                        return Ok(());
                    }
                }
            }
        }
        self.recache(st, &iv.key, || new.into_loaded(), cached);
        Ok(())
    }

    /// [`Views::replace`](super::view::Views::replace) where the keyspace fits the
    /// cache. There a commit replaces nearly every cached interval, and a view that
    /// kept the old forms held a second copy of the cache (100–190 MiB more at 1M
    /// pairs). Where it does not fit, a view keeps at most the cache's size of them,
    /// and the search of the view's index for every changed interval, under the write
    /// lock, with the emptied slots sending reads to the view's space, ran YCSB A and F
    /// at 10M UDB pairs about 0.84 times as fast (docs/benchmarks.md, forty-fifth
    /// session).
    fn keep_view(&self, st: &State, key: &[u8], now: Option<(&Arc<Loaded>, Option<&[u8]>)>) {
        if self.fits(st) {
            self.views.replace(key, now);
        }
    }

    /// Caches the changed interval keyed `key` if `cached`, or else makes sure the
    /// cache holds no entry for it.
    fn recache(&self, st: &State, key: &[u8], new: impl FnOnce() -> Loaded, cached: bool) {
        if cached {
            let l = Arc::new(new());
            let end = st.index.next(key).map(|n| n.key);
            self.keep_view(st, key, Some((&l, end.as_deref())));
            self.cache.put(&st.index, key, end.as_deref(), l);
        } else {
            self.keep_view(st, key, None);
            self.cache.remove(&st.index, key);
        }
    }

    /// Splits an interval that outgrew `split_pairs` or [`SPLIT_BYTES`] into even
    /// pieces, or, when the updates all went past its end (a sequential load), into
    /// full pieces and a remainder, so a load leaves full intervals behind it.
    fn split(
        &self,
        st: &mut State,
        iv: &Interval,
        new: Laid<'_>,
        appended: bool,
        cached: bool,
    ) -> Result<()> {
        self.keep_view(st, &iv.key, None);
        // Records past the interval's end (a load in key order) make pieces no reader
        // has asked for: only the last, which the next slice appends to, is cached,
        // unless a reader used the interval lately.
        let only_last = appended && !self.cache.read_lately(&st.index, &iv.key);
        let n = new.len();
        let pieces = n
            .div_ceil(self.split_pairs)
            .max(new.size().div_ceil(SPLIT_BYTES))
            .max(2);
        let target = if appended {
            self.split_pairs
        } else {
            n.div_ceil(pieces)
        };
        // Where each piece starts.
        let mut starts = vec![0];
        let (mut count, mut bytes) = (0, 0);
        for i in 0..n {
            let (s, e) = new.span(i);
            if count > 0 && (count == target || bytes + (e - s) > SPLIT_BYTES) {
                starts.push(i);
                (count, bytes) = (0, 0);
            }
            count += 1;
            bytes += e - s;
        }
        // Each later piece is keyed by the shortest key above the previous piece's last.
        let keys: Vec<&[u8]> = std::iter::once(&iv.key[..])
            .chain(
                starts[1..]
                    .iter()
                    .map(|&c| separator(new.key(c - 1), new.key(c))),
            )
            .collect();
        for (w, k) in starts.windows(2).zip(keys.windows(2)) {
            let at = (new.span(w[1]).0 - new.span(w[0]).0) as u64;
            st.index.split(k[0], at, k[1])?;
            self.counters.splits.fetch_add(1, Ordering::Relaxed);
            st.space
                .set_tag(iv.offset + new.span(w[1]).0 as u64, HEAD)?;
        }
        if !cached {
            self.cache.remove(&st.index, &iv.key);
            return Ok(());
        }
        if only_last {
            // The whole interval's entry goes before the last piece comes in.
            self.cache.remove(&st.index, &iv.key);
        }
        // The pieces are cached last first, so that until the first piece replaces the
        // whole interval's entry, a reader of its keys finds a right one.
        let end = st.index.next(keys[keys.len() - 1]).map(|n| n.key);
        let mut end = end.as_deref();
        let mut last = n;
        let new = new.into_loaded();
        for (&cut, &key) in starts.iter().zip(&keys).rev() {
            let piece = Arc::new(new.slice(cut..last));
            self.cache.put(&st.index, key, end, piece);
            if only_last {
                break;
            }
            (end, last) = (Some(key), cut);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::rngs::SmallRng;
    use rand::seq::SliceRandom;
    use rand::SeedableRng;

    use super::{until, LockHolds, Update, RECORDS_KEPT};
    use crate::io::{CrashMode, FaultVfs};
    use crate::memtable::Versions;
    use crate::space::SpaceOptions;
    use crate::{Db, Durability, WriteBatch};

    #[test]
    fn the_doubling_search_counts_the_keys_below_a_bound_as_a_binary_search_does() {
        for n in 1..70u16 {
            // Even keys 2, 4, …: every bound from just above the first to past the last,
            // on a key and between two.
            let ups: Vec<Update> = (1..=n)
                .map(|i| Update {
                    key: (2 * i).to_be_bytes().into(),
                    versions: Versions::new(),
                })
                .collect();
            for b in 3..=2 * n + 2 {
                let k = b.to_be_bytes();
                let want = ups.partition_point(|u| *u.key < k[..]);
                assert_eq!(until(&ups, &k), want, "{n} keys, bound {b}");
            }
        }
    }

    #[test]
    fn a_slice_of_large_values_leaves_no_large_buffer_behind() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let ks = db.default_keyspace();
        // 1,000 inline values of 2 KiB: one slice, about 2 MiB of records.
        let mut b = WriteBatch::new();
        for i in 0..1000u32 {
            b.put(&ks, &i.to_be_bytes(), &[i as u8; 2000]).unwrap();
        }
        db.write(b).unwrap();
        db.flush().unwrap();
        let kept = db.store_of(&ks).records.lock().capacity();
        assert!(kept <= RECORDS_KEPT, "{kept} bytes kept");
        for i in [0u32, 517, 999] {
            assert_eq!(db.get(&i.to_be_bytes()).unwrap(), Some(vec![i as u8; 2000]));
        }
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    /// On `vfs`, a database whose default keyspace caches nothing, lies in small
    /// segments and extents, and holds 6,000 pairs written in random order over twenty
    /// commits (every interval in several extents); the committer does not sweep, the
    /// test takes the sweep's steps. Returns it and the pairs.
    fn scattered(vfs: &FaultVfs) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>) {
        scattered_with(vfs, 0, None)
    }

    /// [`scattered`] with a cache of `cache_bytes` and the data file limited to
    /// `max_data_size`.
    fn scattered_with(
        vfs: &FaultVfs,
        cache_bytes: usize,
        max_data_size: Option<u64>,
    ) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>) {
        let db = Db::builder("/db")
            .vfs(vfs.shared())
            .cache_bytes(cache_bytes)
            .space_options(SpaceOptions {
                segment_size: 64 << 10,
                max_extent: 16 << 10,
                log_capacity: 8 << 10,
                log_grows_with_tree: false,
                max_data_size,
                ..SpaceOptions::default()
            })
            .idle_sweep(false)
            .open()
            .unwrap();
        let ks = db.default_keyspace();
        let mut order: Vec<u32> = (0..6_000).collect();
        order.shuffle(&mut SmallRng::seed_from_u64(5));
        let mut model = BTreeMap::new();
        for chunk in order.chunks(300) {
            let mut b = WriteBatch::new();
            b.durability(Durability::Buffered);
            for &i in chunk {
                let v = format!("{i}:{}", "v".repeat(20 + i as usize % 90)).into_bytes();
                b.put(&ks, &key(i), &v).unwrap();
                model.insert(key(i), v);
            }
            db.write(b).unwrap();
            db.flush().unwrap();
        }
        (db, model)
    }

    fn reads_as_modelled(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str) {
        for (k, v) in model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{when}: {k:?}");
        }
    }

    /// (intervals, extents, pieces in the data file) of the default keyspace.
    fn shape(db: &Db) -> (usize, usize, usize) {
        let store = db.store_of(&db.default_keyspace());
        let st = store.state.read();
        let len = st.space.len();
        (
            st.index.len(),
            st.space.extents_in(0, len),
            st.space.pieces_in(0, len),
        )
    }

    /// The sweep walks a scattered keyspace in steps and leaves it in a few pieces of
    /// the data file (where segments end), one extent per interval, its records as
    /// they were. A commit in the middle of a pass makes another pass due after it;
    /// the steps taken one at a time say more is due until the last pass ends.
    #[test]
    fn the_sweep_leaves_a_scattered_keyspace_in_few_pieces_and_passes_again_after_a_commit() {
        let vfs = FaultVfs::new(3);
        let (db, mut model) = scattered(&vfs);
        let store = db.store_of(&db.default_keyspace());
        let holds = LockHolds::default();
        let (intervals, extents, pieces) = shape(&db);
        assert!(
            extents >= 3 * intervals && pieces >= 3 * intervals,
            "scattered to begin with: {extents} extents, {pieces} pieces, {intervals} intervals"
        );
        // The load's commits marked a pass due.
        assert!(store.sweep.lock().due());
        assert!(
            store.sweep_steps(&holds, 1).unwrap(),
            "one step left more to do"
        );
        assert!(store
            .sweep
            .lock()
            .at
            .as_ref()
            .is_some_and(|k| !k.is_empty()));
        // A commit now: another pass once this one ends.
        db.put(&key(6_000), b"late").unwrap();
        model.insert(key(6_000), b"late".to_vec());
        db.flush().unwrap();
        assert_eq!(store.sweep.lock().changed, 1, "the keys the commit changed");
        let mut passes_ended = 0;
        while store.sweep_steps(&holds, 1).unwrap() {
            passes_ended += usize::from(store.sweep.lock().at.is_none());
        }
        assert_eq!(passes_ended, 1, "the pass under way ended with another due");
        let swept = store
            .counters
            .swept_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let (intervals, extents, pieces) = shape(&db);
        assert!(
            extents <= intervals + intervals / 4 && pieces <= intervals / 4,
            "after sweeping {swept} bytes: {extents} extents, {pieces} pieces, {intervals} intervals"
        );
        // Nothing scattered is left: a pass now rewrites nothing.
        store.sweep.lock().changed = 1;
        assert!(!store.sweep_steps(&holds, usize::MAX).unwrap());
        let again = store
            .counters
            .swept_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(again, swept, "a second pass rewrote what lay contiguous");
        reads_as_modelled(&db, &model, "swept");
        db.check().unwrap();
        drop(store);
        drop(db);
        let db = Db::builder("/db")
            .vfs(vfs.shared())
            .idle_sweep(false)
            .open()
            .unwrap();
        reads_as_modelled(&db, &model, "reopened");
        db.check().unwrap();
        // Opening marks no pass due: a process that only reads writes nothing.
        assert!(!db.store_of(&db.default_keyspace()).sweep.lock().due());
    }

    /// A pass syncs the space every `sync_every` bytes it rewrote. Each sync frees the
    /// segments the intervals rewritten since the last one lay in, and gives those
    /// intervals the shortcuts of where they lie now, so that their reads go there
    /// with no search of the tree.
    #[test]
    fn a_sync_within_a_pass_gives_the_intervals_rewritten_since_the_last_their_new_spots() {
        let vfs = FaultVfs::new(4);
        let (db, model) = scattered(&vfs);
        let store = db.store_of(&db.default_keyspace());
        let holds = LockHolds::default();
        store.sweep.lock().sync_every = 16 << 10;
        let (mut last_sync, mut syncs, mut checked) = (Vec::new(), 0, 0);
        while store.sweep_steps(&holds, 1).unwrap() {
            let synced_at = {
                let sweep = store.sweep.lock();
                if sweep.at.is_none() || sweep.synced_at == last_sync {
                    continue; // no sync since the last look
                }
                sweep.synced_at.clone()
            };
            syncs += 1;
            let st = store.state.read();
            let mut cursor = st.space.cursor();
            st.index
                .walk_intervals(Some(&last_sync), true, 0, |key, offset, size, slot| {
                    if key >= synced_at.as_slice() {
                        return false;
                    }
                    let now = cursor.shortcut_at(offset, size);
                    assert!(now.is_some());
                    assert_eq!(slot.shortcut(), now, "interval {key:?} after sync {syncs}");
                    checked += 1;
                    true
                });
            last_sync = synced_at;
        }
        let intervals = shape(&db).0;
        assert!(
            syncs >= 4 && checked >= intervals / 2,
            "{syncs} syncs within the pass, {checked} intervals checked of {intervals}"
        );
        reads_as_modelled(&db, &model, "swept");
        db.check().unwrap();
    }

    /// A keyspace that lay scattered when it was opened is due a pass beside a trickle
    /// of writes from its first commit on: a steady trickle alone would take long to
    /// change as many keys as it has intervals. Opening alone makes none due, and once
    /// swept and opened again, a commit beside a trickle makes none due either.
    #[test]
    fn a_keyspace_opened_scattered_is_due_a_pass_beside_a_trickle_from_its_first_commit() {
        let vfs = FaultVfs::new(6);
        let (db, mut model) = scattered(&vfs);
        let pieces = shape(&db).2;
        drop(db);
        let reopen = || {
            Db::builder("/db")
                .vfs(vfs.shared())
                .cache_bytes(0)
                .idle_sweep(false)
                .open()
                .unwrap()
        };
        let trickle = |db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u32| {
            db.put(&key(i), b"trickle").unwrap();
            model.insert(key(i), b"trickle".to_vec());
            db.flush().unwrap();
        };
        let db = reopen();
        let store = db.store_of(&db.default_keyspace());
        assert!(!store.sweep_due(false), "opening alone makes no pass due");
        trickle(&db, &mut model, 6_000);
        assert!(store.sweep_due(true), "one commit beside a trickle");
        let holds = LockHolds::default();
        while store.sweep_steps(&holds, usize::MAX).unwrap() {}
        let swept = shape(&db).2;
        assert!(
            swept * 4 <= pieces,
            "{swept} pieces after the pass, {pieces} before"
        );
        reads_as_modelled(&db, &model, "swept after reopening");
        trickle(&db, &mut model, 6_002);
        assert!(
            !store.sweep_due(true),
            "a commit beside a trickle after the pass"
        );
        drop(store);
        drop(db);
        let db = reopen();
        let store = db.store_of(&db.default_keyspace());
        trickle(&db, &mut model, 6_001);
        assert!(
            !store.sweep_due(true),
            "swept, then one commit beside a trickle"
        );
        assert!(
            store.sweep_due(false),
            "swept, then one commit and writes stopped"
        );
        reads_as_modelled(&db, &model, "reopened after the sweep");
        db.check().unwrap();
    }

    /// A keyspace its interval cache holds whole is not swept, however scattered (its
    /// reads come from the cache), nor one whose data file has a size limit (a step's
    /// copy may find no room, which must not fail the keyspace).
    #[test]
    fn a_keyspace_that_fits_its_cache_or_a_size_limit_is_not_swept() {
        for (cache, limit) in [(64 << 20, None), (0, Some(64 << 20))] {
            let vfs = FaultVfs::new(6);
            let (db, model) = scattered_with(&vfs, cache, limit);
            let store = db.store_of(&db.default_keyspace());
            assert_eq!(store.fits(&store.state.read()), limit.is_none());
            let (intervals, extents, _) = shape(&db);
            assert!(
                extents >= 3 * intervals,
                "{extents} extents, {intervals} intervals"
            );
            assert!(store.sweep.lock().due());
            assert!(!store
                .sweep_steps(&LockHolds::default(), usize::MAX)
                .unwrap());
            let swept = store
                .counters
                .swept_bytes
                .load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(swept, 0, "cache {cache}, limit {limit:?}");
            assert_eq!(shape(&db).1, extents);
            reads_as_modelled(&db, &model, "not swept");
        }
    }

    /// A record damaged on the disk is not moved: the sweep reads without the data
    /// blocks' checksums and checks every record itself (the blocks it writes get
    /// checksums of whatever it writes, so a damaged record moved would pass for a good
    /// one from then on), and fails naming the keyspace's offset, before any check of
    /// the damaged block's own checksum sees it.
    #[test]
    fn the_sweep_refuses_to_move_a_damaged_record() {
        let vfs = FaultVfs::new(7);
        let (db, _) = scattered(&vfs);
        let store = db.store_of(&db.default_keyspace());
        let path = store.dir.join("flexspace.data");
        let clean = vfs.contents(&path).unwrap();
        // Old copies of key 1's record lie in the file too: the live one is the copy
        // whose damage a point read (which checks the record) finds. It is in the
        // sweep's first step, which reads it before any GC pass could.
        let (key, value) = (b"key000001", b"1:vv");
        let copies: Vec<usize> = (0..clean.len() - 64)
            .filter(|&at| clean[at..].starts_with(key))
            .filter_map(|at| (at..at + 64).find(|&i| clean[i..].starts_with(value)))
            .collect();
        let live = copies.iter().find(|&&i| {
            let mut data = clean.clone();
            data[i + value.len() - 1] = b'w';
            vfs.set_contents(&path, data).unwrap();
            db.get(&key[..]).is_err()
        });
        assert!(
            live.is_some(),
            "no copy of the record is the live one: {copies:?}"
        );
        let holds = LockHolds::default();
        let failed = loop {
            match store.sweep_steps(&holds, 1) {
                Ok(true) => continue,
                Ok(false) => break None,
                Err(e) => break Some(e),
            }
        };
        assert!(
            matches!(&failed, Some(crate::Error::Corruption { reason, .. })
                if reason.starts_with("sorted keyspace")),
            "{failed:?}"
        );
    }

    /// The disk dies at points spread over a whole pass of the sweep (segments written,
    /// the space synced, holes punched); after a crash of each kind drawn at random,
    /// every pair reads as written and the keyspace checks.
    #[test]
    fn a_crash_during_the_sweep_loses_nothing() {
        const POINTS: u64 = 16;
        let sweep = |db: &Db| -> crate::Result<()> {
            let store = db.store_of(&db.default_keyspace());
            let holds = LockHolds::default();
            while store.sweep_steps(&holds, 1)? {}
            Ok(())
        };
        let vfs = FaultVfs::new(0);
        let (db, model) = scattered(&vfs);
        let start = vfs.change_count();
        sweep(&db).unwrap();
        let work = vfs.change_count() - start;
        assert!(work >= 4 * POINTS, "{work} changes in a pass");
        drop(db);
        let mut died = 0;
        for n in 0..POINTS {
            let point = 1 + work * n / POINTS;
            let vfs = FaultVfs::new(n);
            let (db, _) = scattered(&vfs);
            vfs.fail_changes_from(point);
            died += u64::from(sweep(&db).is_err());
            drop(db);
            let mode = vfs.crash(CrashMode::Random);
            let db = Db::builder("/db")
                .vfs(vfs.shared())
                .idle_sweep(false)
                .open()
                .unwrap();
            reads_as_modelled(&db, &model, &format!("change {point} of {work}, {mode:?}"));
            db.check().unwrap();
        }
        assert!(
            died >= POINTS * 3 / 4,
            "the disk died in {died} of {POINTS} passes"
        );
    }
}
