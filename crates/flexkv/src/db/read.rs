//! Read handles: [`Keyspace`], [`Snapshot`] and [`Iter`].
//!
//! Every read happens at one sequence. A point read at "now" uses the visible sequence;
//! a snapshot or an iterator registers its sequence with the snapshot registry (so the
//! committer and GC keep what it can see) and releases it when dropped. An iterator
//! holds no lock between calls and sees exactly one sequence: what it has read ahead it
//! uses only while nothing it read has changed, and otherwise seeks again from the last
//! key it returned.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

use super::batch::check_value;
use super::Handle;
use crate::memtable::{KeyspaceId, Value};
use crate::sorted::history::{self, Version};
use crate::sorted::interval::Loaded;
use crate::sorted::store::{Epoch, Run, SortedStore};
use crate::sorted::Record;
use crate::sorted::RecordValue;
use crate::vlog::{First, Job, Pointer, ValueBytes, Wanted};
use crate::{Durability, Result, WriteBatch};

/// A named keyspace of a [`Db`](crate::Db): its own sorted key order. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Keyspace {
    db: Handle,
    id: KeyspaceId,
    name: Arc<str>,
}

impl Keyspace {
    pub(crate) fn new(db: Handle, id: KeyspaceId, name: &str) -> Self {
        Keyspace {
            db,
            id,
            name: name.into(),
        }
    }

    pub(crate) fn id(&self) -> KeyspaceId {
        self.id
    }

    pub(crate) fn db_id(&self) -> u64 {
        self.db.id
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Puts `value` (which may be empty) at `key`, with [`Durability::Sync`].
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with(key, value, Durability::Sync)
    }

    /// Puts `value` at `key` with the given durability.
    pub fn put_with(&self, key: &[u8], value: &[u8], durability: Durability) -> Result<()> {
        check_value(value)?;
        let mut b = WriteBatch::new();
        b.durability(durability).put(self, key, value)?;
        self.db.write(b).map(drop)
    }

    /// Deletes `key`, with [`Durability::Sync`]. Deleting a missing key is not an error.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.delete_with(key, Durability::Sync)
    }

    /// Deletes `key` with the given durability.
    pub fn delete_with(&self, key: &[u8], durability: Durability) -> Result<()> {
        let mut b = WriteBatch::new();
        b.durability(durability).delete(self, key)?;
        self.db.write(b).map(drop)
    }

    /// The value at `key`, as of now.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get_at(self.id, key, self.db.vis.visible(), false)
    }

    /// Whether `key` has a value (possibly empty), as of now.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.db
            .contains_at(self.id, key, self.db.vis.visible(), false)
    }

    /// A snapshot at the current visible sequence, reading this keyspace.
    pub fn snapshot(&self) -> Snapshot {
        let seq = self.db.snapshots.acquire(&self.db.vis);
        Snapshot {
            guard: Arc::new(Guard {
                db: self.db.clone(),
                seq,
            }),
            ks: self.id,
        }
    }

    /// The pairs with keys in `range`, in key order (reverse with `.rev()`), as of now.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.snapshot().range(range)
    }

    /// The pairs whose keys start with `prefix`, as of now.
    pub fn prefix(&self, prefix: &[u8]) -> Iter {
        self.snapshot().prefix(prefix)
    }

    /// Every pair, as of now.
    pub fn iter(&self) -> Iter {
        self.snapshot().iter()
    }
}

/// Keeps a sequence registered as a live snapshot until the last user drops it.
#[derive(Debug)]
struct Guard {
    db: Handle,
    seq: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.db.snapshots.release(self.seq);
    }
}

/// A consistent read-only view of the database at one sequence: it sees every write
/// acknowledged before it was taken and nothing after. Released when dropped (with
/// every [`Iter`] made from it). Reads go to one keyspace; [`Snapshot::keyspace`] gives
/// a view of another at the same sequence.
#[derive(Clone, Debug)]
pub struct Snapshot {
    guard: Arc<Guard>,
    ks: KeyspaceId,
}

impl Snapshot {
    /// The sequence this snapshot reads at.
    pub fn seq(&self) -> u64 {
        self.guard.seq
    }

    /// The same snapshot, reading keyspace `ks` (of the same database).
    pub fn keyspace(&self, ks: &Keyspace) -> Result<Snapshot> {
        if ks.db.id != self.guard.db.id {
            return Err(crate::Error::invalid(
                "the keyspace belongs to another database than the snapshot",
            ));
        }
        Ok(Snapshot {
            guard: Arc::clone(&self.guard),
            ks: ks.id,
        })
    }

    /// The value at `key` as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.guard.db.get_at(self.ks, key, self.guard.seq, true)
    }

    /// Whether `key` had a value as of the snapshot.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.guard
            .db
            .contains_at(self.ks, key, self.guard.seq, true)
    }

    /// The pairs with keys in `range` as of the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let own = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        Iter {
            guard: Arc::clone(&self.guard),
            ks: self.ks,
            lo: own(range.start_bound()),
            hi: own(range.end_bound()),
            done: false,
            cur: Cur::default(),
            unsettled: None,
            buf: StoreBuf::default(),
            buf_epoch: None,
            last_read: None,
            store_batch: STORE_AHEAD_FIRST,
            epoch: None,
            store: None,
            buf_forward: true,
            buf_end: false,
            ahead: HashMap::default(),
            ahead_bytes: 0,
            issued: 0,
            taken: 0,
            streak: 0,
            borrow: false,
            batch: start_window(&self.guard.db),
            mems: Vec::new(),
            mems_generation: None,
            mems_forward: true,
            clear: 0,
            clear_forward: true,
            expected: None,
        }
    }

    /// The pairs whose keys start with `prefix` as of the snapshot.
    pub fn prefix(&self, prefix: &[u8]) -> Iter {
        let hi = match successor(prefix) {
            Some(s) => Bound::Excluded(s),
            None => Bound::Unbounded,
        };
        let mut it = self.range::<&[u8], _>(..);
        it.lo = Bound::Included(prefix.to_vec());
        it.hi = hi;
        it
    }

    /// Every pair as of the snapshot.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }
}

/// The smallest key greater than every key starting with `prefix`, if there is one.
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < u8::MAX {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// An iterator over `(key, value)` pairs of one keyspace at one sequence, in key order
/// from the front and in reverse from the back ([`DoubleEndedIterator`]). An item is an
/// error if a value cannot be read (a value-log record fails its checks) or the
/// database was closed; iteration may go on after a value error.
///
/// Each step merges the memtables with the sorted store. From each memtable it keeps
/// the next entries found (searched again only once the iterator passes them, or when
/// the memtable list changes); from the store it takes whole cached intervals, walking
/// from one to the next in the cache without the keyspace's lock while the committer
/// is not editing (the store's epoch says so), and loading under the lock otherwise.
/// Buffered records are used only while the store's epoch is unchanged; after a
/// commit the iterator seeks again by key. No lock is held between steps.
///
/// [`Iter::next_ref`] returns pairs borrowed from the iterator: a key and an inline
/// value from the store are slices of the cached interval, so a scan copies nothing.
#[derive(Debug)]
pub struct Iter {
    guard: Arc<Guard>,
    ks: KeyspaceId,
    /// What is left to visit: shrinks from both ends as items are returned.
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    done: bool,
    /// The pair the last step stood on.
    cur: Cur,
    /// The bound behind (`lo` forward) does not yet exclude `cur`'s key: see
    /// [`Iter::settle`].
    unsettled: Option<bool>,
    /// Store records past the bound in the current direction, nearest first.
    buf: StoreBuf,
    /// The store epoch `buf` was read at (`None`: nothing read).
    buf_epoch: Option<u64>,
    /// The last interval the last read of the store returned, and its epoch: where
    /// the next read most likely starts ([`SortedStore::scan`]'s hint).
    ///
    /// [`SortedStore::scan`]: crate::sorted::store::SortedStore::scan
    last_read: Option<(u64, Arc<Loaded>)>,
    /// Records to take from the cache per read of the store where the caller has not
    /// said how many pairs it wants ([`Iter::expecting`]): it doubles from
    /// [`STORE_AHEAD_FIRST`] to [`STORE_AHEAD`], so a long scan searches the cache
    /// seldom and a short one does not walk far past where it stops.
    store_batch: usize,
    /// The store's epoch counter (taken on the first read of the store). `store`
    /// holds it too; kept here so that a step loads the counter straight, not through
    /// the store's struct, whose lock word every read writes.
    epoch: Option<Arc<Epoch>>,
    /// The keyspace's store (taken on the first read of it): looked up once, not at
    /// every read of it, since the lookup takes the database's lock of the stores and a
    /// count of the store's `Arc`, which other threads' readers write too.
    store: Option<Arc<SortedStore>>,
    buf_forward: bool,
    /// The store has nothing past `buf` in this direction.
    buf_end: bool,
    /// Values handed to the reader threads, by pointer (the job and the item in it): a
    /// record's bytes never change, so a value read ahead is right whenever its pointer
    /// comes up.
    ahead: HashMap<Pointer, Ahead, foldhash::fast::RandomState>,
    /// The value bytes in `ahead`.
    ahead_bytes: u64,
    /// The order the next value handed to the readers gets (they are handed in scan
    /// order)...
    issued: u64,
    /// ...and one past the order of the last one the scan took: those in `ahead` with
    /// a lower order were passed over (a memtable shadowed their keys).
    taken: u64,
    /// Separated values resolved in a row without read-ahead.
    streak: u32,
    /// The last step was [`Iter::next_ref`]'s: values read ahead from a mapping are
    /// checked in place and borrowed, not copied (the caller borrows them too).
    borrow: bool,
    /// The read-ahead window (values in flight): [`READAHEAD_FIRST`] (or one more than
    /// the reader threads), doubling up to [`READAHEAD`] each time a read waited on the
    /// device. From the page cache a small window keeps the threads busy, and a short
    /// scan does not read far past where it stops.
    batch: usize,
    /// The memtables (newest first) with the next entry of each in the direction
    /// `mems_forward`, taken from the memtable list of generation `mems_generation`.
    mems: Vec<MemHead>,
    mems_generation: Option<u64>,
    mems_forward: bool,
    /// Records of `buf`, nearest first, that the last full step in direction
    /// `clear_forward` found to come before every memtable's next entry and before
    /// the bound ahead: the steps take them with no comparison of keys
    /// ([`Iter::step_clear`]) while the memtable list and the store's epoch stay as
    /// they were.
    clear: usize,
    clear_forward: bool,
    /// Pairs the caller still means to take, if it said ([`Iter::expecting`]): a read
    /// of the store takes that many records (up to [`STORE_AHEAD`]), no more.
    expected: Option<usize>,
}

/// Store records an iterator has read ahead of its position, nearest first: runs of
/// cached intervals (never empty), decoded a record at a time as it comes to them.
#[derive(Debug, Default)]
struct StoreBuf {
    runs: VecDeque<Run>,
}

impl StoreBuf {
    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn clear(&mut self) {
        self.runs.clear();
    }

    /// The nearest record's place in its interval.
    fn nearest(run: &Run, forward: bool) -> usize {
        if forward {
            run.range.start
        } else {
            run.range.end - 1
        }
    }

    fn front_key(&self, forward: bool) -> Option<&[u8]> {
        let run = self.runs.front()?;
        Some(run.interval.key(Self::nearest(run, forward)))
    }

    /// Whether the nearest record is in `interval`.
    fn front_in(&self, interval: Option<&Arc<Loaded>>) -> bool {
        match (self.runs.front(), interval) {
            (Some(run), Some(l)) => Arc::ptr_eq(&run.interval, l),
            _ => false,
        }
    }

    /// Passes the nearest record; returns its place in its interval, which is put in
    /// `interval` (unless it is there already).
    fn pop(&mut self, forward: bool, interval: &mut Option<Arc<Loaded>>) -> Option<usize> {
        let run = self.runs.front_mut()?;
        let at = Self::nearest(run, forward);
        if forward {
            run.range.start += 1;
        } else {
            run.range.end -= 1;
        }
        let same = interval
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, &run.interval));
        if run.range.is_empty() {
            let run = self.runs.pop_front()?;
            if !same {
                *interval = Some(run.interval);
            }
        } else if !same {
            *interval = Some(Arc::clone(&run.interval));
        }
        Some(at)
    }

    /// Every record held, nearest first.
    fn records(&self, forward: bool) -> impl Iterator<Item = Record<'_>> {
        self.runs.iter().flat_map(move |run| {
            let order: Box<dyn Iterator<Item = usize>> = if forward {
                Box::new(run.range.clone())
            } else {
                Box::new(run.range.clone().rev())
            };
            order.map(|i| run.interval.record(i))
        })
    }
}

/// The pair an iterator stands on, where it lives: in a record of a cached interval
/// (borrowed, not copied, until the caller asks for a copy), or owned.
#[derive(Debug, Default)]
struct Cur {
    /// The interval the key (and an inline value) lie in, if they come from the store;
    /// kept from one step to the next while the steps stay in it.
    interval: Option<Arc<Loaded>>,
    key: CurKey,
    value: CurValue,
}

#[derive(Debug)]
enum CurKey {
    /// Bytes of `interval`.
    Span(std::ops::Range<usize>),
    Owned(Box<[u8]>),
}

impl Default for CurKey {
    fn default() -> Self {
        CurKey::Owned(Box::default())
    }
}

#[derive(Debug, Default)]
enum CurValue {
    /// A deleted key (or none yet).
    #[default]
    None,
    /// An inline value in `interval`: these bytes of it.
    Span(std::ops::Range<usize>),
    /// An inline value from a memtable or a history record.
    Inline(Box<[u8]>),
    /// A value in the value log, not read yet.
    Pointer(Pointer),
    /// A value read from the value log (borrowed from a mapping if the scan borrows).
    Read(ValueBytes),
}

impl Cur {
    fn bytes(&self, span: &std::ops::Range<usize>) -> &[u8] {
        match &self.interval {
            Some(l) => &l.bytes()[span.clone()],
            None => unreachable!("a span is within the current interval"),
        }
    }

    fn key(&self) -> &[u8] {
        match &self.key {
            CurKey::Span(r) => self.bytes(r),
            CurKey::Owned(k) => k,
        }
    }

    /// The value, once resolved (empty before).
    fn value(&self) -> &[u8] {
        match &self.value {
            CurValue::Span(r) => self.bytes(r),
            CurValue::Inline(v) => v,
            CurValue::Read(v) => v.as_slice(),
            CurValue::Pointer(_) | CurValue::None => &[],
        }
    }

    /// Stands on a memtable's (or a history record's) version of `key`.
    fn set_owned(&mut self, key: Box<[u8]>, v: Value) {
        self.key = CurKey::Owned(key);
        self.value = match v {
            Value::Inline(v) => CurValue::Inline(v),
            Value::Separated(p) => CurValue::Pointer(p),
            Value::Tombstone => CurValue::None,
        };
    }
}

/// Where `part` (a slice of `whole`) lies in it.
fn span(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// One memtable as an iterator reads it. What a memtable holds at or below the
/// iterator's sequence never changes (a batch goes into the memtable that was active
/// when its sequence was handed out, before that sequence becomes visible), so entries
/// found ahead of the iterator stay right until it passes them. Going forward, one
/// search finds the next several (a walk along the skip list after it), twice as
/// many each time up to [`MEM_AHEAD`], so a scan through many memtable entries does
/// not search from the top for each; going backward, one at a time.
#[derive(Debug)]
struct MemHead {
    table: Arc<crate::memtable::Memtable>,
    /// Entries found ahead in the iterator's direction, nearest first.
    ahead: VecDeque<(Box<[u8]>, Value)>,
    /// The memtable may hold more past `ahead` (searched once `ahead` is empty).
    more: bool,
    /// How many entries the next search finds.
    batch: usize,
}

/// Entries a memtable search finds ahead of an iterator at first...
const MEM_AHEAD_FIRST: usize = 4;
/// ...and at most.
const MEM_AHEAD: usize = 64;

impl MemHead {
    fn new(table: Arc<crate::memtable::Memtable>) -> Self {
        MemHead {
            table,
            ahead: VecDeque::new(),
            more: true,
            batch: MEM_AHEAD_FIRST,
        }
    }

    fn front_key(&self) -> Option<&[u8]> {
        self.ahead.front().map(|(k, _)| &**k)
    }
}

/// Records an iterator takes from cached intervals at its first read of the store...
const STORE_AHEAD_FIRST: usize = 16;
/// ...and at most.
const STORE_AHEAD: usize = 256;

/// The read-ahead window before any read waited on the device.
fn first_window(db: &super::Inner) -> usize {
    (db.opts.scan_read_threads + 1).clamp(READAHEAD_FIRST, READAHEAD)
}

/// The read-ahead window a scan starts with: the first one, or twice that if the last
/// read through a pointer waited on the device (the scan then starts on the device
/// path).
fn start_window(db: &super::Inner) -> usize {
    if db.vlog.device() {
        (2 * first_window(db)).min(READAHEAD)
    } else {
        first_window(db)
    }
}

/// A value handed to the reader threads: the job reading it, its place in the job, and
/// its order among the values the scan handed.
#[derive(Debug)]
struct Ahead {
    job: Arc<Job>,
    item: usize,
    order: u64,
}

/// Separated values an iterator reads one by one before it starts reading ahead.
const READAHEAD_AFTER: u32 = 2;
/// Read ahead only when at least this many values are known to come...
const READAHEAD_MIN: usize = 4;
/// ...the window is at first this many (or one more than the reader threads)...
const READAHEAD_FIRST: usize = 8;
/// ...and grows up to this many while reads wait on the device...
const READAHEAD: usize = 64;
/// ...and the most bytes of them.
const READAHEAD_BYTES: u64 = 8 << 20;

type Item = Result<(Vec<u8>, Vec<u8>)>;

impl Iter {
    /// Whether `key` is before the bound ahead in the direction (the one behind holds
    /// for every entry found from it).
    fn before_end(&self, key: &[u8], forward: bool) -> bool {
        if forward {
            match &self.hi {
                Bound::Included(h) => key <= h.as_slice(),
                Bound::Excluded(h) => key < h.as_slice(),
                Bound::Unbounded => true,
            }
        } else {
            match &self.lo {
                Bound::Included(l) => key >= l.as_slice(),
                Bound::Excluded(l) => key > l.as_slice(),
                Bound::Unbounded => true,
            }
        }
    }

    /// Refills the buffer of store records in the direction if it is empty or stale.
    fn fill_store_buf(&mut self, forward: bool) -> Result<()> {
        let epoch = self.epoch.as_ref().map(|e| e.now());
        if self.buf_epoch != epoch || self.buf_forward != forward {
            self.buf.clear();
            self.buf_epoch = None;
        }
        if self.buf.is_empty() && !(self.buf_epoch.is_some() && self.buf_end) {
            self.settle();
            let store = match &self.store {
                Some(store) => store,
                None => self.store.insert(self.guard.db.store(self.ks)?),
            };
            self.epoch.get_or_insert_with(|| Arc::clone(&store.epoch));
            let from = if forward {
                as_ref(&self.lo)
            } else {
                as_ref(&self.hi)
            };
            let min = if self.streak >= READAHEAD_AFTER {
                self.batch
            } else {
                1
            };
            let hint = self.last_read.as_ref().map(|(e, l)| (*e, l));
            // Told how many pairs are wanted, one read takes them all (up to the
            // most per read); not told, reads grow from a few records.
            let ahead = match self.expected {
                None => self.store_batch,
                Some(left) => left.clamp(1, STORE_AHEAD),
            };
            let (e, recs) = store.scan(from, forward, min, ahead, hint)?;
            self.last_read = recs.last().map(|r| (e, Arc::clone(&r.interval)));
            self.store_batch = (self.store_batch * 2).min(STORE_AHEAD);
            self.buf_epoch = Some(e);
            self.buf_forward = forward;
            self.buf_end = recs.is_empty();
            for r in &recs {
                r.interval.touch(r.range.clone());
            }
            self.buf.runs = recs.into();
        }
        Ok(())
    }

    /// Brings `mems` up to date: the current memtable list (keeping the entries found
    /// in memtables still on it), each searched for its next entry in the direction.
    fn fill_mems(&mut self, forward: bool) {
        let db = &self.guard.db;
        let generation = db.tables_generation.load(Ordering::Acquire);
        if self.mems_generation != Some(generation) {
            let (tables, generation) = {
                let t = db.tables.read();
                (t.newest_first(), t.generation)
            };
            let mut old = std::mem::take(&mut self.mems);
            self.mems = tables
                .into_iter()
                .map(
                    |table| match old.iter().position(|m| Arc::ptr_eq(&m.table, &table)) {
                        Some(i) => old.swap_remove(i),
                        None => MemHead::new(table),
                    },
                )
                .collect();
            self.mems_generation = Some(generation);
        }
        if self.mems_forward != forward {
            for m in &mut self.mems {
                *m = MemHead::new(Arc::clone(&m.table));
            }
            self.mems_forward = forward;
        }
        if self.mems.iter().any(|m| m.ahead.is_empty() && m.more) {
            self.settle();
        }
        let (ks, seq) = (self.ks, self.guard.seq);
        for m in &mut self.mems {
            if m.ahead.is_empty() && m.more {
                if forward {
                    let from = as_ref(&self.lo);
                    m.more = m.table.next_run_at(ks, from, seq, m.batch, &mut m.ahead);
                    m.batch = (m.batch * 2).min(MEM_AHEAD);
                } else {
                    let found = m.table.prev_at(ks, as_ref(&self.hi), seq);
                    m.more = found.is_some();
                    m.ahead.extend(found.map(|(k, _, v)| (k, v)));
                }
            }
        }
    }

    /// Moves `cur` to the next pair in the direction, its value resolved: a clear
    /// record with an inline value at once ([`Iter::step_clear_inline`]), anything
    /// else by the general step ([`Iter::step_resolved`]).
    #[inline]
    fn advance(&mut self, forward: bool) -> Option<Result<()>> {
        if self.step_clear_inline(forward) {
            return Some(Ok(()));
        }
        self.step_resolved(forward)
    }

    /// The next pair in the direction, copied out, with its value resolved.
    fn step(&mut self, forward: bool) -> Option<Item> {
        self.borrow = false;
        if let Err(e) = self.advance(forward)? {
            return Some(Err(e));
        }
        self.settle();
        let cur = &mut self.cur;
        let key = match std::mem::take(&mut cur.key) {
            CurKey::Span(r) => cur.bytes(&r).to_vec(),
            CurKey::Owned(k) => k.into_vec(),
        };
        let value = match std::mem::take(&mut cur.value) {
            CurValue::Span(r) => cur.bytes(&r).to_vec(),
            CurValue::Inline(v) => v.into_vec(),
            CurValue::Read(v) => v.into_vec(),
            CurValue::Pointer(_) | CurValue::None => unreachable!("resolved by step_resolved"),
        };
        Some(Ok((key, value)))
    }

    /// The next pair in the direction, borrowed from the iterator.
    fn step_ref(&mut self, forward: bool) -> Option<Result<(&[u8], &[u8])>> {
        self.borrow = true;
        if let Err(e) = self.advance(forward)? {
            return Some(Err(e));
        }
        Some(Ok((self.cur.key(), self.cur.value())))
    }

    /// Moves `cur` to the next pair in the direction, with its value resolved (read
    /// ahead when the values come from the value log one after another).
    fn step_resolved(&mut self, forward: bool) -> Option<Result<()>> {
        if let Err(e) = self.step_raw(forward)? {
            return Some(Err(e));
        }
        let p = match self.cur.value {
            CurValue::Pointer(p) => p,
            _ => {
                self.streak = 0;
                return Some(Ok(()));
            }
        };
        let key = self.cur.key().to_vec();
        match self.value(&key, Value::Separated(p)) {
            Ok(Some(v)) => {
                self.cur.value = CurValue::Read(v);
                Some(Ok(()))
            }
            // Only a lookup again after GC gets here, and it reads at the same sequence.
            Ok(None) => Some(Err(crate::Error::corruption(
                &self.guard.db.dir,
                0,
                format!("key {key:?} vanished from the iterator's snapshot"),
            ))),
            Err(e) => Some(Err(e)),
        }
    }

    /// The version in `cur`, unresolved, as a memtable value.
    fn cur_version(&self) -> Value {
        match &self.cur.value {
            CurValue::Span(_) | CurValue::Read(_) => Value::Inline(self.cur.value().into()),
            CurValue::Inline(v) => Value::Inline(v.clone()),
            CurValue::Pointer(p) => Value::Separated(*p),
            CurValue::None => Value::Tombstone,
        }
    }

    /// Makes the bound behind the iterator exclude the key it stands on (put off from
    /// the step itself, which needs it only to search again).
    fn settle(&mut self) {
        let Some(forward) = self.unsettled.take() else {
            return;
        };
        let key = self.cur.key();
        // The bound's buffer is reused: no allocation per step.
        match if forward { &mut self.lo } else { &mut self.hi } {
            Bound::Excluded(b) => {
                b.clear();
                b.extend_from_slice(key);
            }
            b => *b = Bound::Excluded(key.to_vec()),
        }
    }

    /// The value of `key` given the version found: read ahead, or read now.
    fn value(&mut self, key: &[u8], v: Value) -> Result<Option<ValueBytes>> {
        let (ks, seq) = (self.ks, self.guard.seq);
        let Value::Separated(p) = v else {
            self.streak = 0;
            let got = self.guard.db.resolve(ks, key, v, seq, true)?;
            return Ok(got.map(ValueBytes::Owned));
        };
        self.streak = self.streak.saturating_add(1);
        // On the device path a scan reads ahead from its second value.
        let after = if self.on_device_path() {
            1
        } else {
            READAHEAD_AFTER
        };
        if self.streak > after && self.in_flight() <= self.batch as u64 / 2 {
            self.read_ahead(p, key);
        }
        if let Some(a) = self.ahead.remove(&p) {
            self.ahead_bytes -= u64::from(p.len);
            self.taken = self.taken.max(a.order + 1);
            if self.ahead.len() as u64 > self.in_flight() + READAHEAD as u64 {
                self.drop_passed();
            }
            if self.on_device_path() {
                // Reads wait on the device: while a thread reads this value, the scan
                // reads the nearest one no thread has begun, one more read in flight.
                while a.job.under_way() && self.read_next_queued() {}
            }
            let (got, slow) = a.job.take(a.item);
            let slow = slow || self.guard.db.opts.scan_reads_slow;
            self.guard.db.vlog.set_device(slow);
            if slow {
                // Reads wait on the device: keep more of them in flight.
                self.batch = (self.batch * 2).min(READAHEAD);
            }
            return got.map(Some);
        }
        // Not read ahead (or its segment was collected before it could be): the usual way.
        let got = self.guard.db.resolve(ks, key, v, seq, true)?;
        Ok(got.map(ValueBytes::Owned))
    }

    /// Reads the nearest job handed to the readers that no one has begun; whether
    /// there was one.
    fn read_next_queued(&self) -> bool {
        let mut queued: Vec<&Ahead> = self.ahead.values().filter(|a| a.job.queued()).collect();
        queued.sort_by_key(|a| a.order);
        queued.iter().any(|a| a.job.read_if_queued())
    }

    /// Whether reads have waited on the device: the window has grown past its first
    /// size.
    fn on_device_path(&self) -> bool {
        self.batch > first_window(&self.guard.db)
    }

    /// Values handed to the readers that the scan has not yet come to.
    fn in_flight(&self) -> u64 {
        self.issued - self.taken
    }

    /// Forgets the values read ahead for keys the scan passed over (a memtable
    /// shadowed them): a job no one holds is skipped if not yet begun.
    fn drop_passed(&mut self) {
        let taken = self.taken;
        self.ahead.retain(|_, a| a.order >= taken);
        self.ahead_bytes = self.ahead.keys().map(|p| u64::from(p.len)).sum();
    }

    /// Hands `p` (unless already handed) and the separated values of the buffered store
    /// records after it to the reader threads (WiscKey §3.3.1), so that up to the
    /// current window (and at most [`READAHEAD_BYTES`]) are in flight. The scan goes on
    /// meanwhile.
    fn read_ahead(&mut self, p: Pointer, key: &[u8]) {
        let (ks, seq) = (self.ks, self.guard.seq);
        let room = (self.batch as u64).saturating_sub(self.in_flight()) as usize;
        let mut found: Vec<(Pointer, &[u8])> = Vec::new();
        let mut bytes = self.ahead_bytes;
        if !self.ahead.contains_key(&p) {
            found.push((p, key));
            bytes += u64::from(p.len);
        }
        for r in self.buf.records(self.buf_forward) {
            if found.len() >= room || bytes >= READAHEAD_BYTES {
                break;
            }
            if let (true, RecordValue::Separated(q)) = (r.seq <= seq, r.value) {
                if q != p && !self.ahead.contains_key(&q) {
                    found.push((q, r.key));
                    bytes += u64::from(q.len);
                }
            }
        }
        if self.in_flight() as usize + found.len() < READAHEAD_MIN {
            return; // too few to be worth the threads: read the one value now
        }
        let want: Vec<Wanted> = (self.issued..)
            .zip(found)
            .map(|(order, (ptr, key))| Wanted {
                ptr,
                ks,
                key: key.into(),
                order,
            })
            .collect();
        let db = &self.guard.db;
        db.stats
            .read_ahead
            .fetch_add(want.len() as u64, Ordering::Relaxed);
        self.issued += want.len() as u64;
        let first = if self.on_device_path() {
            First::Nearest
        } else {
            First::Farthest
        };
        for job in db
            .readers
            .submit(db.vlog.plan_reads(want, self.borrow), first)
        {
            job.run().hint_start();
            for (item, w) in job.run().items().iter().enumerate() {
                self.ahead_bytes += u64::from(w.ptr.len);
                let job = Arc::clone(&job);
                let order = w.order;
                self.ahead.insert(w.ptr, Ahead { job, item, order });
            }
        }
    }

    /// Moves `cur` to the store's nearest record in the direction, which the caller
    /// chose: its key and value where they lie in the cached interval, or, for a
    /// snapshot older than the record, the version the history chain holds. Where that
    /// chain cannot be read, the error is for this record alone: `cur` stands on its
    /// key all the same, so the scan goes on past it.
    fn take_stored(&mut self, forward: bool) -> std::result::Result<(), (crate::Error, bool)> {
        let cur = &mut self.cur;
        let i = self
            .buf
            .pop(forward, &mut cur.interval)
            .unwrap_or_else(|| unreachable!("chosen because present"));
        let Some(l) = &cur.interval else {
            unreachable!("set by pop")
        };
        let r = l.record(i);
        let seq = self.guard.seq;
        if r.seq <= seq {
            cur.key = CurKey::Span(span(l.bytes(), r.key));
            cur.value = match r.value {
                RecordValue::Inline(v) => CurValue::Span(span(l.bytes(), v)),
                RecordValue::Separated(p) => CurValue::Pointer(p),
                RecordValue::Tombstone => CurValue::None,
            };
        } else {
            // A snapshot older than the record: its version is in the history chain.
            let db = &self.guard.db;
            let found = Version::from_record(&r);
            let got = history::at(&db.vlog, self.ks, r.key, found, seq);
            let key = Box::from(r.key);
            match got {
                Ok(v) => cur.set_owned(key, v.map_or(Value::Tombstone, |v| v.value)),
                Err(e) => {
                    // The step passes the record all the same, so that the next one
                    // goes on after it: with the bound behind left short of it, a
                    // step that had to read the store again found it again, and at
                    // the end of the keys a scan returned the same error forever.
                    cur.set_owned(key, Value::Tombstone);
                    self.unsettled = Some(forward);
                    return Err((e, false));
                }
            }
        }
        Ok(())
    }

    /// How many of the records left in `buf` come, in the direction, before every
    /// memtable's next entry and before the bound ahead (none if a memtable has yet to
    /// be searched for its next entry). The count goes on from one run to the next
    /// while a whole run is clear, so that a scan crosses from interval to interval
    /// without a full step at each (a 50-pair scan meets about five). Against the
    /// memtables' nearest entry, a seek in each run's interval ([`Loaded::seek`]: by
    /// the heads where the interval has them, reading a record's bytes only on a
    /// tie), so that the records past where the scan will stop are not touched for it;
    /// against the bound ahead, if there is one, one comparison when the whole run
    /// comes before it, else a binary search.
    fn count_clear(&self, forward: bool) -> usize {
        if self.mems.iter().any(|m| m.ahead.is_empty() && m.more) {
            return 0;
        }
        let mem = self
            .mems
            .iter()
            .filter_map(MemHead::front_key)
            .reduce(|a, b| if (b < a) == forward { b } else { a });
        let mut total = 0;
        for run in &self.buf.runs {
            let n = self.clear_in(run, mem, forward);
            total += n;
            if n < run.range.len() {
                break;
            }
        }
        total
    }

    /// [`Iter::count_clear`] for one run: how many of its records, nearest first,
    /// come before `mem` (the memtables' nearest entry) and the bound ahead.
    fn clear_in(&self, run: &Run, mem: Option<&[u8]>, forward: bool) -> usize {
        let l = &run.interval;
        let (start, end) = (run.range.start, run.range.end);
        let n = match mem {
            None => run.range.len(),
            // The run's records below `m`.
            Some(m) if forward => l.seek(m).clamp(start, end) - start,
            // The run's records above `m`: past it, and past a record equal to it.
            Some(m) => {
                let at = l.seek(m);
                let past = at + usize::from(at < l.len() && l.key(at) == m);
                end - past.clamp(start, end)
            }
        };
        let bounded = if forward {
            !matches!(self.hi, Bound::Unbounded)
        } else {
            !matches!(self.lo, Bound::Unbounded)
        };
        if n == 0 || !bounded {
            return n;
        }
        // The `j`th record from the run's near end.
        let key = |j: usize| l.key(if forward { start + j } else { end - 1 - j });
        let before = |k: &[u8]| self.before_end(k, forward);
        if before(key(n - 1)) {
            return n;
        }
        // The records before the bound are a prefix (the test is monotone in the
        // direction); record `n - 1` is not one of them.
        let (mut lo, mut hi) = (0, n - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(key(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// [`Iter::step_clear`] for the commonest record, on the shortest way: one whose
    /// value lies inline in its interval and which the iterator's sequence sees, so
    /// that its key and value are where the step leaves them. Looks at the record
    /// before changing anything, and returns whether it took it; `false` leaves the
    /// step to the general way ([`Iter::step_raw`]), which also takes tombstones,
    /// separated values, versions newer than the snapshot, and a closed database's
    /// error. What it skips is that way's layers of calls, checks and `Option`s and
    /// `Result`s, about 4 ns of a pair's 38 in a 1M scan: 1M `seekrandom` 1.05× (the
    /// median of seven paired rounds; docs/benchmarks.md, sixty-second session).
    /// Where the snapshot sees every record of the interval ([`Loaded::max_seq`]), it
    /// reads nothing of the record: the interval's span of it says where the key and
    /// an inline value lie ([`Loaded::inline_at`]); decoding each record's header was a
    /// fifth of a 1M `seekrandom`'s reading thread, most of it the first touch of the
    /// record's line (1M seekrandom 1.19×, sixty-fifth session).
    fn step_clear_inline(&mut self, forward: bool) -> bool {
        if self.done || !self.clear_stands(forward) || self.guard.db.closed.load(Ordering::Acquire)
        {
            return false;
        }
        let Some(run) = self.buf.runs.front() else {
            return false;
        };
        let l = &run.interval;
        let i = StoreBuf::nearest(run, forward);
        let (key, value) = if l.max_seq() <= self.guard.seq {
            // Every record's version is visible: the record's span says where the key
            // and an inline value lie, and its bytes are left to the caller to touch.
            let Some(pair) = l.inline_at(i) else {
                return false;
            };
            pair
        } else {
            let r = l.record(i);
            let RecordValue::Inline(v) = r.value else {
                return false;
            };
            if r.seq > self.guard.seq {
                return false;
            }
            (span(l.bytes(), r.key), span(l.bytes(), v))
        };
        self.buf.pop(forward, &mut self.cur.interval);
        self.cur.key = CurKey::Span(key);
        self.cur.value = CurValue::Span(value);
        self.clear -= 1;
        self.unsettled = Some(forward);
        self.took_one();
        self.streak = 0;
        true
    }

    /// Whether the last full step in direction `forward` counted records ahead of it
    /// as clear ([`Iter::count_clear`]) and what it counted against still stands: the
    /// direction, the memtable list (a memtable's entries at or below the iterator's
    /// sequence never change, and none was taken from since) and the store's epoch
    /// (`buf` is as read).
    fn clear_stands(&self, forward: bool) -> bool {
        let db = &self.guard.db;
        self.clear > 0
            && self.clear_forward == forward
            && self.mems_generation == Some(db.tables_generation.load(Ordering::Acquire))
            && self.buf_epoch == self.epoch.as_ref().map(|e| e.now())
    }

    /// A step with no comparison of keys, when [`Iter::clear_stands`]. `None`: take a
    /// full step.
    fn step_clear(
        &mut self,
        forward: bool,
    ) -> Option<std::result::Result<bool, (crate::Error, bool)>> {
        if !self.clear_stands(forward) {
            return None;
        }
        self.clear -= 1;
        if let Err(e) = self.take_stored(forward) {
            return Some(Err(e));
        }
        self.unsettled = Some(forward);
        Some(Ok(!matches!(self.cur.value, CurValue::None)))
    }

    /// Counts a pair taken against what the caller said it would take, if it did.
    fn took_one(&mut self) {
        if let Some(left) = &mut self.expected {
            *left = left.saturating_sub(1);
        }
    }

    /// Moves `cur` to the next key with a value at this sequence, its version's value
    /// unresolved.
    fn step_raw(&mut self, forward: bool) -> Option<Result<()>> {
        while !self.done {
            match self.step_once(forward) {
                Ok(Some(true)) => {
                    self.took_one();
                    return Some(Ok(()));
                }
                Ok(Some(false)) => continue,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err((e, fatal)) => {
                    self.done |= fatal;
                    return Some(Err(e));
                }
            }
        }
        None
    }

    /// One key into `cur`: `None` at the end, `Some(false)` for a key with no value at
    /// this sequence, an error with whether iteration must stop.
    fn step_once(
        &mut self,
        forward: bool,
    ) -> std::result::Result<Option<bool>, (crate::Error, bool)> {
        let fatal = |e| (e, true);
        self.guard.db.check_open().map_err(fatal)?;
        if let Some(stepped) = self.step_clear(forward) {
            return stepped.map(Some);
        }
        self.clear = 0;
        if self.unsettled.is_some_and(|f| f != forward) {
            self.settle(); // turning round: the bound ahead now is the one just passed
        }
        // Memtables first (listed before the store's epoch is read), newest first.
        self.fill_mems(forward);
        self.fill_store_buf(forward).map_err(fatal)?;
        // The nearest memtable entry; on a tie the newer memtable's.
        let mut best: Option<(usize, &[u8])> = None;
        for (i, m) in self.mems.iter().enumerate() {
            if let Some(k) = m.front_key() {
                let better = best.is_none_or(|(_, b)| if forward { k < b } else { k > b });
                if better {
                    best = Some((i, k));
                }
            }
        }
        // Entries ahead in the direction are past the bound behind (they were found
        // from it), so only the bound ahead is checked.
        let mem = best.filter(|(_, k)| self.before_end(k, forward));
        let stored = self
            .buf
            .front_key(forward)
            .filter(|k| self.before_end(k, forward));
        let (take_mem, same) = match (mem, stored) {
            (None, None) => return Ok(None),
            (Some(_), None) => (true, false),
            (None, Some(_)) => (false, false),
            (Some((_, m)), Some(s)) => (if forward { m <= s } else { m >= s }, m == s),
        };
        let mem = mem.map(|(i, _)| i);
        // `cur` is about to change: the bound behind must take its key now, unless the
        // next key lies in the same interval (the bound is then set to that key).
        if take_mem || !self.buf.front_in(self.cur.interval.as_ref()) {
            self.settle();
        }
        if let (true, Some(i)) = (take_mem, mem) {
            let Some((k, v)) = self.mems[i].ahead.pop_front() else {
                unreachable!("chosen because present")
            };
            if same {
                self.buf.pop(forward, &mut self.cur.interval);
            }
            self.cur.set_owned(k, v);
        } else {
            self.take_stored(forward)?;
            self.clear = self.count_clear(forward);
            self.clear_forward = forward;
        }
        let cur = &mut self.cur;
        // Older memtables' versions of the same key are passed with it. Only when a
        // memtable's entry was taken can another memtable's front hold the same key: the
        // store's record was taken only below every memtable's front.
        if take_mem {
            let key = cur.key();
            for m in &mut self.mems {
                if m.front_key() == Some(key) {
                    m.ahead.pop_front();
                }
            }
        }
        self.unsettled = Some(forward);
        Ok(Some(!matches!(self.cur.value, CurValue::None)))
    }

    /// The next pair, borrowed from the iterator until its next step: what
    /// [`Iterator::next`] returns, without copying the key and value out. A key and an
    /// inline value that come from the sorted store are read in place in the cached
    /// interval, and a large value read ahead from the value log while it is in the page
    /// cache is checked (CRC-32C) where it lies in the log's mapping and borrowed from
    /// there: the fastest way to scan large values (1.2–1.35× `next` with 16 KiB values
    /// in docs/benchmarks.md). Mixing this with `next` and `next_back` is fine.
    ///
    /// ```
    /// # fn main() -> flexkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = flexkv::Db::open(dir.path())?;
    /// db.put(b"a", b"1")?;
    /// db.put(b"b", b"22")?;
    /// let mut it = db.iter();
    /// let mut bytes = 0;
    /// while let Some(pair) = it.next_ref() {
    ///     let (key, value) = pair?;
    ///     bytes += key.len() + value.len();
    /// }
    /// assert_eq!(bytes, 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn next_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        self.step_ref(true)
    }

    /// [`Iter::next_ref`] from the back: the pair [`DoubleEndedIterator::next_back`]
    /// returns, borrowed.
    pub fn next_back_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        self.step_ref(false)
    }

    /// Tells the iterator that the caller means to take about `n` more pairs, so that
    /// it reads as far ahead as that and no further: each read of the store takes the
    /// records left to take, up to 256. (Untold, reads take 16, then twice as many each
    /// time up to 256: a scan of 20 pairs decoded and fetched 48, and one of 50 read
    /// the store three times.) A hint only: the iterator goes on past `n` pairs,
    /// reading the store an interval at a time.
    ///
    /// ```
    /// # fn main() -> flexkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = flexkv::Db::open(dir.path())?;
    /// for i in 0..100u32 {
    ///     db.put(format!("k{i:03}").as_bytes(), b"v")?;
    /// }
    /// let first: Vec<_> = db.range(&b"k050"[..]..).expecting(3).take(3).collect::<Result<_, _>>()?;
    /// assert_eq!(first[2].0, b"k052");
    /// # Ok(())
    /// # }
    /// ```
    pub fn expecting(mut self, n: usize) -> Iter {
        self.expected = Some(n);
        self
    }

    /// The keys only: no value is read.
    pub fn keys(self) -> Keys {
        Keys(self)
    }

    /// Pairs whose values are read only when asked ([`LazyValue::load`]): for scans
    /// that look at keys (or value lengths) and read few values.
    pub fn lazy(self) -> LazyIter {
        LazyIter(self)
    }
}

/// An iterator over keys only ([`Iter::keys`]).
#[derive(Debug)]
pub struct Keys(Iter);

impl Iterator for Keys {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.0.step_raw(true)?.map(|()| self.0.cur.key().to_vec()))
    }
}

impl DoubleEndedIterator for Keys {
    fn next_back(&mut self) -> Option<Self::Item> {
        Some(self.0.step_raw(false)?.map(|()| self.0.cur.key().to_vec()))
    }
}

/// An iterator whose values are loaded on demand ([`Iter::lazy`]).
#[derive(Debug)]
pub struct LazyIter(Iter);

impl LazyIter {
    fn wrap(&self, r: Result<()>) -> Result<(Vec<u8>, LazyValue)> {
        r?;
        let key = self.0.cur.key().to_vec();
        let lazy = LazyValue {
            guard: Arc::clone(&self.0.guard),
            ks: self.0.ks,
            key: key.clone(),
            value: self.0.cur_version(),
        };
        Ok((key, lazy))
    }
}

impl Iterator for LazyIter {
    type Item = Result<(Vec<u8>, LazyValue)>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = self.0.step_raw(true)?;
        Some(self.wrap(r))
    }
}

impl DoubleEndedIterator for LazyIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        let r = self.0.step_raw(false)?;
        Some(self.wrap(r))
    }
}

/// A value not read yet. It keeps the iterator's snapshot alive, so it loads the
/// version the iterator saw however much later [`LazyValue::load`] is called.
#[derive(Debug)]
pub struct LazyValue {
    guard: Arc<Guard>,
    ks: KeyspaceId,
    key: Vec<u8>,
    value: Value,
}

impl LazyValue {
    /// The value's length in bytes, known without reading it.
    pub fn len(&self) -> usize {
        match &self.value {
            Value::Inline(b) => b.len(),
            Value::Separated(p) => p.len as usize,
            Value::Tombstone => 0,
        }
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the value lives in the value log (reading it is a disk read).
    pub fn is_separated(&self) -> bool {
        matches!(self.value, Value::Separated(_))
    }

    /// Reads the value (checksums verified).
    pub fn load(&self) -> Result<Vec<u8>> {
        let db = &self.guard.db;
        let v = db.resolve(self.ks, &self.key, self.value.clone(), self.guard.seq, true)?;
        v.ok_or_else(|| {
            crate::Error::corruption(
                &db.dir,
                0,
                format!("key {:?} vanished from a lazy value's snapshot", self.key),
            )
        })
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Iterator for Iter {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Item> {
        self.step(false)
    }
}

#[cfg(test)]
mod tests {
    use super::successor;
    use crate::sorted::store::Run;
    use std::ops::Bound;
    use std::sync::Arc;

    fn keys(runs: &[Run]) -> Vec<Vec<u8>> {
        runs.iter()
            .flat_map(|r| r.range.clone().map(|i| r.interval.key(i).to_vec()))
            .collect()
    }

    /// A store read takes the interval it is handed as the one holding its start only
    /// where it is that interval and was read at the store's epoch now.
    #[test]
    fn a_store_read_takes_its_hint_only_where_it_holds_the_start_now() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::Db::builder(dir.path())
            .interval_pairs(4)
            .open()
            .unwrap();
        for i in 0..64u32 {
            db.put(format!("k{i:03}").as_bytes(), b"v").unwrap();
        }
        db.flush().unwrap();
        let store = db.inner.store(db.default_keyspace().id()).unwrap();
        let from = Bound::Included(&b"k040"[..]);
        let (e, plain) = store.scan(from, true, 8, 8, None).unwrap();
        assert!(keys(&plain).len() >= 8);
        assert_eq!(keys(&plain)[0], b"k040");
        // A copy of the interval holding k040, to tell whether the read took it.
        let right = Arc::new((*plain[0].interval).clone());
        let (_, far) = store
            .scan(Bound::Included(b"k010"), true, 1, 1, None)
            .unwrap();
        let wrong = Arc::new((*far[0].interval).clone());

        let (_, got) = store.scan(from, true, 8, 8, Some((e, &right))).unwrap();
        assert!(Arc::ptr_eq(&got[0].interval, &right), "the hint holds k040");
        assert_eq!(keys(&got), keys(&plain));
        let (_, got) = store.scan(from, true, 8, 8, Some((e, &wrong))).unwrap();
        assert!(
            !Arc::ptr_eq(&got[0].interval, &wrong),
            "k010's interval was taken"
        );
        assert_eq!(keys(&got), keys(&plain));
        // The same interval, read before a commit moved the epoch on.
        db.put(b"k041a", b"v").unwrap();
        db.flush().unwrap();
        let (_, got) = store.scan(from, true, 8, 8, Some((e, &right))).unwrap();
        assert!(
            !Arc::ptr_eq(&got[0].interval, &right),
            "a stale hint was taken"
        );
        assert_eq!(keys(&got)[..3], [&b"k040"[..], b"k041", b"k041a"]);
    }

    #[test]
    fn successor_is_the_first_key_past_a_prefix() {
        assert_eq!(successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(successor(b"\xff\xff"), None);
        assert_eq!(successor(b""), None);
    }
}
